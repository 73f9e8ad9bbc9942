"""What the journal does with the batches its exchanges send, one round at a time (no sockets).

A round is what the journal's loop read at once. :meth:`Intake.take` decides for each batch (checked as an
exchange checks it, then :func:`~exchange.journal._sequencer.decide`) and appends what is new to the store;
:meth:`Intake.acks` then says, per exchange, each publisher's highest seq journaled, for every publisher that
exchange sent something of in the round (a duplicate and a marker are answered too: their publisher waits for
the acknowledgement). The owner sends those only once the round is written (``interval``) or synced
(``always``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Callable

from exchange.journal._sequencer import DUPLICATE, GAP, TRIM, Gaps, Held, decide
from exchange.journal._store import Store
from roq.wire import batch
log = logging.getLogger(__name__)

__all__ = ["Intake"]


class Intake:
    """Batches in, entries appended, acknowledgements out.

    Args:
        store: the journal.
        max_body: a batch body above this is refused (as the exchanges refuse it).
        gaps: where batches beyond a gap wait.
        on_seam: told of each seam an exchange marks (:data:`roq.wire.batch.SEAM`).
    """

    def __init__(self, store: Store, max_body: int, gaps: Gaps | None = None,
                 on_seam: Callable[[bytes, bytes, int], None] | None = None) -> None:
        self.store = store
        self.on_seam = on_seam  # (subscriber, exchange, offset): an exchange marked a replaying subscriber's seam
        self.max_body = max_body
        self.gaps = gaps if gaps is not None else Gaps()
        self._touched: dict[bytes, set[bytes]] = defaultdict(set)  # exchange -> publishers to acknowledge
        self.records = 0  # records journaled
        self.batches = 0
        self.duplicates = 0  # batches journaled already
        self.trimmed = 0  # batches partly journaled already
        self.skipped = 0  # records never received, passed over after GAP_WAIT_S

    def take(self, source: bytes, key: bytes, header: bytes, body: bytes, now: float, time_ns: int) -> None:
        """One batch or marker from the exchange ``source``.

        Raises:
            BatchError: it does not check (nothing is appended).
        """
        if key == batch.CONTROL_TOPIC and len(header) == batch.HEADER_SIZE and header[1] == batch.SEAM:
            h = batch.parse_header(header)
            if self.on_seam is not None:  # everything its exchange sent before is in this round or earlier
                self.on_seam(h.publisher, body[:256], self.store.next_offset)
            return
        h = batch.check_incoming(key, header, body, self.max_body)
        publisher = h.publisher
        if h.kind != batch.DATA:  # a marker: its publisher waits for an acknowledgement up to it
            self._touched[source].add(publisher)
            return
        if decide(self.store.high(publisher), h.first_seq, h.last_seq, bool(h.flags & batch.FLAG_RELAYED)) == GAP:
            self.gaps.hold(publisher, Held(h.first_seq, h.last_seq, [key, header, body], source, now))
            return
        self._apply(source, key, header, body, h, time_ns)
        for item in self.gaps.ready(publisher, self.store.high(publisher)):
            self._replay(item, time_ns)

    def _apply(self, source: bytes, key: bytes, header: bytes, body: bytes, h: batch.Header, time_ns: int) -> None:
        """Append what is new of a batch (a gap before it passed over and counted); acknowledged to ``source``."""
        publisher = h.publisher
        self._touched[source].add(publisher)
        high = self.store.high(publisher)
        decision = decide(high, h.first_seq, h.last_seq, bool(h.flags & batch.FLAG_RELAYED))
        if decision == DUPLICATE:
            self.duplicates += 1
            return
        if decision == TRIM:
            self.trimmed += 1
            header, body = _after(h, body, high or 0)
            h = batch.parse_header(header)
        elif decision == GAP:
            self.skipped += h.first_seq - (high or 0) - 1
            log.warning("publisher %s: seqs %d..%d never reached the journal in %.1fs; journaling from %d",
                        publisher.hex()[:8], (high or 0) + 1, h.first_seq - 1, self.gaps.wait_s, h.first_seq)
        self.store.append(key, header, body, publisher, h.count, h.last_seq, time_ns)
        self.records += h.count
        self.batches += 1

    def _replay(self, item: Held, time_ns: int) -> None:
        """A batch that waited: taken as if it came now."""
        key, header, body = item.frames
        self._apply(item.source, key, header, body, batch.parse_header(header), time_ns)

    def expire(self, now: float, time_ns: int) -> int:
        """Journal the batches whose gap was not filled in time; how many."""
        taken = 0
        for _publisher, items in self.gaps.expired(now):
            for item in items:
                self._replay(item, time_ns)
                taken += 1
        return taken

    def acks(self) -> dict[bytes, list[tuple[bytes, int]]]:
        """Per exchange, each publisher of the round with its highest seq journaled (taken out)."""
        out: dict[bytes, list[tuple[bytes, int]]] = {}
        high = self.store.high
        for source, publishers in self._touched.items():
            pairs = [(p, s) for p, s in ((p, high(p)) for p in publishers) if s is not None]
            if pairs:
                out[source] = pairs
        self._touched.clear()
        return out


def _after(h: batch.Header, body: bytes, high: int) -> tuple[bytes, bytes]:
    """The header and body of the records of a batch after seq ``high``."""
    records = batch.decode_body(body, h.count)[high - h.first_seq + 1:]
    header = batch.pack_header(batch.DATA, h.publisher, high + 1, len(records), epoch=h.epoch,
                               timestamp_ns=h.timestamp_ns, flags=h.flags)
    return header, batch.encode_body(records)
