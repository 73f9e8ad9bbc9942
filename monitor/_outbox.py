"""What the monitor's core decided should happen, waiting for the shell to carry it out.

The core (:class:`monitor.Core`) has no socket, no ZooKeeper session and no archive file. Its handlers put
what they decide into an :class:`Outbox`: messages for peers (by routing identity), topology events, KPI
archive records and requests to the GCM. The shell (:class:`monitor.Monitor`) takes everything out after
each input and each timer and applies it: it sends the messages on its ROUTER, records the events (event
log, archive, log line), appends the records to the archive and passes the requests to its
:class:`~monitor._cluster.ClusterLink`. Unit tests read the outbox instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from roq.wire.control import Message, Reply
from roq.kpi.records import Record

__all__ = ["Outbox", "Outgoing", "Event", "GcmRequest", "Answer"]

#: ``answer(reply, why, now)``: the GCM's reply, or None when none came (``why`` says why: no leader, the
#: leader changed, no answer in time); requests are idempotent, so the caller may simply ask again
Answer = Callable[["Reply | None", str, float], None]


@dataclasses.dataclass(frozen=True)
class Event:
    """A topology decision or observation: one log line, one entry of the event log, one archive record."""

    kind: str
    text: str
    fields: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class GcmRequest:
    """A request for the GCM leader; ``answer`` is called exactly once, with its reply or without one."""

    message: Message
    what: str  # names the request in log lines and in the reason of a missing answer
    answer: Answer


@dataclasses.dataclass
class Outgoing:
    """Everything an :class:`Outbox` held when it was taken."""

    sends: list[tuple[bytes, Message]] = dataclasses.field(default_factory=list)
    events: list[Event] = dataclasses.field(default_factory=list)
    records: list[Record] = dataclasses.field(default_factory=list)
    requests: list[GcmRequest] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.sends or self.events or self.records or self.requests)


class Outbox:
    """Collects the core's decisions until the shell :meth:`take` s them."""

    def __init__(self) -> None:
        self._out = Outgoing()

    def send(self, identity: bytes, msg: Message) -> None:
        """Send ``msg`` to the peer whose routing identity is ``identity``."""
        self._out.sends.append((identity, msg))

    def event(self, kind: str, text: str, **fields: Any) -> None:
        """Record a topology event (``fields`` are its numbers and names, JSON values)."""
        self._out.events.append(Event(kind, text, fields))

    def record(self, record: Record) -> None:
        """Append ``record`` to the KPI archive (the shell stamps its time)."""
        self._out.records.append(record)

    def ask(self, message: Message, what: str, answer: Answer) -> None:
        """Send ``message`` to the GCM leader; ``answer`` gets its reply (or None) later."""
        self._out.requests.append(GcmRequest(message, what, answer))

    def take(self) -> Outgoing:
        """Everything collected since the last call (the outbox is empty afterwards)."""
        out, self._out = self._out, Outgoing()
        return out

    def __bool__(self) -> bool:
        return bool(self._out)

    # views for tests and for the shell's own checks

    @property
    def sends(self) -> list[tuple[bytes, Message]]:
        return self._out.sends

    @property
    def events(self) -> list[Event]:
        return self._out.events

    @property
    def records(self) -> list[Record]:
        return self._out.records

    @property
    def requests(self) -> list[GcmRequest]:
        return self._out.requests
