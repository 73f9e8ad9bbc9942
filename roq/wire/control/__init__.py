"""Control messages: one frozen dataclass per message, encoded as a BSON document with an int32 ``CMD``.

One registry and one envelope (:mod:`roq.wire.control.codec`): every message class registers its command number
with :func:`message` where it is defined, and :func:`encode` and :func:`decode` are the only ways in and out.
Every server answers with one :class:`Reply` (:mod:`roq.wire.control.reply`). The messages live by conversation,
each module naming who talks to whom:

* :mod:`~roq.wire.control.publishers`: publisher <-> monitor, assignment, relocation and failover (1-3, 7, 10, 12)
* :mod:`~roq.wire.control.subscribers`: subscriber <-> monitor, the exchanges it hears and its KPIs (30-35)
* :mod:`~roq.wire.control.exchanges`: exchange <-> monitor, heartbeat, KPIs, journaling, shutdown (5, 6, 21, 1100,
  1106, 1109)
* :mod:`~roq.wire.control.journals`: journal <-> monitor, heartbeat and policy (8, 1110)
* :mod:`~roq.wire.control.permissions`: monitor -> its exchanges and journal, the permissions they enforce (1108)
* :mod:`~roq.wire.control.commands`: host manager -> its children, on their command pipe (1107)
* :mod:`~roq.wire.control.reads`: reader (or operator) <-> journal, on its reads port (50-54)
* :mod:`~roq.wire.control.operators`: anyone -> monitor, ping, status, a forced relocation (40-42)
* :mod:`~roq.wire.control.links`: a child cluster <-> its parent, on the link between them (60-65)
* :mod:`~roq.wire.control.reply`: any server -> its client, the answer to a request (9000)

The GCM's requests (from 2000) register in the same registry from :mod:`roq.wire.management`. Command numbers keep
those of the original system where the command existed there (1 relocate, 2 publisher init, 3 panic, 5
heartbeat, 6 exchange shut down, 7 publisher disconnect, 1100 shutdown).
"""

from __future__ import annotations

from roq.wire.control.codec import Message, decode, decode_document, encode, message, registered
from roq.wire.control.commands import Retarget
from roq.wire.control.exchanges import ExchangeBye, ExchangeKpi, Heartbeat, Journaling, KpiPeriod, PublisherRate, Shutdown
from roq.wire.control.journals import FENCED, FOLLOWER, LEADER, STANDBY, JournalHeartbeat, JournalPolicy, JournalRole
from roq.wire.control.links import (
    REFUSALS,
    ROLES,
    WAYS,
    ClusterName,
    Interest,
    LinkStats,
    LinkHello,
    LinkRefused,
    LinkWelcome,
    Names,
    NamesRefused,
    QueueInterest,
)
from roq.wire.control.operators import ForceRelocate, JournalWhere, Ping, Status
from roq.wire.control.permissions import AclRules
from roq.wire.control.publishers import Moved, NoExchange, Panic, PublisherBye, PublisherHello, Relocate
from roq.wire.control.reads import (DURABLE_NAME, MAX_FETCH_BYTES, MAX_PREFIXES, MAX_WAIT_MS, NO_CURSOR, Commit,
                                    Fetch, Fetched, Position, Promise, Verify)
from roq.wire.control.reply import REPLY, Reply, refusal
from roq.wire.control.subscribers import (
    LATENCY_BOUNDS_MS,
    ExchangeInfo,
    Exchanges,
    Prepare,
    Ready,
    SubscriberBye,
    SubscriberHello,
)
from roq.errors import Result

__all__ = [
    # the envelope and the registry
    "Message",
    "message",
    "encode",
    "decode",
    "decode_document",
    "registered",
    # the answer
    "Reply",
    "REPLY",
    "Result",
    "refusal",
    # publisher <-> monitor
    "PublisherHello",
    "Relocate",
    "Moved",
    "Panic",
    "PublisherBye",
    "NoExchange",
    # subscriber <-> monitor
    "SubscriberHello",
    "LATENCY_BOUNDS_MS",
    "Exchanges",
    "ExchangeInfo",
    "Prepare",
    "Ready",
    "SubscriberBye",
    # exchange <-> monitor
    "Heartbeat",
    "ExchangeBye",
    "ExchangeKpi",
    "PublisherRate",
    "KpiPeriod",
    "Journaling",
    "Shutdown",
    # journal <-> monitor
    "JournalHeartbeat",
    "JournalPolicy",
    "JournalRole",
    "LEADER",
    "FOLLOWER",
    "STANDBY",
    "FENCED",
    # monitor -> its exchanges and journal
    "AclRules",
    # host manager -> its children
    "Retarget",
    # reader <-> journal
    "Fetch",
    "Fetched",
    "NO_CURSOR",
    "MAX_PREFIXES",
    "MAX_FETCH_BYTES",
    "MAX_WAIT_MS",
    "Commit",
    "DURABLE_NAME",
    "Position",
    "Verify",
    "Promise",
    # anyone -> monitor
    "Ping",
    "Status",
    "ForceRelocate",
    "JournalWhere",
    # a child cluster <-> its parent
    "ROLES",
    "WAYS",
    "REFUSALS",
    "LinkHello",
    "LinkWelcome",
    "LinkRefused",
    "Interest",
    "LinkStats",
    "QueueInterest",
    "Names",
    "ClusterName",
    "NamesRefused",
]
