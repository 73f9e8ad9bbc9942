"""What a subscriber receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count, repeat
from operator import itemgetter
from typing import Any, Iterator


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


class Batch:
    """Records of one publisher, in its order, as :meth:`client.Subscriber.recv_many` returns them.

    Attributes:
        key: the key every record of the batch shares.
        payloads: the records' payloads, in order (a list the application may keep).
        publisher: the publisher's id (hex).
        first_seq: the sequence number of ``payloads[0]``; the others follow one by one.
        timestamp: when the publisher sent the batch's first record (seconds since the epoch).
        offset: the offset of its first record in the queue's journal, when it was read from there (a replay, a
            durable subscriber); -1 when it came live.

    ``len(batch)`` is its number of records; iterating over it yields a :class:`Message` per record.
    """

    __slots__ = ("key", "payloads", "publisher", "first_seq", "timestamp", "offset")

    def __init__(self, key: bytes, payloads: list[bytes], publisher: str, first_seq: int, timestamp: float,
                 offset: int = -1) -> None:
        self.key = key
        self.payloads = payloads
        self.publisher = publisher
        self.first_seq = first_seq
        self.timestamp = timestamp
        self.offset = offset

    @property
    def last_seq(self) -> int:
        """The sequence number of the batch's last record."""
        return self.first_seq + len(self.payloads) - 1

    def __len__(self) -> int:
        return len(self.payloads)

    def __iter__(self) -> Iterator[Message]:
        return map(Message, zip(repeat(self.key), self.payloads, repeat(self.publisher), count(self.first_seq),
                                repeat(self.timestamp)))

    def split(self, n: int) -> tuple[Batch, Batch]:
        """The first ``n`` records and the rest, as two batches."""
        p = self.payloads
        after = self.offset + n if self.offset >= 0 else -1
        return (Batch(self.key, p[:n], self.publisher, self.first_seq, self.timestamp, self.offset),
                Batch(self.key, p[n:], self.publisher, self.first_seq + n, self.timestamp, after))

    def __repr__(self) -> str:
        return (f"Batch(key={self.key!r}, records={len(self.payloads)}, publisher={self.publisher[:8]}, "
                f"seqs={self.first_seq}..{self.last_seq}, timestamp={self.timestamp:.6f})")


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
        cut_off: times an exchange of a durable queue cut the subscriber off (it did not keep up); it then read
            what it missed from the journal.
        replaying: True while the subscriber reads the journal (it started before "latest", or it catches up
            after a cut) rather than the live stream.
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
    cut_off: int = 0
    replaying: bool = False
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
            "cut_off": self.cut_off,
            "replaying": self.replaying,
            "exchanges": self.exchanges,
            "latency": dict(self.latency),
        }
