"""The children of one host manager, all together: started, published, told, stopped, reaped, restarted.

:class:`Children` applies the actions of :func:`~hostmanager._converge.converge` to the
:class:`~hostmanager._children.Supervised` children: a child is started from its settings object on ports
allocated for it (never one still in use), its log goes to a file of its own, it is published in ZooKeeper
once its ready line is in (:class:`~hostmanager._host.Registration`) and unpublished when it exits, and a
child that exits while still assigned is started again after its back-off.
"""

from __future__ import annotations

import logging
import os
import time
from typing import IO, Any

from hostmanager._children import Supervised
from hostmanager._config import ChildSettings
from hostmanager._converge import Action, ChildState, Restart, Start, Stop, Tell
from hostmanager._host import Registration
from hostmanager._ports import PortAllocator
from roq.wire.documents import (JOURNAL, LINK, MONITOR, Assignment, Document, ExchangeDoc, FederationDoc, JournalDoc,
                                MonitorDoc)
from roq.errors import BrokerConnectionError, ZooKeeperError
from roq.wire.ready import ExchangeReady, JournalReady, MonitorReady, Ready
from roq.zk import incarnation

__all__ = ["Children", "START_RETRY"]

log = logging.getLogger("hostmanager")

#: seconds before trying again to start a child that could not be started (no free port...)
START_RETRY = 1.0


class Children:
    """The supervised children of a host manager, by assignment name.

    Args:
        settings: makes each child's settings object.
        ports: allocates the children's ports.
        registration: publishes ready children in ZooKeeper.
        log_dir: directory of the children's logs ("" = this process's stderr).
    """

    def __init__(self, settings: ChildSettings, ports: PortAllocator, registration: Registration,
                 log_dir: str = "") -> None:
        self.settings = settings
        self.ports = ports
        self.registration = registration
        self.log_dir = log_dir
        self.by_name: dict[str, Supervised] = {}
        self._logs: dict[str, IO[Any]] = {}

    def states(self) -> dict[str, ChildState]:
        return {name: sup.state() for name, sup in self.by_name.items()}

    def outputs(self) -> dict[int, Supervised]:
        """The children's standard outputs (for the poll loop), by file descriptor."""
        return {s.child.stdout_fd: s for s in self.by_name.values() if s.child is not None}

    def ready(self, role: str) -> int:
        """How many children of ``role`` are ready."""
        return sum(1 for s in self.by_name.values() if s.ready and s.assignment.role == role)

    # ------------------------------------------------------------------ applying decisions

    def apply(self, action: Action, now: float) -> bool:
        """Carry out one action; True if the assignments should be looked at again soon."""
        if isinstance(action, Start):
            self._start(self.by_name.setdefault(action.assignment.name, Supervised(action.assignment)),
                        action.monitor, action.generation, action.federation, action.replicas, action.learner)
            return False
        sup = self.by_name[action.name]
        a = sup.assignment
        if isinstance(action, Stop):
            log.info("%s of queue %s no longer assigned here: stopping it", a.slot, a.queue)
            sup.begin_stop(now)
        elif isinstance(action, Tell):
            if not sup.tell(action.monitor):
                return True  # it will be restarted instead
            log.info("monitor of queue %s moved to %s: exchange %s told", a.queue, action.monitor, a.slot)
        elif isinstance(action, Restart):
            log.info("monitor of queue %s moved to %s: restarting exchange %s (it cannot be told)",
                     a.queue, action.monitor, a.slot)
            sup.begin_stop(now, restart=True)
        return False

    def _start(self, sup: Supervised, monitor: str, generation: int = 0,
               federation: FederationDoc | None = None, replicas: int = 1, learner: bool = False) -> None:
        a = sup.assignment
        ports: list[int] = []
        try:
            if a.role == MONITOR:
                ports.append(self.ports.allocate(sup.last_port))
                sup.last_port = ports[0]
                config: Any = self.settings.monitor(a.queue, ports[0])
            elif a.role == JOURNAL:  # on its port of before: its exchanges find it again where they left it
                ports.append(self.ports.allocate(sup.last_port))
                sup.last_port = ports[0]
                config = self.settings.journal(a.queue, monitor, ports[0], generation, replicas, learner)
                sup.replicas = replicas
            elif a.role == LINK:  # no port: a client of both clusters
                assert federation is not None  # (converge starts a link only with it)
                config = self.settings.link(a.queue, monitor, federation)
            else:
                ports += [self.ports.allocate(), self.ports.allocate()]
                # every incarnation has a name of its own: the monitor must see a crashed exchange as lost (and
                # fail its publishers over), not as the same exchange come back on new ports
                config = self.settings.exchange(monitor, ports[0], ports[1], incarnation(a.slot))
            sup.start(config, ports, self._log_for(sup))
        except (BrokerConnectionError, ValueError, OSError) as exc:  # no free port, a bad setting (ConfigError)...
            log.warning("cannot start %s of queue %s: %s; trying again in %.0fs", a.slot, a.queue, exc, START_RETRY)
            self.ports.release(*ports)
            sup.not_before = time.monotonic() + START_RETRY
            sup.restart_pending = True

    def _log_for(self, sup: Supervised) -> IO[Any] | None:
        if not self.log_dir:
            return None
        name = sup.assignment.name
        if name not in self._logs:
            os.makedirs(self.log_dir, exist_ok=True)
            self._logs[name] = open(os.path.join(self.log_dir, f"{name.replace('@', '-')}.log"), "ab")
        return self._logs[name]

    # ------------------------------------------------------------------ their life

    def read(self, sup: Supervised) -> None:
        """Read a child's output; publish it once its ready line is in."""
        info = sup.read()
        if info is not None and sup.stopping_since is None:
            self.publish(sup, info)

    def republish(self) -> None:
        """Publish every ready child again (a new ZooKeeper session lost the old nodes)."""
        for sup in self.by_name.values():
            if sup.ready and sup.child is not None and sup.child.info is not None and sup.stopping_since is None:
                self.publish(sup, sup.child.info)

    def publish(self, sup: Supervised, info: Ready) -> None:
        """Write the ephemeral znode that makes a ready child known to the cluster."""
        a = sup.assignment
        if a.role == LINK:
            log.info("link of queue %s ready (pid %d)", a.queue, info.pid)
            return
        doc = _document(a, info, sup.incarnation, self.ports.address)
        if doc is None:
            log.warning("%s of queue %s printed a %s's ready line: not published", a.slot, a.queue, info.ROLE)
            return
        try:
            if not self.registration.publish(a, doc, take=sup.replicas == 1):
                log.info("queue %s is gone: stopping %s", a.queue, a.slot)
                sup.begin_stop(time.monotonic())
                return
        except ZooKeeperError as exc:
            log.warning("publishing %s of queue %s failed: %s", a.slot, a.queue, exc)
            return
        log.info("%s of queue %s ready: %s", a.slot, a.queue, doc)

    def check(self, now: float) -> bool:
        """Push stops along, reap the children that exited; True if the assignments should be looked at
        again (a child to start again, a slot freed)."""
        again = False
        for name, sup in list(self.by_name.items()):
            if sup.restart_pending and now >= sup.not_before:
                again = True
            sup.push_stop(now)
            planned = sup.restarting
            code = sup.exited(now)
            if code is None:
                if sup.child is None and sup.stopping_since is not None:  # stopped before it ever ran
                    self._gone(sup)
                    del self.by_name[name]
                    again = True
                continue
            a = sup.assignment
            self._gone(sup)
            again = True
            if sup.stopping_since is not None:
                log.info("%s of queue %s stopped (exit code %s)", a.slot, a.queue, code)
                del self.by_name[name]
            elif planned:
                log.info("%s of queue %s stopped (exit code %s): starting it again", a.slot, a.queue, code)
            else:
                sup.restarts += 1
                log.warning("%s of queue %s exited with code %s: restart %d in %.1fs",
                            a.slot, a.queue, code, sup.restarts, max(0.0, sup.not_before - now))
        return again

    def _gone(self, sup: Supervised) -> None:
        self.registration.unpublish(sup.assignment)
        self.ports.release(*sup.ports)
        sup.ports = []

    def stop_all(self, timeout: float = 10.0) -> None:
        """Stop every child (SIGTERM, then a second one, then SIGKILL) and wait at most ``timeout``."""
        now = time.monotonic()
        for sup in self.by_name.values():
            sup.begin_stop(now)
        deadline = now + timeout
        while any(s.running for s in self.by_name.values()) and time.monotonic() < deadline:
            for sup in self.by_name.values():
                sup.push_stop(time.monotonic())
            time.sleep(0.02)
        for sup in self.by_name.values():
            sup.exited(time.monotonic())
        self.by_name.clear()
        for f in self._logs.values():
            f.close()
        self._logs.clear()

    def status(self) -> list[dict[str, Any]]:
        return [{"queue": s.assignment.queue, "role": s.assignment.role, "id": s.assignment.slot,
                 "pid": s.child.pid if s.child is not None else 0, "alive": s.running,
                 "ready": s.ready and s.running and s.stopping_since is None, "restarts": s.restarts}
                for s in self.by_name.values()]


def _document(a: Assignment, info: Ready, incarnation: str, host: str) -> Document | None:
    """The znode document of the child of ``a`` that printed the ready line ``info`` on ``host`` (None: the
    ready line of another role)."""
    if a.role == MONITOR:
        return (MonitorDoc(endpoint=info.endpoint, host=host, pid=info.pid) if isinstance(info, MonitorReady)
                else None)
    if a.role == JOURNAL:
        return (JournalDoc(host=host, intake=info.intake, pid=info.pid, incarnation=info.incarnation)
                if isinstance(info, JournalReady) else None)
    return (ExchangeDoc(name=incarnation, host=host, frontend=info.frontend, backend=info.backend, pid=info.pid)
            if isinstance(info, ExchangeReady) else None)
