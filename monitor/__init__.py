"""The monitor process: one per logical queue; places, moves and fails over publishers, scales the queue.

Run it with ``python -m monitor --address ADDR --port PORT``. :class:`Monitor` is the process (a socket
shell); :class:`Core` is every decision it takes, without sockets, ZooKeeper or a clock, and its rooms
are exported for tests and tools that drive it by hand.
"""

from __future__ import annotations

from monitor._balancer import Balancer
from monitor._core import Core, Handler
from monitor._elastic import Decision, QueueLoad, Scaler
from monitor._events import EventLog
from monitor._monitor import Monitor
from monitor._moves import Mover
from monitor._operators import MAX_STATUS_BYTES, fit
from monitor._outbox import Event, GcmRequest, Outbox, Outgoing
from monitor._durability import Durability
from monitor._permissions import NEEDS, Permissions
from monitor._rule import Ewma, ExchangeLoad, LimitCase, Move, evaluate, saturation_mark
from monitor._rules import Rules
from monitor._topology import (
    MAX_EXCHANGES,
    MAX_NAME,
    MAX_PREFIX,
    MAX_PUBLISHERS,
    MAX_RATES,
    MAX_SUBSCRIBERS,
    ExchangeEntry,
    PublisherEntry,
    QueueView,
    Relocation,
    SubscriberEntry,
    Topology,
)

__all__ = [
    # the process
    "Monitor",
    # the core and what it decides
    "Core",
    "Handler",
    "Outbox",
    "Outgoing",
    "Event",
    "GcmRequest",
    "EventLog",
    "QueueView",
    "Rules",
    "Permissions",
    "Durability",
    "NEEDS",
    # what it knows, and its bounds
    "Topology",
    "ExchangeEntry",
    "PublisherEntry",
    "SubscriberEntry",
    "Relocation",
    "MAX_EXCHANGES",
    "MAX_PUBLISHERS",
    "MAX_SUBSCRIBERS",
    "MAX_RATES",
    "MAX_NAME",
    "MAX_PREFIX",
    "MAX_STATUS_BYTES",
    "fit",
    # moves and the rules
    "Mover",
    "Balancer",
    "Ewma",
    "ExchangeLoad",
    "LimitCase",
    "Move",
    "evaluate",
    "saturation_mark",
    "Scaler",
    "QueueLoad",
    "Decision",
]
