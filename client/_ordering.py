"""Per-publisher ordering at a subscriber (pure): duplicates, gaps, and holding across relocations.

Every batch carries its publisher's id, the publisher's *epoch* (incremented each time the publisher
moves to another exchange) and the seq of its first record. Within one exchange a publisher's batches
arrive in order; across exchanges they do not, so the reassembler applies these rules per publisher:

* **Duplicates.** A record with a seq at or below the highest seq delivered is dropped (failover
  resends records the subscriber may already have).
* **Contiguity.** A subscriber without a prefix receives all of a publisher's records, so a batch that
  starts at or before the next seq expected can be delivered whatever its epoch: no older record can
  still be on its way.
* **Epochs.** Otherwise (a hole before it, or a filtering subscriber, which sees only some seqs), data
  of a newer epoch is delivered only once every older epoch since the current one has *ended*: its
  exchange's marker arrived (the marker travels after the publisher's last batch through that
  exchange, on the same pipe), or that exchange was declared lost. Until then it is *held*. Data of the
  current or an older epoch is never held behind it.
* **Notes.** Before a planned move the monitor tells subscribers that a publisher is leaving an exchange.
  A subscriber that has not heard that publisher yet (e.g. its prefix matched none of its keys so far)
  then holds the publisher's data from other exchanges until the noted exchange's marker arrives. Notes
  are kept in order: after moves A -> B -> C, data from B waits for A's marker, data from C for both.
* **Bounds.** Held data is released after ``hold_timeout`` seconds or beyond ``max_held`` batches,
  whatever arrived; a hole that remains is counted as a gap.
* **A journal.** A subscriber that replays a durable queue's journal gets each publisher's records in order
  from it, whatever their epochs (:meth:`Reassembler.ordered`), before the live stream takes over.
* **Gaps.** A subscriber that receives everything (empty prefix) knows a gap when a seq is skipped.
  A filtering subscriber sees only some of a publisher's keys, so it follows each key's chain instead:
  every batch names the seq of its publisher's previous record with the same key (``key_prev``). So does
  every subscriber for a publisher relayed from another cluster (``relayed``): only the keys wanted there
  crossed, and its seqs are sparse.

A pure core, public for tests and tools (``from client._ordering import Reassembler``); not part of the
application API (:data:`client.__all__`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Reassembler", "JOURNAL"]

#: the source of batches read from a durable queue's journal (:meth:`Reassembler.ordered`)
JOURNAL = "\x00journal"


def _epoch_of(entry: tuple) -> int:
    return entry[1]


class _Stream:
    __slots__ = ("epoch", "source", "last", "ended", "sources", "held", "held_since", "notes", "key_last", "filtered")

    def __init__(self, filtered: bool) -> None:
        self.filtered = filtered  # its seqs are not all seen here: gaps are found per key
        self.epoch: int | None = None  # epoch of the data delivered last
        self.source: str | None = None  # exchange that data came from
        self.last = 0  # highest seq delivered
        self.ended: set[int] = set()  # epochs known to have ended (>= epoch)
        self.sources: dict[int, str] = {}  # exchange of each epoch seen (>= epoch)
        self.held: list[tuple[str, int, int, int, int, bytes, Any]] = []
        self.held_since = 0.0
        self.notes: list[tuple[str, float]] = []  # (exchange the publisher leaves, until when), in order
        self.key_last: dict[bytes, int] = {}


class Reassembler:
    """Decides, batch by batch, what a subscriber delivers and in which order.

    Args:
        filtered: the subscriber filters on a non-empty prefix (gaps are found per key).
        hold_timeout: longest hold of a newer epoch's data, seconds.
        max_held: most batches held per publisher.
        max_keys: per-publisher key chains remembered by a filtering subscriber (then reset).

    Every method returns the list of ``(item, skip)`` to deliver now, in order: ``item`` is what the
    caller passed with the batch, ``skip`` how many of its first records are duplicates.
    """

    def __init__(self, *, filtered: bool, hold_timeout: float, max_held: int, max_keys: int = 65536) -> None:
        self.filtered = filtered
        self.hold_timeout = hold_timeout
        self.max_held = max_held
        self.max_keys = max_keys
        self.streams: dict[bytes, _Stream] = {}
        self.duplicates = 0  # records dropped as already delivered
        self.gaps = 0  # discontinuities detected
        self.lost = 0  # records known missing (exact without a prefix, a lower bound with one)
        self.hold_timeouts = 0  # holds released by the timeout or the bound
        self.held = 0  # batches held right now

    # ------------------------------------------------------------------ inputs

    def data(
        self,
        source: str,
        publisher: bytes,
        epoch: int,
        first: int,
        count: int,
        key_prev: int,
        key: bytes,
        item: Any,
        now: float,
        relayed: bool = False,
    ) -> list[tuple[Any, int]]:
        """A data batch arrived from exchange ``source`` (``relayed``: from another cluster, by a link)."""
        st = self.streams.get(publisher)
        if st is None:
            st = self.streams[publisher] = _Stream(self.filtered or relayed)
        elif relayed:
            st.filtered = True  # (a note made its stream before its first batch)
        entry = (source, epoch, first, count, key_prev, key, item)
        st.sources.setdefault(epoch, source)
        if self._may_deliver(st, source, epoch, first):
            out: list[tuple[Any, int]] = []
            self._deliver(st, entry, out)
            if st.held:
                out.extend(self._retry(st, now))
            return out
        self._hold(st, entry, now)
        return self._release(st, now) if len(st.held) > self.max_held else []

    def ordered(self, publisher: bytes, epoch: int, first: int, count: int, key_prev: int, key: bytes, item: Any,
                now: float, relayed: bool = False) -> list[tuple[Any, int]]:
        """A data batch from a source that gives each publisher's records in order whatever their epoch (a
        journal): delivered now, past what was delivered already; data held behind it may follow."""
        st = self.streams.get(publisher)
        if st is None:
            st = self.streams[publisher] = _Stream(self.filtered or relayed)
        elif relayed:
            st.filtered = True
        out: list[tuple[Any, int]] = []
        if st.held and any(e[2] < first for e in st.held):  # the journal's order says they come first
            before = sorted((e for e in st.held if e[2] < first), key=lambda e: e[2])
            st.held = [e for e in st.held if e[2] >= first]
            self.held -= len(before)
            for entry in before:
                self._deliver(st, entry, out)
        self._deliver(st, (JOURNAL, epoch, first, count, key_prev, key, item), out)
        if st.held:
            out.extend(self._retry(st, now))
        return out

    def marker(self, source: str, publisher: bytes, epoch: int, now: float) -> list[tuple[Any, int]]:
        """A marker arrived from ``source``: the publisher's ``epoch`` there is over."""
        st = self.streams.get(publisher)
        if st is None:
            return []  # never heard of it and nobody asked us to wait for it
        if st.sources.setdefault(epoch, source) != source:
            return []  # that epoch went through another exchange: not a marker we can trust
        st.ended.add(epoch)
        st.notes = [n for n in st.notes if n[0] != source]
        return self._retry(st, now)

    def note(self, publisher: bytes, source: str, now: float) -> None:
        """The monitor announced that ``publisher`` is about to leave exchange ``source``."""
        st = self.streams.get(publisher)
        if st is None:
            st = self.streams[publisher] = _Stream(self.filtered)
        if st.epoch is None and all(n[0] != source for n in st.notes):
            st.notes.append((source, now + 2 * self.hold_timeout))

    def source_lost(self, source: str, now: float) -> list[tuple[Any, int]]:
        """Exchange ``source`` is dead: none of its epochs will send a marker."""
        out: list[tuple[Any, int]] = []
        for st in self.streams.values():
            before = (len(st.ended), len(st.notes))
            floor = -1 if st.epoch is None else st.epoch
            st.ended.update(e for e, s in st.sources.items() if s == source and e >= floor)
            st.notes = [n for n in st.notes if n[0] != source]
            if (len(st.ended), len(st.notes)) != before:
                out.extend(self._retry(st, now))
        return out

    def expire(self, now: float) -> list[tuple[Any, int]]:
        """Release holds older than the timeout and forget expired notes."""
        out: list[tuple[Any, int]] = []
        for st in self.streams.values():
            if st.notes and any(until <= now for _, until in st.notes):
                st.notes = [n for n in st.notes if n[1] > now]
                out.extend(self._retry(st, now))
            if st.held and now - st.held_since >= self.hold_timeout:
                out.extend(self._release(st, now))
        return out

    def delivered(self) -> dict[bytes, int]:
        """Each publisher's highest seq delivered."""
        return {publisher: st.last for publisher, st in self.streams.items()}

    def next_deadline(self) -> float | None:
        """The earliest time :meth:`expire` has something to do, or None."""
        times = [st.held_since + self.hold_timeout for st in self.streams.values() if st.held]
        times += [until for st in self.streams.values() for _, until in st.notes]
        return min(times) if times else None

    # ------------------------------------------------------------------ rules

    def _may_deliver(self, st: _Stream, source: str, epoch: int, first: int) -> bool:
        if st.epoch is None:
            # never delivered: only notes can make us wait, for the exchanges left before ``source``
            return not st.notes or st.notes[0][0] == source
        if epoch <= st.epoch:
            return True
        if not st.filtered and first <= st.last + 1:
            return True
        return all(e in st.ended for e in range(st.epoch, epoch))

    def _hold(self, st: _Stream, entry: tuple, now: float) -> None:
        if not st.held:
            st.held_since = now
        st.held.append(entry)
        self.held += 1

    def _retry(self, st: _Stream, now: float) -> list[tuple[Any, int]]:
        """Deliver what the newest knowledge allows: oldest epoch first, arrival order within one."""
        out: list[tuple[Any, int]] = []
        if not st.held:
            return out
        held, st.held = sorted(st.held, key=_epoch_of), []
        self.held -= len(held)
        for entry in held:
            if self._may_deliver(st, entry[0], entry[1], entry[2]):
                self._deliver(st, entry, out)
            else:
                self._hold(st, entry, now)
        return out

    def _release(self, st: _Stream, now: float) -> list[tuple[Any, int]]:
        """Give up waiting: every epoch before the newest held one is taken as ended."""
        self.hold_timeouts += 1
        newest = max(e for _, e, *_ in st.held)
        st.ended.update(range(st.epoch if st.epoch is not None else newest, newest))
        st.notes = []
        held, st.held = sorted(st.held, key=_epoch_of), []
        self.held -= len(held)
        out: list[tuple[Any, int]] = []
        for entry in held:
            self._deliver(st, entry, out)
        return out

    def _deliver(self, st: _Stream, entry: tuple, out: list[tuple[Any, int]]) -> None:
        source, epoch, first, count, key_prev, key, item = entry
        if st.epoch is None or epoch > st.epoch:
            st.epoch, st.source = epoch, source
            st.ended = {e for e in st.ended if e >= epoch}
            st.sources = {e: s for e, s in st.sources.items() if e >= epoch}
            st.notes = []
        last = first + count - 1
        if last <= st.last:
            self.duplicates += count
            return
        skip = st.last - first + 1 if first <= st.last else 0
        if skip:
            self.duplicates += skip
        elif st.filtered:
            known = st.key_last.get(key)
            if known is not None and key_prev > known:
                self.gaps += 1
                self.lost += 1
            if len(st.key_last) >= self.max_keys and known is None:
                st.key_last.clear()
            st.key_last[key] = last
        elif st.last and first > st.last + 1:
            self.gaps += 1
            self.lost += first - st.last - 1
        if st.filtered and skip:
            st.key_last[key] = last
        st.last = last
        out.append((item, skip))
