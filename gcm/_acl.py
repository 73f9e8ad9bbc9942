"""The cluster's permissions (2020 get, 2021 grant, 2022 revoke), and the permission every request needs: pure.

The rules live in one node, ``/acl`` (:class:`~roq.wire.documents.AclDoc`); a grant or a revoke writes it with the
version it was read at, so two changes decided on the same snapshot cannot both land. Who asks is the
principal of the request's CURVE key (:attr:`roq.server.Request.principal`):

* none (a plaintext cluster): no key, no principal, nothing to check;
* :data:`roq.security.zap.CLUSTER`, the cluster's own processes (a monitor asking to scale): everything;
* anyone else needs what :func:`required` says of the request, decided by :class:`roq.security.acl.Acl` (deny wins,
  default deny). Before any rule was set (no ``/acl`` node: a cluster made before permissions existed, or by
  hand) every key of the keyring may do everything; a secure cluster starts with :func:`bootstrap`'s rules.
"""

from __future__ import annotations

from typing import Any

from gcm._outcome import Outcome
from gcm._view import View
from roq.wire import management as m
from roq.wire.control.links import LinkHello
from roq.security.acl import MAX_PREFIX, MAX_RULES, Acl, Rule
from roq.wire.control import Message, Reply
from roq.wire.documents import AclDoc
from roq.errors import BadRequestError, ConfigError, ForbiddenError, NotFoundError
from roq.security.zap import CLUSTER
from roq.zk import Create, SetData

__all__ = ["grant", "revoke", "get_acl", "required", "check", "bootstrap", "QUEUE_READS"]

#: what a client needs of a queue to look it up: any of these
QUEUE_READS = ("publish", "subscribe", "manage")
#: requests on the whole cluster: admin only
_CLUSTER_WIDE = (m.ListQueues, m.ListHosts, m.GetAcl, m.Grant, m.Revoke, m.GetAudit, m.FederationStatus)
#: requests that find a queue: any permission on it
_LOOKUPS = (m.Lookup, m.QueueExists)


def bootstrap(admin: str) -> AclDoc:
    """The rules a secure cluster starts with: ``admin`` administers it, and may publish and subscribe
    everywhere (the operator's own tools); nobody else may do anything until granted."""
    return AclDoc((Rule(admin, "admin"), Rule(admin, "publish"), Rule(admin, "subscribe")))


def required(msg: Message) -> tuple[tuple[str, ...], str]:
    """The permissions of which ``msg`` needs one, and the queue it is about ("" = the cluster)."""
    if isinstance(msg, _CLUSTER_WIDE):
        return ("admin",), ""
    if isinstance(msg, LinkHello):  # a child cluster's link
        return ("link",), ""
    queue = str(getattr(msg, "QName", ""))
    return (QUEUE_READS if isinstance(msg, _LOOKUPS) else ("manage",)), queue


def check(view: View, msg: Message, principal: str | None) -> None:
    """Refuse ``msg`` unless ``principal`` may send it (see the module).

    Raises:
        ForbiddenError: it may not; the comment names the rule that refused it (or default deny).
    """
    if principal is None or principal == CLUSTER or view.acl is None:
        return
    wanted, queue = required(msg)
    acl = Acl(view.acl)
    refusal = ""
    for permission in wanted:
        decision = acl.check(principal, permission, queue)
        if decision.allowed:
            return
        refusal = refusal or decision.reason
    raise ForbiddenError(f"{type(msg).__name__} refused: {refusal}")


def get_acl(view: View, msg: m.GetAcl) -> Reply:
    return Reply(data={"Rules": [r.document() for r in view.acl or ()], "Enforced": view.acl is not None})


def grant(view: View, msg: m.Grant, now: float) -> Outcome:
    """Add a rule (nothing changes if an equal one is there).

    The rules stay within bounds checked before anything is written, so that ``/acl`` never reaches the 1 MiB
    ZooKeeper refuses (it drops the connection that writes more): a key prefix of at most
    :data:`~roq.security.acl.MAX_PREFIX` bytes, at most :data:`~roq.security.acl.MAX_RULES` rules, and at most
    :attr:`AclDoc.MAX_BYTES <roq.wire.documents.AclDoc.MAX_BYTES>` bytes in the node.

    Raises:
        BadRequestError: the rule does not read, or would pass a bound (the comment names the field or the bound).
    """
    rule = _rule(msg.Rule)
    rules = tuple(view.acl or ())
    if rule in rules:
        return Outcome.answer("already granted", Rules=[r.document() for r in rules])
    longest = max((len(p) for p in rule.prefixes), default=0)
    if longest > MAX_PREFIX:
        raise BadRequestError(f"permissions unchanged: a key prefix of a rule is at most {MAX_PREFIX} bytes "
                              f"(MAX_PREFIX), got {longest}")
    if len(rules) >= MAX_RULES:
        raise BadRequestError(f"permissions unchanged: at most {MAX_RULES} rules (MAX_RULES), {len(rules)} are "
                              "in force; revoke one first")
    doc = AclDoc((*rules, rule))
    size = len(doc.encode())
    if size > AclDoc.MAX_BYTES:
        raise BadRequestError(f"permissions unchanged: the rules would take {size} bytes in /acl, over its bound "
                              f"of {AclDoc.MAX_BYTES} (MAX_BYTES; ZooKeeper holds at most 1 MiB in a node)")
    return _write(view, doc, f"granted: {rule.describe()}", now)


def revoke(view: View, msg: m.Revoke, now: float) -> Outcome:
    """Take the rule equal to ``msg.Rule`` out.

    Raises:
        BadRequestError: the rule does not read. NotFoundError: no such rule is in force.
    """
    rule = _rule(msg.Rule)
    rules = tuple(view.acl or ())
    if rule not in rules:
        raise NotFoundError(f"no rule '{rule.describe()}' to revoke")
    return _write(view, AclDoc(tuple(r for r in rules if r != rule)), f"revoked: {rule.describe()}", now)


def _rule(doc: Any) -> Rule:
    try:
        return Rule.of(doc)
    except ConfigError as exc:
        raise BadRequestError(f"permissions unchanged: {exc}") from exc


def _write(view: View, doc: AclDoc, what: str, now: float) -> Outcome:
    path = view.paths.acl
    data = doc.encode()
    op = Create(path, data) if view.acl_version < 0 else SetData(path, data, view.acl_version)
    return Outcome(ops=(op,), notes=(what,),
                   reply=Reply(comment=what, data={"Rules": [r.document() for r in doc.rules]}))
