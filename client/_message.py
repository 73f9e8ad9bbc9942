"""What a subscriber receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any


class Message(tuple):
    """One record: ``key``, ``payload``, ``publisher`` (hex id), ``seq`` and ``timestamp``.

    ``seq`` is the record's sequence number in its publisher's stream (from 1); ``timestamp`` is when
    the publisher sent the record's batch (seconds since the epoch). A tuple, so that subscribers can
    build many of them cheaply.
    """

    __slots__ = ()

    key: bytes = property(itemgetter(0))  # type: ignore[assignment]
    payload: bytes = property(itemgetter(1))  # type: ignore[assignment]
    publisher: str = property(itemgetter(2))  # type: ignore[assignment]
    seq: int = property(itemgetter(3))  # type: ignore[assignment]
    timestamp: float = property(itemgetter(4))  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Message(key={self[0]!r}, payload=<{len(self[1])} bytes>, publisher={self[2][:8]}, "
            f"seq={self[3]}, timestamp={self[4]:.6f})"
        )


@dataclass(frozen=True)
class SubscriberStats:
    """Counters of a subscriber since it started.

    Attributes:
        received: records delivered to the application.
        duplicates: records dropped because they had been delivered already (resent after a failover).
        gaps: discontinuities in a publisher's sequence (records that never arrived).
        lost: records known to be missing (exact without a prefix; a lower bound with one).
        hold_timeouts: times records of a moved publisher were released without the old exchange's marker.
        held: batches held right now.
        dropped: malformed frames dropped.
        exchanges: exchanges heard right now.
        latency: summary of recent batch latencies in seconds (count, mean, p50, p99, max).
    """

    received: int
    duplicates: int
    gaps: int
    lost: int
    hold_timeouts: int
    held: int
    dropped: int
    exchanges: int
    latency: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "duplicates": self.duplicates,
            "gaps": self.gaps,
            "lost": self.lost,
            "hold_timeouts": self.hold_timeouts,
            "held": self.held,
            "dropped": self.dropped,
            "exchanges": self.exchanges,
            "latency": dict(self.latency),
        }
