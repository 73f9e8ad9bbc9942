"""A link's rate limit: a token bucket that keeps what crosses to its rate over any stretch of time."""

from __future__ import annotations

import random

import pytest

from roq.federation.pace import Pace


def test_a_burst_goes_at_once_then_batches_wait_for_the_bucket():
    pace = Pace(1000, now=0.0)  # 1,000 bytes a second, a burst of 100
    assert pace.take(100, 0.0) and pace.take(1, 0.0)  # the bucket is at zero, not below: one more goes
    assert not pace.take(1, 0.0)  # below zero now
    assert pace.ready_at(0.0) == pytest.approx(0.001)
    assert pace.take(1, pace.ready_at(0.0))
    assert pace.taken == 102


def test_a_batch_larger_than_the_burst_still_crosses_and_is_paid_for_after():
    pace = Pace(1000, now=0.0)
    assert pace.take(5000, 0.0)  # five seconds' worth: it goes, the bucket 4,900 below zero
    assert pace.ready_at(0.0) == pytest.approx(4.9)
    assert not pace.take(1, 4.8) and pace.take(1, 4.95)


def test_over_any_stretch_what_crossed_is_the_rate_times_its_length_plus_a_burst_and_a_batch():
    rng = random.Random(3)
    rate, now = 250_000, 0.0  # 2 Mbit/s
    pace = Pace(rate, now)
    sent: list[tuple[float, int]] = []
    while now < 20.0:
        size = rng.randint(100, 130_000)
        now = max(now, pace.ready_at(now)) + rng.random() * 0.002
        assert pace.take(size, now)
        sent.append((now, size))
    for start in (0.0, 3.3, 10.0):
        for length in (1.0, 5.0, 9.9):
            crossed = sum(s for t, s in sent if start <= t < start + length)
            assert crossed <= rate * length + pace.burst + 130_000, (start, length, crossed)
    total = sum(s for _, s in sent)
    assert abs(total / now - rate) / rate < 0.05  # and kept busy, it reaches its rate


def test_a_rate_is_above_zero():
    with pytest.raises(ValueError):
        Pace(0, 0.0)
