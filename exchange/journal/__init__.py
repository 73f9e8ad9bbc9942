"""A durable queue's journal: every record its exchanges carry, on disk, in one order, read back by offset.

The storage (:class:`Store`: segments of whole batches, a checksum each, an offset index, retention, recovery
that cuts a torn tail) and the order of each publisher's records in it (:func:`decide`, :class:`Gaps`).
"""

from __future__ import annotations

from exchange.journal._format import INDEX_INTERVAL, Entry, decode_entry, encode_entry, segment_name
from exchange.journal._intake import Intake
from exchange.journal._journal import PAUSE_S, REBASE_SHIFT, ROUND, Journal
from exchange.journal._segment import Segment
from exchange.journal._sequencer import DUPLICATE, GAP, GAP_WAIT_S, TRIM, WRITE, Gaps, Held, decide
from exchange.journal._store import MAX_PUBLISHERS, Recovery, Store, check_directory

__all__ = [
    # the process
    "Journal", "Intake", "ROUND", "PAUSE_S", "REBASE_SHIFT",
    # the storage
    "Store", "Recovery", "Segment", "Entry", "check_directory", "MAX_PUBLISHERS",
    # its files' layout
    "encode_entry", "decode_entry", "segment_name", "INDEX_INTERVAL",
    # each publisher's order
    "decide", "Gaps", "Held", "WRITE", "DUPLICATE", "TRIM", "GAP", "GAP_WAIT_S",
]
