"""The subscriber's per-publisher ordering rules, fed by hand."""

from client._ordering import Reassembler

P = b"p" * 16
Q = b"q" * 16


def make(filtered=False, hold=2.0, max_held=100):
    return Reassembler(filtered=filtered, hold_timeout=hold, max_held=max_held)


def seqs(out):
    """(first, count), skip -> the seqs delivered."""
    result = []
    for (first, count), skip in out:
        result.extend(range(first + skip, first + count))
    return result


def data(r, source, epoch, first, count, now=0.0, pub=P, key=b"k", key_prev=0, relayed=False):
    return r.data(source, pub, epoch, first, count, key_prev, key, (first, count), now, relayed)


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


def test_a_relayed_publisher_is_followed_by_its_key_chains_even_without_a_prefix():
    r = make()  # receives every key here, but only the keys wanted here crossed the link: sparse seqs
    assert seqs(data(r, "A", 0, 1, 1, key=b"a", relayed=True)) == [1]
    assert seqs(data(r, "A", 0, 4, 2, key=b"b", relayed=True)) == [4, 5]
    assert seqs(data(r, "A", 0, 9, 1, key=b"a", key_prev=1, relayed=True)) == [9]
    assert (r.gaps, r.lost) == (0, 0)  # 2, 3, 6-8 were keys nobody here wanted
    assert seqs(data(r, "A", 0, 12, 1, key=b"a", key_prev=10, relayed=True)) == [12]  # 10 of key a is missing
    assert r.gaps == 1
    assert seqs(data(r, "A", 0, 4, 2, key=b"b", relayed=True)) == []  # a resend after a flap: dropped
    assert r.duplicates == 2
    # a publisher of this cluster beside it keeps the exact count
    assert seqs(data(r, "A", 0, 1, 1, pub=b"Q" * 16)) == [1]
    assert seqs(data(r, "A", 0, 3, 1, pub=b"Q" * 16)) == [3]
    assert r.lost == 2


def test_a_relayed_publisher_of_a_new_epoch_waits_for_the_marker_as_a_filtered_one():
    r = make()
    data(r, "A", 0, 1, 1, relayed=True)
    assert seqs(data(r, "B", 1, 2, 1, relayed=True)) == []  # contiguous, but its seqs say nothing: held
    assert seqs(r.marker("A", P, 0, 0.0)) == [2]


# ----------------------------------------------------------------------- moves, without a prefix


def test_contiguous_data_of_a_new_epoch_needs_no_marker():
    r = make()
    data(r, "A", 0, 1, 5)
    assert seqs(data(r, "B", 1, 6, 2)) == [6, 7]  # nothing can come between 5 and 6
    assert r.held == 0


def test_a_hole_before_new_epoch_data_holds_it_until_the_hole_fills():
    r = make()
    data(r, "A", 0, 1, 5)
    assert seqs(data(r, "B", 1, 8, 2)) == []  # 6, 7 are still on A's pipe
    assert r.held == 1
    assert seqs(data(r, "A", 0, 6, 2)) == [6, 7, 8, 9]  # the old epoch is never held behind the new one
    assert (r.held, r.gaps, r.duplicates) == (0, 0, 0)


def test_a_hole_is_also_released_by_the_old_exchanges_marker():
    r = make()
    data(r, "A", 0, 1, 5)
    data(r, "B", 1, 8, 2)
    assert seqs(r.marker("C", P, 0, 0.0)) == []  # someone else's marker
    assert seqs(r.marker("A", P, 0, 0.1)) == [8, 9]  # A's epoch is over: 6, 7 are lost for good
    assert (r.gaps, r.lost) == (1, 2)


def test_failover_resend_flows_at_once_and_duplicates_are_dropped():
    r = make()
    data(r, "A", 0, 1, 10)
    # A dies having delivered up to 10; the publisher resends its window 6..12 through B
    assert seqs(data(r, "B", 1, 6, 7)) == [11, 12]
    assert (r.duplicates, r.gaps, r.held) == (5, 0, 0)


def test_an_unrelated_lost_exchange_releases_nothing():
    # publisher: A (epoch 1) -> B (epoch 2) -> C (epoch 3); B's data is late; exchange D dies
    for lost in ("A", "D"):
        r = make()
        got = seqs(data(r, "A", 1, 1, 10))
        got += seqs(r.marker("A", P, 1, 0.1))
        got += seqs(data(r, "C", 3, 21, 10, now=0.2))
        got += seqs(r.source_lost(lost, 0.3))
        assert r.held == 1, lost
        got += seqs(data(r, "B", 2, 11, 10, now=0.4))
        assert got == list(range(1, 31)), lost
        assert (r.duplicates, r.gaps) == (0, 0)


def test_the_lost_exchange_of_a_held_epoch_releases_it():
    r = make()
    data(r, "A", 0, 1, 5)
    data(r, "B", 1, 9, 1)
    assert seqs(r.source_lost("A", 0.5)) == [9]
    assert (r.gaps, r.lost) == (1, 3)


# ----------------------------------------------------------------------- moves, with a prefix


def test_filtered_new_epoch_waits_for_the_marker_even_when_its_key_chain_is_whole():
    r = make(filtered=True)
    data(r, "A", 0, 5, 1, key=b"b", key_prev=0)
    # seq 10 (key a, also ours) is still on A's pipe; 11 (key b) arrives through B
    assert seqs(data(r, "B", 1, 11, 1, key=b"b", key_prev=5)) == []
    assert seqs(data(r, "A", 0, 10, 1, key=b"a", key_prev=0)) == [10]
    assert seqs(r.marker("A", P, 0, 0.1)) == [11]
    assert (r.gaps, r.duplicates) == (0, 0)


def test_two_quick_moves_need_both_markers():
    r = make(filtered=True)
    data(r, "A", 0, 1, 1)
    assert seqs(data(r, "C", 2, 4, 1)) == []
    assert seqs(data(r, "B", 1, 3, 1)) == []  # 2 may still be on A's pipe
    assert seqs(r.marker("A", P, 0, 0.0)) == [3]  # epoch 1 may go, epoch 2 waits for B's marker
    assert seqs(r.marker("B", P, 1, 0.0)) == [4]


def test_note_holds_an_unknown_publisher_until_the_marker():
    r = make(filtered=True)
    r.note(P, "A", 0.0)  # monitor: P leaves A
    assert seqs(data(r, "B", 1, 11, 1, key=b"b", key_prev=10)) == []  # 10 may still be on A's pipe
    assert seqs(data(r, "A", 0, 10, 1, key=b"b", key_prev=0)) == [10]
    assert seqs(r.marker("A", P, 0, 0.1)) == [11]
    assert (r.gaps, r.duplicates) == (0, 0)


def test_notes_are_kept_in_order():
    r = make(filtered=True)
    r.note(P, "A", 0.0)  # A -> B
    r.note(P, "B", 0.0)  # B -> C
    got = seqs(data(r, "C", 2, 21, 10))
    got += seqs(r.marker("B", P, 1, 0.1))  # B is done, but A's backlog is not
    assert got == [] and r.held == 1
    got += seqs(data(r, "A", 0, 1, 10))
    got += seqs(r.marker("A", P, 0, 0.2))
    assert got == list(range(1, 11)) + list(range(21, 31))
    assert r.duplicates == 0


def test_without_a_note_an_unknown_publisher_is_delivered_at_once():
    r = make(filtered=True)
    assert seqs(data(r, "B", 3, 50, 2)) == [50, 51]


# ----------------------------------------------------------------------- bounds


def test_hold_timeout_releases_and_counts_the_hole():
    r = make(hold=1.0)
    data(r, "A", 0, 1, 5)
    data(r, "B", 1, 9, 1, now=10.0)
    assert r.next_deadline() == 11.0
    assert seqs(r.expire(10.5)) == []
    assert seqs(r.expire(11.0)) == [9]
    assert (r.hold_timeouts, r.gaps, r.lost) == (1, 1, 3)


def test_notes_expire():
    r = make(filtered=True, hold=1.0)
    r.note(P, "A", 0.0)
    data(r, "B", 1, 5, 1)
    assert seqs(r.expire(2.0)) == [5]


def test_holding_is_bounded():
    r = make(max_held=3)
    data(r, "A", 0, 1, 1)
    for i in range(3):
        assert seqs(data(r, "B", 1, 3 + i, 1)) == []
    assert seqs(data(r, "B", 1, 6, 1)) == [3, 4, 5, 6]
    assert r.hold_timeouts == 1 and r.gaps == 1


def test_publishers_are_independent():
    r = make()
    data(r, "A", 0, 1, 1)
    data(r, "B", 1, 5, 1)  # P held
    assert seqs(data(r, "A", 0, 1, 2, pub=Q)) == [1, 2]


def journal(r, first, count, epoch=0, now=0.0):
    return r.ordered(P, epoch, first, count, 0, b"k", (first, count), now)


def test_a_journal_delivers_in_order_past_what_was_delivered_and_first_what_waited_before_it():
    r = make(filtered=True)
    assert seqs(data(r, "A", 0, 1, 3)) == [1, 2, 3]
    assert seqs(journal(r, 2, 4)) == [4, 5]  # 2..3 delivered already
    # live data of a newer epoch waits for its old exchange's marker; the journal's order puts it before its own
    assert data(r, "B", 1, 7, 2) == [] and r.held == 1
    assert seqs(journal(r, 10, 2, epoch=1)) == [7, 8, 10, 11]
    assert (r.held, r.gaps, r.lost) == (0, 0, 0)
    assert seqs(journal(r, 9, 3, epoch=1)) == [] and r.delivered() == {P: 11}


def test_a_starved_exchange_taken_for_dead_loses_nothing_if_its_epochs_end_only_when_it_goes():
    """Exchange A was declared dead while a subscriber was behind it (A had 801..900 on the way): the publisher
    resent from what A said was delivered (901 on, under a new epoch, through B), and those came first. Ended at
    once (the subscriber's rule until 2026-11-28), A's late records pass for copies and 100 are lost; kept open until
    A goes, B's records wait for them and nothing is lost."""
    def run(end_at_once: bool):
        r = make()
        data(r, "A", 1, 1, 800)
        if end_at_once:
            r.source_lost("A", 0.0)
        early = seqs(data(r, "B", 2, 901, 100, now=0.1))  # the resend, first
        late = seqs(data(r, "A", 1, 801, 100, now=0.2))  # what A had on the way
        return early + late, r

    delivered, r = run(end_at_once=True)
    assert delivered == list(range(901, 1001)) and (r.lost, r.duplicates) == (100, 100)
    delivered, r = run(end_at_once=False)
    assert delivered == list(range(801, 1001)) and (r.lost, r.duplicates, r.gaps) == (0, 0, 0)
