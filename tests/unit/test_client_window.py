import pytest

from client._window import Pressure, Sent, Window


def sent(first, count, at=0.0, size=10):
    return Sent(first, count, b"k", b"", 0, 0, size, 0, at)


def test_acknowledged_batches_are_kept_until_delivered():
    w = Window()
    for i in range(3):
        w.add(sent(1 + 10 * i, 10))
    assert w.ack(20, now=5.0)
    assert not w.ack(15, now=5.1)  # old news
    assert w.trim() == 0  # acknowledged: handed on, maybe still in the exchange's pipes
    w.deliver(15)
    assert w.trim() == 10  # the first batch of 10 bytes: every subscriber took it
    w.deliver(30)  # (a delivered seq beyond the acknowledged frees only what was acknowledged)
    assert w.trim() == 10
    assert [e.first for e in w.entries] == [21]
    assert w.oldest_unacked().first == 21


def test_a_planned_move_lets_go_what_the_old_exchange_acknowledged():
    w = Window()
    w.add(sent(1, 5))
    w.add(sent(6, 5))
    w.ack(5, now=1.0)
    w.release()
    assert w.trim() == 10 and [e.first for e in w.entries] == [6]


def test_take_all_resets_acknowledgements():
    w = Window()
    w.add(sent(1, 5))
    w.add(sent(6, 5))
    w.ack(10, now=1.0)
    w.deliver(5)
    assert w.trim() == 10
    entries = w.take_all()
    assert [e.first for e in entries] == [6]  # what was delivered is not resent
    w = Window()
    w.add(sent(1, 5))
    w.add(sent(6, 5))
    w.ack(10, now=1.0)
    entries = w.take_all()
    assert [e.first for e in entries] == [1, 6]
    assert w.acked == 0 and w.delivered == 0 and not w.entries
    w.deliver(0)
    assert w.trim() == 0  # the dead exchange's acks no longer free anything


def test_in_flight_counts_unacknowledged_batches_and_a_slow_exchange_is_not_a_stalled_one():
    w = Window()
    assert w.stalled_for(100.0) == 0.0  # nothing waits
    for i in range(4):
        w.add(sent(1 + 10 * i, 10, at=10.0 + i))
    assert w.in_flight == 4 and w.stalled_for(12.0) == 2.0  # since the first batch that waits
    w.ack(20, now=12.5)  # slow, but progress
    assert w.in_flight == 2 and w.stalled_for(13.0) == 0.5
    w.ack(40, now=14.0)
    assert w.in_flight == 0 and w.stalled_for(20.0) == 0.0
    w.add(sent(41, 5, at=30.0))
    assert w.stalled_for(31.0) == 1.0  # the wait starts with the batch, not with the last ack
    w.take_all()
    assert w.in_flight == 0


def test_an_exchange_that_repeats_its_acknowledgement_is_stalled_but_not_silent():
    w = Window()
    w.add(sent(1, 10, at=10.0))
    w.ack(10, now=11.0)
    w.add(sent(11, 10, at=12.0))
    assert w.silent_for(14.0) == w.stalled_for(14.0) == 2.0
    assert not w.ack(10, now=14.0)  # the same acknowledgement again: it holds us back, alive
    assert w.stalled_for(15.0) == 3.0 and w.silent_for(15.0) == 1.0
    w.ack(20, now=16.0)
    assert w.silent_for(30.0) == 0.0  # nothing waits


def test_pressure_is_the_share_of_the_time_batches_waited_for_the_exchange():
    p = Pressure()
    assert p.fraction(10.0) == 0.0  # the first call starts the measure
    p.waiting(10.0, False)
    p.waiting(10.2, True)  # the window fills at 10.2...
    p.waiting(10.5, True)  # ...is still full at 10.5...
    p.waiting(10.6, False)  # ...and has room at 10.6
    assert p.fraction(11.0) == pytest.approx(0.4)
    p.waiting(11.5, True)  # waiting across a reading counts on both sides of it
    assert p.fraction(12.0) == pytest.approx(0.5)
    assert p.fraction(13.0) == pytest.approx(1.0)  # still waiting: a saturated exchange
    p.waiting(13.0, False)
    assert p.fraction(13.0) == 0.0 and p.fraction(14.0) == 0.0  # no time, then no waiting
