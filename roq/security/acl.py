"""Permissions (pure): who may publish to, subscribe to or manage which queues, and who administers the cluster.

A rule allows or denies one permission to a principal (or to every principal, ``*``) on the queues whose
names match a pattern (``fnmatch`` wildcards: ``orders.*``, ``*``); a ``subscribe`` rule may also name the
key prefixes it covers. A request is decided by the rules that match it: **a matching deny wins**, then a
matching allow grants, and with neither it is refused (**default deny**). ``admin`` is cluster-wide: it
grants ``manage`` on every queue (and the right to change the rules), never ``publish`` or ``subscribe``:
reading and writing records is granted on its own. ``link`` is cluster-wide too: it lets a child cluster's link
open (what that child may then publish into or subscribe to is granted on its own). Every decision says why,
naming the rule.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from typing import Any, Iterable, Mapping

from roq.errors import ConfigError

__all__ = ["PERMISSIONS", "MAX_RULES", "MAX_PREFIX", "Rule", "Decision", "Acl"]

PERMISSIONS = ("publish", "subscribe", "manage", "admin", "link")
#: rules a grant may bring the cluster's set to: every decision looks at each of them, and 2,000 rules of the
#: longest names (210 bytes each in ``/acl``) take 420 KB, under the node's bound
#: (:attr:`roq.wire.documents.AclDoc.MAX_BYTES`), so a set without long prefixes meets this bound first
MAX_RULES = 2_000
#: bytes of one key prefix a granted subscribe rule may name: as many as a monitor keeps of a subscriber's
#: prefix (``monitor.MAX_PREFIX``); a rule's 64 prefixes then take at most 64 KiB, 384 KiB in ``/acl`` if
#: every byte needs a JSON escape
MAX_PREFIX = 1024
_PRINCIPAL = re.compile(r"(\*|[A-Za-z0-9][A-Za-z0-9_.@-]{0,63})\Z")
_PATTERN = re.compile(r"[A-Za-z0-9_.*?\[\]!-]{1,64}\Z")


@dataclasses.dataclass(frozen=True)
class Rule:
    principal: str  # a name, or "*" for everyone
    permission: str  # one of PERMISSIONS
    queues: str = "*"  # a pattern of queue names ("*" for admin)
    allow: bool = True
    prefixes: tuple[bytes, ...] = ()  # subscribe only: the key prefixes covered (none = every key)

    def __post_init__(self) -> None:
        if not _PRINCIPAL.match(self.principal):
            raise ConfigError(f"principal must be '*' or a name of 1-64 letters, digits, '.', '_', '@', '-', "
                              f"got {self.principal[:80]!r}")
        if self.permission not in PERMISSIONS:
            raise ConfigError(f"permission must be one of {', '.join(PERMISSIONS)}, got {self.permission[:40]!r}")
        if not _PATTERN.match(self.queues):
            raise ConfigError(f"queues must be a queue name or a pattern (*, ?, [...]) of at most 64 characters, "
                              f"got {self.queues[:80]!r}")
        if self.prefixes and self.permission != "subscribe":
            raise ConfigError("prefixes restrict subscribe rules only")

    def matches(self, principal: str, permission: str, queue: str) -> bool:
        if self.principal not in ("*", principal):
            return False
        if self.permission == "admin":
            return permission in ("admin", "manage")
        return self.permission == permission and fnmatch.fnmatchcase(queue, self.queues)

    def covers(self, prefix: bytes) -> bool:
        """Whether a subscription to ``prefix`` stays within this rule's prefixes (always, without any)."""
        return not self.prefixes or any(prefix.startswith(p) for p in self.prefixes)

    def overlaps(self, prefix: bytes) -> bool:
        """Whether a subscription to ``prefix`` would receive any key under this rule's prefixes (always,
        without any): ``eu.`` overlaps ``eu.secret`` as much as ``eu.secret.keys`` does."""
        return not self.prefixes or any(prefix.startswith(p) or p.startswith(prefix) for p in self.prefixes)

    def describe(self) -> str:
        what = f"{'allow' if self.allow else 'deny'} {self.permission} to {self.principal}"
        where = "" if self.permission in ("admin", "link") else f" on {self.queues}"
        keys = f" (keys {', '.join(p.decode('utf-8', 'backslashreplace') for p in self.prefixes)})" if self.prefixes else ""
        return what + where + keys

    def document(self) -> dict[str, Any]:
        return {"principal": self.principal, "permission": self.permission, "queues": self.queues,
                "allow": self.allow, "prefixes": [p.decode("utf-8", "backslashreplace") for p in self.prefixes]}

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Rule:
        """A rule from its document (as stored, or as an operator sent it).

        Raises:
            ConfigError: a key missing, unknown or of the wrong type, or a bad value (the message names it).
        """
        if not isinstance(doc, Mapping):
            raise ConfigError("a rule is an object with principal, permission, queues, allow, prefixes")
        unknown = set(doc) - {"principal", "permission", "queues", "allow", "prefixes"}
        if unknown:
            raise ConfigError(f"unknown key {sorted(unknown)[0][:40]!r} in a rule")
        for key, kind in (("principal", str), ("permission", str), ("queues", str), ("allow", bool)):
            if key in doc and not isinstance(doc[key], kind):
                raise ConfigError(f"a rule's {key!r} must be {'true or false' if kind is bool else 'text'}")
        if "principal" not in doc or "permission" not in doc:
            raise ConfigError("a rule needs 'principal' and 'permission'")
        prefixes = doc.get("prefixes", [])
        if not isinstance(prefixes, list) or not all(isinstance(p, str) for p in prefixes) or len(prefixes) > 64:
            raise ConfigError("a rule's 'prefixes' must be a list of at most 64 texts")
        return cls(doc["principal"], doc["permission"], doc.get("queues", "*"), doc.get("allow", True),
                   tuple(p.encode() for p in prefixes))


@dataclasses.dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


class Acl:
    """A set of rules, in the order they were given (the order does not change a decision: deny wins).

    Any set that was stored reads: :data:`MAX_RULES` and :data:`MAX_PREFIX` bound what a grant may add (the GCM
    checks them), so that rules stored before a bound was lowered still decide, and may be revoked.
    """

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules = list(rules)

    def check(self, principal: str, permission: str, queue: str = "", prefix: bytes | None = None) -> Decision:
        """May ``principal`` have ``permission`` on ``queue`` (and, to subscribe, to keys under ``prefix``)?"""
        if permission not in PERMISSIONS:
            raise ConfigError(f"permission must be one of {', '.join(PERMISSIONS)}, got {permission[:40]!r}")
        matching = [r for r in self.rules if r.matches(principal, permission, queue)]
        for rule in matching:
            if not rule.allow and (prefix is None or rule.overlaps(prefix)):
                return Decision(False, f"{principal} may not {permission}{_on(queue, permission)}: {rule.describe()}")
        for rule in matching:
            if rule.allow and (prefix is None or rule.covers(prefix)):
                return Decision(True, rule.describe())
        if any(r.allow for r in matching):
            return Decision(False, f"{principal} may subscribe to {queue} only under the prefixes it was granted")
        return Decision(False, f"{principal} may not {permission}{_on(queue, permission)}: no rule allows it "
                               "(default deny)")

    def documents(self) -> list[dict[str, Any]]:
        return [r.document() for r in self.rules]

    @classmethod
    def of(cls, docs: Iterable[Mapping[str, Any]]) -> Acl:
        return cls(Rule.of(d) for d in docs)


def _on(queue: str, permission: str) -> str:
    return "" if permission in ("admin", "link") or not queue else f" on {queue}"
