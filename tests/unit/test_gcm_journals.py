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
