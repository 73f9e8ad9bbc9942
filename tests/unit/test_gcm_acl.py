"""gcm._acl: which permission each request needs, the check of a principal, grant and revoke as decisions."""

from __future__ import annotations

import dataclasses

import pytest

from gcm._acl import bootstrap, check, get_acl, grant, required, revoke
from gcm._view import View
from roq.wire import management as m
from roq.security.acl import MAX_PREFIX, MAX_RULES, Rule
from roq.wire.documents import AclDoc
from roq.errors import BadRequestError, ForbiddenError, NotFoundError
from roq.zk import Create, Paths, SetData

RULES = (Rule("ops", "admin"), Rule("alice", "publish", "orders.*"), Rule("bob", "manage", "orders.eu"),
         Rule("bob", "manage", "orders.eu.secret", allow=False))


def _view(acl=RULES, version=3) -> View:
    return View(paths=Paths("/roq"), acl=acl, acl_version=version)


@pytest.mark.parametrize("msg, wanted", [
    (m.CreateQueue(QName="q", Host="h"), (("manage",), "q")),
    (m.RemoveQueue(QName="q"), (("manage",), "q")),
    (m.SetRules(QName="q", Rules={}), (("manage",), "q")),
    (m.Lookup(QName="q"), (("publish", "subscribe", "manage"), "q")),
    (m.ListQueues(), (("admin",), "")),
    (m.Grant(Rule={}), (("admin",), "")),
])
def test_each_request_names_the_permission_it_needs(msg, wanted):
    assert required(msg) == wanted


def test_a_principal_is_allowed_what_a_rule_grants_and_refused_the_rest_naming_why():
    view = _view()
    check(view, m.RemoveQueue(QName="anything"), "ops")  # admin manages every queue
    check(view, m.Lookup(QName="orders.us"), "alice")  # publish is enough to look a queue up
    check(view, m.StopQueue(QName="orders.eu"), "bob")
    with pytest.raises(ForbiddenError, match="alice may not manage on orders.us: no rule allows it"):
        check(view, m.StopQueue(QName="orders.us"), "alice")
    with pytest.raises(ForbiddenError, match="deny manage to bob on orders.eu.secret"):
        check(view, m.StopQueue(QName="orders.eu.secret"), "bob")
    with pytest.raises(ForbiddenError, match="default deny"):
        check(view, m.ListQueues(), "alice")
    with pytest.raises(ForbiddenError):
        check(view, m.Lookup(QName="orders.us"), "mallory")


def test_no_principal_the_cluster_itself_or_no_rules_yet_are_not_checked_but_rules_that_do_not_read_allow_nothing():
    check(_view(), m.RemoveQueue(QName="q"), None)  # plaintext: no key, nothing to check
    check(_view(), m.ScaleOut(QName="q", Exchanges=2), "cluster")  # a monitor asking to scale
    check(_view(acl=None, version=-1), m.RemoveQueue(QName="q"), "anyone")  # no rule was ever set
    with pytest.raises(ForbiddenError):
        check(_view(acl=()), m.Lookup(QName="q"), "ops")


def test_a_grant_writes_the_rules_with_the_version_read_and_is_idempotent():
    out = grant(_view(), m.Grant(Rule={"principal": "carol", "permission": "subscribe", "queues": "orders.*",
                                       "prefixes": ["eu."]}), 0.0)
    (op,) = out.ops
    assert isinstance(op, SetData) and op.path == "/roq/acl" and op.version == 3
    assert AclDoc.decode(op.data).rules[-1] == Rule("carol", "subscribe", "orders.*", prefixes=(b"eu.",))
    assert out.reply is not None and len(out.reply.data["Rules"]) == 5
    again = grant(_view(), m.Grant(Rule=RULES[1].document()), 0.0)
    assert again.ops == () and again.reply is not None and again.reply.comment == "already granted"
    first = grant(_view(acl=None, version=-1), m.Grant(Rule={"principal": "ops", "permission": "admin"}), 0.0)
    assert isinstance(first.ops[0], Create)  # the first rule makes the node


def test_a_revoke_takes_out_the_equal_rule_only_and_a_bad_rule_changes_nothing():
    out = revoke(_view(), m.Revoke(Rule=RULES[1].document()), 0.0)
    assert AclDoc.decode(out.ops[0].data).rules == (RULES[0], RULES[2], RULES[3])
    with pytest.raises(NotFoundError, match="no rule 'allow publish to alice on orders'"):
        revoke(_view(), m.Revoke(Rule={"principal": "alice", "permission": "publish", "queues": "orders"}), 0.0)
    for bad in ({"principal": "alice"}, {"principal": "a b", "permission": "publish"},
                {"principal": "alice", "permission": "fly"}, {"principal": "alice", "permission": "publish",
                                                              "prefixes": ["x"]}, {"x" * 10_000: 1}):
        with pytest.raises(BadRequestError, match="permissions unchanged"):
            grant(_view(), m.Grant(Rule=bad), 0.0)


def test_get_and_bootstrap():
    assert get_acl(_view(acl=None), m.GetAcl()).data == {"Rules": [], "Enforced": False}
    assert len(get_acl(_view(), m.GetAcl()).data["Rules"]) == 4
    doc = bootstrap("root")
    assert [dataclasses.astuple(r)[:2] for r in doc.rules] == [("root", "admin"), ("root", "publish"),
                                                               ("root", "subscribe")]


def _subscribe(principal: str, *prefixes: str) -> dict:
    return {"principal": principal, "permission": "subscribe", "queues": "q", "prefixes": list(prefixes)}


def test_a_key_prefix_is_bounded_in_bytes_not_characters():
    fits = grant(_view(), m.Grant(Rule=_subscribe("carol", "k" * MAX_PREFIX)), 0.0)
    assert len(AclDoc.decode(fits.ops[0].data).rules) == 5
    for prefix, length in (("k" * (MAX_PREFIX + 1), MAX_PREFIX + 1), ("é" * 513, 1026)):  # two bytes each
        with pytest.raises(BadRequestError, match=f"at most {MAX_PREFIX} bytes \\(MAX_PREFIX\\), got {length}"):
            grant(_view(), m.Grant(Rule=_subscribe("carol", "eu.", prefix)), 0.0)


def test_the_number_of_rules_is_bounded_and_a_full_set_may_still_revoke():
    full = tuple(Rule(f"p{i}", "publish", "q") for i in range(MAX_RULES))
    with pytest.raises(BadRequestError, match=f"at most {MAX_RULES} rules \\(MAX_RULES\\), {MAX_RULES} are in force"):
        grant(_view(acl=full), m.Grant(Rule={"principal": "one-more", "permission": "publish"}), 0.0)
    assert grant(_view(acl=full), m.Grant(Rule=full[0].document()), 0.0).ops == ()  # already there: no change
    out = revoke(_view(acl=full), m.Revoke(Rule=full[0].document()), 0.0)
    assert len(AclDoc.decode(out.ops[0].data).rules) == MAX_RULES - 1
    fits = grant(_view(acl=full[1:]), m.Grant(Rule={"principal": "one-more", "permission": "publish"}), 0.0)
    assert len(AclDoc.decode(fits.ops[0].data).rules) == MAX_RULES


def test_the_encoded_rules_are_bounded_before_they_are_written():
    # each rule: 64 prefixes of MAX_PREFIX control bytes, each written as a 6-byte JSON escape (384 KiB)
    heavy = ["\x01" * (MAX_PREFIX - 2) + f"{i:02}" for i in range(64)]
    first = grant(_view(acl=()), m.Grant(Rule=_subscribe("a", *heavy)), 0.0)
    stored = AclDoc.decode(first.ops[0].data).rules
    assert 256 * 1024 < len(first.ops[0].data) <= AclDoc.MAX_BYTES
    with pytest.raises(BadRequestError, match=f"bytes in /acl, over its bound of {AclDoc.MAX_BYTES} \\(MAX_BYTES"):
        grant(_view(acl=stored), m.Grant(Rule=_subscribe("b", *heavy)), 0.0)
    small = grant(_view(acl=stored), m.Grant(Rule=_subscribe("b", "eu.")), 0.0)
    assert len(AclDoc.decode(small.ops[0].data).rules) == 2  # what fits is still granted
