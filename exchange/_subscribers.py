"""The subscribers an exchange sends to: who they are, what keys they want, and whether they keep up.

A subscriber's DEALER connects to the exchange's backend ROUTER and sends a subscription
(:func:`roq.wire.batch.pack_subscription`, naming the subscriber's id); it sends it again every heartbeat, so that an
exchange that lost it (a reconnection, a full table) has it back within a second. The table is keyed by the
connection (the ROUTER's routing id): a subscription that names a subscriber already in the table on another
connection moves it to the new one (the subscriber reconnected; with CURVE its id is its key's own, so only the
same key can). The exchange sends each batch to every subscriber
whose prefix the key starts with, one send per subscriber, so it knows each one's pipe: a subscriber whose
pipe stays full for ``subscriber_grace`` is *behind*, and until its pipe has had room for :data:`BEHIND_HOLD`
graces the batches that find it full go past it (it sees a gap), while every other subscriber keeps the
back-pressure that costs it nothing; one that reports progress (below) stays behind until it reports again.

**Progress.** A full pipe alone does not say that its subscriber stopped reading: ZeroMQ tells the writer
only every half a pipe read. So a subscriber of the client library reports, while it takes batches, that it
took some (:func:`roq.wire.batch.pack_progress`, every few tens of milliseconds at most), and the grace runs from
its last report (:attr:`Subscriber.progressed`): one that keeps reading holds its publishers back to its pace
and is never behind; a report also ends a subscriber's time behind. One that sends no reports (an older
client) has its grace run from when its pipe was found full, as before.

On a durable queue a subscriber whose pipe stays full is *cut* instead (:meth:`Subscribers.cut`): it is sent
nothing more, told where the journal has what it did not get (:class:`Cut`), and comes back with a subscription
that names the cut's tag once it has read the journal that far.

The tables are bounded (:data:`MAX_SUBSCRIBERS`): a flood of identities is refused and counted, never grown.
"""

from __future__ import annotations

from roq.wire import batch
__all__ = ["Subscriber", "Subscribers", "Cut", "MAX_SUBSCRIBERS", "BEHIND_HOLD"]

#: Subscribers one exchange sends to at most.
MAX_SUBSCRIBERS = 4096
#: A subscriber found behind stays so until its pipe has had room for this many ``subscriber_grace``.
BEHIND_HOLD = 2.0


class Subscriber:
    """One subscriber of the exchange: its connection's routing id (``ident``, what it is sent to), its id (the
    one its subscription names), the prefixes it gets (its own and the control topic's), until when it is behind,
    how many batches went past it, whether its seam went to the journal, when it last reported progress, the last
    delivery mark it took and when, and whether a mark its full pipe refused is owed to it."""

    __slots__ = ("ident", "id", "prefix", "prefixes", "behind_until", "missed", "principal", "seamed", "progressed",
                 "missed_at", "mark", "marked", "unwaited", "mark_owed")

    def __init__(self, ident: bytes, prefix: bytes, principal: str = "", id: bytes = b"") -> None:
        self.ident = ident
        self.id = id or ident
        self.prefix = prefix
        self.principal = principal  # the principal of its key, with CURVE
        self.prefixes = (prefix, batch.CONTROL_TOPIC)  # one bytes.startswith for both
        self.behind_until = 0.0
        self.missed = 0
        self.seamed = False  # a replaying subscriber's seam was sent to the journal
        self.progressed = 0.0  # when it last reported it took batches (0: never; an older client does not)
        self.missed_at = 0.0  # when a batch last went past it
        self.mark = -1  # the last delivery mark it took (-1: it came after the last one sent; see exchange._delivery)
        self.marked = 0.0  # when it last reported a mark newer than the one before
        self.unwaited = False  # delivery goes on without it until it takes a newer mark (see exchange._delivery)
        self.mark_owed = False  # the last mark did not go (a full pipe, a batch held for it): the newest goes next

    def behind(self, now: float) -> bool:
        """Until ``behind_until``; and one that reports progress, until it reports again after it missed a batch
        (a long hold for another subscriber must not end its time behind and make everyone wait for it again)."""
        return now < self.behind_until or 0.0 < self.progressed < self.missed_at

    def progress(self, now: float, mark: int = 0) -> None:
        """It reported at ``now`` that it took batches, and delivery mark ``mark`` (0: none yet): it is reading,
        so not behind."""
        self.progressed = now
        self.behind_until = 0.0
        if mark > self.mark:
            self.mark = mark
            self.marked = now
            self.unwaited = False

    def __repr__(self) -> str:
        return f"Subscriber({self.id.hex()[:8]}, {self.prefix[:40]!r})"


class Cut:
    """A subscriber cut off: the connection it is told on, its id, the journal offset from which it missed what
    this exchange forwarded (-1: not known), the tag its subscription must name to come back, and whether the
    cut reached its pipe."""

    __slots__ = ("ident", "id", "floor", "tag", "told")

    def __init__(self, ident: bytes, floor: int, tag: int, id: bytes = b"") -> None:
        self.ident = ident
        self.id = id or ident
        self.floor = floor
        self.tag = tag
        self.told = False


class Subscribers:
    """The exchange's subscribers, in the order they came (the forward loop iterates :attr:`all`).

    Args:
        limit: most subscribers kept; a new one beyond is refused.
    """

    def __init__(self, limit: int = MAX_SUBSCRIBERS) -> None:
        self.limit = limit
        self.all: list[Subscriber] = []
        self._by_ident: dict[bytes, Subscriber] = {}  # by connection
        self._by_id: dict[bytes, Subscriber] = {}  # by the id its subscription names
        self.cuts: dict[bytes, Cut] = {}  # subscribers cut off and not back yet (by id), oldest first

    def __len__(self) -> int:
        return len(self.all)

    def get(self, ident: bytes) -> Subscriber | None:
        return self._by_ident.get(ident)

    def subscribe(self, ident: bytes, prefix: bytes, principal: str = "",
                  id: bytes = b"") -> tuple[Subscriber | None, bool]:
        """Record the subscription of the subscriber ``id`` (default: ``ident``) on the connection ``ident``
        (``principal``: its key's, with CURVE); ``(subscriber, new)``, or ``(None, False)`` when the table is
        full. The same subscriber on another connection is forgotten there: it reconnected."""
        id = id or ident
        sub = self._by_ident.get(ident)
        if sub is not None and sub.id == id:
            if sub.prefix != prefix:
                sub.prefix = prefix
                sub.prefixes = (prefix, batch.CONTROL_TOPIC)
            return sub, False
        for old in (sub, self._by_id.get(id)):  # another id on this connection, or this id on another
            if old is not None:
                self.remove(old)
        if len(self.all) >= self.limit:
            return None, False
        sub = self._by_ident[ident] = self._by_id[id] = Subscriber(ident, prefix, principal, id)
        self.all = self.all + [sub]  # a new list: a loop over the old one is not disturbed
        return sub, True

    def remove(self, sub: Subscriber) -> bool:
        """Forget ``sub`` (its connection is gone); False if it was not here."""
        if self._by_ident.get(sub.ident) is not sub:
            return False
        del self._by_ident[sub.ident]
        if self._by_id.get(sub.id) is sub:
            del self._by_id[sub.id]
        self.all = [s for s in self.all if s is not sub]
        return True

    def cut(self, sub: Subscriber, floor: int, tag: int) -> Cut:
        """Send ``sub`` nothing more until it comes back with ``tag`` (it reads the journal from ``floor``); the
        oldest cut is forgotten beyond :attr:`limit`."""
        self.remove(sub)
        cut = self.cuts[sub.id] = Cut(sub.ident, floor, tag, sub.id)
        while len(self.cuts) > self.limit:
            del self.cuts[next(iter(self.cuts))]
        return cut
