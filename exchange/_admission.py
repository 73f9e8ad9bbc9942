"""Who may publish to and subscribe at a CURVE exchange: the permissions its monitor sent (pure).

The monitor sends the cluster's rules (:class:`roq.wire.control.AclRules`) when the exchange joins, whenever they
change, and whenever a heartbeat shows that the exchange holds others (the digest of those it holds, :meth:`roq.wire.control.AclRules.digest`).
Until the first arrive the exchange reads neither publishers nor subscribers: nothing is let in that the
rules would have kept out, and nothing is lost (publishers wait, as for a full pipe). A decision costs one
dictionary look-up per batch: each principal's is kept until the rules change.

``enforced`` false (no rule was ever set in the cluster, or a monitor without ZooKeeper): every key of the
keyring may publish and subscribe, as before permissions existed.
"""

from __future__ import annotations

from roq.wire import control
from roq.security.acl import Acl
from roq.errors import ConfigError
from roq.security.zap import CLUSTER

__all__ = ["Admission"]


class Admission:
    """The permissions an exchange holds, and its decisions by principal."""

    def __init__(self) -> None:
        self.known = False
        self.digest = ""
        self.queue = ""
        self._acl: Acl | None = None
        self._publish: dict[str, bool] = {}

    def adopt(self, msg: control.AclRules) -> bool:
        """Hold ``msg``'s rules from now on; True if they differ from those held.

        Raises:
            ConfigError: a rule that does not read (the rules held stay).
        """
        new = msg.digest()
        if new == self.digest:
            return False
        acl = Acl.of(msg.rules) if msg.enforced else None
        if msg.enforced and not msg.queue:
            raise ConfigError("permissions without the queue they are for")
        self._acl, self.queue, self.digest, self.known = acl, msg.queue, new, True
        self._publish = {}
        return True

    def may_publish(self, principal: str) -> bool:
        """Whether ``principal`` may publish to the queue (False while no rules are held)."""
        allowed = self._publish.get(principal)
        if allowed is None:
            if len(self._publish) >= 10_000:  # principals are keys of the keyring: bounded, but a cache is
                self._publish.clear()
            allowed = self._publish[principal] = self._decide(principal, "publish", None)
        return allowed

    def may_subscribe(self, principal: str, prefix: bytes) -> bool:
        """Whether ``principal`` may subscribe to the queue's keys under ``prefix``."""
        return self._decide(principal, "subscribe", prefix)

    def _decide(self, principal: str, permission: str, prefix: bytes | None) -> bool:
        if not self.known:
            return False
        if self._acl is None or principal == CLUSTER:
            return True
        return self._acl.check(principal, permission, self.queue, prefix).allowed
