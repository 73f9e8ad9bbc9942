"""The audit trail: every management action, who asked, through which port, when, and what came of it.

Recorded are the requests that change something (the GCM's decisions: create, remove, stop, start, scale,
rules, thresholds, grants and revokes), whether carried out or refused, every request refused for want of
permission, and every hello of a child cluster's link that was refused (a cycle, a duplicate name, a second
parent, a stale incarnation: ``result`` CONFLICT, the comment naming both ends), and every key refused at the
CURVE handshake (a child cluster's link, or any client, with a key the keyring does not admit: action ``Connect``,
``result`` FORBIDDEN, the key and the peer's address in ``detail``; :class:`KeyRefusals`). Each entry: ``seq``, ``time`` (wall clock), ``principal`` (the key's, the bearer token's,
``anonymous``, or "" in a plaintext cluster), ``via`` (``management``, ``lookup`` or ``http``), ``action``
(the request's name), ``queue``, ``detail`` (the rule granted, the rules set...), ``result`` (``OK``,
``ACCEPTED`` when the answer waits for the cluster, or the refusal's code name) and ``comment``.

The leader keeps what it records in memory (at most :data:`MAX_PENDING`; beyond, the oldest are dropped and
counted) and writes it to ``/audit`` (an :class:`~roq.wire.documents.AuditDoc` of the latest :data:`MAX_ENTRIES`)
at most every :data:`FLUSH_S`: a flood of refused requests costs ZooKeeper one write a second, not one each.
Recording never fails a request: a write that fails is tried again at the next flush.
"""

from __future__ import annotations

import collections
import json
import logging
import time
from typing import Any, Callable

from roq.wire.control import Message
from roq.wire.documents import AuditDoc
from roq.errors import BadRequestError, Result, ZooKeeperError
from roq.zk import Create, Paths, SetData

__all__ = ["AuditTrail", "KeyRefusals", "entry", "action_entry", "MAX_ENTRIES", "MAX_PENDING", "FLUSH_S",
           "KEY_REFUSAL_EVERY_S"]

log = logging.getLogger("gcm")

MAX_ENTRIES = 1000  # entries kept in ZooKeeper (about 300 bytes each: well under a node's 1 MB)
MAX_PENDING = 1000  # entries waiting for a flush
FLUSH_S = 1.0
#: a key refused at the handshake goes into the trail at most this often (its client tries again every 0.1 s)
KEY_REFUSAL_EVERY_S = 60.0
#: keys whose last entry is remembered, at most
MAX_REFUSED_KEYS = 1024
_TEXT = 200  # characters of a detail or a comment kept


def _result(code: int | None) -> str:
    if code is None:
        return "ACCEPTED"
    try:
        return Result(code).name
    except ValueError:
        return str(code)


def entry(msg: Message, principal: str | None, via: str, code: int | None, comment: str, now: float) -> dict[str, Any]:
    """The audit entry of ``msg`` (``code``: its reply's RESULT, None while it waits for the cluster)."""
    fields = {k: v for k, v in vars(msg).items() if k != "QName"}
    return action_entry(type(msg).__name__, str(getattr(msg, "QName", "")), fields, principal, via, code, comment, now)


def action_entry(action: str, queue: str, fields: dict[str, Any], principal: str | None, via: str, code: int | None,
                 comment: str, now: float) -> dict[str, Any]:
    """The audit entry of ``action`` on ``queue`` ("" none) with ``fields`` (its detail), as :func:`entry`; for what
    the cluster refused without a request, such as a child's link its permissions refuse."""
    detail = json.dumps(fields, sort_keys=True, default=str)[:_TEXT] if fields else ""
    return {"time": now, "principal": principal or "", "via": via, "action": action, "queue": queue,
            "detail": detail, "result": _result(code), "comment": comment[:_TEXT]}


class AuditTrail:
    """The leader's audit trail (see the module).

    Args:
        session: the GCM's ZooKeeper session (None: kept in memory only, as in a test).
        paths: the cluster's paths.
        clock: monotonic time, for the flushes.
    """

    def __init__(self, session: Any, paths: Paths, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self.paths = paths
        self.clock = clock
        self.pending: collections.deque[dict[str, Any]] = collections.deque()
        self.dropped = 0
        self._next_flush = 0.0

    def record(self, item: dict[str, Any]) -> None:
        """Keep ``item`` for the next flush (the oldest waiting is dropped beyond :data:`MAX_PENDING`)."""
        if len(self.pending) >= MAX_PENDING:
            self.pending.popleft()
            self.dropped += 1
        self.pending.append(item)

    def flush(self, force: bool = False) -> bool:
        """Write what waits to ``/audit`` if :data:`FLUSH_S` has passed (or ``force``); True if written."""
        if not self.pending or self.session is None or (not force and self.clock() < self._next_flush):
            return False
        self._next_flush = self.clock() + FLUSH_S
        try:
            doc, version = self.session.read(self.paths.audit, AuditDoc.decode)
            entries = list(doc.entries) if doc is not None else []
            seq = int(entries[-1].get("seq", 0)) if entries and isinstance(entries[-1].get("seq"), int) else 0
            for i, item in enumerate(self.pending, 1):
                entries.append({**item, "seq": seq + i})
            data = AuditDoc(entries[-MAX_ENTRIES:]).encode()
            path = self.paths.audit
            self.session.commit([Create(path, data) if version < 0 else SetData(path, data, version)])
        except ZooKeeperError as exc:  # another leader wrote meanwhile, or ZooKeeper did not answer: next time
            log.warning("the audit trail could not be written (%s); %d entries wait", exc, len(self.pending))
            return False
        if self.dropped:
            log.warning("the audit trail dropped %d entries it could not write in time", self.dropped)
        self.pending.clear()
        return True

    def latest(self, limit: int) -> list[dict[str, Any]]:
        """The latest ``limit`` entries (1 to :data:`MAX_ENTRIES`), oldest first (those written, then those
        waiting).

        Raises:
            BadRequestError: ``limit`` out of range. ZooKeeperError: the trail could not be read.
        """
        if not 1 <= limit <= MAX_ENTRIES:
            raise BadRequestError(f"Limit must be between 1 and {MAX_ENTRIES}, got {limit}")
        doc, _ = self.session.read(self.paths.audit, AuditDoc.decode) if self.session is not None else (None, -1)
        written = list(doc.entries) if doc is not None else []
        return (written + [{**e, "seq": None} for e in self.pending])[-limit:]


class KeyRefusals:
    """Keys the GCM's CURVE refused at the handshake, into the audit trail: each key's first refusal, then at most
    every :data:`KEY_REFUSAL_EVERY_S` with how many came since (a client retries its handshake ten times a
    second). ``refused`` counts them all.

    Args:
        audit: the trail.
        clock: monotonic time; ``wall``: the entries' time.
    """

    def __init__(self, audit: AuditTrail, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.audit = audit
        self.refused = 0
        self._clock, self._wall = clock, wall
        self._last: collections.OrderedDict[str, tuple[float, int]] = collections.OrderedDict()  # key -> (when, since)

    def refuse(self, key: str, address: str, reason: str) -> None:
        """The key ``key`` (Z85) was refused from ``address`` for ``reason``."""
        self.refused += 1
        now = self._clock()
        when, since = self._last.pop(key, (float("-inf"), 0))
        if now - when < KEY_REFUSAL_EVERY_S:
            self._last[key] = (when, since + 1)
            return
        self._last[key] = (now, 0)
        while len(self._last) > MAX_REFUSED_KEYS:
            self._last.popitem(last=False)
        more = f" ({since} more since the last entry)" if since else ""
        self.audit.record(action_entry("Connect", "", {"key": key, "address": address}, None, "curve",
                                       Result.FORBIDDEN, f"refused at the CURVE handshake: {reason}{more}",
                                       self._wall()))
