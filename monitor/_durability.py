"""Whether the queue is durable, and which journal its exchanges feed: pure.

The monitor tells every exchange (:class:`~roq.control.Journaling`) when it joins, when the queue's
durability or its journal changes, and when an exchange's heartbeat shows it feeds another (a lost message,
an exchange started again). An exchange reads no publisher before it is told, so none is acknowledged by an
exchange of a durable queue before its journal has the records.
"""

from __future__ import annotations

from monitor._outbox import Outbox
from monitor._topology import Topology
from roq import control

__all__ = ["Durability"]


class Durability:
    """The queue's durability as the monitor holds it.

    Args:
        topology: its exchanges (the ones told of a change).
        outbox: where the messages to the exchanges go.
        journal: the journal's intake ("" none).
        durability: "none", "interval" or "always".
    """

    def __init__(self, topology: Topology, outbox: Outbox, journal: str = "", durability: str = "none") -> None:
        self.topology = topology
        self.outbox = outbox
        self.message = control.Journaling(journal=journal, durability=durability)

    @property
    def journal(self) -> str:
        return self.message.journal

    def adopt(self, journal: str, durability: str) -> bool:
        """Hold this journal and durability from now on and tell every exchange; True if they changed."""
        message = control.Journaling(journal=journal, durability=durability)
        if message == self.message:
            return False
        self.message = message
        for x in self.topology.exchanges.values():
            self.outbox.send(x.identity, message)
        self.outbox.event("durability_changed", f"durability {durability}" + (f", journal {journal}" if journal else "")
                          + "; every exchange told", durability=durability, journal=journal)
        return True

    def heartbeat(self, hb: control.Heartbeat, identity: bytes) -> None:
        """An exchange's heartbeat: tell it if it feeds another journal, or was never told."""
        if hb.journal != self.message.journal:
            self.outbox.send(identity, self.message)
