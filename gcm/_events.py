"""A queue's topology events: the GCM's own decisions, and the merged log that GetEvents answers.

Each source (``roq.zk.EVENT_SOURCES``: the queue's monitor, the GCM) keeps its recent events in
``/queues/<q>/events/<source>`` as ``{"events": [oldest first, at most MAX_EVENTS], "counters": {...}}``.
An event is ``{"seq", "time" (wall clock), "kind", "text", "queue", "origin", ...numbers and names}``
(``origin`` names the source that recorded it; a relocation's ``source`` is the exchange it left);
``text`` is a sentence an operator understands with its numbers.

Writing an event must never fail the decision it records: :meth:`EventLog.record` logs and gives up.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from roq.zk import EVENT_SOURCES, MAX_EVENTS, Paths, dumps, loads

__all__ = ["EventLog", "merge_events", "MAX_LIMIT"]

log = logging.getLogger("gcm")

MAX_LIMIT = 1000  # most events one GetEvents returns
_SOURCE = "gcm"
_ATTEMPTS = 3  # read-modify-write attempts when another writer got in between


def _number(value: Any, default: float = 0.0) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def merge_events(documents: Mapping[str, Any], limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` events of every source's document, ordered by (time, source, seq).

    Args:
        documents: source name -> its decoded document (anything else, e.g. None, counts as empty).
        limit: how many to keep, the newest.

    Returns:
        Events oldest first; each names its ``origin``. Entries that are not documents are skipped.
    """
    merged = []
    for source, document in documents.items():
        events = document.get("events") if isinstance(document, dict) else None
        for event in events if isinstance(events, list) else []:
            if isinstance(event, dict):
                merged.append({**event, "origin": str(event.get("origin") or source)})
    merged.sort(key=lambda e: (_number(e.get("time")), e["origin"], _number(e.get("seq"))))
    return merged[-limit:] if limit > 0 else []


class EventLog:
    """Read and append the event documents of queues in ZooKeeper."""

    def __init__(self, zk: KazooClient, paths: Paths) -> None:
        self.zk = zk
        self.paths = paths

    def record(self, queue: str, kind: str, text: str, **fields: Any) -> dict[str, Any] | None:
        """Log ``text`` and append it as a GCM event of ``queue``; the event, or None if it was not stored."""
        log.info("queue %s: %s", queue, text)
        path = self.paths.events(queue, _SOURCE)
        for _ in range(_ATTEMPTS):
            try:
                try:
                    data, stat = self.zk.get(path)
                    document, version = loads(data), stat.version
                except NoNodeError:
                    document, version = {}, -1
                events = document.get("events") if isinstance(document, dict) else None
                events = [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []
                counters = document.get("counters") if isinstance(document, dict) else None
                seq = int(_number(events[-1].get("seq"))) + 1 if events else 1
                event = {**fields, "seq": seq, "time": time.time(), "kind": kind, "text": text, "queue": queue,
                         "origin": _SOURCE}
                new = dumps({"events": [*events, event][-MAX_EVENTS:], "counters": counters if isinstance(counters, dict) else {}})
                if version < 0:
                    self._create(queue, new)
                else:
                    self.zk.set(path, new, version=version)
                return event
            except (BadVersionError, NodeExistsError):
                continue  # someone wrote in between: read again
            except NoNodeError:
                log.warning("queue %s: event %s not recorded: the queue is gone", queue, kind)
                return None
            except KazooException as exc:
                log.warning("queue %s: event %s not recorded (%s)", queue, kind, type(exc).__name__)
                return None
        log.warning("queue %s: event %s not recorded: the event log kept changing", queue, kind)
        return None

    def _create(self, queue: str, data: bytes) -> None:
        # never makepath: that would bring back the node of a queue just removed
        try:
            self.zk.create(self.paths.events(queue), b"")
        except NodeExistsError:
            pass
        self.zk.create(self.paths.events(queue, _SOURCE), data)

    def read(self, queue: str, limit: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """(the last ``limit`` events of every source, oldest first; the monitor's counters).

        Raises:
            KazooException: ZooKeeper could not be read.
        """
        documents = {}
        for source in EVENT_SOURCES:
            try:
                documents[source] = loads(self.zk.get(self.paths.events(queue, source))[0])
            except NoNodeError:
                documents[source] = None
        monitor = documents.get("monitor")
        counters = monitor.get("counters") if isinstance(monitor, dict) else None
        return merge_events(documents, limit), counters if isinstance(counters, dict) else {}
