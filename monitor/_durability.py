"""Whether the queue is durable, its journal, and what its exchanges and journal are told: pure.

The queue's rules say its durability (``durability``, ``sync_interval_ms``, ``retention_bytes``,
``retention_s``); the journal says where it is: its heartbeat (:class:`~roq.wire.control.JournalHeartbeat`) names
its intake and the policy it holds. The monitor

* tells every exchange (:class:`~roq.wire.control.Journaling`) the durability and the journal's intake when it
  joins, when either changes and whenever its heartbeat shows it feeds another. An exchange reads no
  publisher before it is told, and while the queue is durable and no journal is heard of it is told the
  durability with no intake: it acknowledges nothing, rather than what no journal has;
* tells the journal the policy (:class:`~roq.wire.control.JournalPolicy`) when its heartbeat shows another, with
  the highest offset heard of the queue's journals (from the journal's heartbeats and the exchanges'
  acknowledgements): a new, empty journal in a lost one's place begins past it.

What the journal last reported is kept for the queue's status (:meth:`Durability.describe`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from monitor._outbox import Outbox
from monitor._rules import Rules
from monitor._topology import Topology
from roq.wire import control
from roq.wire.status import JournalStatus

__all__ = ["Durability", "policy_of"]


def policy_of(rules: Mapping[str, Any]) -> control.JournalPolicy:
    """The journal's policy the rules ask for ("always" when they say "none": a journal left running keeps to the
    strictest)."""
    durability = rules.get("durability", "none")
    return control.JournalPolicy(durability=durability if durability != "none" else "always",
                                 sync_interval_ms=int(rules.get("sync_interval_ms", 100)),
                                 retention_bytes=int(rules.get("retention_bytes", 0)),
                                 retention_s=float(rules.get("retention_s", 0.0)))


class Durability:
    """The queue's durability and journal as the monitor holds them.

    Args:
        topology: its exchanges (the ones told of a change).
        outbox: where the messages go.
        rules: the rules in force (read at each use: ``durability`` and the journal's policy).
        journal_timeout: a journal silent this long is reported as silent (its exchanges keep feeding it:
            they send again what it did not acknowledge when it is back, or when another takes its place).
    """

    def __init__(self, topology: Topology, outbox: Outbox, rules: Rules, journal_timeout: float) -> None:
        self.topology = topology
        self.outbox = outbox
        self.rules = rules
        self.journal_timeout = journal_timeout
        self.journal: control.JournalHeartbeat | None = None  # the last heartbeat of the journal
        self.last = 0  # the highest offset heard of the queue's journal
        self.waiting: dict[bytes, int] = {}  # exchange -> bytes it sent the journal, not acknowledged yet
        self.identity = b""
        self.heard_at = 0.0
        self.message = self._message()

    def _message(self) -> control.Journaling:
        durability = self.rules.values.get("durability", "none")
        intake = self.journal.intake if self.journal is not None and durability != "none" else ""
        return control.Journaling(journal=intake, durability=durability)

    def changed(self) -> bool:
        """The rules (or the journal) may have changed: tell every exchange, and the journal, what they must know
        now; True if the exchanges were told something new."""
        policy = policy_of(self.rules.values)
        if self.journal is not None and self.journal.policy != policy.digest():
            self.outbox.send(self.identity, dataclasses.replace(policy, last=self.last))
        message = self._message()
        if message == self.message:
            return False
        self.message = message
        for x in self.topology.exchanges.values():
            self.outbox.send(x.identity, message)
        where = f", journal {message.journal}" if message.journal else (
            ", no journal heard of yet: exchanges acknowledge nothing" if message.durability != "none" else "")
        self.outbox.event("durability_changed", f"durability {message.durability}{where}; every exchange told",
                          durability=message.durability, journal=message.journal)
        return True

    def heartbeat(self, hb: control.Heartbeat, identity: bytes) -> None:
        """An exchange's heartbeat: tell it if it feeds another journal, or was never told."""
        self.last = max(self.last, hb.journal_end)
        self.waiting[identity] = hb.journal_waiting
        if len(self.waiting) > len(self.topology.exchanges) + 1:  # exchanges that left: forgotten here, not in describe
            live = {identity} | {x.identity for x in self.topology.exchanges.values()}
            self.waiting = {x: n for x, n in self.waiting.items() if x in live}
        if hb.journal != self.message.digest():
            self.outbox.send(identity, self.message)

    def replica_heartbeat(self, hb: control.JournalHeartbeat, identity: bytes) -> None:
        """A replica's heartbeat (leader or not): it is told the policy when it holds another."""
        self.last = max(self.last, hb.next_offset)
        policy = policy_of(self.rules.values)
        if hb.policy != policy.digest():
            self.outbox.send(identity, dataclasses.replace(policy, last=self.last))

    @property
    def reads(self) -> str:
        """Where the journal is read, while the queue is durable ("" none)."""
        durable = self.rules.values.get("durability", "none") != "none"
        return self.journal.reads if self.journal is not None and durable else ""

    def journal_heartbeat(self, hb: control.JournalHeartbeat, identity: bytes, now: float) -> bool:
        """The journal's heartbeat: where it is, what it holds; True if it is read elsewhere now."""
        reads = self.reads
        moved = self.journal is None or hb.intake != self.journal.intake or hb.incarnation != self.journal.incarnation
        self.journal, self.identity, self.heard_at = hb, identity, now
        self.last = max(self.last, hb.next_offset)
        if moved:
            self.outbox.event("journal_joined", f"journal {hb.journal} at {hb.intake} (offsets {hb.first_offset}.."
                              f"{hb.next_offset})", journal=hb.journal, intake=hb.intake)
        self.changed()
        return self.reads != reads

    def describe(self, now: float) -> JournalStatus:
        """The journal as the queue's status shows it."""
        durability = self.rules.values.get("durability", "none")
        hb = self.journal
        if hb is None:
            return JournalStatus(durability=durability, journal="")
        return JournalStatus(
            durability=durability, journal=hb.journal, pid=hb.pid, intake=hb.intake, reads=hb.reads,
            silent_s=round(now - self.heard_at, 3), alive=now - self.heard_at < self.journal_timeout, policy=hb.policy,
            permissions=hb.permissions, first_offset=hb.first_offset, next_offset=hb.next_offset,
            size_bytes=hb.size_bytes, segments=hb.segments, unsynced_bytes=hb.unsynced_bytes, records=hb.records,
            duplicates=hb.duplicates, skipped=hb.skipped, syncs=hb.syncs, sync_ms=hb.sync_ms,
            sync_max_ms=hb.sync_max_ms, write_failures=hb.write_failures, error=hb.error,
            lag_bytes=sum(self.waiting.get(x.identity, 0) for x in self.topology.exchanges.values()))
