"""hostmanager host: the host's KPIs and document, and the ephemeral nodes of its session (a stand-in session)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from hostmanager._host import HostSampler, Registration
from roq.wire.documents import Assignment, ExchangeDoc, HostDoc, MonitorDoc
from roq.errors import NodeExistsError, NodeMissingError, VersionConflictError, ZooKeeperError
from roq.kpi.archive import HOSTS_PARTITION, ArchiveWriter
from roq.zk import Paths

PATHS = Paths("/roq")
ADDRESS = "127.0.0.12"


@dataclasses.dataclass
class Stat:
    ephemeralOwner: int
    version: int = 0


class StandInSession:
    """The calls of roq.zk.Session that Registration makes, on a dict; ``owner`` is the session's id."""

    def __init__(self, owner: int = 1) -> None:
        self.session_id = owner
        self.nodes: dict[str, tuple[bytes, Stat]] = {}
        self.parents: set[str] = {PATHS.queues + "/orders/exchanges", PATHS.queue("orders")}
        self.down = False

    def _up(self) -> None:
        if self.down:
            raise ZooKeeperError("ZooKeeper did not answer")

    def ensure(self, *paths: str) -> None:
        self._up()
        self.parents.update(paths)

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> str:
        self._up()
        if path in self.nodes:
            raise NodeExistsError(path)
        if path.rpartition("/")[0] not in self.parents:
            raise NodeMissingError(path)
        self.nodes[path] = (data, Stat(self.session_id))
        return path

    def get(self, path: str):
        self._up()
        return self.nodes.get(path)

    def set(self, path: str, data: bytes, *, version: int = -1) -> int:
        self._up()
        if path not in self.nodes:
            raise NodeMissingError(path)
        _, stat = self.nodes[path]
        self.nodes[path] = (data, Stat(stat.ephemeralOwner, stat.version + 1))
        return stat.version + 1

    def delete(self, path: str, *, version: int = -1) -> bool:
        self._up()
        if path in self.nodes and version not in (-1, self.nodes[path][1].version):
            raise VersionConflictError(path)
        return self.nodes.pop(path, None) is not None

    def owns(self, stat: Stat) -> bool:
        return stat.ephemeralOwner == self.session_id


def host_doc(**fields) -> HostDoc:
    return HostDoc(address=ADDRESS, endpoint="tcp://127.0.0.12:7000", **fields)


def test_registering_writes_the_host_node_and_the_assignments_parent():
    session = StandInSession()
    reg = Registration(session, PATHS, ADDRESS)
    reg.register(host_doc(max_exchanges=4))
    assert HostDoc.decode(session.nodes[PATHS.host(ADDRESS)][0]).max_exchanges == 4
    assert {PATHS.hosts, PATHS.host_assignments(ADDRESS), PATHS.queues} <= session.parents and reg.registered


def test_a_node_left_by_a_previous_session_is_replaced_not_rewritten():
    session = StandInSession(owner=2)
    session.parents.add(PATHS.hosts)
    session.nodes[PATHS.host(ADDRESS)] = (b"{}", Stat(ephemeralOwner=1, version=3))
    Registration(session, PATHS, ADDRESS).register(host_doc())
    assert session.nodes[PATHS.host(ADDRESS)][1].ephemeralOwner == 2


def test_a_report_rewrites_the_node_and_registers_again_if_it_was_deleted():
    session = StandInSession()
    reg = Registration(session, PATHS, ADDRESS)
    reg.register(host_doc())
    reg.report(host_doc(exchanges=2))
    assert HostDoc.decode(session.nodes[PATHS.host(ADDRESS)][0]).exchanges == 2
    del session.nodes[PATHS.host(ADDRESS)]
    reg.report(host_doc(exchanges=3))
    assert HostDoc.decode(session.nodes[PATHS.host(ADDRESS)][0]).exchanges == 3


def test_a_report_without_zookeeper_is_not_an_error():
    session = StandInSession()
    reg = Registration(session, PATHS, ADDRESS)
    reg.register(host_doc())
    session.down = True
    reg.report(host_doc())  # nothing raised: the next period tries again


def test_children_are_published_in_their_slot_and_unpublished_only_if_ours():
    session = StandInSession()
    reg = Registration(session, PATHS, ADDRESS)
    x1 = Assignment("orders", "x1")
    doc = ExchangeDoc(name="x1-ab12", host=ADDRESS, frontend="tcp://a:1", backend="tcp://a:2", pid=7)
    assert reg.publish(x1, doc)
    assert ExchangeDoc.decode(session.nodes[PATHS.exchange("orders", "x1")][0]) == doc
    assert reg.publish(x1, dataclasses.replace(doc, pid=8))  # published again: rewritten
    reg.unpublish(x1)
    assert PATHS.exchange("orders", "x1") not in session.nodes
    session.nodes[PATHS.monitor("orders")] = (b"{}", Stat(ephemeralOwner=99))
    reg.unpublish(Assignment("orders", "monitor"))  # another session's: left alone
    assert PATHS.monitor("orders") in session.nodes


def test_publishing_in_a_queue_that_is_gone_says_so():
    reg = Registration(StandInSession(), PATHS, ADDRESS)
    assert not reg.publish(Assignment("gone", "monitor"), MonitorDoc(endpoint="tcp://a:1"))


def test_publishing_without_zookeeper_raises_for_the_caller_to_retry():
    session = StandInSession()
    session.down = True
    with pytest.raises(ZooKeeperError):
        Registration(session, PATHS, ADDRESS).publish(Assignment("orders", "monitor"), MonitorDoc())


def test_the_host_document_carries_capacity_and_kpis_and_the_archive_gets_a_record(tmp_path):
    archive = ArchiveWriter(str(tmp_path), HOSTS_PARTITION, "test")
    sampler = HostSampler(ADDRESS, 6, archive)
    sampler.endpoint = "tcp://127.0.0.12:7000"
    doc = sampler.doc(exchanges=2, monitors=1)
    sampler.close()
    assert (doc.address, doc.endpoint, doc.max_exchanges, doc.exchanges, doc.monitors) == (
        ADDRESS, "tcp://127.0.0.12:7000", 6, 2, 1)
    assert doc.pid == os.getpid() and doc.cpus >= 1 and doc.memory_bytes > 0
    assert 0 <= doc.kpis.cpu_percent <= 100 and 0 <= doc.kpis.memory_percent <= 100
    assert HostDoc.decode(doc.encode()) == doc
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and any(b'"host"' in p.read_bytes() for p in written)
