"""exchange journal reads: a fetch filtered by several prefixes, and one that wants no key (a link that wants nothing
of the queue): answered at once with only where to go on, never parked, nothing read."""

from __future__ import annotations

import pytest

from exchange.journal import Store
from exchange.journal._reads import Reads
from roq.errors import ProtocolError
from roq.wire import batch, control


def _journal(tmp_path) -> Store:
    store, _ = Store.open(str(tmp_path), "q")
    for i, key in enumerate([b"a.1", b"b.1", b"c.1", b"a.2"]):
        header = batch.pack_header(batch.DATA, b"P" * 16, i + 1, 1, timestamp_ns=1)
        store.append(key, header, batch.encode_body([b"x"]), b"P" * 16, 1, i + 1, 0)
    store.write()
    return store


def _keys(frames: list[bytes]) -> tuple[control.Fetched, list[bytes]]:
    meta = control.decode(frames[0])
    assert isinstance(meta, control.Fetched)
    return meta, frames[1::3]


def test_a_fetch_filtered_by_several_prefixes_gets_the_keys_of_any_of_them(tmp_path):
    store = _journal(tmp_path)
    try:
        reads = Reads(store)
        meta, keys = _keys(reads.fetch(b"r", control.Fetch(offset=0, prefixes=[b"a.", b"c."], filtered=True), 0.0))
        assert keys == [b"a.1", b"c.1", b"a.2"] and meta.next_offset == 4
        meta, keys = _keys(reads.fetch(b"r", control.Fetch(offset=0, prefix=b"b."), 0.0))  # (one prefix, as before)
        assert keys == [b"b.1"]
        with pytest.raises(ProtocolError, match="at most"):
            reads.fetch(b"r", control.Fetch(offset=0, prefixes=[b"x"] * (control.MAX_PREFIXES + 1), filtered=True), 0.0)
    finally:
        store.close()


def test_a_fetch_that_wants_no_key_goes_on_past_everything_at_once_and_is_never_parked(tmp_path):
    store = _journal(tmp_path)
    try:
        reads = Reads(store)
        nothing = control.Fetch(offset=1, prefixes=[], filtered=True, wait_ms=1000)
        meta, keys = _keys(reads.fetch(b"r", nothing, 0.0))
        assert keys == [] and (meta.start_offset, meta.next_offset, meta.end_offset) == (1, 4, 4)
        at_end = control.Fetch(offset=4, prefixes=[], filtered=True, wait_ms=1000)
        meta, keys = _keys(reads.fetch(b"r", at_end, 0.0))  # at the end: answered now, not parked
        assert keys == [] and meta.next_offset == 4 and reads.parked == []
        assert reads.fetch(b"r", control.Fetch(offset=4, wait_ms=1000), 0.0) is None  # (a fetch of keys waits there)
    finally:
        store.close()
