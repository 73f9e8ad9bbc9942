"""Who may publish to and subscribe to the queue, and what its exchanges hold of it: pure.

The cluster's rules come from ZooKeeper (:class:`~monitor._topology.QueueView` ``.acl``: None while no rule
was ever set, or for a monitor without ZooKeeper). The monitor

* refuses, FORBIDDEN, a publisher's or subscriber's message from a principal without the permission
  (:meth:`Permissions.check`): a publisher without ``publish`` is never given an exchange, a subscriber
  without ``subscribe`` on its prefix never the list of exchanges, and either learns why on its next hello
  once its permission is revoked;
* refuses, FORBIDDEN, a publisher's or subscriber's message that names an id (:data:`NAMES`) which is not its
  sender's key's own (:meth:`Permissions.names_own`: counted as ``forged id``): nobody can say hello, panic,
  report a move, confirm or say goodbye for another;
* sends the rules to every exchange when they change, and to one whose heartbeat shows it holds others (a
  new exchange, a lost message), so that the exchanges refuse a revoked publisher's batches and stop sending
  to a revoked subscriber as soon as they read them (:mod:`exchange._admission`).

Without CURVE there is no principal and nothing to check.
"""

from __future__ import annotations

from typing import Any

from monitor._outbox import Outbox
from monitor._topology import Topology
from roq.wire import control
from roq.security.acl import Acl, Rule
from roq.errors import ForbiddenError
from roq.security.zap import CLUSTER, Keyring

__all__ = ["Permissions", "NEEDS", "NAMES"]

#: message type -> the permission its sender needs (those not named need none but a key of the keyring)
NEEDS: dict[type[control.Message], str] = {
    control.PublisherHello: "publish",
    control.Moved: "publish",
    control.Panic: "publish",
    control.PublisherBye: "publish",
    control.SubscriberHello: "subscribe",
    control.Ready: "subscribe",
    control.SubscriberBye: "subscribe",
    control.Status: "manage",
    control.JournalWhere: "subscribe",
    control.ForceRelocate: "manage",
    control.Interest: "link",
}

#: message type -> the field that names its sender's id (hex), which must be the sender's key's own
NAMES: dict[type[control.Message], str] = {
    control.PublisherHello: "publisher",
    control.Moved: "publisher",
    control.Panic: "publisher",
    control.PublisherBye: "publisher",
    control.SubscriberHello: "subscriber",
    control.Ready: "subscriber",
    control.SubscriberBye: "subscriber",
}


class Permissions:
    """The queue's permissions as the monitor holds them.

    Args:
        queue: the queue's name.
        topology: its exchanges (the ones told of a change).
        outbox: where the messages to the exchanges go.
    """

    def __init__(self, queue: str, topology: Topology, outbox: Outbox) -> None:
        self.queue = queue
        self.topology = topology
        self.outbox = outbox
        self.rules: tuple[Rule, ...] | None = None
        self._acl: Acl | None = None
        self.message = self._message()

    def adopt(self, rules: tuple[Rule, ...] | None) -> bool:
        """Hold ``rules`` from now on and tell every exchange; True if they changed."""
        if rules == self.rules:
            return False
        self.rules = rules
        self._acl = Acl(rules) if rules is not None else None
        self.message = self._message()
        for x in self.topology.exchanges.values():
            self.outbox.send(x.identity, self.message)
        self.outbox.event("permissions_changed", f"permissions now {len(rules) if rules is not None else 'no'} rules "
                          f"({self.message.digest()}); every exchange told", rules=len(rules or ()))
        return True

    def heartbeat(self, hb: control.Heartbeat | control.JournalHeartbeat, identity: bytes) -> None:
        """An exchange's or the journal's heartbeat: send it the permissions if it holds others (plaintext ones
        need none)."""
        if hb.permissions != "-" and hb.permissions != self.message.digest():
            self.outbox.send(identity, self.message)

    def check(self, msg: Any, principal: str | None) -> None:
        """Refuse ``msg`` unless ``principal`` may send it.

        Raises:
            ForbiddenError: it may not (the comment names the rule, or default deny).
        """
        needed = NEEDS.get(type(msg))
        if needed is None or principal is None or principal == CLUSTER or self._acl is None:
            return
        prefix = msg.prefix if isinstance(msg, (control.SubscriberHello, control.JournalWhere)) else None
        decision = self._acl.check(principal, needed, self.queue, prefix)
        if not decision.allowed:
            raise ForbiddenError(decision.reason)

    @staticmethod
    def names_own(msg: Any, principal: str | None, keyring: Keyring | None) -> str:
        """Why ``msg`` may not come from ``principal`` for the id it names ("" = it may): with CURVE, the
        publisher or subscriber id it names must be one of the sender's key's (:meth:`roq.security.zap.Keyring.owns`)."""
        field = NAMES.get(type(msg))
        if field is None or keyring is None or principal is None or principal == CLUSTER:
            return ""
        return keyring.may_name(principal, getattr(msg, field))

    def _message(self) -> control.AclRules:
        rules = self.rules
        return control.AclRules(rules=[r.document() for r in rules or ()], queue=self.queue,
                                enforced=rules is not None)
