"""Each publisher's records once and in order (pure): what the journal does with a batch an exchange sent.

A publisher numbers its records 1, 2, 3... across every exchange it goes through. Batches come to the
journal from its exchanges, and some come twice: a publisher resends its unacknowledged batches when it
fails over, an exchange resends what the journal had not acknowledged when the journal restarted. Against the
highest seq journaled for the publisher (``high``, None for a publisher not known) a batch is:

* :data:`WRITE`: the next records (or the first the journal sees of this publisher);
* :data:`DUPLICATE`: journaled already; it is acknowledged again, not written;
* :data:`TRIM`: partly journaled (a batch cut differently when it was resent); its new records are written;
* :data:`GAP`: beyond records not journaled yet. It waits (:class:`Gaps`) for them; if they have not come
  within :data:`GAP_WAIT_S` it is written anyway, and the records skipped are counted (they were never
  acknowledged by the journal, so their publisher still holds them).

A publisher relayed from another cluster by a link (``sparse``: :data:`roq.wire.batch.FLAG_RELAYED`) has sparse
seqs, only those of the keys wanted here having crossed: a batch beyond its highest is the next one, never a
gap. Its order is the link's: one connection, in the source journal's order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["WRITE", "DUPLICATE", "TRIM", "GAP", "decide", "Gaps", "Held", "GAP_WAIT_S", "MAX_HELD_BYTES"]

WRITE, DUPLICATE, TRIM, GAP = "write", "duplicate", "trim", "gap"
#: how long a batch beyond a gap waits for the records before it
GAP_WAIT_S = 2.0
#: bytes of batches waiting beyond gaps, at most; past it a batch is dropped, not acknowledged
MAX_HELD_BYTES = 64 << 20


def decide(high: int | None, first: int, last: int, sparse: bool = False) -> str:
    """What to do with a batch of seqs ``first..last`` when ``high`` is journaled (``sparse``: a relayed
    publisher's)."""
    if high is None or first == high + 1 or (sparse and first > high):
        return WRITE
    if last <= high:
        return DUPLICATE
    if first <= high:
        return TRIM
    return GAP


@dataclass
class Held:
    """A batch waiting beyond a gap: its frames, where it came from, its seqs and since when."""

    first: int
    last: int
    frames: list[bytes]
    source: bytes
    since: float
    size: int = field(init=False)

    def __post_init__(self) -> None:
        self.size = sum(map(len, self.frames))


class Gaps:
    """The batches waiting beyond gaps, per publisher, in seq order; bounded in bytes."""

    def __init__(self, max_bytes: int = MAX_HELD_BYTES, wait_s: float = GAP_WAIT_S) -> None:
        self.max_bytes = max_bytes
        self.wait_s = wait_s
        self.held: dict[bytes, list[Held]] = {}
        self.bytes = 0
        self.dropped = 0  # batches refused for want of room

    def hold(self, publisher: bytes, item: Held) -> bool:
        """Keep ``item``; False if there is no room (it is dropped: its publisher will resend it)."""
        if self.bytes + item.size > self.max_bytes:
            self.dropped += 1
            return False
        items = self.held.setdefault(publisher, [])
        if any(h.first == item.first for h in items):
            return True  # the same batch again: one copy waits
        items.append(item)
        items.sort(key=lambda h: h.first)
        self.bytes += item.size
        return True

    def ready(self, publisher: bytes, high: int | None) -> list[Held]:
        """The batches of ``publisher`` that follow ``high`` without a gap now (taken out, in order)."""
        items = self.held.get(publisher)
        if not items or high is None:
            return []
        out = []
        while items and items[0].first <= high + 1:
            item = items.pop(0)
            self.bytes -= item.size
            out.append(item)
            high = max(high, item.last)
        if not items:
            del self.held[publisher]
        return out

    def expired(self, now: float) -> list[tuple[bytes, list[Held]]]:
        """The publishers whose oldest waiting batch waited :attr:`wait_s`, with all their batches (taken out,
        in order): the records before them are not coming."""
        out = []
        for publisher, items in list(self.held.items()):
            if now - min(h.since for h in items) >= self.wait_s:
                del self.held[publisher]
                self.bytes -= sum(h.size for h in items)
                out.append((publisher, items))
        return out

    def __len__(self) -> int:
        return sum(len(items) for items in self.held.values())
