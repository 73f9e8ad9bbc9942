"""monitor._permissions: who may publish and subscribe, and what the exchanges are told (through the core)."""

from __future__ import annotations

from monitor._topology import QueueView
from monitor.testing import Driver
from roq.wire import control
from roq.security.acl import Rule
from roq.config import MonitorConfig
from roq.wire.control import Result

RULES = (Rule("alice", "publish", "orders"), Rule("bob", "subscribe", "orders", prefixes=(b"eu.",)))


def _driver(acl=RULES) -> Driver:
    return Driver(MonitorConfig(queue="orders"), view=QueueView(state="running", acl=acl))


def _beat(d: Driver, x: str, permissions: str) -> None:
    d.send(control.Heartbeat(exchange=x, frontend=f"tcp://h:{1}", backend="tcp://h:2", pid=1, permissions=permissions),
           x.encode(), "cluster")


def test_a_publisher_or_subscriber_without_the_permission_is_refused_and_never_given_an_exchange():
    d = _driver()
    _beat(d, "x1", "")
    reply = d.send(control.PublisherHello(publisher="aa", exchange=""), b"aa", "mallory")
    assert reply is not None and reply.result == Result.FORBIDDEN and "mallory may not publish" in reply.comment
    assert d.to(b"aa") == []
    assert d.send(control.PublisherHello(publisher="bb", exchange=""), b"bb", "alice") is None
    assert d.to(b"bb", control.Relocate)  # alice was given an exchange
    reply = d.send(control.SubscriberHello(subscriber="cc", prefix=b"us.", confirmed=[]), b"cc", "bob")
    assert reply is not None and reply.result == Result.FORBIDDEN and "only under the prefixes" in reply.comment
    assert d.send(control.SubscriberHello(subscriber="dd", prefix=b"eu.x", confirmed=[]), b"dd", "bob") is None
    reply = d.send(control.Status(), b"ee", "alice")
    assert reply is not None and reply.result == Result.FORBIDDEN
    assert d.send(control.Ping(), b"ee", "mallory").result == Result.OK  # any key of the keyring may ping
    assert d.drops.by_reason.get("refused: no permission") == 3


def test_the_exchanges_get_the_rules_when_they_join_when_they_change_and_when_they_hold_others():
    d = _driver()
    _beat(d, "x1", "")
    (first,) = d.to(b"x1", control.AclRules)
    assert first.enforced and first.queue == "orders" and len(first.rules) == 2
    _beat(d, "x1", first.digest())
    assert len(d.to(b"x1", control.AclRules)) == 1  # it holds them: nothing sent
    _beat(d, "x1", "-")
    assert len(d.to(b"x1", control.AclRules)) == 1  # a plaintext exchange needs none
    d.cluster(QueueView(state="running", acl=RULES[:1]))
    latest = d.to(b"x1", control.AclRules)[-1]
    assert len(latest.rules) == 1 and latest.digest() != first.digest()
    assert d.events("permissions_changed")
    _beat(d, "x1", first.digest())  # a change it missed
    assert d.to(b"x1", control.AclRules)[-1] == latest
    # revoked: alice's next hello is refused
    d.cluster(QueueView(state="running", acl=()))
    reply = d.send(control.PublisherHello(publisher="bb", exchange="x1"), b"bb", "alice")
    assert reply is not None and reply.result == Result.FORBIDDEN


def test_without_rules_without_a_key_or_from_the_cluster_nothing_is_checked():
    d = _driver(acl=None)
    assert d.send(control.PublisherHello(publisher="aa", exchange=""), b"aa", "anyone") is None
    _beat(d, "x1", "")
    assert d.to(b"x1", control.AclRules)[-1].enforced is False
    d = _driver()
    assert d.send(control.PublisherHello(publisher="aa", exchange=""), b"aa", None) is None
    assert d.send(control.Status(), b"gcm", "cluster").result == Result.OK


def test_where_the_journal_is_read_is_told_to_a_subscriber_of_the_prefix_and_to_nobody_else():
    d = _driver()
    reply = d.send(control.JournalWhere(prefix=b"eu.x"), b"ff", "bob")
    assert reply is not None and reply.result == Result.OK and reply.data["durability"] == "none"
    for principal, prefix in (("bob", b""), ("bob", b"us."), ("alice", b"eu."), ("mallory", b"eu.")):
        reply = d.send(control.JournalWhere(prefix=prefix), b"ff", principal)
        assert reply is not None and reply.result == Result.FORBIDDEN, (principal, prefix)
    reply = d.send(control.Status(), b"ff", "bob")
    assert reply is not None and reply.result == Result.FORBIDDEN  # the whole status is a manager's
