"""gcm's broadcast: sent on a change of the topology and when forced (the period), not for KPIs alone."""

from __future__ import annotations

import zmq

from gcm._broadcast import Broadcaster
from gcm._view import HostView, QueueView, View
from roq.wire.documents import HostDoc, HostKpis, QueueDoc
from roq.wire.management import parse_broadcast


class Pub:
    """A PUB socket's sends, a message (its frames) each."""

    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []
        self._parts: list[bytes] = []

    def send(self, frame: bytes, flags: int = 0) -> None:
        self._parts.append(frame)
        if not flags & zmq.SNDMORE:
            self.sent.append(self._parts)
            self._parts = []


def _view(cpu: float = 10.0, state: str = "running", max_exchanges: int = 4) -> View:
    host = HostView("h", HostDoc(address="h", max_exchanges=max_exchanges, kpis=HostKpis(cpu_percent=cpu)))
    return View({"q": QueueView("q", QueueDoc(state=state, host="h"))}, {"h": host})


def test_the_topology_is_sent_once_until_it_changes_or_the_period_forces_it():
    pub = Pub()
    broadcaster = Broadcaster(pub, period=2.0)  # type: ignore[arg-type]
    assert broadcaster.publish(_view(), 100.0, force=False) and broadcaster.next_at == 102.0
    assert not broadcaster.publish(_view(cpu=55.0), 100.5, force=False)  # KPIs alone
    assert broadcaster.publish(_view(state="stopped"), 101.0, force=False)
    assert broadcaster.publish(_view(max_exchanges=8), 101.5, force=False)  # capacity is topology
    assert broadcaster.publish(_view(max_exchanges=8, cpu=70.0), 103.5, force=True)
    queues, hosts = parse_broadcast(pub.sent[-1])
    assert [(q["Name"], q["State"]) for q in queues] == [("q", "running")]
    assert hosts == [{"Address": "h", "Endpoint": "", "MaxExchanges": 8, "AssignedExchanges": 0, "Exchanges": 0,
                      "Monitors": 0, "Cpus": 1.0, "CpuPercent": 70.0, "MemoryPercent": 0.0, "NetBytesPerS": 0.0,
                     "LinkBytesPerS": 0.0, "NetPercent": 0.0}]
    assert len(pub.sent) == broadcaster.sent == 4


def test_an_empty_cluster_is_broadcast_too():
    pub = Pub()
    Broadcaster(pub, period=1.0).publish(View(), 0.0, force=True)  # type: ignore[arg-type]
    assert parse_broadcast(pub.sent[0]) == ([], [])
