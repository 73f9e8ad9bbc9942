"""Subscriber <-> monitor: which exchanges a subscriber hears, its KPIs, and its part in a publisher's move.

A subscriber says hello to the queue's monitor with the exchanges it hears and its KPIs
(:class:`SubscriberHello`); the monitor sends it the queue's live exchanges and journal on every change
(:class:`Exchanges`). Before a publisher moves, the monitor tells every subscriber (:class:`Prepare`) and waits
until each hears the target exchange (:class:`Ready`), or for its timeout.
"""

from __future__ import annotations

import dataclasses

from roq.wire.control.codec import Message, message

__all__ = ["SubscriberHello", "LATENCY_BOUNDS_MS", "Exchanges", "ExchangeInfo", "Prepare", "Ready", "SubscriberBye"]


@message(30)
class SubscriberHello(Message):
    """Subscriber -> monitor at start and every heartbeat; ``confirmed`` lists the exchanges it hears.

    Its KPIs ride along: over the ``period`` seconds since its previous hello, the ``records`` it delivered
    and the p50 / p99 end-to-end latency of their batches (ms; -1 = no batch), and every batch's latency
    counted in ``latency_buckets`` (one count per bound of :data:`LATENCY_BOUNDS_MS`, a batch counted under the
    first bound it does not exceed, then one for the batches above the last) with their sum,
    ``latency_sum_ms``; since it started, the ``gaps`` it found, the records ``lost`` in them and the
    ``duplicates`` it dropped. ``period`` 0 = no KPIs.
    """

    subscriber: str
    prefix: bytes
    confirmed: list[str]
    period: float = 0.0
    records: int = 0
    latency_p50_ms: float = -1.0
    latency_p99_ms: float = -1.0
    gaps: int = 0
    lost: int = 0
    duplicates: int = 0
    latency_buckets: list[int] = dataclasses.field(default_factory=list)
    latency_sum_ms: float = 0.0
    journal: str = ""  # the queue's journal as it knows it (Exchanges.journal): a list comes when it differs


#: the upper bounds (ms) of the latency histogram subscribers count their batches in (SubscriberHello)
LATENCY_BOUNDS_MS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0)


@dataclasses.dataclass(frozen=True)
class ExchangeInfo:
    exchange: str
    backend: str


@message(32)
class Exchanges(Message):
    """Monitor -> subscriber: the live exchanges of the queue (sent on every change)."""

    exchanges: list[ExchangeInfo]
    lost: list[str]  # exchanges declared dead since the last list
    journal: str = ""  # where the queue's journal is read (its reads port); "" none


@message(33)
class Prepare(Message):
    """Monitor -> subscriber: ``publisher`` is about to move from ``source`` to ``target``."""

    relocation: int
    publisher: str
    source: str
    target: str
    target_backend: str


@message(34)
class Ready(Message):
    """Subscriber -> monitor: noted ``relocation`` and hears its target exchange."""

    subscriber: str
    relocation: int


@message(35)
class SubscriberBye(Message):
    subscriber: str
