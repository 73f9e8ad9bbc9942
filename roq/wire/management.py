"""The GCM's BSON protocol: management requests, look-ups, replies and the configuration broadcast.

A request is one BSON document with an int32 ``CMD`` and the original system's argument names (``QName``,
``Host``); it is decoded and checked by :func:`roq.wire.control.decode` like every control message. The answer is
a :class:`roq.wire.control.Reply` like every server's: one flat BSON document ``{CMD: 9000, REQUEST, RESULT: int32,
COMMENT: str, ...data}``; RESULT 0 is success, any other value is a :class:`~roq.errors.Result` code and
COMMENT says why in words.

Command numbers keep the original's where the command existed there: 2000 look-up, 2001 remove, 2002 stop,
2003 create on a host, 2004 create exchange, 2005 start, 2006/2007 set/get rules, 2010 create on the host
with most headroom, 2011 exists. New ones: 2012 list queues, 2013 queue stats, 2014 list hosts, 2015/2016
set/get thresholds, 2017 scale out, 2018 remove an exchange, 2019 the queue's topology events, 2020-2022 the
permissions, 2023 the audit trail, 2024 the cluster's place in its tree, 2025 replace a journal replica, 2026 admit one.

The broadcast (PUB) is three frames, as in the original: ``{CMD: 1500}``, ``{Queues: [...]}``,
``{Hosts: [...]}``. What the GCM says of a queue and of a host, in its replies and in the broadcast, is one
shape each (:class:`QueueSummary` with its :class:`ExchangeSummary` list, :class:`HostSummary`), made from
the znodes' documents in one place (their ``of`` constructors).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, TypeVar

import bson
from bson.errors import BSONError

from roq.wire import shape
from roq.wire.control import Message, message
from roq.wire.documents import RUNNING, ExchangeDoc, HostDoc, MonitorDoc, QueueDoc
from roq.errors import ProtocolError

__all__ = [
    "BROADCAST",
    "GetAcl",
    "Grant",
    "Revoke",
    "GetAudit",
    "FederationStatus",
    "ReplaceReplica",
    "AdmitReplica",
    "MAX_REQUEST_BYTES",
    "Lookup",
    "RemoveQueue",
    "StopQueue",
    "CreateQueue",
    "CreateExchange",
    "StartQueue",
    "SetRules",
    "GetRules",
    "CreateQueueAnywhere",
    "QueueExists",
    "ListQueues",
    "QueueStats",
    "ListHosts",
    "SetThresholds",
    "GetThresholds",
    "ScaleOut",
    "RemoveExchange",
    "GetEvents",
    "ExchangeSummary",
    "QueueSummary",
    "HostSummary",
    "broadcast_frames",
    "parse_broadcast",
]

BROADCAST = 1500
MAX_REQUEST_BYTES = 1 << 20  # larger requests are answered BAD_REQUEST without being decoded


@message(2000)
class Lookup(Message):
    """Client -> GCM look-up port: where is the monitor of ``QName``? With ``Cluster``, the queue of that cluster
    of the tree: the answer names this cluster's queue of that name, and ``To`` the cluster its records go to
    ("" when it is this one)."""

    QName: str
    Cluster: str = ""


@message(2001)
class RemoveQueue(Message):
    QName: str


@message(2002)
class StopQueue(Message):
    """Stop the queue's processes; its definition and rules stay (start brings it back)."""

    QName: str


@message(2003)
class CreateQueue(Message):
    """Create ``QName`` with its monitor and ``Exchanges`` exchanges on ``Host``."""

    QName: str
    Host: str
    Exchanges: int = 1


@message(2004)
class CreateExchange(Message):
    """Add one exchange to ``QName`` on ``Host`` ("" = the host with most headroom)."""

    QName: str
    Host: str = ""


@message(2005)
class StartQueue(Message):
    QName: str


@message(2006)
class SetRules(Message):
    QName: str
    Rules: dict


@message(2007)
class GetRules(Message):
    QName: str


@message(2010)
class CreateQueueAnywhere(Message):
    """Create ``QName`` with ``Exchanges`` exchanges spread over the hosts with most headroom."""

    QName: str
    Exchanges: int = 1


@message(2011)
class QueueExists(Message):
    QName: str


@message(2012)
class ListQueues(Message):
    pass


@message(2013)
class QueueStats(Message):
    QName: str


@message(2014)
class ListHosts(Message):
    pass


@message(2015)
class SetThresholds(Message):
    """Set some thresholds (merged into those stored); ``Evidence``, if given, is kept beside them (e.g. the
    KPI tuner's samples and fit) and ``GetThresholds`` returns it."""

    QName: str
    Thresholds: dict
    Evidence: dict = dataclasses.field(default_factory=dict)


@message(2016)
class GetThresholds(Message):
    QName: str


@message(2017)
class ScaleOut(Message):
    """Monitor (or operator) -> GCM: ``QName`` should have ``Exchanges`` exchanges placed.

    The missing ones are placed on the hosts with most headroom (free slots, the queue's per-host maximum,
    host CPU and memory limits). Idempotent: if as many are placed already, nothing changes, so a request
    repeated after a GCM fail-over never adds two. Refused beyond the queue's ``max_exchanges``. The reply
    comes once the placement is stored (``Placed: [{Exchange, Host}]``, ``Exchanges``: how many are placed),
    not when the exchanges run: the monitor sees them join.
    """

    QName: str
    Exchanges: int
    Reason: str = ""


@message(2018)
class RemoveExchange(Message):
    """Monitor (or operator) -> GCM: take exchange slot ``Exchange`` (e.g. ``x3``) out of ``QName``.

    Its host manager stops it. Idempotent (a slot already gone answers OK); refused if it would leave fewer
    exchanges than the queue's ``min_exchanges``. The monitor asks only once the exchange is drained.
    """

    QName: str
    Exchange: str
    Reason: str = ""


@message(2019)
class GetEvents(Message):
    """The queue's recent topology events, oldest first (``Events``: at most ``Limit`` documents)."""

    QName: str
    Limit: int = 200


@message(2020)
class GetAcl(Message):
    """The cluster's permissions (``Rules``: rule documents, :mod:`roq.security.acl`; ``Enforced``: false while no rule
    was ever set)."""


@message(2021)
class Grant(Message):
    """Add a rule to the cluster's permissions (``Rule``: a rule document, :meth:`roq.security.acl.Rule.of`); idempotent."""

    Rule: dict


@message(2022)
class Revoke(Message):
    """Take a rule out of the cluster's permissions (the one equal to ``Rule``); NOT_FOUND if none is."""

    Rule: dict


@message(2023)
class GetAudit(Message):
    """The audit trail: the latest ``Limit`` management actions (``Entries``, oldest first: time, principal,
    via, action, queue, detail, result, comment)."""

    Limit: int = 100


@message(2024)
class FederationStatus(Message):
    """This cluster's place in its tree of clusters (``Name``, ``Role``, ``Path`` to the root, the parent first;
    ``Children``: each linked child with its ``Key``, ``Incarnation`` and the clusters ``Below`` it;
    ``Refusals``: links refused, by reason). A cluster in no tree has the name ""."""


@message(2025)
class ReplaceReplica(Message):
    """Monitor (or operator) -> GCM: the journal replica of ``QName`` on host ``Replica`` was lost with its host;
    put one on another live host in its place.

    The new replica takes the lost one's place in the queue's replica set and starts as a learner (it votes in no
    election until it holds what is committed); the lost host's assignment goes in the same transaction, so it
    never comes back as a member. Idempotent: a replica no longer in the set answers OK and changes nothing, so a
    request repeated after a lost reply never replaces two. Refused while the replica's host is live (its host
    manager restarts it there). The reply comes once the change is stored (``Replaced``, ``Replica``: the new
    one's host, ``Replicas``: the set), not when the new replica has caught up.
    """

    QName: str
    Replica: str
    Reason: str = ""


@message(2026)
class AdmitReplica(Message):
    """Monitor (or operator) -> GCM: the learner replica of ``QName`` on host ``Replica`` holds what its leader
    committed and votes: it is a learner no more in the queue's document (started again, it is not made one
    anew). Idempotent: one that is no learner answers OK and changes nothing."""

    QName: str
    Replica: str


# --------------------------------------------------------------------------- what the GCM says of the cluster


S = TypeVar("S", bound="_Summary")


class _Summary:
    """What the GCM's summaries share: read from a reply's or a broadcast's document, and written as one."""

    @classmethod
    def read(cls: type[S], doc: Any) -> S:
        """A summary from a reply's or a broadcast's document.

        Raises:
            ProtocolError: a field is missing or of the wrong type.
        """
        return shape.read(cls, doc)

    def document(self) -> dict[str, Any]:
        return shape.to_document(self)


@dataclasses.dataclass(frozen=True)
class ExchangeSummary:
    """A live exchange of a queue: its slot (``Id``), its incarnation (``Name``), host and endpoints."""

    Id: str
    Name: str = ""
    Host: str = ""
    Frontend: str = ""
    Backend: str = ""


@dataclasses.dataclass(frozen=True)
class QueueSummary(_Summary):
    """A queue as the GCM describes it (create, start, list queues, queue stats, the broadcast)."""

    Name: str
    Host: str = ""
    State: str = ""
    Running: bool = False
    Monitor: str = ""  # the live monitor's endpoint ("" when none is registered)
    Exchanges: list[ExchangeSummary] = dataclasses.field(default_factory=list)  # the live ones, by slot

    @classmethod
    def of(cls, name: str, queue: QueueDoc, monitor: MonitorDoc | None,
           exchanges: Mapping[str, ExchangeDoc]) -> QueueSummary:
        """The summary of queue ``name`` from its znodes' documents (``exchanges``: the live ones by slot)."""
        return cls(
            Name=name,
            Host=queue.host,
            State=queue.state,
            Running=queue.state == RUNNING,
            Monitor=monitor.endpoint if monitor is not None else "",
            Exchanges=[ExchangeSummary(Id=slot, Name=x.name or slot, Host=x.host, Frontend=x.frontend, Backend=x.backend)
                       for slot, x in sorted(exchanges.items())],
        )


@dataclasses.dataclass(frozen=True)
class HostSummary(_Summary):
    """A live host as the GCM describes it (list hosts, the broadcast): capacity, load and latest KPIs."""

    Address: str
    Endpoint: str = ""
    MaxExchanges: int = 0
    AssignedExchanges: int = 0  # exchanges placed on it by the GCM, of every queue not being removed
    Exchanges: int = 0  # exchanges its host manager runs now
    Monitors: int = 0
    Cpus: float = 0.0  # its CPU budget in cores, which CpuPercent is of
    CpuPercent: float = 0.0
    MemoryPercent: float = 0.0
    NetBytesPerS: float = 0.0
    LinkBytesPerS: float = 0.0  # the rate of its link, which NetPercent is of (0 = unknown)
    NetPercent: float = 0.0

    @classmethod
    def of(cls, address: str, host: HostDoc, assigned: int) -> HostSummary:
        """The summary of the host registered at ``address`` with ``assigned`` exchanges placed on it."""
        return cls(
            Address=address,
            Endpoint=host.endpoint,
            MaxExchanges=host.max_exchanges,
            AssignedExchanges=assigned,
            Exchanges=host.exchanges,
            Monitors=host.monitors,
            Cpus=host.cpus,
            CpuPercent=host.kpis.cpu_percent,
            MemoryPercent=host.kpis.memory_percent,
            NetBytesPerS=host.kpis.net_bytes_per_s,
            LinkBytesPerS=host.link_bytes_per_s,
            NetPercent=host.kpis.net_percent,
        )


def broadcast_frames(queues: list[QueueSummary] | list[dict[str, Any]],
                     hosts: list[HostSummary] | list[dict[str, Any]]) -> list[bytes]:
    """The three frames of a configuration broadcast."""
    return [bson.encode({"CMD": BROADCAST}), bson.encode({"Queues": shape.to_document(list(queues))}),
            bson.encode({"Hosts": shape.to_document(list(hosts))})]


def parse_broadcast(frames: list[bytes]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(queues, hosts) of a broadcast.

    Raises:
        ProtocolError: not three BSON frames of the expected shape.
    """
    if len(frames) != 3:
        raise ProtocolError(f"a broadcast has 3 frames, got {len(frames)}")
    try:
        head, queues, hosts = (bson.decode(f) for f in frames)
    except (BSONError, ValueError, TypeError, OverflowError, IndexError, KeyError, RecursionError) as exc:
        raise ProtocolError(f"broadcast frame is not BSON: {exc}") from exc
    if head.get("CMD") != BROADCAST or not isinstance(queues.get("Queues"), list) or not isinstance(hosts.get("Hosts"), list):
        raise ProtocolError("broadcast frames are not {CMD: 1500}, {Queues: [...]}, {Hosts: [...]}")
    return queues["Queues"], hosts["Hosts"]
