"""monitor._durability: what exchanges and the journal are told of the queue's durability (through the core)."""

from __future__ import annotations

from monitor._topology import QueueView
from monitor.testing import Driver
from roq.wire import control
from roq.config import MonitorConfig
from roq.rules import DEFAULT_RULES
from roq.wire.status import decode


def _view(**rules) -> QueueView:
    return QueueView(state="running", rules={**DEFAULT_RULES, **rules})


def _beat(d: Driver, x: str, journal: str) -> None:
    d.send(control.Heartbeat(exchange=x, frontend="tcp://h:1", backend="tcp://h:2", pid=1, journal=journal),
           x.encode(), "cluster")


def _journal_beat(d: Driver, intake: str = "tcp://h:9", policy: str = "", incarnation: int = 7) -> None:
    d.send(control.JournalHeartbeat(journal="j1", intake=intake, pid=2, incarnation=incarnation, policy=policy,
                                    next_offset=42), b"j1", "cluster")


def test_a_queue_that_is_not_durable_tells_each_exchange_so_once():
    d = Driver(MonitorConfig(queue="q"))
    _beat(d, "x1", "?")
    assert d.to(b"x1", control.Journaling) == [control.Journaling(journal="", durability="none")]
    _beat(d, "x1", "none")
    assert len(d.to(b"x1", control.Journaling)) == 1


def test_a_durable_queue_holds_its_exchanges_until_its_journal_is_heard_and_then_names_it():
    d = Driver(MonitorConfig(queue="q"), view=_view(durability="always", sync_interval_ms=20))
    _beat(d, "x1", "?")
    assert d.to(b"x1", control.Journaling)[-1] == control.Journaling(journal="", durability="always")
    _beat(d, "x1", "always")
    assert len(d.to(b"x1", control.Journaling)) == 1  # it holds: nothing new until a journal reports
    _journal_beat(d)
    assert d.to(b"x1", control.Journaling)[-1] == control.Journaling(journal="tcp://h:9", durability="always")
    (policy,) = d.to(b"j1", control.JournalPolicy)
    assert policy == control.JournalPolicy(durability="always", sync_interval_ms=20, last=42)  # (its next offset)
    _journal_beat(d, policy=policy.digest())
    assert len(d.to(b"j1", control.JournalPolicy)) == 1  # it holds it
    assert d.events("journal_joined") and d.events("durability_changed")
    journal = decode(d.send(control.Status(), b"op", "cluster").data).journal
    assert journal.intake == "tcp://h:9" and journal.next_offset == 42 and journal.alive


def test_rules_that_change_reach_the_journal_and_every_exchange_and_a_journal_elsewhere_is_named():
    d = Driver(MonitorConfig(queue="q"), view=_view(durability="always"))
    _beat(d, "x1", "?")
    _journal_beat(d, policy=control.JournalPolicy().digest())
    d.cluster(_view(durability="interval", sync_interval_ms=50, retention_bytes=10**7))
    assert d.to(b"j1", control.JournalPolicy)[-1] == control.JournalPolicy("interval", 50, 10**7, 0.0, last=42)
    assert d.to(b"x1", control.Journaling)[-1] == control.Journaling(journal="tcp://h:9", durability="interval")
    _journal_beat(d, intake="tcp://other:9", incarnation=8)  # started again on another host
    assert d.to(b"x1", control.Journaling)[-1].journal == "tcp://other:9"
    d.cluster(_view(durability="none"))
    assert d.to(b"x1", control.Journaling)[-1] == control.Journaling(journal="", durability="none")
    _beat(d, "x1", "interval tcp://other:9")  # a change it missed
    assert d.to(b"x1", control.Journaling)[-1] == control.Journaling(journal="", durability="none")



def test_a_new_journal_is_told_the_highest_offset_its_exchanges_heard():
    """The exchanges' heartbeats carry the end their journal's last acknowledgement named (a new, empty journal
    begins past it) and what waits for the journal (its lag)."""
    d = Driver(MonitorConfig(queue="q"), view=_view(durability="always"))
    d.send(control.Heartbeat(exchange="x1", frontend="tcp://h:1", backend="tcp://h:2", pid=1, journal="?",
                             journal_end=5000, journal_waiting=3000), b"x1", "cluster")
    d.send(control.JournalHeartbeat(journal="j2", intake="tcp://h:9", pid=2, incarnation=3), b"j2", "cluster")
    (policy,) = d.to(b"j2", control.JournalPolicy)
    assert policy.last == 5000
    assert policy.digest() == control.JournalPolicy().digest()  # it is not the policy itself
    assert d.send(control.Status(), b"op", "cluster").data["journal"]["lag_bytes"] == 3000  # what waits for it
