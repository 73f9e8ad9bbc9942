"""The configuration broadcast: the leader publishes what it knows of every queue and host on its PUB port.

Three frames (:func:`roq.wire.management.broadcast_frames`): ``{CMD: 1500}``, ``{Queues: [...]}``,
``{Hosts: [...]}``, sent at once on every change of the topology (queues, their states, monitors and
exchanges, host membership and capacity) and every ``broadcast_period`` with fresh host KPIs; KPI changes
alone do not trigger one.
"""

from __future__ import annotations

import logging
from typing import Any

import zmq

from gcm._view import View
from roq.wire.management import broadcast_frames
from roq.sockets import send_frames

__all__ = ["Broadcaster"]

log = logging.getLogger("gcm")


class Broadcaster:
    """Publishes the view on a bound PUB socket.

    Args:
        sock: the PUB socket (bound and closed by the owner).
        period: seconds between two broadcasts when nothing changes.
    """

    def __init__(self, sock: zmq.Socket, period: float) -> None:
        self.socket = sock
        self.period = period
        self.next_at = 0.0  # monotonic time of the next periodic broadcast
        self.sent = 0
        self._last: Any = None

    def publish(self, view: View, now: float, *, force: bool) -> bool:
        """Broadcast ``view`` if it changed since the last broadcast (or if ``force``); True if sent."""
        queues, hosts = view.summaries()
        topology = (queues, [(h.Address, h.Endpoint, h.MaxExchanges) for h in hosts])
        if not force and topology == self._last:
            return False
        self._last = topology
        self.next_at = now + self.period
        try:
            send_frames(self.socket, broadcast_frames(queues, hosts), zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # a PUB drops rather than blocks; this is the context ending
            log.debug("broadcast not sent: %s", exc)
            return False
        self.sent += 1
        return True
