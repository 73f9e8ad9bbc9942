"""The journal's intake: batches from several exchanges, once each and in order per publisher; its acks."""

from __future__ import annotations

import pytest

from exchange.journal import Store
from exchange.journal._intake import Intake
from exchange.journal._sequencer import Gaps
from roq.wire import batch
from roq.wire.batch import BatchError

P = b"P" * 16
Q = b"Q" * 16
X1, X2 = b"exchange-1", b"exchange-2"


def _frames(publisher: bytes, first: int, count: int, flags: int = 0) -> tuple[bytes, bytes, bytes]:
    payloads = [f"{publisher[:1].decode()}{first + i}".encode() for i in range(count)]
    return b"k", batch.pack_header(batch.DATA, publisher, first, count, flags=flags), batch.encode_body(payloads)


def _journaled(store: Store) -> list[bytes]:
    store.write()
    out = []
    for e in store.read(0, 1 << 30):
        out.extend(batch.decode_body(e.body, batch.parse_header(e.header).count))
    return out


@pytest.fixture
def intake(tmp_path):
    store, _ = Store.open(str(tmp_path), "q")
    yield Intake(store, 1 << 20, Gaps(wait_s=1.0))
    store.close()


def test_a_batch_sent_twice_or_cut_differently_is_journaled_once_and_acknowledged_to_its_sender(intake):
    intake.take(X1, *_frames(P, 1, 3), now=0.0, time_ns=1)
    intake.take(X2, *_frames(Q, 1, 1), now=0.0, time_ns=1)
    assert intake.acks() == {X1: [(P, 3)], X2: [(Q, 1)]}
    intake.take(X2, *_frames(P, 1, 3), now=0.0, time_ns=2)  # resent through another exchange
    intake.take(X2, *_frames(P, 2, 4), now=0.0, time_ns=2)  # 2..5: 2 and 3 are there already
    assert intake.acks() == {X2: [(P, 5)]}
    assert intake.duplicates == 1 and intake.trimmed == 1
    assert _journaled(intake.store) == [b"P1", b"P2", b"P3", b"Q1", b"P4", b"P5"]


def test_a_batch_beyond_a_gap_waits_for_the_records_before_it_and_then_follows_them(intake):
    intake.take(X1, *_frames(P, 1, 2), now=0.0, time_ns=1)
    intake.take(X2, *_frames(P, 5, 2), now=0.0, time_ns=1)  # 3..4 not yet here
    assert intake.acks() == {X1: [(P, 2)]}  # nothing of the held batch is acknowledged
    intake.take(X1, *_frames(P, 3, 2), now=0.1, time_ns=2)
    assert intake.acks() == {X1: [(P, 6)], X2: [(P, 6)]}
    assert _journaled(intake.store) == [b"P1", b"P2", b"P3", b"P4", b"P5", b"P6"]


def test_a_relayed_publishers_jump_is_no_gap_and_a_resend_of_it_is_a_duplicate(intake):
    relayed = batch.FLAG_RELAYED
    intake.take(X1, *_frames(P, 1, 2, relayed), now=0.0, time_ns=1)
    intake.take(X1, *_frames(P, 7, 2, relayed), now=0.0, time_ns=1)  # 3..6 were keys not wanted here
    assert intake.acks() == {X1: [(P, 8)]}
    intake.take(X2, *_frames(P, 7, 2, relayed), now=0.0, time_ns=2)  # sent again after the link flapped
    assert intake.duplicates == 1 and intake.skipped == 0
    assert _journaled(intake.store) == [b"P1", b"P2", b"P7", b"P8"]


def test_a_gap_that_stays_open_is_passed_over_and_counted(intake):
    intake.take(X1, *_frames(P, 1, 1), now=0.0, time_ns=1)
    intake.take(X1, *_frames(P, 4, 1), now=0.0, time_ns=1)
    assert intake.expire(0.5, 2) == 0
    assert intake.expire(1.0, 2) == 1
    assert intake.skipped == 2
    assert intake.acks() == {X1: [(P, 4)]}
    assert _journaled(intake.store) == [b"P1", b"P4"]


def test_a_marker_is_answered_with_its_publishers_highest_seq_and_garbage_appends_nothing(intake):
    intake.take(X1, *_frames(P, 1, 2), now=0.0, time_ns=1)
    intake.acks()
    marker = batch.pack_header(batch.MARKER, P, 3, 0)
    intake.take(X2, batch.CONTROL_TOPIC, marker, b"", now=0.0, time_ns=1)
    assert intake.acks() == {X2: [(P, 2)]}
    with pytest.raises(BatchError):
        intake.take(X1, b"k", b"not a header", b"", now=0.0, time_ns=1)
    with pytest.raises(BatchError, match="oversized"):
        intake.take(X1, b"k", batch.pack_header(batch.DATA, Q, 1, 1), batch.encode_body([b"x" * (2 << 20)]),
                    now=0.0, time_ns=1)
    assert intake.acks() == {} and _journaled(intake.store) == [b"P1", b"P2"]
