"""What each znode holds: typed documents, written and read only through this module.

A document is a frozen dataclass (:mod:`roq.wire.shape`) stored as compact UTF-8 JSON, so that ``zkCli.sh get``
shows it as it is. :meth:`Document.decode` checks every field; a node holding anything else raises
:class:`~roq.errors.ProtocolError` (:meth:`roq.zk.Session.read` logs it and reads the node as missing).
Every field has a default, so an empty node (a parent such as ``/queues/<q>/exchanges``) reads as the
default document.

Where each lives is :class:`roq.zk.Paths`; who writes it:

=====================  ===============================  ==================================================
document               znode                            written by
=====================  ===============================  ==================================================
:class:`GcmDoc`        ``gcm/election/n_*``,            every GCM (its candidacy), the leader
                       ``gcm/leader``
:class:`HostDoc`       ``hosts/<address>``              its host manager, every KPI period
:class:`Assignment`    ``assignments/<address>/<name>`` the GCM (the name is the document; no data)
:class:`QueueDoc`      ``queues/<q>``                   the GCM, one transaction per decision
:class:`RulesDoc`      ``queues/<q>/rules``,            the GCM (an operator's rules; the thresholds an
                       ``queues/<q>/thresholds``        operator or the KPI tuner set)
:class:`TuningDoc`     ``queues/<q>/tuning``            the GCM, beside the thresholds it was given with
:class:`MonitorDoc`    ``queues/<q>/monitor``           the host manager running the monitor
:class:`ExchangeDoc`   ``queues/<q>/exchanges/<slot>``  the host manager running the exchange
:class:`EventsDoc`     ``queues/<q>/events/<source>``   the queue's monitor, the GCM
=====================  ===============================  ==================================================
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, ClassVar, TypeVar

from roq.wire import shape
from roq.wire.control.links import ClusterName
from roq.security.acl import Rule
from roq.errors import ConfigError, ProtocolError
from roq.zk import check_queue_name

__all__ = [
    "Document",
    "FederationDoc",
    "AclDoc",
    "AuditDoc",
    "GcmDoc",
    "HostKpis",
    "HostDoc",
    "QueueDoc",
    "RulesDoc",
    "TuningDoc",
    "MonitorDoc",
    "ExchangeDoc",
    "EventsDoc",
    "Assignment",
    "RUNNING",
    "STOPPED",
    "REMOVING",
    "STATES",
    "MONITOR",
    "JOURNAL",
    "JournalDoc",
]

RUNNING, STOPPED, REMOVING = "running", "stopped", "removing"
STATES = (RUNNING, STOPPED, REMOVING)
#: the role (and assignment suffix) of a queue's monitor; exchanges are assigned by slot (``x3``)
MONITOR = "monitor"
#: the role (and assignment suffix) of a durable queue's journal
JOURNAL = "journal"
#: the role (and assignment suffix) of a queue's link to the same queue of the parent cluster
LINK = "link"

T = TypeVar("T", bound="Document")


class Document:
    """Base of the znode documents: encode to and decode from compact JSON."""

    def encode(self) -> bytes:
        return _dumps(shape.to_document(self))

    @classmethod
    def decode(cls: type[T], data: bytes | None) -> T:
        """The document in ``data`` (empty = the default document).

        Raises:
            ProtocolError: not JSON, or a field of the wrong type.
        """
        return shape.read(cls, _loads(data), cls.__name__)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _loads(data: bytes | None) -> Any:
    if not data:
        return {}
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"not JSON ({len(data)} bytes): {exc}") from exc


@dataclasses.dataclass(frozen=True)
class GcmDoc(Document):
    """A GCM's endpoints: its election candidacy, and the leader's node."""

    id: str = ""
    pid: int = 0
    lookup: str = ""
    management: str = ""
    broadcast: str = ""
    http: str = ""  # the base URL of its HTTP API ("" = none)

    def endpoint(self, port: str) -> str:
        """The endpoint of ``port`` ("lookup", "management", "broadcast" or "http")."""
        return {"lookup": self.lookup, "management": self.management, "broadcast": self.broadcast,
                "http": self.http}.get(port, "")


@dataclasses.dataclass(frozen=True)
class HostKpis(Document):
    """A host's load: CPU against its own budget (``HostDoc.cpus``), memory, network bytes/s (and against its
    link's rate, when the host knows it)."""

    cpu_percent: float = 0.0  # mean of the last few KPI periods, of the host's budget (100 = all of it)
    memory_percent: float = 0.0
    net_bytes_per_s: float = 0.0
    net_percent: float = 0.0  # of ``HostDoc.link_bytes_per_s`` (0 when the link's rate is unknown)


@dataclasses.dataclass(frozen=True)
class HostDoc(Document):
    """A live host manager: where it answers, what its host can take, its latest KPIs."""

    address: str = ""
    endpoint: str = ""
    pid: int = 0
    max_exchanges: int = 0
    cpus: float = 1.0  # the CPU budget: cores (a cgroup's quota, a container's --cpus, or the machine's cores)
    memory_bytes: int = 0
    link_bytes_per_s: float = 0.0  # the rate of the host's link (0 = unknown: not limited)
    started: float = 0.0
    kpis: HostKpis = HostKpis()
    exchanges: int = 0  # exchanges it runs now
    monitors: int = 0  # monitors it runs now


@dataclasses.dataclass(frozen=True)
class QueueDoc(Document):
    """A queue: its state, its monitor's host, where each exchange slot is placed, and its journal's host,
    generation, replicas and learners."""

    state: str = RUNNING
    host: str = ""  # the monitor's host
    placement: dict[str, str] = dataclasses.field(default_factory=dict)  # exchange slot -> host
    next_exchange: int = 1  # number of the next slot (x<n>)
    journal_host: str = ""  # where its journal's files are ("" = it never had one); it runs while it is durable
    journal_generation: int = 0  # times its journal was started anew elsewhere after its host was lost
    journal_replicas: list[str] = dataclasses.field(default_factory=list)  # replicated: every replica's host
    # of those, the ones placed in place of a replica lost with its host: each starts as a learner (it votes in no
    # election until it holds what is committed) and is named here until its monitor says it votes
    journal_learners: list[str] = dataclasses.field(default_factory=list)
    created: float = 0.0  # wall clock
    removing_since: float = 0.0  # wall clock; 0 unless removing

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ProtocolError(f"QueueDoc.state must be one of {', '.join(STATES)}, got {self.state!r}")

    @classmethod
    def decode(cls, data: bytes | None) -> QueueDoc:
        """The document in ``data`` (empty = the default document). One written before the journal's generation
        had that name holds it as ``journal_lost``, read as :attr:`journal_generation` when that is absent.

        Raises:
            ProtocolError: not JSON, or a field of the wrong type.
        """
        found = _loads(data)
        if type(found) is dict and "journal_generation" not in found and "journal_lost" in found:
            found = {**found, "journal_generation": found["journal_lost"]}
        return shape.read(cls, found, cls.__name__)


@dataclasses.dataclass(frozen=True)
class RulesDoc(Document):
    """A flat ``{rule: value}`` document: the rules an operator set, or the thresholds set for a queue.

    Only numbers and short words (a rule such as ``durability``) are kept; whether a key is a rule and its
    value allowed is :mod:`roq.rules`' business.
    """

    values: dict[str, Any] = dataclasses.field(default_factory=dict)

    def encode(self) -> bytes:
        return _dumps(self.values)

    @classmethod
    def decode(cls, data: bytes | None) -> RulesDoc:
        found = _loads(data)
        if type(found) is not dict:
            raise ProtocolError(f"rules must be a JSON object, got {type(found).__name__}")
        values = {k: v for k, v in found.items()
                  if type(k) is str and ((isinstance(v, (int, float)) and not isinstance(v, bool))
                                         or (type(v) is str and len(v) <= 64))}
        return cls(values)


@dataclasses.dataclass(frozen=True)
class AclDoc(Document):
    """The cluster's permissions: its rules (:mod:`roq.security.acl`), in the order they were granted."""

    #: bytes of the encoded node a grant may write: half of the 1 MiB ZooKeeper holds in a node (beyond it
    #: ZooKeeper drops the writer's session), leaving room for the control messages that carry the rules in
    #: BSON (the monitor's ``AclRules`` to each exchange, a ``GetAcl`` reply) under their own 1 MiB bound
    MAX_BYTES: ClassVar[int] = 512 * 1024

    rules: tuple[Rule, ...] = ()

    def encode(self) -> bytes:
        return _dumps({"rules": [r.document() for r in self.rules]})

    @classmethod
    def decode(cls, data: bytes | None) -> AclDoc:
        found = _loads(data)
        if type(found) is not dict or type(found.get("rules", [])) is not list:
            raise ProtocolError("permissions must be a JSON object with a list of rules")
        try:
            return cls(tuple(Rule.of(r) for r in found.get("rules", [])))
        except ConfigError as exc:
            raise ProtocolError(f"a rule that does not read: {exc}") from exc


@dataclasses.dataclass(frozen=True)
class TuningDoc(Document):
    """The evidence the thresholds last set with some came with (e.g. the KPI tuner's fit)."""

    thresholds: dict = dataclasses.field(default_factory=dict)
    evidence: dict = dataclasses.field(default_factory=dict)
    time: float = 0.0


@dataclasses.dataclass(frozen=True)
class MonitorDoc(Document):
    """A queue's live monitor (ephemeral, in its host manager's session)."""

    endpoint: str = ""
    host: str = ""
    pid: int = 0


@dataclasses.dataclass(frozen=True)
class ExchangeDoc(Document):
    """A live exchange of a slot (ephemeral, in its host manager's session); ``name`` is its incarnation."""

    name: str = ""
    host: str = ""
    frontend: str = ""
    backend: str = ""
    pid: int = 0


@dataclasses.dataclass(frozen=True)
class JournalDoc(Document):
    """A durable queue's live journal (ephemeral, in its host manager's session)."""

    host: str = ""
    intake: str = ""
    pid: int = 0
    incarnation: int = 0


@dataclasses.dataclass(frozen=True)
class FederationDoc(Document):
    """The cluster's place in a tree of clusters, written by the GCM leader from its settings (``/federation``):
    its name and role, and its parent (ZooKeeper, root, and the directory of this cluster's credentials there,
    the same path on every host; "" when the parent is plaintext). A host manager reads it to start a queue's
    link (``<queue>@link``); with no parent, the GCM places no link. ``subtree``: the clusters of its subtree as
    its children's hellos said, itself first: what its links announce to the parent (names climb the tree so);
    ``known``: every cluster ever below it (a new leader, or a child away for long, forgets none), whose addresses
    its links carry down (records for a named cluster, :func:`roq.federation.address`: one for a cluster that is
    away waits in this cluster's journal)."""

    name: str = ""
    role: str = ""
    parent_zk: str = ""
    parent_root: str = ""
    parent_credentials: str = ""
    subtree: list[ClusterName] = dataclasses.field(default_factory=list)
    known: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class EventsDoc(Document):
    """A source's recent topology events of a queue, oldest first, and the counters it keeps."""

    events: list[dict] = dataclasses.field(default_factory=list)
    counters: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class AuditDoc(Document):
    """The cluster's audit trail: its latest management actions, oldest first (see :mod:`gcm._audit`)."""

    entries: list[dict] = dataclasses.field(default_factory=list)


_ROLE = re.compile(r"(monitor|journal|link|x\d{1,9})\Z")


@dataclasses.dataclass(frozen=True)
class Assignment:
    """A process a host must run: ``<queue>@monitor``, ``<queue>@journal``, ``<queue>@link`` or
    ``<queue>@<slot>`` (the znode's name is all of it)."""

    queue: str
    slot: str  # "monitor", "journal", "link" or an exchange slot such as "x3"

    ROLES: ClassVar[tuple[str, ...]] = ("monitor", "journal", "link", "exchange")

    @property
    def name(self) -> str:
        return f"{self.queue}@{self.slot}"

    @property
    def role(self) -> str:
        """``monitor``, ``journal``, ``link`` or ``exchange``."""
        return self.slot if self.slot in (MONITOR, JOURNAL, LINK) else "exchange"

    @classmethod
    def parse(cls, name: str) -> Assignment:
        """The assignment a znode's name stands for.

        Raises:
            ProtocolError: not ``<queue>@monitor``, ``<queue>@journal``, ``<queue>@link`` or ``<queue>@x<n>``
                with a valid queue name.
        """
        queue, sep, slot = name.rpartition("@")
        try:
            check_queue_name(queue)
        except ConfigError as exc:
            raise ProtocolError(f"assignment {name!r}: {exc}") from None
        if not sep or not _ROLE.fullmatch(slot):
            raise ProtocolError(f"assignment {name!r} is not <queue>@monitor, <queue>@journal, <queue>@link or "
                                f"<queue>@x<n>")
        return cls(queue, slot)
