"""The host manager: registers its host, runs the processes assigned to it, restarts them, reports KPIs.

It converges on what ZooKeeper asks (:mod:`hostmanager._converge`): the children of
``/roq/assignments/<address>`` name the monitors and exchanges this host must run. For each it allocates
ports (never one still in use), starts the process from its settings object (:mod:`hostmanager._config`),
and once the process printed its ready line publishes its endpoints in an ephemeral znode of its own
session (:mod:`hostmanager._supervision`, :mod:`hostmanager._host`). A child that exits while still assigned is restarted (at once the first
time); an exchange is told on its command pipe when its queue's monitor moves. An assignment that
disappears stops its process.

With a KPI queue it also runs the host's KPI shipper (:mod:`hostmanager._shipping`).

When the ZooKeeper session expires the host manager registers again and republishes every ready child.
When it stops it stops its children; if it is killed they get SIGTERM from the kernel
(``PR_SET_PDEATHSIG``). Its control port answers Ping and Status; with an HTTP port, it answers the health
checks of itself and of every process it runs (:mod:`hostmanager._health`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import zmq

from hostmanager._config import MODULES, ChildSettings, HostManagerConfig
from hostmanager._converge import converge, wanted
from hostmanager._health import Health
from hostmanager._host import HostSampler, Registration
from hostmanager._ports import PortAllocator
from hostmanager._children import Supervised
from hostmanager._shipping import Shipping
from hostmanager._supervision import Children
from roq import prefork
from roq.wire import control
from roq.security.curve import Curve
from roq.wire.documents import JOURNAL, LINK, MONITOR, FederationDoc, HostDoc, MonitorDoc, QueueDoc
from roq.errors import BrokerConnectionError, ZooKeeperError
from roq.kpi.archive import HOSTS_PARTITION, ArchiveWriter, writer_name
from roq.wire.ready import HostManagerReady
from roq.runtime import DropCounter, SignalWakeup, run_main
from roq.http import HttpServer
from roq.server import Dispatcher, Request, RouterServer
from roq.loop import Loop
from roq.sockets import bind, check_endpoint
from roq.zk import Paths, Session, ZkAuth

__all__ = ["HostManager"]

log = logging.getLogger("hostmanager")

CHECK_S = 0.1  # the children are looked at at least this often (an exit is seen within it)


class HostManager:
    """The shell of a host manager: its control port, ZooKeeper session, children and loop.

    Raises:
        ConfigError: an exchange or monitor option is bad (see :class:`~hostmanager._config.ChildSettings`).
    """

    def __init__(self, config: HostManagerConfig) -> None:
        settings = ChildSettings(config)  # first: a bad option stops the host manager before it does anything
        self.config = config
        self.paths = Paths(config.root)
        self.address = config.address
        # ConfigError: unsafe or unreadable ZooKeeper credentials
        self.session = Session(config.zk, timeout=config.session_timeout,
                               auth=ZkAuth.load(config.zk_auth) if config.zk_auth else None)
        archive = (ArchiveWriter(config.kpi_archive, HOSTS_PARTITION, writer_name("host", config.address, os.getpid()),
                                 rotate_s=config.kpi_rotate_s)
                   if config.kpi_archive else None)
        self.host = HostSampler(config.address, config.max_exchanges, archive, config.cpus, config.link_bytes_per_s)
        self.registration = Registration(self.session, self.paths, config.address)
        ports = PortAllocator(config.address, config.port_low, config.port_high)
        self.children = Children(settings, ports, self.registration, config.log_dir)
        self.shipping = Shipping(settings.shipper(), config.log_dir)
        self.drops = DropCounter(log, "host manager")
        self._ctx = zmq.Context()
        try:  # ConfigError: an unsafe or unreadable key file, an unreadable keyring
            self.curve = Curve.of(self._ctx, config.secret_key, config.keyring, self.drops)
        except BaseException:
            self._ctx.term()
            raise
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
        if self.curve is not None:
            self.curve.serve(sock, "control")
        self.server = RouterServer(sock, Dispatcher("host manager", {control.Ping: self._on_status,
                                                                     control.Status: self._on_status}, self.drops),
                                   keyring=self.curve.keyring if self.curve is not None else None)
        self.http: HttpServer | None = None
        if config.http_port >= 0:
            health = Health(config.address, lambda: self.registration.registered and self.session.connected,
                            self.children.status)
            self.http = HttpServer(health.handle, where=f"host manager {config.address} http", drops=self.drops,
                                   max_body=1 << 10, max_connections=32, max_per_address=8)
        self.http_url = ""
        self.endpoint = ""
        self._skipped: set[str] = set()  # malformed assignment names already logged
        self._dirty = True
        self._outputs: dict[int, Supervised] = {}  # the children's outputs the loop reads

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Bind the control port, connect to ZooKeeper and register the host.

        Raises:
            BrokerConnectionError: the port cannot be bound or ZooKeeper cannot be reached.
        """
        if self.curve is not None:
            self.curve.start()  # before anyone can connect
            log.info("host manager %s: %s (its monitors and exchanges too)", self.address, self.curve.describe())
        else:
            log.warning("host manager %s: plaintext, no CURVE (its monitors and exchanges neither)", self.address)
        self.endpoint = bind(self.server.socket, self.address, self.config.port)
        self.host.bound(self.endpoint)
        if self.http is not None:
            self.http_url = self.http.bind(self.config.http_address, self.config.http_port)
        self.session.start()
        try:
            self.registration.register(self._host_doc())
        except ZooKeeperError as exc:
            raise BrokerConnectionError(f"cannot register in ZooKeeper: {exc}") from exc
        settings = self.children.settings
        log.info("host manager %s: exchange options %s, monitor options %s, link options %s", self.address,
                 settings.exchange_options or "none", settings.monitor_options or "none",
                 settings.link_options or "none")

    def ready_info(self) -> HostManagerReady:
        """The ready line."""
        return HostManagerReady(pid=os.getpid(), address=self.address, endpoint=self.endpoint, http=self.http_url)

    def serve(self, wakeup: SignalWakeup) -> None:
        """Run until a signal: the loop's table of registrations."""
        loop = Loop(f"host manager {self.address}", self.drops, idle=CHECK_S)
        loop.on_signal(wakeup, lambda: self._stop(loop))
        loop.add(self.session.fd, self._on_session, "ZooKeeper's events")
        loop.add(self.server.socket, self.server.readable, "the control port")
        if self.curve is not None:
            self.curve.attach(loop)
        if self.http is not None:
            self.http.attach(loop)
        loop.before_poll(lambda: self._watch_outputs(loop), "the children's outputs")
        loop.after_turn(self._supervise, "supervision")
        loop.every(lambda: self.config.kpi_period, self._report, "the host's KPIs", first=0.0)
        loop.run()

    def _stop(self, loop: Loop) -> None:
        log.info("host manager %s: stopping on signal", self.address)
        loop.stop()

    def _watch_outputs(self, loop: Loop) -> None:
        """Children's outputs come and go: keep the loop in step."""
        current = self.children.outputs()
        for fd in set(self._outputs) - set(current):
            loop.remove(fd)
        for fd, sup in current.items():
            if fd not in self._outputs:
                loop.add(fd, lambda sup=sup: self.children.read(sup), "a child's output")
        self._outputs = current

    def _supervise(self, now: float) -> None:
        self._dirty |= self.children.check(now)
        self.shipping.check(now)
        if self._dirty and self.registration.registered:
            self._converge(now)

    def _report(self, now: float) -> None:
        self.registration.report(self._host_doc())

    def close(self) -> None:
        """Stop every child (SIGTERM, then a second one, then SIGKILL), leave ZooKeeper, close."""
        self.children.stop_all()
        self.host.close()
        self.shipping.stop()
        self.session.close()
        self.server.socket.close()
        if self.curve is not None:
            self.curve.close()
        if self.http is not None:
            self.http.close()
        self._ctx.term()

    # ------------------------------------------------------------------ ZooKeeper

    def _on_session(self) -> None:
        states, fired = self.session.consume()
        self._dirty |= fired
        for state in states:
            if state == "lost":
                log.warning("host manager %s: ZooKeeper session lost; will register again", self.address)
                self.registration.lost()
            elif state == "connected" and not self.registration.registered:
                try:
                    self.registration.register(self._host_doc())
                    self.children.republish()
                except ZooKeeperError as exc:
                    log.warning("host manager %s: registering again failed (%s); retrying", self.address, exc)
                self._dirty = True

    def _host_doc(self) -> HostDoc:
        return self.host.doc(exchanges=self.children.ready("exchange"), monitors=self.children.ready(MONITOR))

    def _converge(self, now: float) -> None:
        """Bring the children in line with the assignments (see :func:`~hostmanager._converge.converge`)."""
        self._dirty = False
        try:
            names = self.session.children(self.paths.host_assignments(self.address), watch=True)
            assignments = wanted(names, skipped=self._skipped)
            queues = sorted({a.queue for a in assignments.values() if a.role != MONITOR})
            monitors = {q: self._monitor_endpoint(q) for q in queues}
            journals = {a.queue: self._journal_of(a.queue) for a in assignments.values() if a.role == JOURNAL}
            generations = {q: doc.journal_generation for q, doc in journals.items()}
            replicas = {q: max(1, len(doc.journal_replicas)) for q, doc in journals.items()}
            learners = {q: self.address in doc.journal_learners for q, doc in journals.items()}
            federation = (self.session.read(self.paths.federation, FederationDoc.decode, watch=True)[0]
                          if any(a.role == LINK for a in assignments.values()) else None)
        except ZooKeeperError as exc:
            log.warning("reading the assignments failed: %s", exc)
            self._dirty = True
            return
        for action in converge(assignments, self.children.states(), monitors, now, generations, federation, replicas,
                               learners):
            self._dirty |= self.children.apply(action, now)

    def _journal_of(self, queue: str) -> QueueDoc:
        """``queue``'s document, for its journal: its generation (how many times its journal was started anew after
        losing its host; the GCM counts it in the transaction that places the journal, so a host manager that sees
        the journal's assignment reads at least that count), its replicas, and which of them are learners."""
        doc, _ = self.session.read(self.paths.queue(queue), QueueDoc.decode)
        return doc if doc is not None else QueueDoc()

    def _monitor_endpoint(self, queue: str) -> str:
        """The endpoint of ``queue``'s monitor ("" while there is none, or none that can be dialled)."""
        doc, _ = self.session.read(self.paths.monitor(queue), MonitorDoc.decode, watch=True)
        if doc is None or not doc.endpoint:
            return ""
        try:
            return check_endpoint(doc.endpoint)
        except ValueError as exc:  # ConfigError, or a port of thousands of digits int() refuses
            log.warning("queue %s: ignoring its monitor's node: %s", queue, exc)
            return ""

    # ------------------------------------------------------------------ control port

    def _on_status(self, _msg: control.Message, _request: Request) -> control.Reply:
        return control.Reply(data=self.status())

    def status(self) -> dict[str, Any]:
        return {"address": self.address, "pid": os.getpid(), "children": self.children.status(),
                "shipper": self.shipping.status(), "dropped": self.drops.total}


DESCRIPTION = (
    "Run the RoQ host manager of one host: it registers the host in ZooKeeper (an ephemeral node with its "
    "capacity and CPU/memory/network KPIs), runs the monitors and exchanges the GCM assigns to it, restarts "
    "them when they crash and stops them when it stops. Settings come from the [hostmanager] table of "
    "--config, overridden by flags; --exchange-option and --monitor-option (KEY=VALUE, repeatable) set fields "
    "of every exchange's and monitor's settings and are checked at start. Prints 'READY {json}' once "
    "registered."
)


def _host_manager(config: HostManagerConfig) -> HostManager:
    # before its ZooKeeper session and ZeroMQ context start threads: its children are forked from a copy of it, with
    # their code imported meanwhile (the first exchange the GCM assigns starts in milliseconds)
    prefork.prepare(sorted(set(MODULES.values())))
    return HostManager(config)


def main(argv: list[str] | None = None) -> int:
    return run_main("hostmanager", HostManagerConfig, _host_manager, argv, description=DESCRIPTION)
