"""A durable queue's journal: every record its exchanges carry, on disk, in one order, read back by offset.

The process (:class:`Journal`), its settings and ``main``; and what reads its files: the storage
(:class:`Store`: segments of whole batches, a checksum each, an offset index, retention, recovery that cuts a
torn tail), the name of a segment file (:func:`segment_name`), and the shift of a replacing journal's first
offset (:data:`REBASE_SHIFT`).
"""

from __future__ import annotations

from exchange.journal._format import segment_name
from exchange.journal._journal import REBASE_SHIFT, Journal, main
from exchange.journal._store import Store
from roq.config import JournalConfig

__all__ = ["Journal", "JournalConfig", "main", "Store", "segment_name", "REBASE_SHIFT"]
