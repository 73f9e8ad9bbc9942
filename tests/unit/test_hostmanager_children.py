"""hostmanager children: the state machine of one supervised child (a stand-in process: no fork)."""

from __future__ import annotations

import signal

from hostmanager._children import KILL_AFTER, SECOND_SIGNAL_AFTER, Supervised
from hostmanager._converge import ChildState
from roq.wire import control
from roq.config import ExchangeConfig
from roq.wire.documents import Assignment
from tests.unit.standins import StandIn

X1 = Assignment("orders", "x1")
HERE = "tcp://127.0.0.12:5500"
THERE = "tcp://127.0.0.13:5500"


def running(child: StandIn, monitor: str = HERE) -> Supervised:
    sup = Supervised(X1)
    sup.child = child  # type: ignore[assignment]
    sup.config = ExchangeConfig(monitor=monitor, exchange_id="x1-ab12", commands=True)
    sup.started_at = 100.0
    return sup


def test_its_state_is_what_the_decision_reads():
    sup = running(StandIn())
    assert sup.state() == ChildState(X1, running=True, monitor=HERE)
    assert sup.incarnation == "x1-ab12"
    assert Supervised(X1).state() == ChildState(X1)


def test_telling_an_exchange_sends_one_retarget_and_remembers_where_its_monitor_is():
    child = StandIn()
    sup = running(child)
    assert sup.tell(THERE)
    assert child.sent == [control.Retarget(monitor=THERE)]
    assert sup.state().monitor == THERE and sup.state().tellable


def test_an_exchange_that_cannot_be_told_is_marked_so():
    sup = running(StandIn(takes_commands=False))
    assert not sup.tell(THERE)
    assert sup.state() == ChildState(X1, running=True, monitor=HERE, tellable=False)


def test_a_crash_restarts_at_once_then_with_a_growing_back_off():
    child = StandIn()
    sup = running(child)
    child.returncode = 1
    assert sup.exited(101.0) == 1
    assert sup.child is None and sup.restart_pending and sup.not_before == 101.0
    assert sup.exited(101.0) is None  # found once
    sup.child, sup.started_at = StandIn(), 101.0
    sup.child.returncode = 1
    sup.exited(102.0)
    assert sup.not_before == 102.5


def test_a_stop_escalates_from_sigterm_to_a_second_sigterm_to_sigkill():
    child = StandIn()
    sup = running(child)
    sup.begin_stop(200.0)
    sup.push_stop(200.0 + SECOND_SIGNAL_AFTER)
    sup.push_stop(200.0 + SECOND_SIGNAL_AFTER + 0.01)
    sup.push_stop(200.0 + KILL_AFTER)
    assert child.signals == [signal.SIGTERM, signal.SIGTERM, signal.SIGKILL]
    assert sup.state().stopping
    child.returncode = -9
    assert sup.exited(206.0) == -9 and not sup.restart_pending  # stopped for good: no restart


def test_a_restart_stops_the_process_then_lets_it_start_again_at_once():
    child = StandIn()
    sup = running(child)
    sup.begin_stop(300.0, restart=True)
    assert child.signals == [signal.SIGTERM] and sup.state().stopping
    child.returncode = 130
    assert sup.exited(300.4) == 130
    assert sup.state() == ChildState(X1, running=False, stopping=False, not_before=300.4, monitor=HERE)
    assert sup.restart_pending


def test_a_stop_for_good_overrides_a_restart_in_progress():
    child = StandIn()
    sup = running(child)
    sup.begin_stop(300.0, restart=True)
    sup.begin_stop(300.1)
    child.returncode = 0
    sup.exited(300.2)
    assert sup.state().stopping and not sup.restart_pending
