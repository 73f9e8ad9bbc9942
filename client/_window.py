"""A publisher's retransmission window (pure): batches sent and not yet safe to forget.

A batch becomes safe ``grace`` seconds after an exchange acknowledged it. The grace covers batches an
exchange had acknowledged (handed to its PUB socket) but not yet written to its subscribers when it was
killed: after a failover they are resent, and subscribers drop the copies they already have.

Beside it, :class:`Pressure`: how much of its time the stream's batches waited for the exchange (the window
full, or the exchange's pipe).

A pure core, public for tests and tools (``from client._window import Pressure, Sent, Window``); not part of
the application API (:data:`client.__all__`).
"""

from __future__ import annotations

import collections
from typing import NamedTuple

__all__ = ["Pressure", "Sent", "Window"]


class Sent(NamedTuple):
    first: int
    count: int
    key: bytes
    body: bytes
    key_prev: int
    timestamp_ns: int
    size: int  # payload bytes, as counted against the buffer bound
    flags: int  # header flags asked for by the publisher
    sent_at: float  # monotonic; 0 until sent

    @property
    def last(self) -> int:
        return self.first + self.count - 1


class Window:
    """The batches sent and not yet safe to forget, in seq order.

    Attributes:
        acked: the highest seq acknowledged.
        progress_at: when the exchange last acknowledged something new, or when a batch was sent while
            nothing was waiting (the start of the current wait).
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.entries: collections.deque[Sent] = collections.deque()
        self.acked = 0
        self.progress_at = 0.0
        self._waiting: collections.deque[int] = collections.deque()  # last seq of each batch not acknowledged
        self._acks: collections.deque[tuple[float, int]] = collections.deque()  # (when, seq), seq increasing

    def add(self, entry: Sent) -> None:
        if not self._waiting:
            self.progress_at = entry.sent_at
        self.entries.append(entry)
        self._waiting.append(entry.last)

    def ack(self, seq: int, now: float) -> bool:
        """Record an acknowledgement; True if it acknowledged something new."""
        if seq <= self.acked:
            return False
        self.acked = seq
        self.progress_at = now
        self._acks.append((now, seq))
        waiting = self._waiting
        while waiting and waiting[0] <= seq:
            waiting.popleft()
        return True

    @property
    def in_flight(self) -> int:
        """Batches sent and not acknowledged yet."""
        return len(self._waiting)

    def stalled_for(self, now: float) -> float:
        """Seconds the exchange has acknowledged nothing while batches wait for it (0: none waits).

        A saturated exchange still acknowledges, slowly: only a silent one stalls.
        """
        return now - self.progress_at if self._waiting else 0.0

    def trim(self, now: float) -> int:
        """Forget batches acknowledged at least ``grace`` ago; return the payload bytes freed."""
        safe = 0
        acks = self._acks
        while acks and now - acks[0][0] >= self.grace:
            safe = acks.popleft()[1]
        if not safe:
            return 0
        freed = 0
        entries = self.entries
        while entries and entries[0].last <= safe:
            freed += entries.popleft().size
        return freed

    def oldest_unacked(self) -> Sent | None:
        """The oldest batch not acknowledged yet, or None."""
        for entry in self.entries:
            if entry.last > self.acked:
                return entry
        return None

    def take_all(self) -> list[Sent]:
        """Empty the window for a resend after a failover.

        Acknowledgements of the old exchange no longer count: the caller resends every batch and adds it
        back, and only the new exchange's acknowledgements make them safe.
        """
        entries = list(self.entries)
        self.entries.clear()
        self._acks.clear()
        self._waiting.clear()
        if entries:
            self.acked = min(self.acked, entries[0].first - 1)
        return entries


class Pressure:
    """The fraction of its time a stream's batches wait for the exchange.

    The stream says, each time it has sent what it could, whether batches still wait (:meth:`waiting`);
    :meth:`fraction` reads the share of the time since its previous call that they did. A publisher offering
    more than its exchange forwards waits all the time; the monitor hears it (``PublisherHello.pressure``).
    """

    __slots__ = ("_waited", "_since", "_measured_at")

    def __init__(self) -> None:
        self._waited = 0.0  # seconds waited since the last fraction(), up to _since
        self._since: float | None = None  # batches wait since then (None: they do not)
        self._measured_at: float | None = None

    def waiting(self, now: float, waiting: bool) -> None:
        if self._since is not None:
            self._waited += max(0.0, now - self._since)
        self._since = now if waiting else None

    def fraction(self, now: float) -> float:
        """The share (0..1) of the time since the previous call that batches waited; 0 on the first call."""
        self.waiting(now, self._since is not None)
        waited, since = self._waited, self._measured_at
        self._waited, self._measured_at = 0.0, now
        if since is None or now <= since:
            return 0.0
        return min(1.0, waited / (now - since))
