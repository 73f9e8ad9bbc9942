"""A queue's topology events: the GCM's own decisions, and the merged log that GetEvents answers.

Each source (``roq.zk.EVENT_SOURCES``: the queue's monitor, the GCM) keeps its recent events in
``/queues/<q>/events/<source>`` as an :class:`~roq.wire.documents.EventsDoc` (at most ``MAX_EVENTS`` events,
oldest first, and the source's counters). An event is ``{"seq", "time" (wall clock), "kind", "text",
"queue", "origin", ...numbers and names}`` (``origin`` names the source that recorded it; a relocation's
``source`` is the exchange it left); ``text`` is a sentence an operator understands with its numbers.

Writing an event must never fail the decision it records: :meth:`EventLog.record` logs and gives up.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from gcm._outcome import Event
from roq.wire.documents import EventsDoc
from roq.errors import NodeExistsError, NodeMissingError, VersionConflictError, ZooKeeperError
from roq.zk import MAX_EVENTS, Paths, Session

__all__ = ["EventLog", "merge_events", "appended", "MAX_LIMIT", "SOURCE"]

log = logging.getLogger("gcm")

MAX_LIMIT = 1000  # most events one GetEvents returns
SOURCE = "gcm"
_ATTEMPTS = 3  # read-modify-write attempts when another writer got in between


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def merge_events(documents: Mapping[str, EventsDoc | None], limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` events of every source's document, ordered by (time, source, seq).

    Args:
        documents: source name -> its document (None: none yet).
        limit: how many to keep, the newest.

    Returns:
        Events oldest first; each names its ``origin``.
    """
    merged = []
    for source, document in documents.items():
        for event in document.events if document is not None else []:
            origin = event.get("origin")
            merged.append({**event, "origin": origin if type(origin) is str and origin else source})
    merged.sort(key=lambda e: (_number(e.get("time")), e["origin"], _number(e.get("seq"))))
    return merged[-limit:] if limit > 0 else []


def appended(document: EventsDoc | None, event: Event, now: float) -> tuple[EventsDoc, dict[str, Any]]:
    """``document`` (None: none yet) with ``event`` appended as the GCM's next one at wall-clock ``now``, the
    oldest dropped beyond ``MAX_EVENTS``; and the event as stored."""
    events = list(document.events) if document is not None else []
    seq = int(_number(events[-1].get("seq"))) + 1 if events else 1
    stored = {**event.fields, "seq": seq, "time": now, "kind": event.kind, "text": event.text, "queue": event.queue,
              "origin": SOURCE}
    counters = dict(document.counters) if document is not None else {}
    return EventsDoc(events=[*events, stored][-MAX_EVENTS:], counters=counters), stored


class EventLog:
    """Appends the GCM's events to the event documents of queues in ZooKeeper."""

    def __init__(self, session: Session, paths: Paths) -> None:
        self.session = session
        self.paths = paths

    def record(self, event: Event, now: float) -> dict[str, Any] | None:
        """Log ``event`` and append it to its queue's GCM events; the event as stored, or None if it was not."""
        log.info("queue %s: %s", event.queue, event.text)
        path = self.paths.events(event.queue, SOURCE)
        for _ in range(_ATTEMPTS):
            try:
                document, version = self.session.read(path, EventsDoc.decode)
                new, stored = appended(document, event, now)
                if version < 0:
                    self._create(event.queue, new.encode())
                else:  # a node holding no valid document is replaced
                    self.session.set(path, new.encode(), version=version)
                return stored
            except (VersionConflictError, NodeExistsError):
                continue  # someone wrote in between: read again
            except NodeMissingError:
                log.warning("queue %s: event %s not recorded: the queue is gone", event.queue, event.kind)
                return None
            except ZooKeeperError as exc:
                log.warning("queue %s: event %s not recorded (%s)", event.queue, event.kind, exc)
                return None
        log.warning("queue %s: event %s not recorded: the event log kept changing", event.queue, event.kind)
        return None

    def _create(self, queue: str, data: bytes) -> None:
        # never makepath: that would bring back the node of a queue just removed
        try:
            self.session.create(self.paths.events(queue))
        except NodeExistsError:
            pass
        self.session.create(self.paths.events(queue, SOURCE), data)
