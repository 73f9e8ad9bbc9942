"""What a monitor knows of its queue, and how it chooses among exchanges (pure: no sockets, no clock).

:class:`Topology` holds the exchanges, publishers and subscribers as the monitor last heard of them, and
answers the questions placement asks: which subscribers are live, which exchanges may take a publisher,
which of them is the least loaded. :class:`QueueView` is what the cluster (ZooKeeper) says of the queue.

**Bounds.** Every table is keyed by a name a peer chooses, so every table is bounded
(:data:`MAX_EXCHANGES`, :data:`MAX_PUBLISHERS`, :data:`MAX_SUBSCRIBERS`, :data:`MAX_RATES` per exchange;
moves are at most one per publisher); a newcomer beyond a bound is refused with UNAVAILABLE and counted
(:meth:`Topology.admit`). Names and endpoints are at most :data:`MAX_NAME` characters
(:func:`check_name`), and what a subscriber says it hears or subscribes to is kept only as far as the
monitor needs it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from monitor._rule import Ewma
from roq.security.acl import Rule
from roq.errors import ProtocolError, UnavailableError
from roq.rules import DEFAULT_RULES
from roq.wire.status import ExchangeStatus, PublisherStatus, SubscriberStatus, Totals

__all__ = [
    "TOTALS",
    "ExchangeEntry",
    "PublisherEntry",
    "SubscriberEntry",
    "Relocation",
    "QueueView",
    "Topology",
    "check_name",
    "MAX_EXCHANGES",
    "MAX_PUBLISHERS",
    "MAX_SUBSCRIBERS",
    "MAX_RATES",
    "MAX_NAME",
    "MAX_UNKNOWN_HEARD",
    "MAX_PREFIX",
]

MAX_EXCHANGES = 512  # a queue has at most 256 (max_exchanges), plus incarnations that overlap briefly
MAX_PUBLISHERS = 10_000
MAX_SUBSCRIBERS = 10_000
MAX_RATES = 10_000  # publishers' rates kept per exchange
MAX_NAME = 256  # characters of a peer's name or endpoint
MAX_UNKNOWN_HEARD = 16  # exchanges a subscriber hears that the monitor does not know yet, kept by name
MAX_PREFIX = 1024  # bytes of a subscriber's prefix kept (shown in the status and the archive)
#: the traffic counted since start, per exchange and for the queue (the status's ``totals``; metrics' counters)
TOTALS = ("records_in", "bytes_in", "records_out", "bytes_out")


def check_name(value: str, what: str) -> str:
    """``value`` if it can name a peer or an endpoint (1 to :data:`MAX_NAME` characters).

    Raises:
        ProtocolError: empty or too long (the peer gets BAD_REQUEST).
    """
    if not value or len(value) > MAX_NAME:
        raise ProtocolError(f"{what} must have 1 to {MAX_NAME} characters, got {len(value)}")
    return value


@dataclass
class ExchangeEntry:
    id: str
    frontend: str
    backend: str
    pid: int
    identity: bytes
    last_seen: float
    load: Ewma  # records/s in
    bytes_load: Ewma  # bytes/s in
    joined: float
    out_load: Ewma = field(default_factory=lambda: Ewma(0.5))  # records/s out (to every subscriber)
    out_bytes_load: Ewma = field(default_factory=lambda: Ewma(0.5))  # bytes/s out
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOTALS, 0))  # since it joined
    draining: bool = False
    hot_since: float | None = None  # the smoothed load is above the mark (since the raw load went over)
    over_since: float | None = None  # the raw load has been above the mark in every report since
    rates: dict[str, Ewma] = field(default_factory=dict)  # known publisher -> records/s through this exchange
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    busy: float = 0.0  # as last reported
    busy_load: Ewma = field(default_factory=lambda: Ewma(0.5))  # smoothed busy fraction
    mark: float = 0.0  # its own mark, records/s (0 until its first KPI: the queue's; see monitor._rule)
    pressure: float = 0.0  # its settled publishers' mean pressure (their batches wait for it), at its last KPI
    dropped: int = 0

    def describe(self, publishers: int, now: float) -> ExchangeStatus:
        """The exchange as the status shows it, with the ``publishers`` that send through it."""
        return ExchangeStatus(
            id=self.id,
            frontend=self.frontend,
            backend=self.backend,
            pid=self.pid,
            draining=self.draining,
            records_per_s=round(self.load.value, 1),
            bytes_per_s=round(self.bytes_load.value, 1),
            records_out_per_s=round(self.out_load.value, 1),
            bytes_out_per_s=round(self.out_bytes_load.value, 1),
            totals=Totals(**self.totals),
            cpu_percent=float(self.cpu_percent),
            rss_bytes=self.rss_bytes,
            busy=round(float(self.busy), 3),
            mark_records_per_s=round(self.mark, 1),
            publisher_pressure=round(self.pressure, 3),
            dropped=self.dropped,
            publishers=publishers,
            silent_s=round(now - self.last_seen, 3),
        )


@dataclass
class PublisherEntry:
    id: str
    identity: bytes
    last_seen: float
    exchange: str | None = None  # where it sends, as far as the monitor knows
    relocation: int | None = None  # move in flight
    epoch: int = 0
    moved_at: float = float("-inf")
    pressure: float = 0.0  # the fraction of its time its batches waited for its exchange, as last said (0..1)
    left: dict[str, float] = field(default_factory=dict)  # exchange -> when the rule moved it off there


@dataclass
class SubscriberEntry:
    id: str
    identity: bytes
    prefix: bytes  # at most MAX_PREFIX bytes of it
    last_seen: float
    confirmed: set[str] = field(default_factory=set)  # exchanges it hears (known ones, a few unknown)
    overflow: bool = False  # it hears more exchanges unknown to the monitor than are kept in ``confirmed``
    kpis: dict[str, Any] = field(default_factory=dict)  # its last KPIs (SubscriberStatus's: records/s, latency...)

    def hears(self, names: Iterable[str], known: Mapping[str, Any]) -> None:
        """Take the exchanges it says it hears: every one the monitor knows, up to
        :data:`MAX_UNKNOWN_HEARD` others (a restarted monitor has not heard from every exchange yet)."""
        confirmed: set[str] = set()
        unknown = 0
        for name in names:
            if name in known:
                confirmed.add(known[name].id)  # the table's own string, not another copy
            elif name not in confirmed:
                unknown += 1
                if unknown <= MAX_UNKNOWN_HEARD and len(name) <= MAX_NAME:
                    confirmed.add(name)
        self.confirmed = confirmed
        self.overflow = unknown > MAX_UNKNOWN_HEARD


@dataclass
class Relocation:
    """A move in flight: *preparing* (waiting for subscribers' Ready), then *moving* (Relocate sent)."""

    id: int
    publisher: str
    source: str | None
    target: str
    reason: str  # rule, forced, drain, backlog (its exchange is alive but does not acknowledge), failover
    started: float
    waiting: set[str]
    phase: str = "preparing"
    moving_since: float = 0.0  # since the Relocate, or since the publisher last said it is still moving
    detail: str = ""

    @property
    def resends(self) -> bool:
        """Whether the publisher must resend its window (the source is gone)."""
        return self.reason == "failover"


@dataclass(frozen=True)
class QueueView:
    """What ZooKeeper says of the queue: its state, its placement and its rules.

    Attributes:
        state: running, stopped, removing ("" = no queue node).
        placement: exchange slot -> host.
        rules: the rules in force (operator rules over tuner thresholds over defaults).
        thresholds: the thresholds as written (by the KPI tuner or an operator).
        explicit: the rules an operator set.
        acl: the cluster's permissions (None: no rule was ever set; () when they do not read: nothing allowed).
        replicas: a replicated journal's replica set (their hosts, each replica named by its host).
        learners: of those, the ones placed in place of a lost one that are not yet said to vote.
        version: the queue document's version (ZooKeeper's), which orders its replica sets.
    """

    state: str = ""
    placement: Mapping[str, str] = field(default_factory=dict)
    rules: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_RULES))
    thresholds: Mapping[str, Any] = field(default_factory=dict)
    explicit: Mapping[str, Any] = field(default_factory=dict)
    acl: tuple[Rule, ...] | None = None
    replicas: tuple[str, ...] = ()
    learners: tuple[str, ...] = ()
    version: int = -1


class Topology:
    """Exchanges, publishers and subscribers of one queue, and placement over them.

    Args:
        subscriber_timeout: a subscriber silent for longer is not live (not waited for, not counted).
    """

    LIMITS = {"exchanges": MAX_EXCHANGES, "publishers": MAX_PUBLISHERS, "subscribers": MAX_SUBSCRIBERS}

    def __init__(self, *, subscriber_timeout: float) -> None:
        self.subscriber_timeout = subscriber_timeout
        self.exchanges: dict[str, ExchangeEntry] = {}
        self.publishers: dict[str, PublisherEntry] = {}
        self.subscribers: dict[str, SubscriberEntry] = {}
        self.settle_until = 0.0  # a (re)started monitor waits this long for exchanges to report before failing over
        self.refused: dict[str, int] = dict.fromkeys(self.LIMITS, 0)  # newcomers refused, per table

    def admit(self, table: str, name: str) -> None:
        """Check that a newcomer ``name`` fits in ``table`` (exchanges, publishers or subscribers).

        Raises:
            UnavailableError: the table is full (counted in :attr:`refused`).
        """
        limit = self.LIMITS[table]
        if len(getattr(self, table)) >= limit:
            self.refused[table] += 1
            raise UnavailableError(f"the monitor already tracks {limit} {table}; {name[:64]!r} is refused")

    def settle(self, until: float) -> None:
        """A (re)started monitor: wait until ``until`` for exchanges to report before failing any over."""
        self.settle_until = until

    def settling(self, now: float) -> bool:
        """Whether the monitor is new: a publisher's exchange it has not heard of yet may still report."""
        return now < self.settle_until

    def live_subscribers(self, now: float) -> list[SubscriberEntry]:
        return [s for s in self.subscribers.values() if now - s.last_seen <= self.subscriber_timeout]

    def accepting(self, exclude: set[str], now: float) -> tuple[list[ExchangeEntry], set[str]]:
        """Exchanges that may take publishers, and the ids of those every live subscriber hears."""
        alive = [x for x in self.exchanges.values() if not x.draining and x.id not in exclude]
        heard = {x.id for x in alive}
        for s in self.live_subscribers(now):
            if not heard:
                break
            heard &= s.confirmed
        return alive, heard

    def publisher_counts(self) -> collections.Counter[str]:
        """Publishers on each exchange (by the exchange the monitor knows they send to)."""
        return collections.Counter(p.exchange for p in self.publishers.values() if p.exchange)

    def publisher_count(self, exchange: str) -> int:
        return sum(1 for p in self.publishers.values() if p.exchange == exchange)

    def least_loaded(self, exclude: set[str], now: float, high: float) -> ExchangeEntry | None:
        """The least loaded exchange that may take a publisher, preferring those every subscriber hears.

        While every candidate is cold (below a tenth of the high mark ``high``, e.g. at start, before KPIs),
        the one with the fewest publishers wins, as in the original.
        """
        alive, heard = self.accepting(exclude, now)
        candidates = [x for x in alive if x.id in heard] or alive
        if not candidates:
            return None
        if all(x.load.value < high / 10 for x in candidates):
            counts = self.publisher_counts()
            return min(candidates, key=lambda x: (counts[x.id], x.load.value, x.joined))
        return min(candidates, key=lambda x: x.load.value)

    def publisher_rate(self, p: PublisherEntry) -> float:
        """Smoothed records/s of ``p`` through the exchange it sends to (0 if unknown)."""
        x = self.exchanges.get(p.exchange) if p.exchange else None
        rate = x.rates.get(p.id) if x is not None else None
        return rate.value if rate is not None else 0.0

    def discount(self, late: float) -> None:
        """Move every peer's last sign of life ``late`` seconds forward (the monitor itself was not running)."""
        for peers in (self.exchanges, self.publishers, self.subscribers):
            for peer in peers.values():
                peer.last_seen += late

    def describe(self, now: float) -> tuple[list[ExchangeStatus], list[PublisherStatus], list[SubscriberStatus]]:
        """Exchanges, publishers and subscribers as the status reply shows them."""
        live = {s.id for s in self.live_subscribers(now)}
        counts = self.publisher_counts()
        return (
            [x.describe(counts[x.id], now) for x in self.exchanges.values()],
            [PublisherStatus(id=p.id, exchange=p.exchange or "", relocating=p.relocation is not None,
                             records_per_s=round(self.publisher_rate(p), 1))
             for p in self.publishers.values()],
            [SubscriberStatus(id=s.id, prefix=s.prefix, confirmed=sorted(s.confirmed), live=s.id in live, **s.kpis)
             for s in self.subscribers.values()],
        )
