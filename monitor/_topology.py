"""What a monitor knows of its queue: exchanges, publishers, subscribers, moves in flight, events."""

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
    hot_since: float | None = None
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
    )

    def __init__(self, size: int = 1000) -> None:
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=size)
        self.counters = dict.fromkeys(self.COUNTERS, 0)
        self._seq = 0

    def add(self, kind: str, text: str, **fields: Any) -> dict[str, Any]:
        self._seq += 1
        event = {"seq": self._seq, "time": time.time(), "kind": kind, "text": text, **fields}
        self.events.append(event)
        return event

    def count(self, counter: str, n: int = 1) -> None:
        self.counters[counter] += n
