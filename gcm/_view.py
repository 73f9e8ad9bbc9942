"""What the GCM knows of the cluster: a snapshot read from ZooKeeper, and the pure decisions made on it.

:func:`read_view` reads the whole topology (setting a watch on everything it reads, so any change wakes
the GCM); the rest is plain logic, unit-tested without ZooKeeper: what the broadcast says, whether a queue is
ready. Where things go is decided in :mod:`gcm._placement`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from roq.rules import DEFAULT_RULES, effective_rules
from roq.zk import Paths, loads

__all__ = ["QueueView", "HostView", "View", "read_view", "broadcast_docs", "RUNNING", "STOPPED", "REMOVING"]

RUNNING, STOPPED, REMOVING = "running", "stopped", "removing"


@dataclasses.dataclass
class QueueView:
    name: str
    state: str
    host: str  # the monitor's host
    placement: dict[str, str]  # exchange id -> host
    next_exchange: int
    version: int  # of the queue znode, for conditional updates
    removing_since: float = 0.0  # wall time the removal was decided
    monitor: dict[str, Any] | None = None  # the live monitor's znode, if any
    exchanges: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # live exchanges
    rules: dict[str, Any] = dataclasses.field(default_factory=lambda: dict(DEFAULT_RULES))  # in force
    explicit_rules: dict[str, Any] = dataclasses.field(default_factory=dict)  # the keys an operator set
    thresholds: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ready(self) -> bool:
        """Running with its monitor and every placed exchange up, each registered by the host it is placed on
        (a process of a host the slot was moved away from does not count)."""
        return (
            self.state == RUNNING
            and self.monitor is not None
            and self.monitor.get("host", self.host) == self.host
            and bool(self.placement)
            and all(x in self.exchanges and self.exchanges[x].get("host", h) == h for x, h in self.placement.items())
        )

    @property
    def quiet(self) -> bool:
        """No process of the queue is registered any more."""
        return self.monitor is None and not self.exchanges

    def summary(self) -> dict[str, Any]:
        return {
            "Name": self.name,
            "Host": self.host,
            "State": self.state,
            "Running": self.state == RUNNING,
            "Monitor": (self.monitor or {}).get("endpoint", ""),
            "Exchanges": [
                {"Id": xid, "Name": x.get("name", xid), "Host": x.get("host", ""), "Frontend": x.get("frontend", ""), "Backend": x.get("backend", "")}
                for xid, x in sorted(self.exchanges.items())
            ],
        }


@dataclasses.dataclass
class HostView:
    address: str
    data: dict[str, Any]

    @property
    def max_exchanges(self) -> int:
        value = self.data.get("max_exchanges", 0)
        return value if isinstance(value, int) else 0

    @property
    def cpu_percent(self) -> float:
        return self._kpi("cpu_percent")

    @property
    def memory_percent(self) -> float:
        return self._kpi("memory_percent")

    def _kpi(self, name: str) -> float:
        kpis = self.data.get("kpis")
        value = kpis.get(name, 0.0) if isinstance(kpis, dict) else 0.0
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0

    def summary(self, assigned: int) -> dict[str, Any]:
        kpis = self.data.get("kpis", {}) if isinstance(self.data.get("kpis"), dict) else {}
        return {
            "Address": self.address,
            "Endpoint": self.data.get("endpoint", ""),
            "MaxExchanges": self.max_exchanges,
            "AssignedExchanges": assigned,
            "Exchanges": self.data.get("exchanges", 0),
            "Monitors": self.data.get("monitors", 0),
            "CpuPercent": kpis.get("cpu_percent", 0.0),
            "MemoryPercent": kpis.get("memory_percent", 0.0),
            "NetBytesPerS": kpis.get("net_bytes_per_s", 0.0),
        }


@dataclasses.dataclass
class View:
    queues: dict[str, QueueView]
    hosts: dict[str, HostView]

    def assigned(self) -> dict[str, int]:
        """Exchanges placed on each host, by every queue that is not removed."""
        counts: dict[str, int] = {}
        for q in self.queues.values():
            if q.state != REMOVING:
                for host in q.placement.values():
                    counts[host] = counts.get(host, 0) + 1
        return counts


def read_view(zk: KazooClient, paths: Paths, watch: Callable[..., Any]) -> View:
    """Read the topology, leaving a watch on every node read."""

    def get(path: str) -> tuple[dict[str, Any] | None, int]:
        try:
            data, stat = zk.get(path, watch=watch)
        except NoNodeError:
            zk.exists(path, watch=watch)
            return None, -1
        value = loads(data)
        return (value if isinstance(value, dict) else {}), stat.version

    def children(path: str) -> list[str]:
        try:
            return zk.get_children(path, watch=watch)
        except NoNodeError:
            zk.exists(path, watch=watch)
            return []

    queues = {}
    for name in children(paths.queues):
        data, version = get(paths.queue(name))
        if data is None:
            continue
        placement = data.get("placement", {})
        q = QueueView(
            name=name,
            state=str(data.get("state", RUNNING)),
            host=str(data.get("host", "")),
            placement=dict(placement) if isinstance(placement, dict) else {},
            next_exchange=int(data.get("next_exchange", 1)),
            version=version,
            removing_since=float(data.get("removing_since", 0.0) or 0.0),
        )
        q.monitor, _ = get(paths.monitor(name))
        for xid in children(paths.exchanges(name)):
            x, _ = get(paths.exchange(name, xid))
            if x is not None:
                q.exchanges[xid] = x
        explicit, _ = get(paths.rules(name))
        thresholds, _ = get(paths.thresholds(name))
        q.explicit_rules = {k: v for k, v in (explicit or {}).items() if k in DEFAULT_RULES}
        q.thresholds = thresholds or {}
        q.rules = effective_rules(q.explicit_rules, q.thresholds)
        queues[name] = q
    hosts = {}
    for address in children(paths.hosts):
        data, _ = get(paths.host(address))
        if data is not None:
            hosts[address] = HostView(address, data)
    return View(queues, hosts)


def broadcast_docs(view: View) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Queues and Hosts documents of the configuration broadcast."""
    assigned = view.assigned()
    queues = [view.queues[n].summary() for n in sorted(view.queues)]
    hosts = [view.hosts[a].summary(assigned.get(a, 0)) for a in sorted(view.hosts)]
    return queues, hosts
