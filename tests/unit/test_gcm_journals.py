"""gcm._journals: a durable queue's journal is assigned where its files are, beside its monitor the first time,
and unassigned when the queue stops being durable or stops (pure decisions, through set_rules, start, stop)."""

from __future__ import annotations

import dataclasses
import json

from gcm._lifecycle import start, stop
from gcm._rules import set_rules
from gcm._view import HostView, QueueView, View
from roq.wire import management as m
from roq.wire.documents import STOPPED, QueueDoc
from roq.errors import BadRequestError, UnavailableError
from roq.zk import Create, Delete, Paths, SetData

NOW = 1234.5


def _view(doc: QueueDoc, explicit: dict | None = None, assignments: dict | None = None) -> View:
    q = QueueView("q", doc, version=3, explicit_rules=explicit or {}, rules_version=4)
    return View({"q": q}, hosts={h: HostView(h) for h in ("a", "b")}, assignments=assignments or {},
                paths=Paths("/roq"))


def test_a_queue_made_durable_gets_its_journal_beside_its_monitor_in_the_same_transaction():
    view = _view(QueueDoc(host="a", placement={"x1": "b"}))
    out = set_rules(view, m.SetRules(QName="q", Rules={"durability": "always"}), NOW)
    rules, queue, journal = out.ops
    assert json.loads(rules.data) == {"durability": "always"}
    assert isinstance(queue, SetData) and queue.version == 3 and json.loads(queue.data)["journal_host"] == "a"
    assert journal == Create("/roq/assignments/a/q@journal")
    assert out.ensure == ("/roq/assignments/a",)
    assert out.reply.data["Rules"]["durability"] == "always"


def test_it_comes_back_to_its_files_and_goes_when_the_queue_is_not_durable_any_more():
    doc = QueueDoc(host="a", placement={"x1": "a"}, journal_host="b")
    again = set_rules(_view(doc), m.SetRules(QName="q", Rules={"durability": "interval"}), NOW)
    assert again.ops[-1] == Create("/roq/assignments/b/q@journal")
    assert len(again.ops) == 3 and json.loads(again.ops[1].data)["journal_host"] == "b"
    durable = _view(doc, {"durability": "interval"}, {"b": frozenset({"q@journal"})})
    assert len(set_rules(durable, m.SetRules(QName="q", Rules={"sync_interval_ms": 5}), NOW).ops) == 1  # it runs
    off = set_rules(durable, m.SetRules(QName="q", Rules={"durability": None}), NOW)
    assert off.ops[-1] == Delete("/roq/assignments/b/q@journal")
    assert json.loads(off.ops[1].data)["journal_host"] == "b"  # its files stay where they are


def test_stopping_a_durable_queue_stops_its_journal_and_starting_it_starts_it_again():
    doc = QueueDoc(host="a", placement={"x1": "a"}, journal_host="b")
    running = _view(doc, {"durability": "always"},
                    {"a": frozenset({"q@monitor", "q@x1"}), "b": frozenset({"q@journal"})})
    stopped = stop(running, m.StopQueue(QName="q"), NOW)
    assert Delete("/roq/assignments/b/q@journal") in stopped.ops
    again = _view(dataclasses.replace(doc, state=STOPPED), {"durability": "always"})
    started = start(again, m.StartQueue(QName="q"), NOW)
    assert Create("/roq/assignments/b/q@journal") in started.ops and "/roq/assignments/b" in started.ensure


def _three(doc: QueueDoc, explicit: dict | None = None, assignments: dict | None = None,
           hosts: tuple[str, ...] = ("a", "b", "c")) -> View:
    q = QueueView("q", doc, version=3, explicit_rules=explicit or {}, rules_version=4)
    return View({"q": q}, hosts={h: HostView(h) for h in hosts}, assignments=assignments or {}, paths=Paths("/roq"))


def test_a_replicated_journal_has_one_replica_on_each_of_as_many_distinct_hosts_the_monitors_last():
    out = set_rules(_three(QueueDoc(host="b", placement={"x1": "b"})),
                    m.SetRules(QName="q", Rules={"durability": "always", "replicas": 3}), NOW)
    _, queue, *journal = out.ops
    doc = QueueDoc.decode(queue.data)
    assert doc.journal_replicas == ["a", "c", "b"] and doc.journal_host == "a"
    four = set_rules(_three(QueueDoc(host="b", placement={"x1": "b"}), hosts=("a", "b", "c", "d")),
                     m.SetRules(QName="q", Rules={"durability": "always", "replicas": 3}), NOW)
    assert QueueDoc.decode(four.ops[1].data).journal_replicas == ["a", "c", "d"], "none beside the monitor"
    assert set(journal) == {Create(f"/roq/assignments/{h}/q@journal") for h in "abc"}
    assert set(out.ensure) == {f"/roq/assignments/{h}" for h in "abc"}


def test_a_replicated_journal_is_refused_with_too_few_hosts_and_its_count_does_not_change_once_it_exists():
    try:
        set_rules(_three(QueueDoc(host="a"), hosts=("a", "b")),
                  m.SetRules(QName="q", Rules={"durability": "always", "replicas": 3}), NOW)
        raise AssertionError("three replicas placed on two hosts")
    except UnavailableError as exc:
        assert "3 replicas of its journal need 3 live hosts" in str(exc) and "(a, b)" in str(exc)
    running = _three(QueueDoc(host="a", journal_host="a", journal_replicas=["a", "b", "c"]),
                     {"durability": "always", "replicas": 3},
                     {h: frozenset({"q@journal"}) for h in "abc"})
    try:
        set_rules(running, m.SetRules(QName="q", Rules={"replicas": 5}), NOW)
        raise AssertionError("the replica count of a running queue changed")
    except BadRequestError as exc:
        assert "its replica count cannot change (3 to 5)" in str(exc)
    stopped = _three(QueueDoc(host="a", state=STOPPED, journal_host="a"), {"durability": "always"})
    try:
        set_rules(stopped, m.SetRules(QName="q", Rules={"replicas": 3}), NOW)
        raise AssertionError("an unreplicated journal got two empty replicas")
    except BadRequestError as exc:
        assert "new replicas start empty" in str(exc)
    assert len(set_rules(running, m.SetRules(QName="q", Rules={"sync_interval_ms": 5}), NOW).ops) == 1


def test_a_replica_whose_host_is_missing_keeps_its_place_and_stopping_the_queue_unassigns_every_replica():
    doc = QueueDoc(host="a", placement={"x1": "a"}, journal_host="a", journal_replicas=["a", "b", "gone"])
    rules = {"durability": "always", "replicas": 3}
    again = start(_three(dataclasses.replace(doc, state=STOPPED), rules), m.StartQueue(QName="q"), NOW)
    assert {op for op in again.ops if isinstance(op, Create) and op.path.endswith("@journal")} == \
        {Create("/roq/assignments/a/q@journal"), Create("/roq/assignments/b/q@journal")}, "none for a missing host"
    running = _three(doc, rules, {"a": frozenset({"q@monitor", "q@x1", "q@journal"}), "b": frozenset({"q@journal"})})
    stopped = stop(running, m.StopQueue(QName="q"), NOW)
    assert {Delete("/roq/assignments/a/q@journal"), Delete("/roq/assignments/b/q@journal")} <= set(stopped.ops)
