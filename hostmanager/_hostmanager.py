"""The host manager: registers its host, runs the processes assigned to it, restarts them, reports KPIs.

It converges on what ZooKeeper asks: the children of ``/roq/assignments/<address>`` name the monitors and
exchanges this host must run. For each it allocates ports (never one still in use), spawns the process,
and once the process printed its ready line publishes its endpoints in an ephemeral znode of its own
session (``/roq/queues/<q>/monitor`` or ``/roq/queues/<q>/exchanges/<id>``). A child that exits while
still assigned is restarted (at once the first time). An assignment that disappears stops its process.

The host's own ephemeral node carries its capacity and psutil KPIs, rewritten every KPI period. When the
ZooKeeper session expires the host manager registers again and republishes every running child. When it
stops it stops its children; if it is killed they get SIGTERM from the kernel (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import time
from typing import IO, Any

import psutil
import zmq
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from hostmanager._children import Assignment, Supervised
from hostmanager._ports import PortAllocator
from roq import control
from roq.errors import ConfigError, ProtocolError
from roq.kpi.archive import HOSTS_PARTITION, ArchiveWriter
from roq.kpi.records import HostRecord
from roq.runtime import DropCounter, SignalWakeup
from roq.sockets import bind, poll_ms
from roq.zk import Paths, Session, check_hosts, dumps, incarnation, loads

__all__ = ["HostManager", "HostManagerConfig"]

log = logging.getLogger("hostmanager")

CPU_WINDOW = 5  # the host's CPU % is the mean of this many KPI periods


@dataclasses.dataclass(frozen=True)
class HostManagerConfig:
    """A host manager.

    Attributes:
        zk: ZooKeeper connection string.
        address: the host's address: children bind to it and it names the host in ZooKeeper.
        port: the host manager's control port (Ping, Status); 0 = any free port.
        root: ZooKeeper root of the cluster.
        max_exchanges: how many exchanges this host accepts (capacity published in ZooKeeper).
        kpi_period: seconds between host KPI updates in ZooKeeper.
        session_timeout: ZooKeeper session timeout: this host vanishes this long after a crash.
        port_low, port_high: the port range for children (both 0 = any free port).
        log_dir: directory for the children's logs ("" = inherit this process's stderr).
        exchange_args, monitor_args: extra flags for every exchange or monitor started.
        kpi_archive: KPI archive directory: its host KPIs go there, and its monitors archive their queues'
            ("" = none).
    """

    zk: str
    address: str = "127.0.0.1"
    port: int = 0
    root: str = "/roq"
    max_exchanges: int = 4
    kpi_period: float = 1.0
    session_timeout: float = 6.0
    port_low: int = 0
    port_high: int = 0
    log_dir: str = ""
    exchange_args: tuple[str, ...] = ()
    monitor_args: tuple[str, ...] = ()
    kpi_archive: str = ""

    def __post_init__(self) -> None:
        if self.zk:  # "" only while flags are being gathered
            check_hosts(self.zk)
        Paths(self.root)
        if self.max_exchanges < 0:
            raise ConfigError(f"max_exchanges must be 0 or more, got {self.max_exchanges}")
        if self.kpi_period <= 0 or self.session_timeout <= 0:
            raise ConfigError("kpi_period and session_timeout must be positive")


class HostManager:
    def __init__(self, config: HostManagerConfig) -> None:
        self.config = config
        self.paths = Paths(config.root)
        self.address = config.address
        self.ports = PortAllocator(config.address, config.port_low, config.port_high)
        self.session = Session(config.zk, timeout=config.session_timeout)
        self._ctx = zmq.Context()
        self._control = self._ctx.socket(zmq.ROUTER)
        self._control.setsockopt(zmq.LINGER, 0)
        self._control.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
        self.endpoint = ""
        self.drops = DropCounter(log, "host manager")
        self.children: dict[str, Supervised] = {}
        self._logs: dict[str, IO[Any]] = {}
        self._dirty = True
        self._registered = False
        self._next_kpi = 0.0
        self._net_last: tuple[float, int] | None = None
        # placement acts on the CPU of the last few reports, not on one busy second (a process starting)
        self._cpu: collections.deque[float] = collections.deque(maxlen=CPU_WINDOW)
        psutil.cpu_percent(None)  # the first reading counts from here
        self._started = time.time()
        self.archive = (ArchiveWriter(config.kpi_archive, HOSTS_PARTITION, f"host-{config.address}-{os.getpid()}")
                        if config.kpi_archive else None)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Bind the control port, connect to ZooKeeper and register the host.

        Raises:
            BrokerConnectionError: the port cannot be bound or ZooKeeper cannot be reached.
        """
        self.endpoint = bind(self._control, self.address, self.config.port)
        self.session.start()
        zk = self.session.zk
        zk.ensure_path(self.paths.hosts)
        zk.ensure_path(self.paths.host_assignments(self.address))
        zk.ensure_path(self.paths.queues)
        self._register()

    def serve(self, wakeup: SignalWakeup) -> None:
        poller = zmq.Poller()
        poller.register(wakeup.fd, zmq.POLLIN)
        poller.register(self.session.fd, zmq.POLLIN)
        poller.register(self._control, zmq.POLLIN)
        watched: dict[int, Supervised] = {}
        while True:
            # children's outputs come and go: keep the poller in step with them
            current = {s.child.stdout_fd: s for s in self.children.values() if s.child is not None}
            for fd in set(watched) - set(current):
                poller.unregister(fd)
            for fd in set(current) - set(watched):
                poller.register(fd, zmq.POLLIN)
            watched = current
            now = time.monotonic()
            events = dict(poller.poll(poll_ms(min(0.1, max(0.0, self._next_kpi - now)))))
            now = time.monotonic()
            if wakeup.fd in events and wakeup.consume():
                log.info("host manager %s: stopping on signal", self.address)
                return
            if self.session.fd in events:
                self._on_session()
            if self._control in events:
                self._on_control()
            for fd in events:
                sup = watched.get(fd)
                if sup is not None:
                    info = sup.read()
                    if info is not None:
                        self._on_ready(sup, info)
            self._check_children(now)
            if self._dirty and self._registered:
                self._reconcile(now)
            if now >= self._next_kpi:
                self._next_kpi = now + self.config.kpi_period
                self._report()

    def close(self) -> None:
        """Stop every child (SIGTERM, then a second one, then SIGKILL), leave ZooKeeper, close."""
        now = time.monotonic()
        for sup in self.children.values():
            sup.begin_stop(now)
        deadline = now + 10.0
        while any(s.running for s in self.children.values()) and time.monotonic() < deadline:
            for sup in self.children.values():
                sup.push_stop(time.monotonic())
            time.sleep(0.02)
        for sup in self.children.values():
            sup.exited(time.monotonic())
        self.children.clear()
        if self.archive is not None:
            self.archive.close()
        self.session.close()
        self._control.close()
        self._ctx.term()
        for f in self._logs.values():
            f.close()

    # ------------------------------------------------------------------ ZooKeeper

    def _on_session(self) -> None:
        states, fired = self.session.consume()
        if fired:
            self._dirty = True
        for state in states:
            if state == "lost":
                log.warning("host manager %s: ZooKeeper session lost; will register again", self.address)
                self._registered = False
            elif state == "connected" and not self._registered:
                try:
                    self._register()
                    for sup in self.children.values():
                        if sup.ready and sup.child is not None:
                            self._publish(sup, sup.child.info)
                except KazooException as exc:
                    log.warning("host manager %s: registering again failed (%s); retrying", self.address, exc)

    def _host_data(self) -> dict[str, Any]:
        vm = psutil.virtual_memory()
        return {
            "address": self.address,
            "endpoint": self.endpoint,
            "pid": os.getpid(),
            "max_exchanges": self.config.max_exchanges,
            "cpus": psutil.cpu_count() or 1,
            "memory_bytes": vm.total,
            "started": self._started,
            "kpis": self._kpis(),
            "exchanges": sum(1 for s in self.children.values() if s.assignment.role == "exchange" and s.ready),
            "monitors": sum(1 for s in self.children.values() if s.assignment.role == "monitor" and s.ready),
        }

    def _register(self) -> None:
        zk = self.session.zk
        path = self.paths.host(self.address)
        zk.ensure_path(self.paths.host_assignments(self.address))
        try:
            zk.create(path, dumps(self._host_data()), ephemeral=True)
        except NodeExistsError:
            _, stat = zk.get(path)
            if stat.ephemeralOwner != self.session.session_id:
                log.warning("host manager %s: replacing the node of a previous session", self.address)
                zk.delete(path)
                zk.create(path, dumps(self._host_data()), ephemeral=True)
        self._registered = True
        self._dirty = True
        log.info("host manager %s registered in ZooKeeper (session %#x)", self.address, self.session.session_id)

    def _report(self) -> None:
        if not self._registered:
            return
        try:
            self.session.zk.set(self.paths.host(self.address), dumps(self._host_data()))
        except NoNodeError:  # deleted by someone: be there again
            self._registered = False
            try:
                self._register()
            except KazooException as exc:
                log.warning("host manager %s: registering again failed (%s)", self.address, exc)
        except KazooException as exc:
            log.debug("host KPI update failed: %s", exc)

    def _kpis(self) -> dict[str, float]:
        now = time.monotonic()
        net = psutil.net_io_counters()
        total = net.bytes_sent + net.bytes_recv
        rate = 0.0
        if self._net_last is not None and now > self._net_last[0]:
            rate = (total - self._net_last[1]) / (now - self._net_last[0])
        self._net_last = (now, total)
        self._cpu.append(psutil.cpu_percent(None))
        kpis = {
            "cpu_percent": round(sum(self._cpu) / len(self._cpu), 1),
            "memory_percent": psutil.virtual_memory().percent,
            "net_bytes_per_s": round(rate, 1),
        }
        if self.archive is not None:
            self.archive.append(HostRecord(host=self.address, cpu_percent_now=self._cpu[-1], **kpis))
            self.archive.tick()
        return kpis

    # ------------------------------------------------------------------ converging on the assignments

    def _reconcile(self, now: float) -> None:
        self._dirty = False
        zk = self.session.zk
        try:
            names = zk.get_children(self.paths.host_assignments(self.address), watch=self.session.watch)
        except NoNodeError:
            zk.ensure_path(self.paths.host_assignments(self.address))
            self._dirty = True
            return
        except KazooException as exc:
            log.warning("reading assignments failed: %s", exc)
            self._dirty = True
            return
        wanted = {}
        for name in names:
            a = Assignment.parse(name)
            if a is None:
                log.warning("ignoring malformed assignment %r", name)
                continue
            wanted[name] = a
        for name, sup in list(self.children.items()):
            if name not in wanted and sup.stopping_since is None:
                log.info("%s of queue %s no longer assigned here: stopping it", sup.assignment.id, sup.assignment.queue)
                sup.begin_stop(now)
        for name, a in wanted.items():
            sup = self.children.get(name)
            if sup is None:
                sup = self.children[name] = Supervised(a)
            if sup.stopping_since is not None:
                continue
            if a.role == "exchange":
                monitor = self._monitor_endpoint(a.queue)
                if sup.child is not None and monitor and sup.args and sup.args[1] != monitor:
                    if sup.child.tell(monitor=monitor):
                        log.info("monitor of queue %s moved to %s: exchange %s told", a.queue, monitor, a.id)
                        sup.args[1] = monitor  # what a restart of this incarnation's successor would use
                    else:
                        log.info("monitor of queue %s moved to %s: restarting exchange %s", a.queue, monitor, a.id)
                        sup.child.stop(5.0)
                        self._child_gone(sup, now)
                if sup.child is None and monitor and now >= sup.not_before:
                    self._start_exchange(sup, monitor)
            elif sup.child is None and now >= sup.not_before:
                self._start_monitor(sup)

    def _monitor_endpoint(self, queue: str) -> str:
        try:
            data, _ = self.session.zk.get(self.paths.monitor(queue), watch=self.session.watch)
        except NoNodeError:
            # no monitor yet: wake up when it appears
            self.session.zk.exists(self.paths.monitor(queue), watch=self.session.watch)
            return ""
        return str(loads(data).get("endpoint", ""))

    def _log_for(self, sup: Supervised) -> IO[Any] | None:
        if not self.config.log_dir:
            return None
        name = sup.assignment.name
        if name not in self._logs:
            os.makedirs(self.config.log_dir, exist_ok=True)
            self._logs[name] = open(os.path.join(self.config.log_dir, f"{name.replace('@', '-')}.log"), "ab")
        return self._logs[name]

    def _start_monitor(self, sup: Supervised) -> None:
        a = sup.assignment
        port = self.ports.allocate(sup.last_port)
        sup.last_port = port
        c = self.config
        args = [
            "--address", self.address, "--port", str(port), "--queue", a.queue,
            "--zk", c.zk, "--root", c.root, "--session-timeout", str(c.session_timeout), *c.monitor_args,
        ]  # fmt: skip
        if c.kpi_archive:
            args += ["--kpi-archive", c.kpi_archive]
        sup.start(args, [port], self._log_for(sup))

    def _start_exchange(self, sup: Supervised, monitor: str) -> None:
        a = sup.assignment
        front, back = self.ports.allocate(), self.ports.allocate()
        # every incarnation has a name of its own: the monitor must see a crashed exchange as lost (and fail
        # its publishers over), not as the same exchange come back on new ports
        sup.incarnation = incarnation(a.id)
        args = [
            "--monitor", monitor, "--commands-on-stdin", "--address", self.address, "--frontend-port", str(front),
            "--backend-port", str(back), "--id", sup.incarnation, *self.config.exchange_args,
        ]  # fmt: skip
        sup.start(args, [front, back], self._log_for(sup))

    def _on_ready(self, sup: Supervised, info: dict[str, Any]) -> None:
        if sup.stopping_since is None:
            self._publish(sup, info)

    def _publish(self, sup: Supervised, info: dict[str, Any]) -> None:
        """Write the ephemeral znode that makes a ready child known to the cluster."""
        a = sup.assignment
        zk = self.session.zk
        if a.role == "monitor":
            path = self.paths.monitor(a.queue)
            data = {"endpoint": info.get("endpoint", ""), "host": self.address, "pid": info.get("pid", 0)}
        else:
            path = self.paths.exchange(a.queue, a.id)
            data = {
                "name": sup.incarnation,
                "host": self.address,
                "frontend": info.get("frontend", ""),
                "backend": info.get("backend", ""),
                "pid": info.get("pid", 0),
            }
        try:
            try:
                zk.create(path, dumps(data), ephemeral=True)
            except NodeExistsError:
                zk.set(path, dumps(data))
        except NoNodeError:
            log.info("queue %s is gone: stopping %s", a.queue, a.id)
            sup.begin_stop(time.monotonic())
        except KazooException as exc:
            log.warning("publishing %s of queue %s failed: %s", a.id, a.queue, exc)
        else:
            log.info("%s of queue %s ready: %s", a.id, a.queue, data)

    def _unpublish(self, sup: Supervised) -> None:
        a = sup.assignment
        path = self.paths.monitor(a.queue) if a.role == "monitor" else self.paths.exchange(a.queue, a.id)
        try:
            _, stat = self.session.zk.get(path)
            if stat.ephemeralOwner == self.session.session_id:
                self.session.zk.delete(path, version=stat.version)
        except (NoNodeError, KazooException):
            pass

    def _check_children(self, now: float) -> None:
        for name, sup in list(self.children.items()):
            if sup.restart_pending and now >= sup.not_before:
                self._dirty = True
            sup.push_stop(now)
            code = sup.exited(now)
            if code is None:
                if sup.child is None and sup.stopping_since is not None:
                    self._child_gone(sup, now)
                    del self.children[name]
                continue
            a = sup.assignment
            self._child_gone(sup, now)
            if sup.stopping_since is not None:
                log.info("%s of queue %s stopped (exit code %s)", a.id, a.queue, code)
                del self.children[name]
            else:
                sup.restarts += 1
                log.warning("%s of queue %s exited with code %s: restart %d in %.1fs",
                            a.id, a.queue, code, sup.restarts, max(0.0, sup.not_before - now))
                self._dirty = True

    def _child_gone(self, sup: Supervised, now: float) -> None:
        self._unpublish(sup)
        self.ports.release(*sup.ports)
        sup.ports = []
        if sup.child is not None and not sup.child.alive():
            sup.exited(now)

    # ------------------------------------------------------------------ control port

    def _on_control(self) -> None:
        for _ in range(100):
            try:
                frames = self._control.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2:
                self.drops.drop("control message with a wrong frame count", f"{len(frames) - 1} frames")
                continue
            ident, body = frames
            try:
                msg = control.decode(body)
            except ProtocolError as exc:
                self.drops.drop("malformed control message", str(exc))
                self._answer(ident, control.Reply(request=0, result=control.Result.BAD_REQUEST, comment=str(exc)))
                continue
            if isinstance(msg, (control.Ping, control.Status)):
                self._answer(ident, control.Reply(request=msg.CMD, result=control.Result.OK, data=self.status()))
            else:
                self._answer(ident, control.Reply(request=msg.CMD, result=control.Result.UNKNOWN_COMMAND,
                                                  comment=f"a host manager does not take {type(msg).__name__}"))

    def _answer(self, ident: bytes, reply: control.Reply) -> None:
        try:
            self._control.send_multipart([ident, control.encode(reply)], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def status(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "pid": os.getpid(),
            "children": [
                {
                    "queue": s.assignment.queue,
                    "role": s.assignment.role,
                    "id": s.assignment.id,
                    "pid": s.child.pid if s.child is not None else 0,
                    "ready": s.ready,
                    "restarts": s.restarts,
                }
                for s in self.children.values()
            ],
            "dropped": self.drops.total,
        }
