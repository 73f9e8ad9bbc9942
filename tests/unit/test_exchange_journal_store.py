"""The journal's storage: appends, reads by offset and time, rolls, retention, recovery, full disks, owners."""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from exchange.journal import Store, segment_name
from exchange.journal._format import INDEX_INTERVAL
from roq.wire import batch
from roq.errors import CorruptJournalError, JournalError

PUB_A = b"A" * 16
PUB_B = b"B" * 16


def _batch(publisher: bytes, first: int, payloads: list[bytes], key: bytes = b"k") -> tuple[bytes, bytes, bytes]:
    header = batch.pack_header(batch.DATA, publisher, first, len(payloads), timestamp_ns=1)
    return key, header, batch.encode_body(payloads)


def _put(store: Store, publisher: bytes, first: int, n: int, size: int = 100, t: int = 0) -> int:
    payloads = [bytes([first % 251]) * size for _ in range(n)]
    key, header, body = _batch(publisher, first, payloads)
    return store.append(key, header, body, publisher, n, first + n - 1, t)


def _records(store: Store, offset: int = 0) -> list[tuple[bytes, int]]:
    """(publisher, seq) of every record from ``offset``."""
    out = []
    while True:
        entries = store.read(offset, 1 << 20)
        if not entries:
            return out
        for e in entries:
            h = batch.parse_header(e.header)
            for i in range(h.count):
                if e.offset + i >= offset:
                    out.append((h.publisher, h.first_seq + i))
            offset = e.offset + h.count


def test_appended_batches_read_back_by_offset_in_order_with_their_frames(tmp_path):
    store, rec = Store.open(str(tmp_path), "q")
    assert rec.next_offset == 0
    assert _put(store, PUB_A, 1, 3) == 0
    assert _put(store, PUB_B, 1, 2) == 3
    assert store.read(0, 1 << 20) == []  # queued, not written: nothing is read before the write
    store.write()
    store.sync()
    entries = store.read(0, 1 << 20)
    assert [(e.offset, e.count) for e in entries] == [(0, 3), (3, 2)]
    assert batch.decode_body(entries[1].body, 2) == [bytes([1]) * 100] * 2
    assert entries[0].key == b"k"
    assert [e.offset for e in store.read(4, 1 << 20)] == [3]  # the entry holding offset 4, whole
    assert store.high(PUB_A) == 3 and store.high(PUB_B) == 2 and store.high(b"C" * 16) is None
    store.close()


def test_segments_roll_and_reads_cross_them_and_the_index_finds_offsets_and_times(tmp_path):
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=20_000)
    seq = 1
    for i in range(200):
        _put(store, PUB_A, seq, 2, size=200, t=1_000 + i)
        seq += 2
        store.write()
    assert len(store.segments) >= 4
    assert [s for _, s in _records(store)] == list(range(1, seq))
    assert [s for _, s in _records(store, 301)] == list(range(302, seq))
    assert store.offset_at(1_000 + 150) == 300
    assert store.offset_at(10 ** 18) == store.end_offset == 400
    assert list(store.verify()) == []
    seg = store.segments[1]
    assert len(seg.index.offsets) >= seg.size // (INDEX_INTERVAL + 500)
    store.close()


def test_recovery_cuts_a_torn_tail_keeps_it_aside_and_knows_the_publishers(tmp_path):
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=50_000)
    seq = 1
    for _ in range(100):
        _put(store, PUB_A, seq, 1)
        _put(store, PUB_B, seq, 1)
        seq += 1
        store.write()
    store.sync()
    active = store.active.path
    size = os.path.getsize(active)
    store.close()
    rng = random.Random(7)
    cut = size - 77  # inside the last entry
    os.truncate(active, cut)
    with open(active, "ab") as f:
        f.write(bytes(rng.randrange(256) for _ in range(300)))
    store, rec = Store.open(str(tmp_path), "q", segment_bytes=50_000)
    assert rec.torn_bytes == cut + 300 - os.path.getsize(active)
    assert os.path.exists(active + f".torn-{os.path.getsize(active)}")
    recs = _records(store)
    assert recs[-1] == (PUB_A, 100)  # B's 100th was torn
    assert store.high(PUB_A) == 100 and store.high(PUB_B) == 99
    assert list(store.verify()) == []
    _put(store, PUB_B, 100, 1)
    store.write()
    assert _records(store)[-1] == (PUB_B, 100)
    store.close()


def test_a_missing_or_wrong_index_is_rebuilt_from_the_log(tmp_path):
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=30_000)
    for seq in range(1, 301):
        _put(store, PUB_A, seq, 1, size=300)
        store.write()
    store.close()
    first, second = sorted(p for p in os.listdir(tmp_path) if p.endswith(".idx"))[:2]
    os.unlink(tmp_path / first)
    with open(tmp_path / second, "r+b") as f:
        f.write(b"\xff" * 24)
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=30_000)
    assert [s for _, s in _records(store, 0)] == list(range(1, 301))
    assert os.path.getsize(tmp_path / first) > 0
    store.close()


def test_a_corrupt_sealed_segment_is_never_served_and_verify_names_it(tmp_path):
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=20_000)
    for seq in range(1, 201):
        _put(store, PUB_A, seq, 1, size=300)
        store.write()
    store.close()
    seg = tmp_path / segment_name(0, ".log")
    data = bytearray(seg.read_bytes())
    data[5000] ^= 0xFF
    seg.write_bytes(bytes(data))
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=20_000)
    problems = list(store.verify())
    assert len(problems) == 1 and "checksum fails" in problems[0] and segment_name(0, ".log") in problems[0]
    with pytest.raises(CorruptJournalError, match="checksum"):
        _records(store, 0)
    later = store.segments[1].base
    assert [s for _, s in _records(store, later)] == list(range(later + 1, 201))  # the rest still reads
    store.close()


def test_retention_removes_the_oldest_segments_by_size_and_by_age(tmp_path):
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=10_000)
    for seq in range(1, 401):
        _put(store, PUB_A, seq, 1, size=200, t=seq * 1_000)
        store.write()
    total = store.size_bytes
    assert store.retain(10 ** 9, total // 2, 0) > 0
    assert store.size_bytes <= total // 2 + 10_000 and store.first_offset > 0
    kept = store.first_offset
    assert _records(store, 0)[0][1] == kept + 1  # an offset before the oldest reads from the oldest
    assert store.retain(400_000, 0, 100_000) > 0  # records older than 300,000 ns go
    assert store.segments[1].first_time_ns >= 300_000 or len(store.segments) == 1
    store.close()
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=10_000)
    assert store.high(PUB_A) == 400  # the publishers' table survived the segments' removal
    store.close()


def test_a_journal_of_another_queue_or_owner_is_refused(tmp_path):
    Store.open(str(tmp_path), "q")[0].close()
    with pytest.raises(JournalError, match="journal of queue 'q', not 'other'"):
        Store.open(str(tmp_path), "other")
    (tmp_path / "journal.json").write_text(json.dumps({"format": 99, "queue": "q"}))
    with pytest.raises(JournalError, match="format 99"):
        Store.open(str(tmp_path), "q")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(JournalError, match="belongs to uid 65534.*chown"):
        Store.open(str(theirs), "q")


def test_a_failed_write_leaves_the_journal_as_before_the_round(tmp_path, monkeypatch):
    store, _ = Store.open(str(tmp_path), "q")
    _put(store, PUB_A, 1, 2)
    store.write()
    _put(store, PUB_A, 3, 2)
    _put(store, PUB_B, 1, 2)

    def full(fd, buffers):
        os.write(fd, bytes(buffers[0])[:10])  # a partial write, as a filling disk makes
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "writev", full)
    with pytest.raises(JournalError, match="the disk is full"):
        store.write()
    monkeypatch.undo()
    assert store.next_offset == 2 and store.high(PUB_A) == 2 and store.high(PUB_B) is None
    assert os.path.getsize(store.active.path) == store.active.size
    _put(store, PUB_B, 1, 2)
    store.write()
    assert _records(store) == [(PUB_A, 1), (PUB_A, 2), (PUB_B, 1), (PUB_B, 2)]
    store.close()
    store, rec = Store.open(str(tmp_path), "q")
    assert rec.torn_bytes == 0 and _records(store)[-1] == (PUB_B, 2)
    store.close()


def test_a_sealed_segment_whose_tail_does_not_check_is_never_read_past(tmp_path):
    """Its index no longer fits either: rebuilt, the segment still ends where the next begins, and a read
    that reaches the damage says so instead of skipping to the next segment."""
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=20_000)
    for seq in range(1, 201):
        _put(store, PUB_A, seq, 1, size=300)
        store.write()
    store.close()
    seg = tmp_path / segment_name(0, ".log")
    data = bytearray(seg.read_bytes())
    data[-10] ^= 0xFF  # the last entry of the first segment
    seg.write_bytes(bytes(data))
    (tmp_path / segment_name(0, ".idx")).unlink()
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=20_000)
    later = store.segments[1].base
    with pytest.raises(CorruptJournalError, match="checksum fails"):
        store.read(later - 1, 1 << 20)
    assert any("checksum fails" in p for p in store.verify())
    assert [s for _, s in _records(store, later)] == list(range(later + 1, 201))
    store.close()


def test_closing_writes_and_syncs_but_never_rolls(tmp_path):
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=4096)
    _put(store, PUB_A, 1, 20, size=300)
    store.active.write()  # full, not rolled yet (a crash between the write and the roll)
    store.close()
    assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".log")) == [segment_name(0, ".log")]


def test_a_journal_of_a_new_generation_begins_past_the_old_ones_offsets_and_sets_its_files_aside(tmp_path):
    directory = str(tmp_path / "j")
    store, _ = Store.open(directory, "q")
    assert store.empty and store.generation == 0
    assert store.begin_generation(1, 1 << 40) == ""  # an empty journal: nothing to set aside
    assert (store.first_offset, store.next_offset) == (1 << 40, 1 << 40) and not os.path.exists(
        os.path.join(directory, segment_name(0, ".log")))
    assert _put(store, PUB_A, 1, 3) == 1 << 40
    store.write()
    store.close()
    with open(os.path.join(directory, "positions.json"), "w") as f:
        json.dump({"audit": (1 << 40) + 2}, f)
    store, rec = Store.open(directory, "q")  # where it began, and its generation, stay
    assert rec.next_offset == (1 << 40) + 3 and _records(store, 0) == [(PUB_A, 1), (PUB_A, 2), (PUB_A, 3)]
    assert not store.empty and store.generation == 1

    # the host comes back and is given the queue's journal of generation 3: these files are set aside
    moved = store.begin_generation(3, 1 << 41)
    assert moved.startswith("superseded-1-")
    aside = sorted(os.listdir(os.path.join(directory, moved)))
    assert segment_name(1 << 40, ".log") in aside and "positions.json" in aside
    assert not os.path.exists(os.path.join(directory, "positions.json"))
    assert (store.first_offset, store.next_offset) == (1 << 41, 1 << 41) and _records(store, 0) == []
    assert _put(store, PUB_A, 1, 2) == 1 << 41  # its publishers' seqs start afresh too
    store.write()
    store.close()
    store, rec = Store.open(directory, "q")
    assert (store.generation, store.first_offset, rec.next_offset) == (3, 1 << 41, (1 << 41) + 2)
    assert _records(store, 0) == [(PUB_A, 1), (PUB_A, 2)]
    store.close()


def test_a_generation_that_is_not_a_whole_number_is_refused(tmp_path):
    directory = str(tmp_path / "j")
    Store.open(directory, "q")[0].close()
    with open(os.path.join(directory, "journal.json"), "w") as f:
        json.dump({"format": 1, "queue": "q", "generation": -1}, f)
    with pytest.raises(JournalError, match="generation -1"):
        Store.open(directory, "q")


def test_a_generation_that_cannot_be_written_leaves_the_journal_as_it_was(tmp_path):
    directory = str(tmp_path / "j")
    store, _ = Store.open(directory, "q")
    _put(store, PUB_A, 1, 3)
    store.write()
    os.mkdir(os.path.join(directory, "journal.json.new"))  # journal.json cannot be replaced
    with pytest.raises(JournalError, match="journal.json"):
        store.begin_generation(1, 1 << 40)
    assert store.generation == 0 and store.next_offset == 3  # not told it is of the new generation
    assert _records(store, 0) == [(PUB_A, 1), (PUB_A, 2), (PUB_A, 3)]  # its files are back, and read
    assert sorted(os.listdir(directory)) == sorted([segment_name(0, ".log"), segment_name(0, ".idx"), "journal.json",
                                                    "journal.json.new"]), os.listdir(directory)
    store.close()


def test_the_newest_entries_kept_in_memory_read_as_the_files_do(tmp_path):
    rng = random.Random(5)
    kept, plain = (Store.open(str(tmp_path / name), "q", segment_bytes=64 << 10)[0] for name in ("kept", "plain"))
    kept.keep_recent(20_000)  # a few rounds' worth: the older ones come from the files
    seq = 1
    for _ in range(40):  # rounds of a few batches, across segment rolls
        for _ in range(rng.randint(1, 4)):
            n, size = rng.randint(1, 9), rng.choice((10, 300, 1500))
            for store in (kept, plain):
                _put(store, PUB_A, seq, n, size=size, t=seq)
            seq += n
        for store in (kept, plain):
            store.write()
    assert kept._recent and kept._recent[0].offset > 0  # (the oldest entries were let go)
    for offset in [0, 1, kept._recent[0].offset - 1, kept._recent[0].offset, kept._recent[0].offset + 1,
                   kept.end_offset - 1, kept.end_offset, *rng.sample(range(kept.end_offset), 20)]:
        for max_bytes in (1, 2_000, 1 << 20):
            assert kept.read(offset, max_bytes) == plain.read(offset, max_bytes), (offset, max_bytes)
    kept.close()
    plain.close()


def test_the_log_is_cut_back_to_an_entry_and_goes_on_from_there(tmp_path):
    directory = str(tmp_path / "j")
    store, _ = Store.open(directory, "q", segment_bytes=8 << 10)
    store.keep_recent(4 << 10)
    offsets, seqs = [], {PUB_A: 0, PUB_B: 0}
    for i in range(60):  # entries of three records: the first 30 A's, then A's and B's in turn
        publisher = PUB_A if i < 30 or i % 2 else PUB_B
        offsets.append(_put(store, publisher, seqs[publisher] + 1, 3, size=150, t=i))
        seqs[publisher] += 3
        store.write()
    assert len(store.segments) >= 4
    cut = offsets[25]  # in an older segment: every later one goes
    with pytest.raises(JournalError):
        store.truncate(cut + 1)  # inside an entry: none begins there
    store.truncate(cut)
    assert store.end_offset == store.next_offset == cut and store.high(PUB_A) == 75 and store.high(PUB_B) is None
    assert [p for p, _ in _records(store)] == [PUB_A] * 75
    assert _put(store, PUB_B, 1, 2) == cut  # it goes on from there
    store.write()
    store.close()
    store, rec = Store.open(directory, "q", segment_bytes=8 << 10)  # and so it is found again
    assert rec.torn_bytes == 0 and list(store.verify()) == []
    assert [p for p, _ in _records(store)] == [PUB_A] * 75 + [PUB_B] * 2 and store.high(PUB_B) == 2
    store.close()


def test_offsets_jump_past_a_gap_that_reads_as_one_and_is_found_again(tmp_path):
    directory = str(tmp_path / "j")
    store, _ = Store.open(directory, "q", segment_bytes=8 << 10)
    for seq in range(1, 4):
        _put(store, PUB_A, seq, 1)
        store.write()
    end = store.end_offset
    with pytest.raises(JournalError):
        store.jump(end - 1)  # backwards
    store.jump(1 << 30)
    store.jump(1 << 31)  # twice, nothing between: the empty segment goes, the gap still reads as one
    assert _put(store, PUB_A, 4, 2) == 1 << 31
    store.write()
    assert store.read(end, 1 << 20)[0].offset == 1 << 31  # a read in the gap goes on past it
    assert [seq for _, seq in _records(store)] == [1, 2, 3, 4, 5]
    store.close()
    store, rec = Store.open(directory, "q", segment_bytes=8 << 10)
    assert rec.torn_bytes == 0 and list(store.verify()) == [] and store.next_offset == (1 << 31) + 2
    assert [seq for _, seq in _records(store)] == [1, 2, 3, 4, 5] and store.high(PUB_A) == 5
    store.close()
    os.truncate(os.path.join(directory, segment_name(0, ".log")), 200)  # a sealed segment that ends short...
    store, _ = Store.open(directory, "q", segment_bytes=8 << 10)
    with pytest.raises(CorruptJournalError):
        _records(store)  # ...still reads as damage, not as a gap
    store.close()


def test_a_promise_a_position_and_the_format_are_on_disk_with_their_rename_before_the_answer(tmp_path, monkeypatch):
    """Each small file is written whole, synced, renamed into place, and then its directory synced: the rename is
    durable too, so a power loss cannot take back a replica's promise or a position the journal confirmed."""
    from exchange.journal._reads import Positions
    from exchange.journal._replicas import load_replica, save_replica

    synced = _watched(monkeypatch, "fsync")
    directory = str(tmp_path / "j")
    store, _ = Store.open(directory, "q")
    replica = load_replica(directory, "r1", store)
    replica.promise(3)
    synced.clear()
    save_replica(directory, replica)
    assert synced == [os.path.realpath(os.path.join(directory, "replica.json.new")), os.path.realpath(directory)]
    assert load_replica(directory, "r1", store).promised == 3
    positions = Positions(directory)
    synced.clear()
    positions.commit("sub-1", 42)
    assert synced[-1] == os.path.realpath(directory) and len(synced) == 2
    store.close()


def _failing_syncs(monkeypatch, times: int) -> None:
    """``os.fdatasync`` fails ``times`` times with EIO (a disk that refused), then works."""
    import errno

    real, left = os.fdatasync, [times]

    def fdatasync(fd: int) -> None:
        if left[0] > 0:
            left[0] -= 1
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)


def test_after_a_failed_sync_the_log_is_cut_back_to_what_is_on_the_disk_and_the_resends_are_taken_again(
        tmp_path, monkeypatch):
    """A failed sync may leave its pages marked clean: a later sync succeeds without them, and the exchanges'
    resends would be taken for records the journal holds. What was written since the last good sync is cut away."""
    store, _ = Store.open(str(tmp_path), "q")
    _put(store, PUB_A, 1, 3)
    store.write()
    store.sync()
    synced_end = store.end_offset
    _put(store, PUB_A, 4, 2)
    store.write()
    _failing_syncs(monkeypatch, 1)
    with pytest.raises(JournalError):
        store.sync()
    assert store.end_offset > synced_end and store.high(PUB_A) == 5
    store.cut_to_synced()
    assert store.end_offset == store.next_offset == synced_end and store.high(PUB_A) == 3
    assert _records(store) == [(PUB_A, s) for s in (1, 2, 3)]
    _put(store, PUB_A, 4, 2)  # the exchange's resend: not a duplicate any more
    store.write()
    store.sync()
    assert _records(store) == [(PUB_A, s) for s in (1, 2, 3, 4, 5)]
    store.close()
    reopened, _ = Store.open(str(tmp_path), "q")
    assert _records(reopened) == [(PUB_A, s) for s in (1, 2, 3, 4, 5)]
    reopened.close()


def test_a_sync_that_fails_as_a_full_segment_is_sealed_is_cut_back_too(tmp_path, monkeypatch):
    store, _ = Store.open(str(tmp_path), "q", segment_bytes=300)
    _put(store, PUB_A, 1, 1)
    store.write()
    store.sync()
    synced_end = store.end_offset
    _put(store, PUB_A, 2, 3)  # past the segment's size: the write seals it, and the seal syncs it
    _failing_syncs(monkeypatch, 1)
    with pytest.raises(JournalError):
        store.write()
    assert store.sync_failed and store.end_offset > synced_end
    store.cut_to_synced()
    assert not store.sync_failed and store.end_offset == synced_end and store.high(PUB_A) == 1
    _put(store, PUB_A, 2, 3)
    store.write()
    store.sync()
    assert _records(store) == [(PUB_A, s) for s in (1, 2, 3, 4)]
    store.close()


def test_a_follower_whose_sync_fails_holds_only_what_is_on_the_disk_and_fetches_the_rest_again(tmp_path, monkeypatch):
    from exchange.journal._replicas import append_entries, load_replica
    from exchange.journal._replication import EpochHistory

    store, _ = Store.open(str(tmp_path), "q")
    replica = load_replica(str(tmp_path), "r2", store)
    history = EpochHistory.from_list([[1, 0, -1]])
    first = [*_batch(PUB_A, 1, [b"a"] * 2), *_batch(PUB_A, 3, [b"b"] * 2)]
    assert append_entries(store, replica, history, [0, 2], [1, 2], first, durable=True) == (2, "")
    second = list(_batch(PUB_A, 5, [b"c"] * 3))
    _failing_syncs(monkeypatch, 1)
    with pytest.raises(JournalError):
        append_entries(store, replica, history, [4], [3], second, durable=True)
    assert store.next_offset == 4 and replica.end == 4  # its next fetch asks from 4 again
    assert append_entries(store, replica, history, [4], [3], second, durable=True) == (1, "")
    assert store.next_offset == 7 and replica.end == 7
    store.close()


@pytest.mark.parametrize("leads", [False, True], ids=["one journal", "a leader"])
def test_a_journal_whose_sync_fails_acknowledges_nothing_of_the_round_and_takes_its_resend_as_new(tmp_path,
                                                                                                  monkeypatch, leads):
    """A journal process's core on real sockets: the round whose sync fails is not acknowledged and is cut away, so
    the exchange's resend is written and synced again before it is acknowledged, not taken for a duplicate of what
    the failed sync may have left only in the kernel's memory."""
    import zmq

    from exchange.journal._journal import Journal
    from roq.config import JournalConfig

    journal = Journal(JournalConfig(queue="q", directory=str(tmp_path / "j"), followers=("f1",) if leads else ()))
    journal.start()
    exchange = journal._ctx.socket(zmq.DEALER)
    exchange.setsockopt(zmq.LINGER, 0)
    exchange.connect(journal.endpoint)

    def send(first: int, n: int) -> list[int]:
        """A batch of ``n`` records from ``first``, one round of the journal; the seqs acknowledged."""
        key, header, body = _batch(PUB_A, first, [b"r"] * n)
        exchange.send_multipart([key, header, body])
        deadline = time.monotonic() + 5
        while not journal.sock.poll(10):
            assert time.monotonic() < deadline, "the batch never reached the journal"
        journal._round(time.monotonic())
        return [seq for frame in _frames(exchange) for _, seq in batch.decode_journal_ack(frame)[2]]

    try:
        if leads:  # a leader's round is acknowledged once its follower holds it too: none here
            assert send(1, 3) == [] and journal.leading is not None
        else:
            assert send(1, 3) == [3]
        end = journal.store.end_offset
        _failing_syncs(monkeypatch, 1)
        assert send(4, 2) == []  # not on the disk: not acknowledged
        assert journal.store.end_offset == end  # and not held: the resend is not a duplicate
        if leads:  # its follower may have taken the round: it leads no more, and gives those offsets to nobody
            assert journal.leading is None and journal.standby is not None and journal.standby.end == end
            return
        journal._paused_until = 0.0  # (the intake's pause after a failure, over)
        assert send(4, 2) == [5]
        assert _records(journal.store) == [(PUB_A, s) for s in range(1, 6)]
    finally:
        exchange.close()
        journal.close()


def _frames(sock) -> list[bytes]:
    """The last frame of each message waiting on ``sock``, within 0.2 s."""
    out = []
    while sock.poll(200):
        out.append(sock.recv_multipart()[-1])
    return out


def test_a_journal_opened_again_syncs_its_active_segment_before_its_records_count_as_held(tmp_path, monkeypatch):
    """A process killed after a write and before its sync leaves that write in the kernel's memory only: opened
    again, the journal syncs it before taking it for records it holds (and dropping their resends)."""
    store, _ = Store.open(str(tmp_path), "q")
    _put(store, PUB_A, 1, 3)
    store.write()  # not synced: the process "dies" here
    active = os.path.realpath(store.active.path)
    synced = _watched(monkeypatch, "fdatasync")
    reopened, _ = Store.open(str(tmp_path), "q")
    assert active in synced and reopened.high(PUB_A) == 3
    reopened.close()
    store.close()


def _watched(monkeypatch, call: str) -> list[str]:
    """The paths ``os.<call>`` (``fsync``, ``fdatasync``) syncs from now on, in order (the real call is made)."""
    synced: list[str] = []
    real = getattr(os, call)

    def watched(fd: int) -> None:
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, call, watched)
    return synced
