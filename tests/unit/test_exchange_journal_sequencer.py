"""Each publisher's records once and in order: the journal's decision on a batch, and batches beyond gaps."""

from __future__ import annotations

from exchange.journal._sequencer import DUPLICATE, GAP, TRIM, WRITE, Gaps, Held, decide

P = b"P" * 16


def test_a_batch_is_written_skipped_trimmed_or_held_by_the_publishers_highest_seq():
    assert decide(None, 57, 60) == WRITE  # the first the journal sees of a publisher
    assert decide(10, 11, 20) == WRITE
    assert decide(10, 5, 10) == DUPLICATE
    assert decide(10, 1, 1) == DUPLICATE
    assert decide(10, 8, 14) == TRIM
    assert decide(10, 12, 14) == GAP
    # a publisher relayed from another cluster: its seqs are sparse, a jump is the next batch
    assert decide(10, 12, 14, sparse=True) == WRITE
    assert decide(10, 5, 10, sparse=True) == DUPLICATE
    assert decide(10, 8, 14, sparse=True) == TRIM


def _held(first: int, last: int, since: float = 0.0) -> Held:
    return Held(first, last, [b"k", b"h" * 52, b"x" * 100], b"exchange", since)


def test_batches_beyond_a_gap_come_out_in_order_once_it_is_filled():
    gaps = Gaps()
    assert gaps.hold(P, _held(21, 30))
    assert gaps.hold(P, _held(11, 20))
    assert gaps.hold(P, _held(11, 20))  # the same batch again: one copy
    assert len(gaps) == 2
    assert gaps.ready(P, 5) == []
    assert [(h.first, h.last) for h in gaps.ready(P, 10)] == [(11, 20), (21, 30)]
    assert len(gaps) == 0 and gaps.bytes == 0


def test_a_gap_not_filled_in_time_lets_its_batches_through_and_the_bound_refuses_more():
    gaps = Gaps(max_bytes=400, wait_s=2.0)
    assert gaps.hold(P, _held(50, 60, since=1.0))
    assert gaps.hold(b"Q" * 16, _held(7, 8, since=2.5))
    assert not gaps.hold(P, _held(70, 80, since=1.0))  # over 400 bytes: dropped, and counted
    assert gaps.dropped == 1
    assert gaps.expired(2.9) == []
    out = gaps.expired(3.0)
    assert [(p, [h.first for h in items]) for p, items in out] == [(P, [50])]
    assert [p for p, _ in gaps.expired(4.5)] == [b"Q" * 16]
    assert gaps.bytes == 0
