"""What the GCM knows of the cluster: a snapshot of ZooKeeper, read whole whenever something changes.

:func:`read_view` reads the topology through the session (leaving a watch on every node that can change
without the GCM: the queues, their live monitor and exchanges, rules and thresholds, the hosts), each node
through its document (:mod:`roq.wire.documents`), and the assignment names under every host it meets, so that a
decision knows which assignment znodes exist without asking ZooKeeper. Everything else here is plain data
the decisions read: whether a queue is ready or quiet, what the GCM says of it (its summary), how many
exchanges each host holds.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Mapping

from roq.security.acl import Rule
from roq.wire.documents import (
    AclDoc,
    REMOVING,
    RUNNING,
    Assignment,
    ExchangeDoc,
    FederationDoc,
    JournalDoc,
    HostDoc,
    MonitorDoc,
    QueueDoc,
    RulesDoc,
)
from roq.errors import BadRequestError, ConfigError, NotFoundError
from roq.wire.management import HostSummary, QueueSummary
from roq.rules import DEFAULT_RULES, effective_rules
from roq.zk import Paths, Session, check_queue_name

__all__ = ["QueueView", "HostView", "View", "read_view", "read_host", "read_acl", "echo", "checked_name"]

_ECHO = 80  # characters of a peer's text quoted back in a refusal


def echo(text: str) -> str:
    """``text`` quoted for a reply or a log line, cut short: a peer's 900 KB name is not sent back whole."""
    return repr(text if len(text) <= _ECHO else text[:_ECHO] + "...")


def checked_name(name: str) -> str:
    """``name`` if it can name a queue.

    Raises:
        BadRequestError: it cannot (the message quotes at most the start of it).
    """
    if len(name) > 64:
        raise BadRequestError(f"bad queue name {echo(name)} ({len(name)} characters): at most 64")
    try:
        return check_queue_name(name)
    except ConfigError as exc:
        raise BadRequestError(str(exc)) from None


@dataclasses.dataclass(frozen=True)
class QueueView:
    """A queue: its node's document and version, its live processes, its rules."""

    name: str
    doc: QueueDoc = QueueDoc()
    version: int = -1  # of the queue node, for the version check of every decision
    monitor: MonitorDoc | None = None  # the live monitor, if one is registered
    exchanges: Mapping[str, ExchangeDoc] = dataclasses.field(default_factory=dict)  # live exchanges by slot
    journal: JournalDoc | None = None  # the live journal, if one is registered
    explicit_rules: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the keys an operator set
    thresholds: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    rules_version: int = -1  # -1: no node
    thresholds_version: int = -1
    tuning_version: int = -1

    @property
    def state(self) -> str:
        return self.doc.state

    @property
    def host(self) -> str:
        """The monitor's host."""
        return self.doc.host

    @property
    def placement(self) -> Mapping[str, str]:
        """Exchange slot -> host."""
        return self.doc.placement

    @property
    def next_exchange(self) -> int:
        return self.doc.next_exchange

    @functools.cached_property
    def rules(self) -> dict[str, Any]:
        """The rules in force: defaults, then thresholds, then the operator's."""
        return effective_rules({k: v for k, v in self.explicit_rules.items() if k in DEFAULT_RULES}, dict(self.thresholds))

    @property
    def durable(self) -> bool:
        """Its rules ask for a journal."""
        return self.rules.get("durability", "none") != "none"

    @property
    def ready(self) -> bool:
        """Running with its monitor and every placed exchange up, each registered by the host it is placed on
        (a process of a host the slot was moved away from does not count), and its journal if it is durable."""
        return (
            self.state == RUNNING
            and self.monitor is not None
            and (self.monitor.host or self.host) == self.host
            and bool(self.placement)
            and all(x in self.exchanges and (self.exchanges[x].host or h) == h for x, h in self.placement.items())
            and (not self.durable or (self.journal is not None
                                      and ((self.journal.host or self.doc.journal_host) == self.doc.journal_host
                                           or self.journal.host in self.doc.journal_replicas)))
        )

    @property
    def quiet(self) -> bool:
        """No process of the queue is registered any more."""
        return self.monitor is None and not self.exchanges and self.journal is None

    def summary(self) -> QueueSummary:
        return QueueSummary.of(self.name, self.doc, self.monitor, self.exchanges)


@dataclasses.dataclass(frozen=True)
class HostView:
    """A registered host manager."""

    address: str
    doc: HostDoc = HostDoc()

    @property
    def max_exchanges(self) -> int:
        return self.doc.max_exchanges

    @property
    def cpu_percent(self) -> float:
        return self.doc.kpis.cpu_percent

    @property
    def memory_percent(self) -> float:
        return self.doc.kpis.memory_percent

    @property
    def net_percent(self) -> float:
        """Its network bytes/s as a % of its link's rate (0 when the rate is unknown)."""
        return self.doc.kpis.net_percent

    @property
    def headroom(self) -> float:
        """The cores of its budget it does not use (its CPU budget less its use over the last few periods)."""
        return max(0.0, self.doc.cpus * (100.0 - self.cpu_percent) / 100.0)


@dataclasses.dataclass(frozen=True)
class View:
    """The topology: queues and registered hosts by name, the assignment names under each host met, and where
    in ZooKeeper it was read (``paths``: where a decision's writes go); the cluster's permissions (``acl``:
    None while no rule was ever set, () when the node holds rules that do not read: nothing is allowed then)
    and the version of their node."""

    queues: Mapping[str, QueueView] = dataclasses.field(default_factory=dict)
    hosts: Mapping[str, HostView] = dataclasses.field(default_factory=dict)
    assignments: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    paths: Paths = Paths()
    acl: tuple[Rule, ...] | None = None
    acl_version: int = -1
    federation: FederationDoc | None = None  # the cluster's place in a tree (None: not written yet)

    def with_hosts(self, session: Session, addresses: Iterable[str]) -> View | None:
        """This view with the nodes of ``addresses`` read again (their figures, rewritten every KPI period, are all
        that changed): the rest stands, its watches still set. None: one of them is no longer registered (read it
        all).

        Raises:
            ZooKeeperError: ZooKeeper could not be read.
        """
        hosts = dict(self.hosts)
        for address in addresses:
            host = read_host(session, self.paths, address)
            if host is None:
                return None
            hosts[address] = host
        return dataclasses.replace(self, hosts=hosts)

    def find(self, name: str) -> QueueView | None:
        """The queue named ``name`` (a request's ``QName``), None if there is none.

        Raises:
            BadRequestError: not a queue name.
        """
        return self.queues.get(checked_name(name))

    def queue(self, name: str) -> QueueView:
        """The queue named ``name`` (a request's ``QName``).

        Raises:
            BadRequestError: not a queue name. NotFoundError: no such queue.
        """
        q = self.find(name)
        if q is None:
            raise NotFoundError(f"no queue named {name!r}")
        return q

    def has_assignment(self, host: str, queue: str, slot: str) -> bool:
        """Whether ``/assignments/<host>/<queue>@<slot>`` exists (as read)."""
        return Assignment(queue, slot).name in self.assignments.get(host, frozenset())

    def assigned(self) -> dict[str, int]:
        """Exchanges placed on each host, by every queue that is not being removed."""
        counts: dict[str, int] = {}
        for q in self.queues.values():
            if q.state != REMOVING:
                for host in q.placement.values():
                    counts[host] = counts.get(host, 0) + 1
        return counts

    def summaries(self) -> tuple[list[QueueSummary], list[HostSummary]]:
        """What the GCM says of every queue and every host, sorted by name (list queues, list hosts, the
        broadcast)."""
        assigned = self.assigned()
        return ([self.queues[n].summary() for n in sorted(self.queues)],
                [HostSummary.of(a, self.hosts[a].doc, assigned.get(a, 0)) for a in sorted(self.hosts)])


def read_view(session: Session, paths: Paths) -> View:
    """Read the topology, leaving a watch on everything that others change.

    Raises:
        ZooKeeperError: ZooKeeper could not be read (the view stays as it was; read again later).
    """
    queues = {name: q for name in session.children(paths.queues, watch=True)
              if (q := _read_queue(session, paths, name)) is not None}
    hosts = {}
    for address in session.children(paths.hosts, watch=True):
        if (host := read_host(session, paths, address)) is not None:
            hosts[address] = host
    met = set(hosts)
    for q in queues.values():
        met.add(q.host)
        met.update(q.placement.values())
    assignments = {h: frozenset(session.children(paths.host_assignments(h))) for h in sorted(met) if _node_name(h)}
    acl, acl_version = read_acl(session, paths)
    federation, _ = session.read(paths.federation, FederationDoc.decode, watch=True)
    return View(queues, hosts, assignments, paths, acl, acl_version, federation)


def read_host(session: Session, paths: Paths, address: str) -> HostView | None:
    """The host manager registered as ``address``, leaving a watch on its node; None: not registered.

    Raises:
        ZooKeeperError: ZooKeeper could not be read.
    """
    doc, version = session.read(paths.host(address), HostDoc.decode, watch=True)
    if version < 0:
        return None
    return HostView(address, doc or HostDoc(address=address))  # a node that holds no valid document still registers


def read_acl(session: Session, paths: Paths) -> tuple[tuple[Rule, ...] | None, int]:
    """The cluster's permissions and their node's version, leaving a watch: None when there is no node, ()
    (nothing allowed) when it holds rules that do not read (a corrupted node must not open every door).

    Raises:
        ZooKeeperError: ZooKeeper could not be read.
    """
    doc, version = session.read(paths.acl, AclDoc.decode, watch=True)
    if version < 0:
        return None, version
    return (doc.rules if doc is not None else ()), version


def _read_queue(session: Session, paths: Paths, name: str) -> QueueView | None:
    doc, version = session.read(paths.queue(name), QueueDoc.decode, watch=True)
    if version < 0:
        return None
    monitor, monitor_version = session.read(paths.monitor(name), MonitorDoc.decode, watch=True)
    exchanges = {}
    for slot in session.children(paths.exchanges(name), watch=True):
        x, x_version = session.read(paths.exchange(name, slot), ExchangeDoc.decode, watch=True)
        if x_version >= 0:
            exchanges[slot] = x or ExchangeDoc()
    journal, journal_version = session.read(paths.journal(name), JournalDoc.decode, watch=True)
    explicit, rules_version = session.read(paths.rules(name), RulesDoc.decode, watch=True)
    thresholds, thresholds_version = session.read(paths.thresholds(name), RulesDoc.decode, watch=True)
    tuning = session.exists(paths.tuning(name))
    return QueueView(
        name=name,
        doc=doc or QueueDoc(),
        version=version,
        monitor=(monitor or MonitorDoc()) if monitor_version >= 0 else None,
        exchanges=exchanges,
        journal=(journal or JournalDoc()) if journal_version >= 0 else None,
        explicit_rules={k: v for k, v in (explicit or RulesDoc()).values.items() if k in DEFAULT_RULES},
        thresholds=dict((thresholds or RulesDoc()).values),
        rules_version=rules_version,
        thresholds_version=thresholds_version,
        tuning_version=tuning.version if tuning is not None else -1,
    )


def _node_name(name: str) -> bool:
    """Whether ``name`` can be one znode's name (a placement read from a node might hold anything)."""
    return bool(name) and "/" not in name and name not in (".", "..") and "\x00" not in name
