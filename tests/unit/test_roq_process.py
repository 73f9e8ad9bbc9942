"""Child processes' ready lines, read once where the child's output is read (a real child process)."""

from __future__ import annotations

import logging
import select
import time

import pytest

from roq.errors import ProtocolError
from roq.process import spawn
from roq.wire.ready import ExchangeReady, MonitorReady

GOOD = MonitorReady(pid=7, queue="orders", endpoint="tcp://127.0.0.1:5500").line()


def _printing(*lines: str):
    return spawn("printer", "tests.unit.standins", list(lines))


def test_wait_ready_reads_the_line_as_its_roles_shape():
    child = _printing("starting...", GOOD, "after")
    try:
        ready = child.wait_ready(30)
        assert ready == child.info == MonitorReady(pid=7, queue="orders", endpoint="tcp://127.0.0.1:5500")
        assert child.ready_as(MonitorReady).endpoint == "tcp://127.0.0.1:5500"
        with pytest.raises(ProtocolError, match="printed a monitor's ready line, not a exchange's"):
            child.ready_as(ExchangeReady)
        assert "after" in child.communicate(30)
    finally:
        child.stop()


def test_wait_ready_refuses_a_ready_line_that_is_not_one():
    child = _printing('READY {"role": "monitor", "pid": 7, "queue": "orders"}')
    try:
        with pytest.raises(ProtocolError, match="lacks field 'endpoint'"):
            child.wait_ready(30)
    finally:
        child.stop()


def test_read_ready_passes_over_a_malformed_line_and_takes_the_next(caplog):
    child = _printing('READY {"role": "monitor", "pid": "7"}', GOOD)
    try:
        deadline = time.monotonic() + 30
        with caplog.at_level(logging.WARNING, logger="roq.process"):
            while (ready := child.read_ready()) is None:  # as a poll loop reads it: when its output is readable
                assert time.monotonic() < deadline, "no ready line read"
                select.select([child.stdout_fd], [], [], deadline - time.monotonic())
        assert ready == child.ready_as(MonitorReady) and child.read_ready() is None  # once
        assert "printed a ready line that is not one" in caplog.text and "'MonitorReady.pid'" in caplog.text
    finally:
        child.stop()
