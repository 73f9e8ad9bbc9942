"""The GCM's answers that change nothing: look-up (2000), exists (2011), list queues (2012), list hosts
(2014), get rules (2007), get thresholds (2016) and events (2019).

Most are answered from the view, the leader's cache of ZooKeeper that every watch refreshes, so a flood of
reads costs ZooKeeper nothing. The thresholds' evidence and the events are documents the view does not keep
(large, or rewritten by monitors all the time): those two read them through ``read(path, decode)``, which
gives the document or None when the node is missing.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from gcm._events import MAX_LIMIT, merge_events
from gcm._view import View
from roq.wire import management as m
from roq.wire.control import Reply
from roq.wire.documents import REMOVING, RUNNING, EventsDoc, TuningDoc
from roq.errors import BadRequestError, UnavailableError
from roq.wire.shape import to_document
from roq.zk import EVENT_SOURCES

__all__ = ["lookup", "exists", "list_queues", "list_hosts", "get_rules", "get_thresholds", "get_events", "Read"]

D = TypeVar("D")
Read = Callable[[str, Callable[[bytes], Any]], Any]  # (path, decode) -> the document, None if no node


def lookup(view: View, msg: m.Lookup) -> Reply:
    """Where the queue's monitor is.

    Raises:
        BadRequestError, NotFoundError: no such queue. UnavailableError: it is not running, or has no
            monitor registered right now (retry).
    """
    q = view.queue(msg.QName)
    if q.state != RUNNING:
        raise UnavailableError(f"queue {q.name!r} is {q.state}", data={"State": q.state})
    if q.monitor is None:
        raise UnavailableError(f"queue {q.name!r} has no monitor running right now; retry", data={"State": q.state})
    return Reply(data={"Monitor": q.monitor.endpoint, "Host": q.host, "State": q.state})


def exists(view: View, msg: m.QueueExists) -> Reply:
    """Whether the queue exists (a queue being removed does not), and its state."""
    q = view.find(msg.QName)
    return Reply(data={"Exists": q is not None and q.state != REMOVING, "State": q.state if q is not None else ""})


def list_queues(view: View, msg: m.ListQueues) -> Reply:
    queues, _ = view.summaries()
    return Reply(data={"Queues": [q.document() for q in queues]})


def list_hosts(view: View, msg: m.ListHosts) -> Reply:
    _, hosts = view.summaries()
    return Reply(data={"Hosts": [h.document() for h in hosts]})


def get_rules(view: View, msg: m.GetRules) -> Reply:
    """The rules in force and those an operator set."""
    q = view.queue(msg.QName)
    return Reply(data={"Rules": dict(q.rules), "Explicit": dict(q.explicit_rules)})


def get_thresholds(view: View, msg: m.GetThresholds, read: Read) -> Reply:
    """The thresholds stored, and the evidence the last ones set with some came with (``{}`` if none)."""
    q = view.queue(msg.QName)
    tuning = read(view.paths.tuning(q.name), TuningDoc.decode)
    return Reply(data={"Thresholds": dict(q.thresholds), "Tuning": to_document(tuning) if tuning is not None else {}})


def get_events(view: View, msg: m.GetEvents, read: Read) -> Reply:
    """The queue's last ``Limit`` events of every source, oldest first, and its monitor's counters.

    Raises:
        BadRequestError: ``Limit`` is not between 1 and :data:`~gcm._events.MAX_LIMIT`; a bad name.
            NotFoundError: no such queue.
    """
    if not 1 <= msg.Limit <= MAX_LIMIT:
        raise BadRequestError(f"Limit must be between 1 and {MAX_LIMIT}, got {msg.Limit}")
    q = view.queue(msg.QName)
    documents: dict[str, EventsDoc | None] = {s: read(view.paths.events(q.name, s), EventsDoc.decode) for s in EVENT_SOURCES}
    monitor = documents.get("monitor")
    return Reply(data={"Events": merge_events(documents, msg.Limit),
                       "Counters": dict(monitor.counters) if monitor is not None else {}})
