"""What a monitor knows of its queue, and how it chooses among exchanges (pure: no sockets).

:class:`Topology` holds the exchanges, publishers and subscribers as the monitor last heard of them,
and answers the questions placement asks: which subscribers are live, which exchanges may take a
publisher, which of them is the least loaded.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Any

from monitor._rule import Ewma


@dataclass
class ExchangeEntry:
    id: str
    frontend: str
    backend: str
    pid: int
    identity: bytes
    last_seen: float
    load: Ewma  # records/s
    bytes_load: Ewma  # bytes/s
    joined: float
    draining: bool = False
    hot_since: float | None = None  # the smoothed load is above the mark (since the raw load went over)
    over_since: float | None = None  # the raw load has been above the mark in every report since
    rates: dict[str, Ewma] = field(default_factory=dict)  # publisher -> records/s through this exchange
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    busy: float = 0.0
    dropped: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "frontend": self.frontend,
            "backend": self.backend,
            "pid": self.pid,
            "draining": self.draining,
            "records_per_s": round(self.load.value, 1),
            "bytes_per_s": round(self.bytes_load.value, 1),
            "cpu_percent": self.cpu_percent,
            "rss_bytes": self.rss_bytes,
            "busy": round(self.busy, 3),
            "dropped": self.dropped,
        }


@dataclass
class PublisherEntry:
    id: str
    identity: bytes
    last_seen: float
    exchange: str | None = None  # where it sends, as far as the monitor knows
    relocation: int | None = None  # move in flight
    epoch: int = 0
    moved_at: float = float("-inf")
    left: dict[str, float] = field(default_factory=dict)  # exchange -> when the rule moved it off there


@dataclass
class SubscriberEntry:
    id: str
    identity: bytes
    prefix: bytes
    last_seen: float
    confirmed: set[str] = field(default_factory=set)


@dataclass
class Relocation:
    """A move in flight: *preparing* (waiting for subscribers' Ready), then *moving* (Relocate sent)."""

    id: int
    publisher: str
    source: str | None
    target: str
    reason: str  # rule, forced, drain, failover, panic
    started: float
    waiting: set[str]
    phase: str = "preparing"
    moving_since: float = 0.0
    detail: str = ""

    @property
    def resends(self) -> bool:
        """Whether the publisher must resend its window (the source is gone or not acknowledging)."""
        return self.reason in ("failover", "panic")


class EventLog:
    """Recent topology events (bounded) and the counters an operator watches."""

    COUNTERS = (
        "relocations",
        "relocations_failed",
        "failovers",
        "exchanges_lost",
        "limit_cases",
        "flaps",
        "scale_outs",
        "scale_ins",
    )

    def __init__(self, size: int = 1000) -> None:
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=size)
        self.counters = dict.fromkeys(self.COUNTERS, 0)
        self.changed = False  # since the owner last saved them
        self._seq = 0

    def restore(self, events: list[dict[str, Any]], counters: dict[str, int]) -> None:
        """Continue the events and counters a previous monitor of the queue left."""
        self.events.extend(events)
        self._seq = max([self._seq, *(e["seq"] for e in events if isinstance(e.get("seq"), int))])
        for key, value in counters.items():
            self.counters[key] = self.counters.get(key, 0) + value

    def add(self, kind: str, text: str, **fields: Any) -> dict[str, Any]:
        self._seq += 1
        event = {"seq": self._seq, "time": time.time(), "kind": kind, "text": text, **fields}
        self.events.append(event)
        self.changed = True
        return event

    def count(self, counter: str, n: int = 1) -> None:
        self.counters[counter] = self.counters.get(counter, 0) + n
        self.changed = True


class Topology:
    """Exchanges, publishers and subscribers of one queue, and placement over them.

    Args:
        high_records_per_s: the relocation mark; below a tenth of it an exchange counts as cold.
        subscriber_timeout: a subscriber silent for longer is not live (not waited for, not counted).
    """

    def __init__(self, *, high_records_per_s: float, subscriber_timeout: float) -> None:
        self.high = high_records_per_s
        self.subscriber_timeout = subscriber_timeout
        self.exchanges: dict[str, ExchangeEntry] = {}
        self.publishers: dict[str, PublisherEntry] = {}
        self.subscribers: dict[str, SubscriberEntry] = {}
        self.settle_until = 0.0  # a (re)started monitor waits this long for exchanges to report before failing over

    def settling(self, now: float) -> bool:
        """Whether the monitor is new: a publisher's exchange it has not heard of yet may still report."""
        return now < self.settle_until

    def live_subscribers(self, now: float) -> list[SubscriberEntry]:
        return [s for s in self.subscribers.values() if now - s.last_seen <= self.subscriber_timeout]

    def accepting(self, exclude: set[str], now: float) -> tuple[list[ExchangeEntry], set[str]]:
        """Exchanges that may take publishers, and the ids of those every live subscriber hears."""
        alive = [x for x in self.exchanges.values() if not x.draining and x.id not in exclude]
        subs = self.live_subscribers(now)
        heard = {x.id for x in alive if all(x.id in s.confirmed for s in subs)}
        return alive, heard

    def publisher_count(self, exchange: str) -> int:
        return sum(1 for p in self.publishers.values() if p.exchange == exchange)

    def least_loaded(self, exclude: set[str], now: float) -> ExchangeEntry | None:
        """The least loaded exchange that may take a publisher, preferring those every subscriber hears.

        While every candidate is cold (below a tenth of the high mark, e.g. at start, before KPIs),
        the one with the fewest publishers wins, as in the original.
        """
        alive, heard = self.accepting(exclude, now)
        candidates = [x for x in alive if x.id in heard] or alive
        if not candidates:
            return None
        if all(x.load.value < self.high / 10 for x in candidates):
            return min(candidates, key=lambda x: (self.publisher_count(x.id), x.load.value, x.joined))
        return min(candidates, key=lambda x: x.load.value)

    def publisher_rate(self, p: PublisherEntry) -> float:
        """Smoothed records/s of ``p`` through the exchange it sends to (0 if unknown)."""
        x = self.exchanges.get(p.exchange) if p.exchange else None
        rate = x.rates.get(p.id) if x is not None else None
        return rate.value if rate is not None else 0.0

    def describe(self, now: float) -> dict[str, Any]:
        """Exchanges, publishers and subscribers as the status reply shows them."""
        live = {s.id for s in self.live_subscribers(now)}
        return {
            "exchanges": [{**x.describe(), "publishers": self.publisher_count(x.id), "silent_s": round(now - x.last_seen, 3)}
                          for x in self.exchanges.values()],
            "publishers": [
                {
                    "id": p.id,
                    "exchange": p.exchange or "",
                    "relocating": p.relocation is not None,
                    "records_per_s": round(self.publisher_rate(p), 1),
                }
                for p in self.publishers.values()
            ],
            "subscribers": [
                {"id": s.id, "prefix": s.prefix, "confirmed": sorted(s.confirmed), "live": s.id in live}
                for s in self.subscribers.values()
            ],
        }
