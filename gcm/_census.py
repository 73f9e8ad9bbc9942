"""The leader's census: every running queue's monitor asked for its status, every ``census_period``.

What the metrics, the queue list of the HTTP API and the dashboard show comes from here, so that a scrape
or a page never waits for a hundred monitors. The asks go through their own :class:`~gcm._stats.StatsAsks`
(polled by the GCM's loop beside the operators' stats asks), at most one per queue at a time, which decodes
each answer (:class:`~roq.wire.status.QueueStatus`); a monitor that does not answer within the ask's timeout, or
answers something that is not a status, leaves its queue's last status in place, marked by its age.
A queue that is no longer running is forgotten. Each monitor is asked on one connection round after round (up to
:data:`MAX_KEPT` of them), not a new one each time: a TCP and ZMTP handshake, and on a secure cluster a CURVE key
exchange, per queue per period cost the GCM and every monitor more than the asks themselves.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable

import zmq

from gcm._stats import StatsAsks
from gcm._view import View
from roq.security.curve import Curve
from roq.wire.documents import RUNNING
from roq.wire.status import QueueStatus

__all__ = ["Census", "Snapshot", "MAX_QUEUES", "MAX_KEPT"]

MAX_QUEUES = 1000  # queues asked in one round, at most
MAX_KEPT = 256  # connections to monitors kept from one round to the next (beyond, a new one per ask)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A queue's monitor status as of ``at`` (wall clock)."""

    queue: str
    status: QueueStatus
    at: float


class Census:
    """Asks every running queue's monitor for its status, in rounds.

    Args:
        ctx: the ZeroMQ context of the loop's thread.
        period: seconds between rounds.
        clock: wall clock, for the snapshots' times.
        on_status: called with each new snapshot (the dashboard's stream listens).
        on_round: called once every monitor asked in a round has answered or timed out (the live feeds are
            sent the state then, fresh).
        curve: the GCM's CURVE, or None for plaintext.
    """

    def __init__(self, ctx: zmq.Context, period: float, *, clock: Callable[[], float] = time.time,
                 on_status: Callable[[Snapshot], None] | None = None,
                 on_round: Callable[[], None] | None = None, curve: Curve | None = None) -> None:
        self.period = period
        self.asks = StatsAsks(ctx, limit=MAX_QUEUES, timeout=max(0.5, min(period, 2.0)), curve=curve, keep=MAX_KEPT)
        self.snapshots: dict[str, Snapshot] = {}
        self.next_at = 0.0
        self._asking: set[str] = set()
        self._clock = clock
        self.on_status = on_status
        self.on_round = on_round
        self._round_open = False

    def follow(self, on_status: Callable[[Snapshot], None], on_round: Callable[[], None]) -> None:
        """Call ``on_status`` with each new snapshot and ``on_round`` at the end of each round from now on."""
        self.on_status, self.on_round = on_status, on_round

    def sockets(self) -> set[zmq.Socket]:
        return self.asks.sockets()

    def round(self, view: View, now: float) -> None:
        """Ask the monitors whose answer is not awaited, if a round is due (``now``: monotonic)."""
        if now < self.next_at:
            return
        self.next_at = now + self.period
        running = {name: q for name, q in view.queues.items() if q.state == RUNNING}
        for name in [n for n in self.snapshots if n not in running]:
            del self.snapshots[name]
        self.asks.forget({q.monitor.endpoint for q in running.values() if q.monitor is not None})
        for name, q in list(running.items())[:MAX_QUEUES]:
            if name in self._asking:
                continue
            self._asking.add(name)
            if not self.asks.ask_status(q, functools.partial(self._answered, name), now):  # no monitor to ask
                self._answered(name, None)
        self._round_open = True
        self._close_round()

    def readable(self, sock: zmq.Socket) -> None:
        self.asks.readable(sock)

    def expire(self, now: float) -> None:
        self.asks.expire(now)

    def _answered(self, name: str, status: QueueStatus | None) -> None:
        """The answer of ``name``'s monitor (None: none came)."""
        self._asking.discard(name)
        if status is None:
            self._close_round()
            return  # no monitor, or it did not answer: the last status stays, with its age
        snapshot = Snapshot(name, status, self._clock())
        self.snapshots[name] = snapshot
        if self.on_status is not None:
            self.on_status(snapshot)
        self._close_round()

    def _close_round(self) -> None:
        if self._round_open and not self._asking:
            self._round_open = False
            if self.on_round is not None:
                self.on_round()

    def close(self) -> None:
        self.asks.close()
