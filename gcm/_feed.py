"""The dashboard's live feed (``GET /api/v1/stream``): server-sent events of the cluster's state and its
topology events.

``state`` goes to every open feed after each census round (hosts; each queue with its traffic, exchanges,
publishers and subscribers' latency); ``event`` for each topology event as the census finds it in a monitor's
status (relocations, fail-overs, scaling, thresholds adopted), with the newest :data:`FIRST_EVENTS` sent to a
feed when it opens. A queue's events from before the GCM first heard its monitor are history: kept for new
feeds, not pushed. A feed's first ``state`` also carries each queue's ``history`` (records/s in and exchanges
after each of the last :data:`HISTORY_POINTS` census rounds), so that a page draws the last minutes at once.
Feeds are bounded in number (:data:`MAX_STREAMS`), and so is everything they are sent. Anyone may open one:
publishers and subscribers are named by their opaque labels (:class:`gcm._labels.Labels`), in the state and in
the events, never by their ids.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Callable, Protocol

from gcm._census import Census, Snapshot
from gcm._labels import Labels
from gcm._shapes import snake
from gcm._view import View
from roq.http import EventStream, HttpResponse
from roq.wire.status import QueueStatus, live_subscribers, rate, traffic

__all__ = ["LiveFeed", "MAX_STREAMS", "FIRST_EVENTS"]

log = logging.getLogger(__name__)

MAX_STREAMS = 64  # live feeds open at once
FIRST_EVENTS = 50  # events a new live feed is sent at once
MAX_RECENT = 500  # events kept for new feeds
MAX_FEED_PUBLISHERS = 200  # publishers (and subscribers) per queue in the live feed's state
HISTORY_POINTS = 300  # census rounds of history per queue sent to a feed when it opens (5 min at 1 s)
MAX_HISTORY_QUEUES = 1000  # queues with a history


class _Shell(Protocol):
    id: str
    view: View
    census: Census


class LiveFeed:
    """The open feeds and what they were sent.

    Args:
        shell: the GCM (its view and census).
        tree: the cluster's place in its tree of clusters, as the page shows it (None, or a call that gives None: the
            state has no ``federation``).
        clock: wall clock.
        labels: what names a publisher or a subscriber in what the feeds are sent.
    """

    def __init__(self, shell: _Shell, clock: Callable[[], float] = time.time, *, labels: Labels,
                 tree: Callable[[], dict[str, Any] | None] | None = None) -> None:
        self.shell = shell
        self.tree = tree  # the cluster's place in its tree of clusters, for the page (None: in no tree)
        self.clock = clock
        self.labels = labels
        self.streams: list[EventStream] = []
        self._seen: dict[str, int] = {}  # queue -> the last event seq the feeds were sent
        # queue -> (time, records/s in, exchanges) after each census round, the last HISTORY_POINTS: a page
        # that opens draws the last minutes at once
        self._history: dict[str, collections.deque[tuple[float, float, int]]] = {}
        self._recent: list[dict[str, Any]] = []  # the newest events of every queue, for a new feed

    def open(self) -> HttpResponse | EventStream:
        """Server-sent events: ``state`` now and after every census round (hosts, queues, their exchanges and
        publishers), ``event`` for each topology event as the census finds it (relocations, fail-overs,
        scaling, thresholds adopted), the newest :data:`FIRST_EVENTS` of them at once."""
        self.streams = [s for s in self.streams if not s.closed]
        if len(self.streams) >= MAX_STREAMS:
            return HttpResponse.error(503, f"{MAX_STREAMS} live feeds open already; retry").with_headers(
                ("retry-after", "5"))
        stream = EventStream()
        self.streams.append(stream)
        first = self.state()
        first["history"] = {name: {"t": [round(t, 3) for t, _, _ in h], "rin": [r for _, r, _ in h],
                                   "nx": [n for _, _, n in h]} for name, h in self._history.items()}
        stream.send(first, "state")
        for event in sorted(self._recent[-FIRST_EVENTS:], key=lambda e: e["time"]):
            stream.send(event, "event", _event_id(event))
        return stream

    def state(self) -> dict[str, Any]:
        """What the dashboard draws: hosts, and each queue with its traffic, exchanges and publishers."""
        _, hosts = self.shell.view.summaries()
        snaps = self.shell.census.snapshots
        queues = []
        for name, q in sorted(self.shell.view.queues.items()):
            status = snaps[name].status if name in snaps else None
            exchanges = [{"id": x.id, "records_per_s": x.records_per_s, "records_out_per_s": x.records_out_per_s,
                          "busy": x.busy, "publishers": x.publishers, "mark_records_per_s": x.mark_records_per_s,
                          "draining": x.draining, "host": _host(x.frontend)}
                         for x in (status.exchanges if status is not None else [])]
            publishers = [{"id": self.labels(p.id), "exchange": p.exchange, "records_per_s": p.records_per_s}
                          for p in (status.publishers[:MAX_FEED_PUBLISHERS] if status is not None else [])]
            latency = [{"id": self.labels(s.id), "p50": s.latency_p50_ms, "p99": s.latency_p99_ms,
                        "prefix": s.prefix.decode("utf-8", "backslashreplace")}
                       for s in live_subscribers(status)[:MAX_FEED_PUBLISHERS]]
            queues.append({"name": name, "state": q.state, "host": q.host, "placement": dict(q.placement),
                           "status_from": "monitor" if status is not None else "topology",
                           "status_age_s": round(max(0.0, self.clock() - snaps[name].at), 3) if name in snaps else None,
                           **traffic(status), "exchanges": exchanges, "publisher_list": publishers,
                           "latency": latency, "counters": dict(status.counters) if status is not None else {},
                           "journal": _journal(q.doc.journal_host, q.durable, status)})
        state = {"time": self.clock(), "leader": self.shell.id, "hosts": [snake(h.document()) for h in hosts],
                 "queues": queues}
        tree = self.tree() if self.tree is not None else None
        if tree is not None:
            state["federation"] = tree
        return state

    def _record(self) -> None:
        now, snaps = self.clock(), self.shell.census.snapshots
        for name in [n for n in self._history if n not in snaps]:
            del self._history[name]
        for name, snap in list(snaps.items())[:MAX_HISTORY_QUEUES]:
            h = self._history.get(name)
            if h is None:
                h = self._history[name] = collections.deque(maxlen=HISTORY_POINTS)
            h.append((now, round(rate(snap.status, "records_per_s"), 1), len(snap.status.exchanges)))

    def census_taken(self, snapshot: Snapshot) -> None:
        """A queue's new status: its events not seen yet go to every live feed."""
        events = snapshot.status.events  # each with its seq, time, kind and text (roq.wire.status.Event)
        last = self._seen.get(snapshot.queue)
        self._seen[snapshot.queue] = max((e["seq"] for e in events), default=last or 0)
        if last is None:  # the first status of this queue: its past events are history, kept for new feeds
            fresh = events[-FIRST_EVENTS:]
        else:
            fresh = [e for e in events if e["seq"] > last]
        for event in fresh:
            event = {**self.labels.event(event), "queue": snapshot.queue}
            self._recent.append(event)
            if last is not None:
                self._send(event, "event", _event_id(event))
        del self._recent[:-MAX_RECENT]
        for name in [n for n in self._seen if n not in self.shell.view.queues]:
            del self._seen[name]

    def tick(self) -> None:
        """After a census round: the history taken, the state to every live feed; feeds whose client left are
        forgotten."""
        self._record()
        self.streams = [s for s in self.streams if not s.closed]
        if self.streams:
            self._send(self.state(), "state")

    def _send(self, data: dict[str, Any], event: str, id: str = "") -> None:
        """Send to every live feed; one that fails is ended and forgotten, and the others still get theirs."""
        for stream in self.streams:
            try:
                stream.send(data, event, id)
            except Exception as exc:  # its connection broke in a way the server did not foresee
                log.warning("a live feed failed and is closed: %s: %s", type(exc).__name__, exc)
                stream.close()
        self.streams = [s for s in self.streams if not s.closed]


def _event_id(event: dict[str, Any]) -> str:
    """An event's id in the feed, unique across queues: ``queue:seq``."""
    return f"{event['queue']}:{event['seq']}"


def _host(endpoint: str) -> str:
    """The host of a ``tcp://host:port`` endpoint ("" if it is not one)."""
    if not endpoint.startswith("tcp://"):
        return ""
    return endpoint[len("tcp://"):].rsplit(":", 1)[0]


#: what the page shows of a durable queue's journal, from its monitor's status
JOURNAL_FIELDS = ("durability", "alive", "first_offset", "next_offset", "size_bytes", "unsynced_bytes", "lag_bytes",
                  "sync_ms", "sync_max_ms", "write_failures")


def _journal(host: str, durable: bool, status: QueueStatus | None) -> dict[str, Any] | None:
    """A durable queue's journal for the page (None: not durable; its figures None while none is heard of)."""
    if not durable:
        return None
    journal = status.journal if status is not None and status.journal.journal else None
    replicas = [{"replica": r.replica, "role": r.role, "epoch": r.epoch, "alive": r.alive, "lag": r.lag,
                 "in_sync": r.in_sync, "learner": r.learner} for r in (journal.replicas or [])] if journal is not None else []
    return {"host": host, "replicas": replicas,
            **{k: getattr(journal, k) if journal is not None else None for k in JOURNAL_FIELDS}}
