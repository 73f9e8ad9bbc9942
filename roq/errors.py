"""The one exception tree of RoQ-Py.

Every error a RoQ library raises derives from :class:`RoQError`; errors of the libraries underneath
(pyzmq, bson, psutil) are mapped to these at the boundary where they happen, with the original kept as
``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "RoQError",
    "ProtocolError",
    "UnknownCommandError",
    "ConfigError",
    "BrokerConnectionError",
    "NoExchangeError",
    "BrokerTimeoutError",
    "BufferFullError",
    "ClosedError",
    "ManagementError",
    "NotLeaderError",
    "NotFoundError",
    "BadRequestError",
    "UnavailableError",
]


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


class ManagementError(RoQError):
    """A management request failed; ``code`` is the RESULT code of the reply.

    Args:
        message: the COMMENT of the reply, or a description of the failure.
        code: the non-zero RESULT code.
    """

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class NotLeaderError(ManagementError):
    """The GCM asked is a standby; ``leader`` names the active one ("" when none is elected)."""

    def __init__(self, message: str, code: int, leader: str = "") -> None:
        super().__init__(message, code)
        self.leader = leader


class NotFoundError(ManagementError):
    """The queue or host named in a management request does not exist."""


class BadRequestError(ManagementError):
    """The management request was malformed or its values invalid (the comment says which)."""


class UnavailableError(ManagementError):
    """The cluster cannot do it now (no host with room, queue busy, not ready in time); retry later."""
