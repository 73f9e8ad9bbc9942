"""The subscriber's per-publisher ordering rules, fed by hand."""

from client._ordering import Reassembler

P = b"p" * 16
Q = b"q" * 16


def make(filtered=False, hold=2.0, max_held=100):
    return Reassembler(filtered=filtered, hold_timeout=hold, max_held=max_held)


def seqs(out):
    """(first, skip) -> the seqs delivered."""
    result = []
    for (first, count), skip in out:
        result.extend(range(first + skip, first + count))
    return result


def data(r, source, epoch, first, count, now=0.0, pub=P, key=b"k", key_prev=0):
    return r.data(source, pub, epoch, first, count, key_prev, key, (first, count), now)


def test_in_order_batches_pass_straight_through():
    r = make()
    assert seqs(data(r, "A", 0, 1, 3)) == [1, 2, 3]
    assert seqs(data(r, "A", 0, 4, 2)) == [4, 5]
    assert (r.duplicates, r.gaps, r.lost) == (0, 0, 0)


def test_duplicates_and_partial_overlaps_are_dropped():
    r = make()
    data(r, "A", 0, 1, 10)
    assert seqs(data(r, "A", 0, 5, 3)) == []  # all seen
    assert seqs(data(r, "A", 0, 8, 6)) == [11, 12, 13]  # 8..10 seen
    assert r.duplicates == 3 + 3


def test_gap_without_prefix_counts_missing_records():
    r = make()
    data(r, "A", 0, 1, 2)
    assert seqs(data(r, "A", 0, 6, 1)) == [6]
    assert (r.gaps, r.lost) == (1, 3)


def test_first_sighting_mid_stream_is_not_a_gap():
    r = make()
    assert seqs(data(r, "A", 0, 500, 1)) == [500]
    assert r.gaps == 0


def test_filtered_subscriber_follows_the_key_chain():
    r = make(filtered=True)
    # publisher alternates keys a and b; we only match "a": seqs 1, 3, 5 ... are ours
    assert seqs(data(r, "A", 0, 1, 1, key=b"a", key_prev=0)) == [1]
    assert seqs(data(r, "A", 0, 3, 1, key=b"a", key_prev=1)) == [3]
    assert r.gaps == 0  # the skipped seq 2 had another key
    assert seqs(data(r, "A", 0, 7, 1, key=b"a", key_prev=5)) == [7]  # seq 5 of key a went missing
    assert r.gaps == 1


def test_newer_epoch_is_held_until_the_old_exchange_marker():
    r = make()
    data(r, "A", 0, 1, 5)
    assert seqs(data(r, "B", 1, 8, 2)) == []  # moved to B; A still has 6, 7 in flight
    assert r.held == 1
    assert seqs(data(r, "A", 0, 6, 2)) == [6, 7]  # the old epoch is never held behind the new one
    assert seqs(r.marker("A", P, 0, 0.1)) == [8, 9]
    assert (r.held, r.gaps, r.duplicates) == (0, 0, 0)
    assert seqs(data(r, "B", 1, 10, 1)) == [10]


def test_marker_of_another_exchange_does_not_release():
    r = make()
    data(r, "A", 0, 1, 1)
    data(r, "B", 1, 2, 1)
    assert seqs(r.marker("C", P, 5, 0.0)) == []
    assert r.held == 1


def test_two_quick_moves_need_both_markers():
    r = make()
    data(r, "A", 0, 1, 1)
    assert seqs(data(r, "C", 2, 4, 1)) == []
    assert seqs(data(r, "B", 1, 3, 1)) == []  # 2 is still in flight through A
    assert seqs(r.marker("A", P, 0, 0.0)) == [3]  # epoch 1 may go, epoch 2 waits for B's marker
    assert seqs(r.marker("B", P, 1, 0.0)) == [4]


def test_failover_resend_is_released_when_the_source_is_lost():
    r = make()
    data(r, "A", 0, 1, 10)
    # A dies having delivered up to 10; the publisher resends its window 6..12 through B
    assert seqs(data(r, "B", 1, 6, 7)) == []
    out = r.source_lost("A", 0.5)
    assert seqs(out) == [11, 12]
    assert r.duplicates == 5
    assert r.gaps == 0


def test_note_holds_an_unknown_publisher_until_the_marker():
    r = make(filtered=True)
    r.note(P, "A", 0.0)  # monitor: P leaves A
    assert seqs(data(r, "B", 1, 11, 1, key=b"b", key_prev=10)) == []  # 10 may still be on A's pipe
    assert seqs(data(r, "A", 0, 10, 1, key=b"b", key_prev=0)) == [10]
    assert seqs(r.marker("A", P, 0, 0.1)) == [11]
    assert (r.gaps, r.duplicates) == (0, 0)


def test_without_a_note_an_unknown_publisher_is_delivered_at_once():
    r = make()
    assert seqs(data(r, "B", 3, 50, 2)) == [50, 51]


def test_hold_timeout_releases_and_counts_the_hole():
    r = make(hold=1.0)
    data(r, "A", 0, 1, 5)
    data(r, "B", 1, 9, 1, now=10.0)
    assert r.next_deadline() == 11.0
    assert seqs(r.expire(10.5)) == []
    assert seqs(r.expire(11.0)) == [9]
    assert (r.hold_timeouts, r.gaps, r.lost) == (1, 1, 3)


def test_holding_is_bounded():
    r = make(max_held=3)
    data(r, "A", 0, 1, 1)
    for i in range(3):
        assert seqs(data(r, "B", 1, 2 + i, 1)) == []
    assert seqs(data(r, "B", 1, 5, 1)) == [2, 3, 4, 5]
    assert r.hold_timeouts == 1


def test_publishers_are_independent():
    r = make()
    data(r, "A", 0, 1, 1)
    data(r, "B", 1, 2, 1)  # P held
    assert seqs(data(r, "A", 0, 1, 2, pub=Q)) == [1, 2]
