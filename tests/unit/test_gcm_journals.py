"""gcm._journals: a durable queue's journal is assigned where its files are, beside its monitor the first time,
and unassigned when the queue stops being durable or stops (pure decisions, through set_rules, start, stop); a
replica lost with its host is replaced in its place by a learner (replace_replica)."""

from __future__ import annotations

import dataclasses
import json

import bson
import pytest

from gcm._acl import check, required
from gcm._api import DECISIONS
from gcm._journals import admit_replica, replace_replica
from gcm._lifecycle import start, stop
from gcm._rules import set_rules
from gcm._view import HostView, QueueView, View
from roq.security.acl import Rule
from roq.wire import management as m
from roq.wire.control import decode, encode
from roq.wire.documents import STOPPED, QueueDoc
from roq.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError, UnavailableError
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


# --------------------------------------------------------------------------- a replica lost with its host replaced

RUNNING3 = {"durability": "always", "replicas": 3}


def _lost(doc: QueueDoc | None = None, hosts: tuple[str, ...] = ("a", "b", "d", "e"), assignments: dict | None = None,
          rules: dict | None = None) -> View:
    """Queue q, its monitor on a, replicas on a, b and c; c's host is gone."""
    doc = doc or QueueDoc(host="a", placement={"x1": "a"}, journal_host="a", journal_replicas=["a", "b", "c"])
    held = {"a": frozenset({"q@monitor", "q@x1", "q@journal"}), "b": frozenset({"q@journal"}),
            "c": frozenset({"q@journal"})}
    return _three(doc, RUNNING3 if rules is None else rules, held if assignments is None else assignments, hosts)


def test_a_lost_replica_is_replaced_in_its_place_by_a_learner_on_a_live_host_and_its_assignment_goes():
    out = replace_replica(_lost(), m.ReplaceReplica(QName="q", Replica="c", Reason="silent 30s"), NOW)
    queue, gone, new = out.ops
    assert isinstance(queue, SetData) and queue.path == "/roq/queues/q" and queue.version == 3
    doc = QueueDoc.decode(queue.data)
    assert doc.journal_replicas == ["a", "b", "d"] and doc.journal_host == "a" and doc.journal_learners == ["d"]
    assert gone == Delete("/roq/assignments/c/q@journal") and new == Create("/roq/assignments/d/q@journal")
    assert out.ensure == ("/roq/assignments/d",)
    assert out.reply is not None and out.reply.data == {"Replaced": "c", "Replica": "d", "Replicas": ["a", "b", "d"]}
    (event,) = out.events
    assert event.kind == "journal_replica_replaced" and event.queue == "q"
    assert event.text.startswith("replica c lost with its host: replaced by one on d, a learner until it holds what "
                                 "is committed (silent 30s)")
    assert event.fields["replica"] == "c" and event.fields["replacement"] == "d" and event.fields["reason"] == "silent 30s"


def test_the_first_replica_replaced_names_the_new_journal_host_and_learners_lost_before_catching_up_are_dropped():
    doc = QueueDoc(host="b", placement={"x1": "b"}, journal_host="c", journal_replicas=["c", "a", "e"],
                   journal_learners=["e", "c"])
    out = replace_replica(_lost(doc, assignments={}), m.ReplaceReplica(QName="q", Replica="c"), NOW)
    new = QueueDoc.decode(out.ops[0].data)
    assert new.journal_replicas == ["d", "a", "e"] and new.journal_host == "d" and new.journal_learners == ["e", "d"]
    assert out.ops[1:] == (Create("/roq/assignments/d/q@journal"),), "no assignment of c's to delete"
    assert "()" not in out.events[0].text and out.events[0].fields["reason"] == ""


def test_the_monitors_host_takes_a_replica_only_when_no_other_live_host_is_free():
    doc = QueueDoc(host="d", placement={"x1": "d"}, journal_host="a", journal_replicas=["a", "b", "c"])
    out = replace_replica(_lost(doc), m.ReplaceReplica(QName="q", Replica="c"), NOW)
    assert QueueDoc.decode(out.ops[0].data).journal_replicas == ["a", "b", "e"], "off the monitor's host, by name"
    last = replace_replica(_lost(doc, hosts=("a", "b", "d")), m.ReplaceReplica(QName="q", Replica="c"), NOW)
    assert QueueDoc.decode(last.ops[0].data).journal_replicas == ["a", "b", "d"]


def test_a_replica_no_longer_in_the_set_is_already_replaced_and_nothing_changes_twice():
    doc = QueueDoc(host="a", journal_host="a", journal_replicas=["a", "b", "d"], journal_learners=["d"])
    out = replace_replica(_lost(doc), m.ReplaceReplica(QName="q", Replica="c"), NOW)
    assert out.ops == () and out.events == () and out.reply is not None
    assert "already replaced" in out.reply.comment and out.reply.data == {"Replicas": ["a", "b", "d"]}


def test_a_replica_on_a_live_host_is_not_replaced_its_host_manager_restarts_it():
    with pytest.raises(ConflictError, match="its host manager restarts it; a replica is replaced only when its host "
                                            "is lost"):
        replace_replica(_lost(), m.ReplaceReplica(QName="q", Replica="b"), NOW)


def test_with_every_live_host_holding_a_replica_none_is_replaced_and_the_live_hosts_are_named():
    with pytest.raises(UnavailableError, match=r"no live host is free .*: each of a, b has one"):
        replace_replica(_lost(hosts=("a", "b")), m.ReplaceReplica(QName="q", Replica="c"), NOW)


def test_only_a_running_replicated_journal_has_replicas_to_replace():
    plain = QueueDoc(host="a", journal_host="a")
    with pytest.raises(BadRequestError, match="no replicated journal"):
        replace_replica(_lost(plain, rules={"durability": "always"}), m.ReplaceReplica(QName="q", Replica="a"), NOW)
    with pytest.raises(BadRequestError, match="Replica must name"):
        replace_replica(_lost(), m.ReplaceReplica(QName="q", Replica=" "), NOW)
    with pytest.raises(NotFoundError):
        replace_replica(_lost(), m.ReplaceReplica(QName="nope", Replica="c"), NOW)
    stopped = dataclasses.replace(_lost().queues["q"].doc, state=STOPPED)
    with pytest.raises(ConflictError, match="is stopped"):
        replace_replica(_lost(stopped, assignments={}), m.ReplaceReplica(QName="q", Replica="c"), NOW)
    with pytest.raises(ConflictError, match="is not durable"):
        replace_replica(_lost(rules={}), m.ReplaceReplica(QName="q", Replica="c"), NOW)


def test_later_changes_keep_the_swapped_set_in_its_order_and_its_learners():
    swapped = QueueDoc(host="a", placement={"x1": "a"}, journal_host="a", journal_replicas=["a", "d", "b"],
                       journal_learners=["d"])
    held = {h: frozenset({"q@journal"}) for h in "abd"}
    out = set_rules(_lost(swapped, assignments=held), m.SetRules(QName="q", Rules={"sync_interval_ms": 5}), NOW)
    assert len(out.ops) == 1, "nothing added, moved or re-assigned"
    again = start(_lost(dataclasses.replace(swapped, state=STOPPED), assignments={}), m.StartQueue(QName="q"), NOW)
    doc = QueueDoc.decode(next(op for op in again.ops if op.path == "/roq/queues/q").data)
    assert doc.journal_replicas == ["a", "d", "b"] and doc.journal_learners == ["d"]
    assert {op.path for op in again.ops if op.path.endswith("@journal")} == \
        {f"/roq/assignments/{h}/q@journal" for h in "abd"}


def test_a_learner_that_votes_is_admitted_once_and_its_place_in_the_set_stays():
    doc = QueueDoc(host="a", journal_host="a", journal_replicas=["a", "d", "b"], journal_learners=["d", "e"])
    out = admit_replica(_lost(doc), m.AdmitReplica(QName="q", Replica="d"), NOW)
    (queue,) = out.ops
    assert isinstance(queue, SetData) and queue.version == 3
    admitted = QueueDoc.decode(queue.data)
    assert admitted.journal_learners == ["e"] and admitted.journal_replicas == ["a", "d", "b"]
    assert out.reply is not None and out.reply.data == {"Replica": "d", "Learners": ["e"]} and out.notes
    again = admit_replica(_lost(admitted), m.AdmitReplica(QName="q", Replica="d"), NOW)
    assert again.ops == () and again.reply is not None and "already admitted" in again.reply.comment
    with pytest.raises(BadRequestError, match="Replica must name"):
        admit_replica(_lost(doc), m.AdmitReplica(QName="q", Replica=""), NOW)


def test_the_gcm_takes_the_request_from_the_cluster_and_from_whoever_manages_the_queue():
    assert DECISIONS[m.ReplaceReplica] is replace_replica and DECISIONS[m.AdmitReplica] is admit_replica
    assert required(m.ReplaceReplica(QName="q", Replica="c")) == (("manage",), "q")
    assert required(m.AdmitReplica(QName="q", Replica="c")) == (("manage",), "q")
    acl = View(paths=Paths("/roq"), acl=(Rule("ops", "admin"), Rule("bob", "manage", "q")), acl_version=1)
    for principal in ("cluster", "ops", "bob"):
        check(acl, m.ReplaceReplica(QName="q", Replica="c"), principal)
    with pytest.raises(ForbiddenError):
        check(acl, m.ReplaceReplica(QName="q", Replica="c"), "alice")
    msg = m.ReplaceReplica(QName="q", Replica="127.0.0.12", Reason="lost")
    assert decode(encode(msg)) == msg and encode(msg) == encode(decode(bson.encode(
        {"CMD": 2025, "QName": "q", "Replica": "127.0.0.12", "Reason": "lost"})))


def test_one_replica_is_replaced_at_a_time_while_a_learner_catches_up_only_it_may_be():
    doc = QueueDoc(host="a", placement={"x1": "a"}, journal_host="a", journal_replicas=["a", "b", "c"],
                   journal_learners=["b"])
    with pytest.raises(ConflictError, match="one replica is replaced at a time"):
        replace_replica(_lost(doc), m.ReplaceReplica(QName="q", Replica="c"), NOW)
    out = replace_replica(_lost(doc, hosts=("a", "d", "e")), m.ReplaceReplica(QName="q", Replica="b"), NOW)
    assert QueueDoc.decode(out.ops[0].data).journal_learners == ["d"]
