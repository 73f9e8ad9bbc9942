"""The one exception tree of RoQ-Py.

Every error a RoQ library raises derives from :class:`RoQError`; errors of the libraries underneath
(pyzmq, kazoo, bson, psutil) are mapped to these at the boundary where they happen, with the original kept
as ``__cause__``: kazoo's in :class:`roq.zk.Session`, everything a request handler raises in
:mod:`roq.server`.

Replies carry a :class:`Result` code. :func:`error_for` turns a refused reply into its exception, and a
server turns a raised :class:`ManagementError` into its reply: one registry, both ways.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "Result",
    "error_for",
    "RoQError",
    "ProtocolError",
    "UnknownCommandError",
    "ConfigError",
    "BrokerConnectionError",
    "NoExchangeError",
    "BrokerTimeoutError",
    "BufferFullError",
    "ClosedError",
    "JournalError",
    "CorruptJournalError",
    "ManagementError",
    "NotLeaderError",
    "NotFoundError",
    "BadRequestError",
    "ForbiddenError",
    "UnavailableError",
    "ConflictError",
    "ZooKeeperError",
    "NodeMissingError",
    "NodeExistsError",
    "VersionConflictError",
]


class Result(enum.IntEnum):
    """RESULT codes of replies. 0 is success."""

    OK = 0
    NOT_LEADER = 8
    FAIL = 1101
    BAD_REQUEST = 1102
    UNKNOWN_COMMAND = 1103
    NOT_FOUND = 1104
    UNAVAILABLE = 1105
    CONFLICT = 1106  # the request contradicts the object's state (a queue being removed)
    FORBIDDEN = 1107  # the sender's principal may not do this


class RoQError(Exception):
    """Root of every error raised by RoQ-Py."""


class ProtocolError(RoQError):
    """A frame or control message does not follow the wire protocol (wrong size, type, field...)."""


class UnknownCommandError(ProtocolError):
    """A well-formed control message carries a command number this process does not serve."""


class ConfigError(RoQError, ValueError):
    """A configuration value is missing, of the wrong type or out of range; the message names it."""


class BrokerConnectionError(RoQError):
    """A broker component (monitor, exchange) could not be reached or stopped answering."""


class NoExchangeError(BrokerConnectionError):
    """The queue has no live exchange to carry a publisher's traffic."""


class BrokerTimeoutError(RoQError):
    """An operation did not complete within its deadline. Nothing was discarded."""


class BufferFullError(RoQError):
    """The publisher's bounded retransmission buffer is full (``full_policy="raise"``, or the wait timed out)."""


class ClosedError(RoQError):
    """The object was used after ``close()``."""


class JournalError(RoQError):
    """A queue's journal cannot be used as asked: its directory is missing, not ours or full, a file of it
    does not read back as written. The message names the file and what to do."""


class CorruptJournalError(JournalError):
    """A journal file holds bytes that fail their checksum or layout where whole entries were expected (not a
    torn tail, which recovery cuts off): nothing past them is served."""


class ManagementError(RoQError):
    """A request was refused; ``code`` is the RESULT code of the reply, ``data`` its other fields.

    Raised by clients when a reply refuses, and by request handlers to refuse: the server that catches it
    answers with its code, its message as COMMENT and its data.

    Args:
        message: the COMMENT of the reply, or a description of the failure.
        code: the non-zero RESULT code (default: the class's own).
        data: further fields of the reply.
    """

    CODE = Result.FAIL

    def __init__(self, message: str, code: int | None = None, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = int(self.CODE if code is None else code)
        self.data = dict(data or {})


class NotLeaderError(ManagementError):
    """The GCM asked is a standby; ``leader`` names the active one ("" when none is elected)."""

    CODE = Result.NOT_LEADER

    @property
    def leader(self) -> str:
        return str(self.data.get("Leader", ""))


class NotFoundError(ManagementError):
    """The queue, host, publisher or exchange named in a request does not exist."""

    CODE = Result.NOT_FOUND


class BadRequestError(ManagementError):
    """The request was malformed or its values invalid (the comment says which)."""

    CODE = Result.BAD_REQUEST


class ForbiddenError(ManagementError):
    """The request's sender may not do it: its key's principal lacks the permission (the comment says which
    rule refused it), or the message is for the cluster's own processes."""

    CODE = Result.FORBIDDEN


class UnavailableError(ManagementError):
    """The cluster cannot do it now (no host with room, queue busy, not ready in time); retry later."""

    CODE = Result.UNAVAILABLE


class ConflictError(UnavailableError):
    """The request contradicts the state of what it names (a queue being removed, a stopped queue asked to
    scale); it may succeed once that state has changed. An :class:`UnavailableError`, for callers that retry."""

    CODE = Result.CONFLICT


class ZooKeeperError(UnavailableError):
    """ZooKeeper could not be reached, or refused an operation. Every request is idempotent: retry it."""

    def __init__(self, message: str, code: int | None = None, data: dict[str, Any] | None = None) -> None:
        super().__init__(message, code, {"Retry": True, **(data or {})})


class NodeMissingError(ZooKeeperError):
    """A znode that an operation needed does not exist (any more)."""


class NodeExistsError(ZooKeeperError):
    """A znode that an operation creates exists already."""


class VersionConflictError(ZooKeeperError):
    """A znode changed between the read a decision was based on and its write."""


_BY_CODE: dict[int, type[ManagementError]] = {
    Result.NOT_LEADER: NotLeaderError,
    Result.BAD_REQUEST: BadRequestError,
    Result.UNKNOWN_COMMAND: BadRequestError,
    Result.NOT_FOUND: NotFoundError,
    Result.UNAVAILABLE: UnavailableError,
    Result.CONFLICT: ConflictError,
    Result.FORBIDDEN: ForbiddenError,
}


def error_for(result: int, comment: str, data: dict[str, Any] | None = None) -> ManagementError:
    """The exception of a refused reply (``result`` != OK), of the class registered for its code."""
    cls = _BY_CODE.get(result, ManagementError)
    return cls(comment or f"request failed with RESULT {result}", result, data)
