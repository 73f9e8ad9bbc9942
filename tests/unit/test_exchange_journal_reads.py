"""exchange journal reads: a fetch filtered by several prefixes, and one that wants no key (a link that wants nothing
of the queue): answered at once with only where to go on, never parked, nothing read."""

from __future__ import annotations

import pytest

from exchange.journal import Store
from exchange.journal._reads import Reads
from roq.errors import ProtocolError
from roq.wire import batch, control


def _append(store: Store, key: bytes, seq: int) -> None:
    store.append(key, batch.pack_header(batch.DATA, b"P" * 16, seq, 1, timestamp_ns=1), batch.encode_body([b"x"]),
                 b"P" * 16, 1, seq, 0)
    store.write()


def _journal(tmp_path) -> Store:
    store, _ = Store.open(str(tmp_path), "q")
    for i, key in enumerate([b"a.1", b"b.1", b"c.1", b"a.2"]):
        _append(store, key, i + 1)
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


def test_a_record_for_another_cluster_goes_only_to_a_fetch_that_names_its_address(tmp_path):
    store = _journal(tmp_path)
    try:
        _append(store, b"\x00@store-417/a.9", 5)
        reads = Reads(store)
        _, keys = _keys(reads.fetch(b"r", control.Fetch(offset=0), 0.0))  # every key: not the addressed one
        assert keys == [b"a.1", b"b.1", b"c.1", b"a.2"]
        _, keys = _keys(reads.fetch(b"r", control.Fetch(offset=0, prefixes=[b""], filtered=True), 0.0))
        assert keys == [b"a.1", b"b.1", b"c.1", b"a.2"]
        _, keys = _keys(reads.fetch(b"r", control.Fetch(offset=0, prefixes=[b"a.", b"\x00@store-417/"], filtered=True),
                                    0.0))
        assert keys == [b"a.1", b"a.2", b"\x00@store-417/a.9"]
        _, keys = _keys(reads.fetch(b"r", control.Fetch(offset=0, prefixes=[b"\x00@store-5/"], filtered=True), 0.0))
        assert keys == []
    finally:
        store.close()


def test_a_parked_link_fetch_is_not_answered_for_what_it_does_not_want_but_waits_on_past_it(tmp_path):
    store = _journal(tmp_path)
    try:
        reads = Reads(store)
        assert reads.fetch(b"r", control.Fetch(offset=4, wait_ms=1000, prefixes=[b"c."], filtered=True), 0.0) is None
        _append(store, b"a.3", 5)
        assert reads.written() == []  # nothing it wants: no empty answer, it waits on past it
        assert [p.offset for p in reads.parked] == [5]
        _append(store, b"c.2", 6)
        [(identity, frames)] = reads.written()
        meta, keys = _keys(frames)
        assert identity == b"r" and keys == [b"c.2"] and meta.next_offset == 6
        assert meta.start_offset == 4  # where it asked from: nothing it wanted lay between (the reader takes it)
        # a subscriber's fetch (unfiltered) is answered at once, as before: it may be waiting for its seam
        assert reads.fetch(b"s", control.Fetch(offset=6, wait_ms=1000, prefix=b"c."), 0.0) is None
        _append(store, b"a.4", 7)
        [(identity, frames)] = reads.written()
        assert identity == b"s" and _keys(frames)[1] == []
    finally:
        store.close()


def test_a_fetch_that_releases_has_the_readers_waiting_fetch_answered_first_and_goes_on_from_it(tmp_path):
    """A link whose far side came to want other keys: its fetch waiting at the end (for the old keys) is answered
    at once with where it got to, and the new one reads on from there: what came while the old keys were asked
    for is not read again for the new ones."""
    store = _journal(tmp_path)
    try:
        reads = Reads(store)
        assert reads.fetch(b"r", control.Fetch(offset=4, wait_ms=1000, prefixes=[b"c."], filtered=True), 0.0) is None
        assert reads.fetch(b"o", control.Fetch(offset=4, wait_ms=1000, prefixes=[b"c."], filtered=True), 0.0) is None
        _append(store, b"a.3", 5)
        assert reads.written() == []
        assert reads.release(b"nobody") == []
        [frames] = reads.release(b"r")
        meta, keys = _keys(frames)
        assert (meta.start_offset, meta.next_offset, keys) == (4, 5, [])
        assert [p.identity for p in reads.parked] == [b"o"]  # another reader's waits on
        _append(store, b"a.4", 6)
        frames = reads.fetch(b"r", control.Fetch(offset=-3, wait_ms=1000, prefixes=[b"a."], filtered=True), 0.0)
        meta, keys = _keys(frames)
        assert (meta.start_offset, keys) == (5, [b"a.4"])  # on from the released one: a.3 came before it was wanted
    finally:
        store.close()
