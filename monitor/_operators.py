"""Operators' commands to the monitor: ping, status, and a forced relocation.

The status reply is the monitor's whole view (exchanges, publishers, subscribers, moves, rules, scaling,
counters, drops, recent events), a :class:`roq.wire.status.QueueStatus`, and always fits in
:data:`MAX_STATUS_BYTES` of BSON, whatever its tables hold: when it would not, the longest lists are cut
(the newest events are kept) and ``truncated`` says which, with how many were shown out of how many.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import bson

from monitor._events import EventLog
from monitor._moves import Mover
from monitor._rules import Rules
from monitor._topology import PublisherEntry, Topology
from roq.wire import control
from roq.wire.control import Reply
from roq.errors import BadRequestError, NotFoundError, UnavailableError
from roq.runtime import DropCounter
from roq.wire.shape import to_document
from roq.wire.status import JournalStatus, LatencyHistogram, LinkDemand, QueueStatus, ScalingStatus, Totals

__all__ = ["Operators", "fit", "MAX_STATUS_BYTES"]

MAX_STATUS_BYTES = 1_000_000  # the status reply's BSON stays under this (ZeroMQ peers take 1 MiB)
STATUS_EVENTS = 200  # recent events in the status reply
#: the lists of the status reply that are cut when it would be too long (the newest events are kept)
LISTS = ("exchanges", "publishers", "subscribers", "relocations", "events", "links")


class Operators:
    """Answers operators.

    Args:
        queue: the queue's name.
        pid: the monitor's process id (the status names it, e.g. for fault injection).
        topology, mover, rules, events: what the status shows and a forced move uses.
        drops: the shell's count of dropped input (shown in the status).
        scaling: the scaling state to show (placement, starting, retiring, asking_gcm).
        totals: the queue's traffic counted since the monitor started (records and bytes in and out).
        latency: its subscribers' latency histogram since the monitor started.
    """

    def __init__(self, queue: str, pid: int, topology: Topology, mover: Mover, rules: Rules, events: EventLog,
                 drops: DropCounter, scaling: Callable[[], ScalingStatus], *, totals: Mapping[str, int],
                 latency: Mapping[str, Any], journal: Callable[[float], JournalStatus],
                 links: Callable[[float], list[LinkDemand]] = lambda now: [], adverts: Callable[[], int] = lambda: 0) -> None:
        self.links = links
        self.adverts = adverts
        self.journal = journal
        self.totals = totals
        self.latency = latency
        self.queue = queue
        self.pid = pid
        self.topology = topology
        self.mover = mover
        self.rules = rules
        self.events = events
        self.drops = drops
        self.scaling = scaling

    def ping(self, ping: control.Ping, identity: bytes, now: float) -> Reply:
        return Reply(comment="pong", data={"queue": self.queue})

    def journal_where(self, where: control.JournalWhere, identity: bytes, now: float) -> Reply:
        return Reply(data=to_document(self.journal(now)))

    def status(self, status: control.Status, identity: bytes, now: float) -> Reply:
        return Reply(data=fit(to_document(self.describe(now)), MAX_STATUS_BYTES))

    def describe(self, now: float) -> QueueStatus:
        """The monitor's whole view (whatever its length: :meth:`status` cuts it to fit in a reply)."""
        exchanges, publishers, subscribers = self.topology.describe(now)
        latency = self.latency
        return QueueStatus(
            queue=self.queue,
            pid=self.pid,
            exchanges=exchanges,
            publishers=publishers,
            subscribers=subscribers,
            relocations_in_flight=len(self.mover.relocations),
            rules=dict(self.rules.values),
            scaling=self.scaling(),
            journal=self.journal(now),
            relocations=self.mover.describe(),
            counters={**self.events.counters, "dropped_messages": self.drops.total, "interest_adverts": self.adverts()},
            totals=Totals(**self.totals),
            latency_histogram=LatencyHistogram(bounds_ms=list(latency["bounds_ms"]), counts=list(latency["counts"]),
                                               sum_ms=float(latency["sum_ms"])),
            dropped=dict(self.drops.by_reason),
            refused=dict(self.topology.refused),
            events=self.events.recent(STATUS_EVENTS),
            links=self.links(now),
        )

    def force_relocate(self, force: control.ForceRelocate, identity: bytes, now: float) -> Reply:
        """Move a publisher now (the busiest one unless named) to an exchange (the least loaded unless named).

        Raises:
            NotFoundError: no such publisher or exchange. UnavailableError: it is moving already, or there is
                no other exchange. BadRequestError: it already sends through the target.
        """
        p = self._chosen(force.publisher)
        if p.relocation is not None:
            raise UnavailableError(f"publisher {p.id[:8]} is already moving")
        if force.target:
            target = self.topology.exchanges.get(force.target)
            if target is None or target.draining:
                raise NotFoundError(f"no live exchange {force.target[:64]}")
            if target.id == p.exchange:
                raise BadRequestError(f"publisher {p.id[:8]} already sends through {target.id}")
        else:
            target = self.mover.least_loaded({p.exchange} if p.exchange else set(), now)
            if target is None:
                raise UnavailableError("no other exchange to move to")
        rel = self.mover.start(p, target, "forced", "asked by an operator", now)
        return Reply(comment=f"moving {p.id[:8]} to {target.id}",
                     data={"relocation": rel.id, "publisher": p.id, "source": rel.source or "", "target": target.id})

    def _chosen(self, name: str) -> PublisherEntry:
        publishers = self.topology.publishers
        if name:
            p = publishers.get(name)
            if p is None:
                raise NotFoundError(f"no publisher {name[:64]}")
            return p
        busiest = [
            (ewma.value, pub)
            for x in self.topology.exchanges.values()
            for pub, ewma in x.rates.items()
            if (q := publishers.get(pub)) is not None and q.exchange == x.id and q.relocation is None
        ]
        if busiest:
            return publishers[max(busiest)[1]]
        idle = next((q for q in publishers.values() if q.relocation is None and q.exchange in self.topology.exchanges),
                    None)
        if idle is None:
            raise NotFoundError("no publisher can be moved now")
        return idle


def _size(value: Any) -> int | None:
    """Bytes ``value`` takes in a BSON document (None: it cannot be encoded)."""
    try:
        return len(bson.encode({"v": value}))  # a few bytes more than in a list: on the safe side
    except Exception:  # bson's errors, an integer beyond 64 bits...
        return None


def fit(data: dict[str, Any], limit: int) -> dict[str, Any]:
    """``data``, a status's document, with its :data:`LISTS` cut so that it encodes in at most ``limit`` bytes
    of BSON.

    The room left by everything else is shared fairly: the shortest lists are kept whole, the others get
    equal shares. Cut lists are named in ``truncated`` (``{"shown": n, "total": m}``); events keep their
    newest. Items that cannot be encoded are left out; anything else that cannot be is left as it is (the reply
    then fails to encode, and the caller gets FAIL saying why: a status without it would not be one).
    """
    whole = _size(data)
    if whole is not None and whole <= limit:
        return data
    out = {k: v for k, v in data.items() if k not in LISTS}
    truncated: dict[str, Any] = {}
    scaling = out.get("scaling")
    if isinstance(scaling, dict) and (_size(scaling) or limit) > limit // 10:
        out["scaling"] = {**scaling, "placement": {}}
        truncated["placement"] = {"shown": 0, "total": len(scaling.get("placement", {}))}
    room = limit - (_size(out) or 0) - 1024  # the lists' keys and the truncated note
    lists = {k: list(data[k]) for k in LISTS if isinstance(data.get(k), list)}
    for k in ("events",):  # the newest first, so that a cut keeps them
        if k in lists:
            lists[k].reverse()
    sizes = {k: [_size(item) for item in items] for k, items in lists.items()}
    order = sorted(lists, key=lambda k: sum(n or 0 for n in sizes[k]))
    for i, key in enumerate(order):
        share = max(0, room) // (len(order) - i)
        kept, used = [], 0
        for item, n in zip(lists[key], sizes[key]):
            if n is None:
                continue
            if used + n > share:
                break
            kept.append(item)
            used += n
        room -= used
        if len(kept) < len(lists[key]):
            truncated[key] = {"shown": len(kept), "total": len(lists[key])}
        out[key] = kept[::-1] if key == "events" else kept
    return {**{k: out[k] for k in data if k in out}, "truncated": truncated}  # in the order of data
