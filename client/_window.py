"""A publisher's retransmission window (pure): batches sent and not yet safe to forget.

A batch becomes safe to forget once its exchange says it was *delivered*: every subscriber that reads took it
from its socket (:mod:`exchange._delivery`). An acknowledgement alone says only that the exchange handed it on;
a batch acknowledged but still in the exchange's pipes or the kernel's socket buffers when it is killed is lost
there, so after a failover every batch not delivered is resent, and subscribers drop the copies they already
have. After a planned move the old exchange no longer says: what it acknowledged is let go
(:meth:`Window.release`).

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
        delivered: the highest seq delivered (0: none); the window keeps every batch after it.
        progress_at: when the exchange last acknowledged something new, or when a batch was sent while
            nothing was waiting (the start of the current wait).
        heard_at: when the exchange last acknowledged anything, something new or not (an exchange that holds
            its publishers back says it is alive by repeating its latest acknowledgement).
    """

    def __init__(self) -> None:
        self.entries: collections.deque[Sent] = collections.deque()
        self.acked = 0
        self.delivered = 0
        self.progress_at = 0.0
        self.heard_at = 0.0
        self._waiting: collections.deque[int] = collections.deque()  # last seq of each batch not acknowledged

    def add(self, entry: Sent) -> None:
        if not self._waiting:
            self.progress_at = entry.sent_at
        self.entries.append(entry)
        self._waiting.append(entry.last)

    def ack(self, seq: int, now: float) -> bool:
        """Record an acknowledgement; True if it acknowledged something new."""
        self.heard_at = now
        if seq <= self.acked:
            return False
        self.acked = seq
        self.progress_at = now
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

    def silent_for(self, now: float) -> float:
        """Seconds the exchange has said nothing at all while batches wait for it (0: none waits): a dead
        exchange, not one that holds its publishers back."""
        return now - max(self.progress_at, self.heard_at) if self._waiting else 0.0

    def deliver(self, seq: int) -> None:
        """The exchange says every subscriber that reads took the records up to ``seq``."""
        if seq > self.delivered:
            self.delivered = seq

    def release(self) -> None:
        """A planned move is complete: the old exchange no longer says what was delivered, and what it
        acknowledged is let go (were it killed now, the publisher would not resend: it is not failing over)."""
        self.deliver(self.acked)

    def trim(self) -> int:
        """Forget the batches acknowledged and delivered; return the payload bytes freed."""
        safe = min(self.acked, self.delivered)
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
        self._waiting.clear()
        if entries:
            self.acked = min(self.acked, entries[0].first - 1)
            self.delivered = min(self.delivered, entries[0].first - 1)
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
