"""Permissions: deny wins, default deny, wildcards on queue names, prefixes for subscribers, admin is not data."""

from __future__ import annotations

import pytest

from roq.security.acl import Acl, Rule
from roq.errors import ConfigError


def test_nothing_is_allowed_by_default_and_a_deny_wins_over_any_allow():
    acl = Acl([Rule("alice", "publish", "orders.*"), Rule("*", "publish", "orders.eu"),
               Rule("bob", "publish", "orders.*", allow=False)])
    assert acl.check("alice", "publish", "orders.eu").allowed
    assert acl.check("carol", "publish", "orders.eu").allowed  # everyone, on that one queue
    assert not acl.check("carol", "publish", "orders.us").allowed
    denied = acl.check("bob", "publish", "orders.eu")
    assert not denied.allowed and "deny publish to bob on orders.*" in denied.reason
    nothing = acl.check("alice", "subscribe", "orders.eu")
    assert not nothing.allowed and "default deny" in nothing.reason
    assert not Acl().check("root", "admin").allowed


def test_subscribers_keep_to_their_prefixes():
    acl = Acl([Rule("dash", "subscribe", "metrics", prefixes=(b"eu.", b"us.")),
               Rule("dash", "subscribe", "metrics", allow=False, prefixes=(b"eu.secret",))])
    assert acl.check("dash", "subscribe", "metrics", b"eu.cpu").allowed
    assert not acl.check("dash", "subscribe", "metrics", b"").allowed  # every key: more than it was given
    assert not acl.check("dash", "subscribe", "metrics", b"asia.").allowed
    assert not acl.check("dash", "subscribe", "metrics", b"eu.secret.keys").allowed  # the deny covers it
    assert not acl.check("dash", "subscribe", "metrics", b"eu.").allowed  # it would receive eu.secret keys too
    assert acl.check("dash", "subscribe", "metrics", b"eu.cpu").allowed


def test_admin_manages_every_queue_but_reads_and_writes_no_record():
    acl = Acl([Rule("ops", "admin")])
    assert acl.check("ops", "manage", "anything").allowed and acl.check("ops", "admin").allowed
    assert not acl.check("ops", "publish", "anything").allowed
    assert not acl.check("ops", "subscribe", "anything", b"").allowed


def test_rules_are_checked_when_made_and_read_back_from_their_documents():
    rule = Rule("app-1", "subscribe", "orders.?", prefixes=(b"eu.",))
    assert Rule.of(rule.document()) == rule
    assert Acl.of(Acl([rule]).documents()).rules == [rule]
    for doc, named in (({"principal": "a b", "permission": "publish"}, "principal"),
                       ({"principal": "a", "permission": "read"}, "permission must be one of"),
                       ({"principal": "a", "permission": "publish", "queues": "x/y"}, "queues must be"),
                       ({"principal": "a", "permission": "publish", "prefixes": ["x"]}, "subscribe rules only"),
                       ({"principal": "a", "permission": "publish", "colour": 1}, "unknown key 'colour'"),
                       ({"principal": "a", "permission": "publish", "allow": "yes"}, "'allow' must be true or false"),
                       ({"permission": "publish"}, "needs 'principal'")):
        with pytest.raises(ConfigError, match=named):
            Rule.of(doc)


@pytest.mark.parametrize("doc, named", [({"principal": "alice\n", "permission": "publish"}, "principal"),
                                        ({"principal": "*\n", "permission": "publish"}, "principal"),
                                        ({"principal": "a", "permission": "publish", "queues": "orders\n"}, "queues")])
def test_a_name_or_pattern_with_a_trailing_newline_is_refused(doc, named):
    with pytest.raises(ConfigError, match=named):
        Rule.of(doc)
