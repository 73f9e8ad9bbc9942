"""gcm._audit: the entries of the audit trail, and what the API records."""

from __future__ import annotations

import json
import logging

import pytest

from gcm._api import Api
from gcm._audit import AuditTrail
from gcm._audit import entry as audit_entry
from gcm._view import View
from roq.wire import control
from roq.wire import management as m
from roq.errors import BadRequestError, Result
from roq.runtime import DropCounter
from roq.server import Dispatcher, Request
from roq.security.acl import Rule
from roq.zk import Paths


def test_an_entry_says_who_what_where_when_and_how_it_ended():
    e = audit_entry(m.Grant(Rule={"principal": "bob", "permission": "publish"}), "ops", "management", 0, "granted", 5.0)
    assert e == {"time": 5.0, "principal": "ops", "via": "management", "action": "Grant", "queue": "",
                 "detail": '{"Rule": {"permission": "publish", "principal": "bob"}}', "result": "OK",
                 "comment": "granted"}
    e = audit_entry(m.RemoveQueue(QName="orders"), None, "http", Result.FORBIDDEN, "x" * 500, 6.0)
    assert (e["principal"], e["queue"], e["result"], len(e["comment"])) == ("", "orders", "FORBIDDEN", 200)
    assert audit_entry(m.CreateQueueAnywhere(QName="q"), "ops", "management", None, "", 7.0)["result"] == "ACCEPTED"


def test_memory_is_bounded_and_the_latest_come_last():
    trail = AuditTrail(None, Paths())
    for i in range(1500):
        trail.record({"n": i})
    assert trail.dropped == 500 and [e["n"] for e in trail.latest(3)] == [1497, 1498, 1499]
    with pytest.raises(BadRequestError):
        trail.latest(0)


class _Shell:
    def __init__(self, view: View) -> None:
        self.view, self.leading, self.leader = view, True, None

    def apply(self, decide, request, cmd):
        return decide(self.view).reply


def test_the_api_records_changes_and_refusals_for_want_of_permission_not_reads():
    view = View(paths=Paths("/roq"), acl=(Rule("ops", "admin"),), acl_version=1)
    trail = AuditTrail(None, Paths())
    handlers = Api(_Shell(view), clock=lambda: 9.0, audit=trail).handlers("management")
    dispatcher = Dispatcher("gcm", handlers, DropCounter(logging.getLogger("test"), "test"))
    ask = lambda msg, who: dispatcher.handle(msg, Request(None, (b"x",), who))  # noqa: E731
    ask(m.Grant(Rule={"principal": "bob", "permission": "publish"}), "ops")
    ask(m.RemoveQueue(QName="orders"), "mallory")
    ask(m.ListQueues(), "ops")  # a read: not recorded
    ask(m.Revoke(Rule={"principal": "nobody", "permission": "publish"}), "ops")  # refused: recorded
    got = [(e["principal"], e["action"], e["result"]) for e in trail.latest(10)]
    assert got == [("ops", "Grant", "OK"), ("mallory", "RemoveQueue", "FORBIDDEN"), ("ops", "Revoke", "NOT_FOUND")]
    reply = ask(m.GetAudit(Limit=2), "ops")
    assert reply is not None and [e["action"] for e in reply.data["Entries"]] == ["RemoveQueue", "Revoke"]
    assert ask(m.GetAudit(Limit=2), "mallory").result == control.Result.FORBIDDEN


def test_a_key_refused_at_the_handshake_is_recorded_once_a_minute_with_how_many_came_since():
    from gcm._audit import KEY_REFUSAL_EVERY_S, KeyRefusals

    now = [100.0]
    trail = AuditTrail(None, Paths())
    refusals = KeyRefusals(trail, clock=lambda: now[0], wall=lambda: 1.0e9 + now[0])
    for _ in range(50):  # a client retrying its handshake ten times a second
        refusals.refuse("KEY-A", "127.0.0.30", "unknown key")
        now[0] += 0.1
    refusals.refuse("KEY-B", "127.0.0.31", "unknown key")
    now[0] += KEY_REFUSAL_EVERY_S
    refusals.refuse("KEY-A", "127.0.0.30", "unknown key")
    entries = list(trail.pending)
    assert refusals.refused == 52
    assert [(e["action"], e["result"], e["via"], json.loads(e["detail"])["key"]) for e in entries] == [
        ("Connect", "FORBIDDEN", "curve", "KEY-A"), ("Connect", "FORBIDDEN", "curve", "KEY-B"),
        ("Connect", "FORBIDDEN", "curve", "KEY-A")]
    assert entries[0]["comment"] == "refused at the CURVE handshake: unknown key"
    assert entries[2]["comment"].endswith("(49 more since the last entry)")
