"""hostmanager supervision: the actions applied to the children, their publication and their reaping (stand-in
processes and ZooKeeper: no fork, no server)."""

from __future__ import annotations

import dataclasses
import signal

from hostmanager import HostManagerConfig
from hostmanager._children import Supervised
from hostmanager._config import ChildSettings
from hostmanager._converge import Restart, Start, Stop, Tell
from hostmanager._host import Registration
from hostmanager._ports import PortAllocator
from hostmanager._supervision import Children
from roq.config import ExchangeConfig, JournalConfig
from roq.wire.documents import Assignment, ExchangeDoc
from roq.errors import NodeExistsError, NodeMissingError
from roq.wire.ready import ExchangeReady, MonitorReady
from roq.zk import Paths
from tests.unit.standins import StandIn

PATHS = Paths("/roq")
ADDRESS = "127.0.0.1"
X1 = Assignment("orders", "x1")
THERE = "tcp://127.0.0.13:5500"


@dataclasses.dataclass
class Stat:
    ephemeralOwner: int = 1
    version: int = 0


class StandInSession:
    """Just what Registration.publish and unpublish call; nodes of queue "orders" only."""

    session_id = 1

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> str:
        if path in self.nodes:
            raise NodeExistsError(path)
        if "/orders/" not in path:
            raise NodeMissingError(path)
        self.nodes[path] = data
        return path

    def get(self, path: str):
        return (self.nodes[path], Stat()) if path in self.nodes else None

    def set(self, path: str, data: bytes, *, version: int = -1) -> int:
        self.nodes[path] = data
        return 1

    def delete(self, path: str, *, version: int = -1) -> bool:
        return self.nodes.pop(path, None) is not None

    def owns(self, stat: Stat) -> bool:
        return stat.ephemeralOwner == self.session_id


def rig(child: StandIn, assignment: Assignment = X1) -> tuple[Children, Supervised, StandInSession]:
    session = StandInSession()
    ports = PortAllocator(ADDRESS)
    children = Children(ChildSettings(HostManagerConfig(zk="127.0.0.1:2181", address=ADDRESS)), ports,
                        Registration(session, PATHS, ADDRESS))  # type: ignore[arg-type]
    sup = Supervised(assignment)
    sup.child = child  # type: ignore[assignment]
    sup.config = ExchangeConfig(monitor="tcp://127.0.0.12:5500", exchange_id="x1-ab12", commands=True)
    sup.ports = [ports.allocate(), ports.allocate()]
    children.by_name[assignment.name] = sup
    return children, sup, session


def test_a_ready_exchange_is_published_under_its_slot_with_its_incarnation_and_unpublished_when_it_exits():
    child = StandIn()
    children, sup, session = rig(child)
    child.info = ExchangeReady(pid=4242, id="x1-ab12", frontend="tcp://127.0.0.1:1", backend="tcp://127.0.0.1:2")
    sup.ready = True
    children.publish(sup, child.info)
    path = PATHS.exchange("orders", "x1")
    assert ExchangeDoc.decode(session.nodes[path]) == ExchangeDoc(
        name="x1-ab12", host=ADDRESS, frontend="tcp://127.0.0.1:1", backend="tcp://127.0.0.1:2", pid=4242)
    assert children.ready("exchange") == 1
    held = list(sup.ports)
    child.returncode = 1
    assert children.check(0.0)  # a crash: look at the assignments again
    assert path not in session.nodes and sup.restarts == 1 and sup.restart_pending
    assert not set(held) & children.ports.in_use


def test_a_journal_started_as_a_learner_gets_its_replica_settings():
    journal = Assignment("orders", "journal")
    children, _, _ = rig(StandIn())
    sup = Supervised(journal)
    started: list[JournalConfig] = []
    sup.start = lambda config, ports, log: started.append(config)  # type: ignore[method-assign]
    children.by_name[journal.name] = sup
    children.apply(Start(journal, THERE, 0, replicas=3, learner=True), 0.0)
    (config,) = started
    assert config.learner and config.replicas == 3 and config.journal_id == ADDRESS and sup.replicas == 3


def test_a_child_of_a_queue_that_is_gone_is_stopped():
    child = StandIn()
    children, sup, _ = rig(child, Assignment("gone", "x1"))
    children.by_name = {"gone@x1": sup}
    children.publish(sup, ExchangeReady(pid=1, id="x1-ab12", frontend="tcp://127.0.0.1:1", backend="tcp://127.0.0.1:2"))
    assert child.signals == [signal.SIGTERM] and sup.state().stopping


def test_the_ready_line_of_another_role_is_not_published(caplog):
    child = StandIn()
    children, sup, session = rig(child)
    children.publish(sup, MonitorReady(pid=4242, queue="orders", endpoint="tcp://127.0.0.1:1"))
    assert PATHS.exchange("orders", "x1") not in session.nodes
    assert "printed a monitor's ready line: not published" in caplog.text


def test_a_stop_ends_with_the_child_forgotten():
    child = StandIn()
    children, sup, _ = rig(child)
    assert not children.apply(Stop(X1.name), 0.0)
    assert child.signals == [signal.SIGTERM]
    assert not children.check(0.1)  # still running
    child.returncode = 0
    assert children.check(0.2) and children.by_name == {}


def test_an_exchange_that_cannot_be_told_asks_for_another_look_and_is_then_restarted():
    child = StandIn(takes_commands=False)
    children, sup, _ = rig(child)
    assert children.apply(Tell(X1.name, THERE), 0.0)  # look again: it will be a restart
    assert not sup.state().tellable
    assert not children.apply(Restart(X1.name, THERE), 0.0)
    child.returncode = 130
    assert children.check(0.4)
    assert X1.name in children.by_name and sup.restart_pending and sup.restarts == 0


def test_a_told_exchange_needs_nothing_more():
    children, sup, _ = rig(StandIn())
    assert not children.apply(Tell(X1.name, THERE), 0.0)
    assert sup.state().monitor == THERE


def test_the_status_lists_every_child():
    children, _, _ = rig(StandIn())
    assert children.status() == [{"queue": "orders", "role": "exchange", "id": "x1", "pid": 4242, "alive": True,
                                  "ready": False, "restarts": 0}]
