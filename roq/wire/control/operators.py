"""Anyone -> monitor: the questions and the one order a monitor takes from outside its queue's processes.

Each is answered with a :class:`~roq.wire.control.Reply`. The GCM's management requests are :mod:`roq.wire.management`.
"""

from __future__ import annotations

from roq.wire.control.codec import Message, message

__all__ = ["Ping", "Status", "ForceRelocate", "JournalWhere"]


@message(42)
class Ping(Message):
    """Anyone -> monitor: are you there? Answered with a :class:`~roq.wire.control.Reply`."""


@message(40)
class Status(Message):
    """Anyone -> monitor: the queue's state, counters and recent events, in a :class:`~roq.wire.control.Reply`."""


@message(41)
class ForceRelocate(Message):
    """Operator -> monitor: move a publisher now ("" = the busiest one; target "" = the least loaded)."""

    publisher: str = ""
    target: str = ""


@message(43)
class JournalWhere(Message):
    """Reader -> monitor: where the queue's journal is read, for a reader of the keys under ``prefix`` (the
    permission to subscribe to them is enough). Answered with the journal's
    :class:`~roq.wire.status.JournalStatus` as the reply's data."""

    prefix: bytes = b""
