"""exchange._admission: the permissions an exchange holds, and its decisions by principal."""

from __future__ import annotations

import pytest

from exchange._admission import Admission
from roq.wire import control
from roq.security.acl import Rule
from roq.errors import ConfigError

RULES = [Rule("alice", "publish", "orders.*").document(),
         Rule("bob", "subscribe", "orders.*", prefixes=(b"eu.",)).document(),
         Rule("bob", "publish", "orders.secret", allow=False).document(),
         Rule("*", "publish", "orders.open").document()]


def test_nothing_is_allowed_before_the_rules_arrive():
    a = Admission()
    assert not a.known and a.digest == ""
    assert not a.may_publish("alice") and not a.may_subscribe("bob", b"eu.")


def test_the_rules_decide_per_principal_and_queue_and_a_change_is_held_at_once():
    a = Admission()
    msg = control.AclRules(rules=RULES, queue="orders.eu")
    assert a.adopt(msg) and a.known and a.digest == msg.digest()
    assert not a.adopt(msg)  # the same again: nothing changes
    assert a.may_publish("alice") and not a.may_publish("bob") and not a.may_publish("mallory")
    assert a.may_subscribe("bob", b"eu.paris") and not a.may_subscribe("bob", b"") and not a.may_subscribe("bob", b"us.")
    assert a.may_publish("cluster")
    assert a.adopt(control.AclRules(rules=RULES[1:], queue="orders.eu"))
    assert not a.may_publish("alice")  # revoked: the decision kept for alice is forgotten
    assert a.adopt(control.AclRules(rules=RULES, queue="orders.open"))
    assert a.may_publish("mallory")  # everyone may publish to orders.open


def test_without_enforcement_every_key_may_and_bad_rules_change_nothing():
    a = Admission()
    a.adopt(control.AclRules(rules=[], queue="q", enforced=False))
    assert a.may_publish("anyone") and a.may_subscribe("anyone", b"")
    held = a.digest
    with pytest.raises(ConfigError):
        a.adopt(control.AclRules(rules=[{"principal": "x"}], queue="q"))
    with pytest.raises(ConfigError, match="without the queue"):
        a.adopt(control.AclRules(rules=RULES, queue=""))
    assert a.digest == held and a.may_publish("anyone")
