"""The process loop: sources served in order once per turn, pausing, removal mid-turn, timers whose period
changes, deadlines the process moves, the error boundary, signals."""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest
import zmq

from roq.loop import Loop
from roq.runtime import DropCounter, SignalWakeup


@pytest.fixture
def pipes():
    made = [os.pipe() for _ in range(3)]
    yield made
    for r, w in made:
        os.close(r)
        os.close(w)


def loop(**options) -> Loop:
    return Loop("test", DropCounter(logging.getLogger("test"), "test"), **options)


def test_ready_sources_are_served_once_per_turn_in_order_and_late_ones_last(pipes):
    lp, seen = loop(), []
    (r0, w0), (r1, w1), (r2, w2) = pipes
    lp.add(r0, lambda: seen.append(("late", os.read(r0, 100))), "late one", late=True)
    lp.add(r1, lambda: seen.append(("first", os.read(r1, 1))), "first")
    lp.add(r2, lambda flags: seen.append(("flags", flags)), "with flags", with_flags=True)
    for w in (w0, w1, w2):
        os.write(w, b"ab")
    lp.turn()
    assert seen == [("first", b"a"), ("flags", zmq.POLLIN), ("late", b"ab")]


def test_a_paused_source_is_not_served_and_a_removed_one_not_even_in_its_turn(pipes):
    lp, seen = loop(idle=0.01), []
    (r0, w0), (r1, w1), _ = pipes
    lp.add(r0, lambda: (seen.append(0), lp.remove(r1)), "removes the other")
    lp.add(r1, lambda: seen.append(1), "removed")
    os.write(w0, b"x")
    os.write(w1, b"x")
    lp.turn()
    assert seen == [0] and not lp.has(r1)
    lp.want(r0, 0)
    lp.turn()
    assert seen == [0] and lp.wants(r0) == 0
    lp.want(r0, zmq.POLLIN)
    lp.turn()
    assert seen == [0, 0]
    lp.want(r0, 0)
    lp.remove(r0)  # a paused source can go too
    assert not lp.has(r0) and lp.wants(r0) == 0


def test_timers_run_when_due_with_a_period_read_again_and_deadlines_the_process_moves():
    lp, runs, period = loop(idle=5.0), [], [0.01]
    lp.every(lambda: period[0], lambda now: runs.append("every"), "every", first=time.monotonic())
    due = [time.monotonic() + 0.02]

    def moved(now: float) -> None:
        runs.append("deadline")
        due[0] = float("inf")

    lp.deadline(lambda: due[0], moved, "deadline")
    end = time.monotonic() + 5
    while runs.count("deadline") < 1 and time.monotonic() < end:
        lp.turn()
    assert runs.count("deadline") == 1 and runs.count("every") >= 2  # the poll waits for the nearest, not idle
    period[0] = 3600.0  # read after the next run, which is due within 10 ms
    count = runs.count("every")
    while runs.count("every") == count and time.monotonic() < end:
        lp.turn()
    count = runs.count("every")
    started = time.monotonic()
    lp.idle = 0.05
    lp.turn()
    assert runs.count("every") == count and time.monotonic() - started < 1.0  # an hour away: not run again


def test_whatever_a_handler_raises_is_counted_and_the_loop_goes_on(pipes, caplog):
    handled: list[str] = []
    lp = loop(on_error=lambda what, exc: isinstance(exc, KeyError) and not handled.append(what))
    (r0, w0), (r1, w1), _ = pipes
    lp.add(r0, lambda: (os.read(r0, 1), 1 / 0), "a bug")
    lp.add(r1, lambda: (os.read(r1, 1), {}["x"]), "a known failure")
    os.write(w0, b"x")
    os.write(w1, b"x")
    with caplog.at_level(logging.ERROR):
        lp.turn()
    assert lp.failures == 1 and lp.drops.total == 1 and handled == ["a known failure"]
    assert "a bug failed" in caplog.text and "ZeroDivisionError" in caplog.text


def test_a_signal_stops_the_loop():
    wakeup = SignalWakeup()
    try:
        lp = loop(idle=5.0)
        lp.on_signal(wakeup, lp.stop)
        os.kill(os.getpid(), signal.SIGTERM)
        started = time.monotonic()
        lp.run()
        assert lp.stopped and time.monotonic() - started < 4.0
    finally:
        wakeup.close()
