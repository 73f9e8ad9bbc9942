"""A monitor's status, the reply to ``Status`` (also the ``Monitor`` of the GCM's ``QueueStats``): its one
definition, and how it is read.

The monitor builds a :class:`QueueStatus` and sends its document (:func:`roq.wire.shape.to_document`), its longest
lists cut when it would not fit in a reply (``truncated`` says which). Whoever receives one reads it with
:func:`decode`, the one way in: every field is checked (presence, type, range) and a malformed status is a
:class:`~roq.errors.ProtocolError` naming the field. Then :func:`traffic` and :func:`latency` sum a queue's
traffic and its subscribers' latency the one way the HTTP API, the metrics, the live feed and ``roq status``
all show them.

Fields the monitor always writes are required. Optional ones (:func:`roq.wire.shape.optional`) are None while the
monitor has nothing to say: a subscriber's KPIs before its first report, the journal's figures before its
first heartbeat, ``truncated`` when nothing was cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from roq.wire import shape
from roq.errors import ProtocolError
from roq.wire.shape import optional

__all__ = [
    "QueueStatus",
    "ExchangeStatus",
    "PublisherStatus",
    "SubscriberStatus",
    "RelocationStatus",
    "LinkDemand",
    "ScalingStatus",
    "JournalStatus",
    "ReplicaStatus",
    "LatencyHistogram",
    "Totals",
    "Shown",
    "Event",
    "decode",
    "decode_journal",
    "of_stats",
    "RATES",
    "rate",
    "traffic",
    "latency",
    "live_subscribers",
]


@dataclass(frozen=True)
class Totals:
    """Traffic counted since the monitor started (a queue's) or since an exchange joined (an exchange's)."""

    records_in: int
    bytes_in: int
    records_out: int
    bytes_out: int


@dataclass(frozen=True)
class ExchangeStatus:
    """An exchange as its monitor last heard of it: loads smoothed (records and bytes per second, in and out)."""

    id: str
    frontend: str
    backend: str
    pid: int
    draining: bool
    records_per_s: float
    bytes_per_s: float
    records_out_per_s: float
    bytes_out_per_s: float
    totals: Totals
    cpu_percent: float
    rss_bytes: int
    busy: float  # the share of its time its loop works (0..1), as last reported
    mark_records_per_s: float  # its own mark (the queue's, or less when it saturates first)
    publisher_pressure: float  # its settled publishers' mean pressure (0..1)
    dropped: int
    publishers: int  # publishers sending through it
    silent_s: float  # since the monitor last heard of it


@dataclass(frozen=True)
class PublisherStatus:
    id: str
    exchange: str  # where it sends ("" none known)
    relocating: bool
    records_per_s: float


@dataclass(frozen=True)
class SubscriberStatus:
    """A subscriber, with its KPIs once it reported some: records/s delivered, its latency's median and 99th
    percentile (ms, -1 when it received nothing) over its last KPI period, and its gaps, records lost in them
    and duplicates since it started."""

    id: str
    prefix: bytes  # at most 1 KiB of it
    confirmed: list[str]  # the exchanges it hears
    live: bool
    records_per_s: float | None = optional()
    latency_p50_ms: float | None = optional()
    latency_p99_ms: float | None = optional()
    gaps: int | None = optional()
    lost: int | None = optional()
    duplicates: int | None = optional()


@dataclass(frozen=True)
class LinkDemand:
    """A link that touches the queue (see :mod:`monitor._demand`): its side, what it wants of the queue, what the
    monitor last told it the queue wants (prefixes, shown as text), seconds since it said so, which way it
    carries records on a tree's edge (up, down, "" outside a tree) and whether it reads the queue (else it
    carries records into it)."""

    side: str
    wants: list[str]
    told: list[str]
    heard_s: float
    way: str = ""
    reads: bool = False


@dataclass(frozen=True)
class RelocationStatus:
    """A move in flight: ``phase`` preparing (``waiting`` for that many subscribers' Ready) or moving."""

    id: int
    publisher: str
    source: str  # "" when the publisher had none
    target: str
    reason: str  # rule, forced, drain, backlog, failover
    phase: str
    waiting: int


@dataclass(frozen=True)
class ScalingStatus:
    placement: dict[str, str]  # exchange slot -> host, as the GCM placed them
    starting: list[str]  # placed slots not heard of yet
    retiring: str  # the exchange drained to scale in ("" none)
    asking_gcm: bool


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica of a replicated journal: its name (its host), role, the epoch it promised, where its log ends,
    how far behind the leader's log it is as the leader last counted it (``lag``, in offsets: records, with the
    epoch entries), whether it holds everything committed (``in_sync``), and whether it is a ``learner`` (new in
    the set in place of a lost one: it votes once it holds what its leader committed)."""

    replica: str
    role: str
    pid: int
    epoch: int
    end: int
    intake: str
    alive: bool
    silent_s: float
    lag: int
    in_sync: bool
    learner: bool = False


@dataclass(frozen=True)
class JournalStatus:
    """The queue's durability and its journal (``journal`` "": none heard of); the journal's figures are those of
    its last heartbeat, there once it was heard of."""

    durability: str
    journal: str
    pid: int | None = optional()
    intake: str | None = optional()
    reads: str | None = optional()
    silent_s: float | None = optional()
    alive: bool | None = optional()
    policy: str | None = optional()
    permissions: str | None = optional()
    first_offset: int | None = optional()
    next_offset: int | None = optional()
    size_bytes: int | None = optional()
    segments: int | None = optional()
    unsynced_bytes: int | None = optional()
    records: int | None = optional()
    duplicates: int | None = optional()
    skipped: int | None = optional()
    syncs: int | None = optional()
    sync_ms: float | None = optional()
    sync_max_ms: float | None = optional()
    write_failures: int | None = optional()
    error: str | None = optional()
    lag_bytes: int | None = optional()  # what the exchanges sent it that it did not acknowledge yet
    replicas: list[ReplicaStatus] | None = optional()  # a replicated journal's (the figures above: its leader's)
    elections: int | None = optional()  # elections this monitor started


@dataclass(frozen=True)
class LatencyHistogram:
    """The subscribers' batches counted per latency bound since the monitor started (one count per bound, then
    one above the last), and the sum of their latencies."""

    bounds_ms: list[float]
    counts: list[int]
    sum_ms: float

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.bounds_ms) + 1:
            raise ProtocolError(f"a latency histogram of {len(self.bounds_ms)} bounds has {len(self.counts)} counts, "
                                f"not {len(self.bounds_ms) + 1}")


@dataclass(frozen=True)
class Shown:
    """How much of a list a cut status shows."""

    shown: int
    total: int


@dataclass(frozen=True)
class Event:
    """What every event of a monitor's log has; each kind adds fields of its own (``exchange``, ``publisher``,
    ``took_s``...), so an event stays a document, checked against this shape."""

    seq: int
    time: float
    kind: str
    text: str


@dataclass(frozen=True)
class QueueStatus:
    """A monitor's whole view of its queue."""

    queue: str
    pid: int  # the monitor's
    exchanges: list[ExchangeStatus]
    publishers: list[PublisherStatus]
    subscribers: list[SubscriberStatus]
    relocations_in_flight: int
    rules: dict[str, Any]  # the rules in force (roq.rules)
    scaling: ScalingStatus
    journal: JournalStatus
    relocations: list[RelocationStatus]
    counters: dict[str, int]  # relocations, failovers, scale_outs..., relocations_by_<reason>, dropped_messages
    totals: Totals
    latency_histogram: LatencyHistogram
    dropped: dict[str, int]  # input dropped, by reason
    refused: dict[str, int]  # newcomers refused beyond a table's bound, by table
    events: list[dict[str, Any]]  # the recent ones, oldest first (each an :class:`Event` and its kind's fields)
    links: list[LinkDemand] | None = optional()  # the links that touch it (a monitor of before 2026-11-27: none)
    truncated: dict[str, Shown] | None = optional()  # the lists cut to fit in a reply ("placement": the scaling's)

    def count(self, counter: str) -> int:
        """The monitor's counter ``counter`` (0: it never counted one)."""
        return self.counters.get(counter, 0)

    def shown(self, part: str) -> Shown | None:
        """How much of the list ``part`` the status shows, if it was cut (None: whole)."""
        return self.truncated.get(part) if self.truncated is not None else None


def decode(doc: Any) -> QueueStatus:
    """The status in ``doc``, a monitor's reply data (or the ``Monitor`` of a stats reply), checked.

    Raises:
        ProtocolError: not a status: a field is missing, of the wrong type or out of range (named).
    """
    status: QueueStatus = shape.read(QueueStatus, doc, "status")
    for i, event in enumerate(status.events):
        shape.read(Event, event, f"status.events[{i}]")
    return status


def decode_journal(doc: Any) -> JournalStatus:
    """The journal's status in ``doc`` (a monitor's answer to :class:`~roq.wire.control.JournalWhere`), checked.

    Raises:
        ProtocolError: a field is missing, of the wrong type or out of range (named).
    """
    journal: JournalStatus = shape.read(JournalStatus, doc, "journal")
    return journal


def of_stats(data: Mapping[str, Any]) -> QueueStatus | None:
    """The monitor's status in the data of a ``QueueStats`` reply (None: the GCM gave the topology alone).

    Raises:
        ProtocolError: its ``Monitor`` is not a status.
    """
    return decode(data["Monitor"]) if "Monitor" in data else None


# ---------------------------------------------------------------------- sums

#: the exchanges' rates :func:`rate` sums
RATES = ("records_per_s", "records_out_per_s", "bytes_per_s", "bytes_out_per_s")


def rate(status: QueueStatus | None, key: str) -> float:
    """The sum of the exchanges' rate ``key`` (one of :data:`RATES`), 0 without a status."""
    if key not in RATES:
        raise ValueError(f"{key!r} is not a rate of an exchange ({', '.join(RATES)})")
    return sum(getattr(x, key) for x in status.exchanges) if status is not None else 0


def live_subscribers(status: QueueStatus | None) -> list[SubscriberStatus]:
    return [s for s in status.subscribers if s.live] if status is not None else []


def traffic(status: QueueStatus | None) -> dict[str, Any]:
    """A queue's traffic from its monitor's status (zeros without one)."""
    return {
        "records_in_per_s": round(rate(status, "records_per_s"), 1),
        "records_out_per_s": round(rate(status, "records_out_per_s"), 1),
        "bytes_in_per_s": round(rate(status, "bytes_per_s"), 1),
        "bytes_out_per_s": round(rate(status, "bytes_out_per_s"), 1),
        "publishers": len(status.publishers) if status is not None else 0,
        "subscribers": len(live_subscribers(status)),
    }


def latency(status: QueueStatus | None) -> dict[str, float | None]:
    """The median of the live subscribers' p50 and the highest of their p99, ms, over their last KPI period
    (None where no subscriber received a record in it)."""
    live = live_subscribers(status)
    p50 = sorted(s.latency_p50_ms for s in live if s.latency_p50_ms is not None and s.latency_p50_ms >= 0)
    p99 = [s.latency_p99_ms for s in live if s.latency_p99_ms is not None and s.latency_p99_ms >= 0]
    return {"p50_median": p50[len(p50) // 2] if p50 else None, "p99_max": max(p99) if p99 else None}
