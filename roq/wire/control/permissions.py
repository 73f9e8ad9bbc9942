"""Monitor -> the processes of its queue (its exchanges and its journal): the permissions they enforce.

Each process says in its heartbeat which permissions it holds (:meth:`AclRules.digest`); the monitor sends
them again whenever that digest is not theirs.
"""

from __future__ import annotations

import hashlib
import json

from roq.wire.control.codec import Message, message

__all__ = ["AclRules"]


@message(1108)
class AclRules(Message):
    """Monitor -> exchange, when it joins, whenever they change and whenever its heartbeat shows others: the
    cluster's permissions (rule documents, :mod:`roq.security.acl`) for ``queue``, which the exchange holds every batch
    and subscription it reads to; ``enforced`` false: none are set, every key of the keyring may publish and
    subscribe. The queue's journal is told the same, for its readers."""

    rules: list[dict]
    queue: str = ""
    enforced: bool = True

    def digest(self) -> str:
        """A short digest of these permissions, for a heartbeat to say which the exchange holds."""
        text = json.dumps([self.rules, self.queue, self.enforced], sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
