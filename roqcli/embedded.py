"""An embedded cluster on one machine: ZooKeeper, GCMs and one host manager per loopback address.

Used by ``roq cluster up``, ``make demo`` (through the scenario runner), the benchmark and the tests. Each "host" is a loopback alias
(127.0.0.11, 127.0.0.12, ...) with its own host manager; queues are then created through the management
API. Every process it starts it stops, by pid; all of them also die with it (``PR_SET_PDEATHSIG``).

Given budgets, the hosts are emulated (:mod:`roqcli.emulation`): each host manager and its children run in
a cgroup with the host's CPU quota and, with a bandwidth, in a network namespace of its own behind a rate
limited link (the hosts then have addresses in 198.18.0.0/15, and ZooKeeper and the GCMs bind the
bridge's).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import tempfile
import time
from typing import IO, Any, Callable, Sequence

import psutil

import client
from roq.errors import BrokerTimeoutError, ConfigError
from roq.security.keys import ClusterKeys
from roq.process import Child, spawn, stop_all
from roq.wire.ready import GcmReady, HostManagerReady
from roq import defaults
from roqcli.emulation import Emulation, HostBudget, sweep
from roqcli.zkserver import ZooKeeperServer

log = logging.getLogger(__name__)

__all__ = ["EmbeddedCluster", "host_addresses", "wait_for", "spawn_logged", "secure", "crash", "new_token"]


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``condition()`` until it is true; return its value.

    Raises:
        BrokerTimeoutError: still false after ``timeout`` (the message says ``what``).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise BrokerTimeoutError(f"timed out after {timeout:.1f}s waiting for: {what}")
        time.sleep(interval)


def host_addresses(n: int, first: str = "127.0.0.11") -> list[str]:
    """``n`` loopback addresses from ``first`` up (127.0.0.11, 127.0.0.12, ...)."""
    a, b, c, d = (int(x) for x in first.split("."))
    if a != 127 or d + n - 1 > 254:
        raise ConfigError(f"cannot take {n} loopback hosts from {first}")
    return [f"{a}.{b}.{c}.{d + i}" for i in range(n)]


class EmbeddedCluster:
    """Start ZooKeeper (unless ``zk`` is given), ``gcms`` GCMs and a host manager per host address.

    Args:
        hosts: how many hosts (loopback aliases from ``first_host``).
        zk: servers of an existing ZooKeeper; None = start one on 127.0.0.1.
        zk_port: the port of the ZooKeeper it starts (0 = any free port).
        gcms: how many GCMs (the first becomes the leader, the others standbys).
        root: ZooKeeper root (distinct roots let several clusters share one ZooKeeper).
        session_timeout: ZooKeeper session timeout of the GCMs and host managers.
        max_exchanges: capacity of each host.
        log_dir: where every process logs (None = inherit stderr).
        gcm_ports: (lookup, management, broadcast) of the first GCM; others use free ports.
        hostmanager_args: extra flags of every host manager (e.g. ``--exchange-option=backend_hwm=100``: a
            setting of every exchange it starts).
        gcm_args: extra flags of every GCM.
        kpi_archive: KPI archive directory of the host managers and their monitors (None = no archive).
        kpi_queue: with ``kpi_archive``, the queue each host's archive is shipped to (None = none; see
            :mod:`client.shipper`).
        budgets: each host's CPU and network budget (one for all, or one per host; None = plain loopback
            hosts sharing the machine).
        http_port: the HTTP port of the first GCM (0 = any free port; the others always take a free one;
            -1 = no HTTP API).
        api_token_file: the bearer token of writes over HTTP (None = a new token in a file of its own, readable
            by its owner only, removed on stop).
        secure: CURVE on every socket of the cluster (its keys from ``keys``); the cluster's own clients
            (:attr:`manager`, :meth:`connect`) use the credentials of the principal ``admin``.
        keys: with ``secure``, the directory of the cluster's keys (:class:`roq.security.keys.ClusterKeys`; what is
            missing is made); None = a temporary one, removed on stop.
        journal_dir: the host managers' ``--journal-dir`` (None = ``<log_dir>/journals``, or their default).
        emulation: emulated hosts started by the caller and shared with other clusters (e.g. the sites of a tree of
            clusters, on one bridge): this cluster's hosts are those of its addresses there; it neither starts nor
            stops them, and ``zk`` must listen on the emulation's bridge (its gateway).
    """

    def __init__(
        self,
        *,
        hosts: int = 3,
        first_host: str = "127.0.0.11",
        zk: str | None = None,
        zk_port: int = 0,
        gcms: int = 1,
        root: str = defaults.ROOT,
        session_timeout: float = 4.0,
        max_exchanges: int = 4,
        log_dir: str | None = None,
        gcm_ports: tuple[int, int, int] = (0, 0, 0),
        hostmanager_args: Sequence[str] = (),
        gcm_args: Sequence[str] = (),
        kpi_archive: str | None = None,
        kpi_queue: str | None = None,
        budgets: Sequence[HostBudget] | None = None,
        http_port: int = 0,
        api_token_file: str | None = None,
        secure: bool = False,
        keys: str | None = None,
        journal_dir: str | None = None,
        emulation: Emulation | None = None,
    ) -> None:
        self.secure = secure
        self._keys_dir = keys or ""
        self.keys: ClusterKeys | None = None
        self.credentials: str | None = None  # the admin's, when secure
        self.http_port = http_port
        self.api_token_file = api_token_file or ""
        self._token_dir = ""
        self.addresses = host_addresses(hosts, first_host)
        if budgets is not None and len(budgets) not in (1, hosts):
            raise ConfigError(f"{len(budgets)} host budgets for {hosts} hosts (give one, or one per host)")
        each = list(budgets or []) * (hosts if budgets is not None and len(budgets) == 1 else 1)
        if emulation is not None and (budgets is not None or not zk):
            raise ConfigError("a cluster on a shared emulation takes its hosts' budgets from it, and a ZooKeeper (zk) "
                              "that listens on its bridge")
        self._shared = emulation is not None  # started and stopped by the caller
        self.emulation = emulation or (Emulation(dict(zip(self.addresses, each)))
                                       if any(b.cpus or b.bandwidth for b in each) else None)
        self.bind = "127.0.0.1"  # where ZooKeeper and the GCMs listen
        self.zk = zk or ""
        self.zk_port = zk_port
        self.n_gcms = gcms
        self.root = root
        self.session_timeout = session_timeout
        self.max_exchanges = max_exchanges
        self.log_dir = log_dir
        self.journal_dir = journal_dir or (os.path.join(log_dir, "journals") if log_dir else "")
        self.gcm_ports = gcm_ports
        self.hostmanager_args = (list(hostmanager_args) + (["--kpi-archive", kpi_archive] if kpi_archive else [])
                                 + (["--kpi-queue", kpi_queue] if kpi_archive and kpi_queue else []))
        self.kpi_archive = kpi_archive
        self.gcm_args = list(gcm_args)
        self.zookeeper: ZooKeeperServer | None = None
        self.gcms: dict[str, Child] = {}
        self.hostmanagers: dict[str, Child] = {}
        self._gcm_ports: dict[str, tuple[int, int, int]] = {}  # the ports each GCM was started with
        self._gcm_http: dict[str, int] = {}  # and its HTTP port
        self._logs: list[IO[Any]] = []
        self._manager: client.QueueManager | None = None
        self._gcm_count = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> EmbeddedCluster:
        """Start everything; return once the leader lists every host.

        Raises:
            BrokerConnectionError: a process exited early.
            BrokerTimeoutError: the cluster was not whole within ``timeout``.
        """
        try:
            if self.emulation is None:
                sweep()  # what a cluster killed before its stop left (an emulation's start sweeps too)
            elif self._shared:
                self.addresses = [self.emulation.addresses[a] for a in self.addresses]
                self.bind = self.emulation.gateway or self.bind
            else:
                if self.emulation.networked and self.zk:
                    raise ConfigError("hosts with links of their own need the cluster's own ZooKeeper (no zk given): "
                                      "it must listen where their namespaces reach it")
                self.emulation.start()
                self.addresses = [self.emulation.addresses[a] for a in self.addresses]
                self.bind = self.emulation.gateway or self.bind
            if not self.zk:
                log_path = os.path.join(self.log_dir, "zookeeper.log") if self.log_dir else None
                if self.log_dir:
                    os.makedirs(self.log_dir, exist_ok=True)
                self.zookeeper = ZooKeeperServer(address=self.bind, port=self.zk_port, log_path=log_path).start(timeout)
                self.zk = self.zookeeper.hosts
            if self.secure:
                self.keys, self.credentials = secure(self._keys_dir, self.gcm_args, self.hostmanager_args)
            if not self.api_token_file:
                self._token_dir = tempfile.mkdtemp(prefix="roq-api-")
                self.api_token_file = new_token(os.path.join(self._token_dir, "api-token"))
            for i in range(self.n_gcms):
                self.add_gcm(ports=self.gcm_ports if i == 0 else (0, 0, 0), timeout=timeout,
                             http_port=self.http_port if i == 0 else min(self.http_port, 0))
            started = [self.add_host(a, wait=False) for a in self.addresses]
            for address in started:
                self.hostmanagers[address].wait_ready(timeout)
            self.wait_for(lambda: {h["Address"] for h in self.manager.hosts()} >= set(self.addresses),
                          timeout, "every host registered")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the host managers (they stop their children), the GCMs, then ZooKeeper."""
        if self._manager is not None:
            self._manager.close()
            self._manager = None
        # all at once, one SIGTERM each (a second one means "exit now", without stopping their children cleanly)
        stop_all(self.hostmanagers.values(), timeout)
        stop_all(self.gcms.values(), timeout)
        self.hostmanagers.clear()
        self.gcms.clear()
        if self.zookeeper is not None:
            self.zookeeper.stop()
            self.zookeeper = None
        for f in self._logs:
            f.close()
        self._logs.clear()
        if self.emulation is not None and not self._shared:
            self.emulation.stop()
        if self._token_dir:
            shutil.rmtree(self._token_dir, ignore_errors=True)
            self._token_dir = self.api_token_file = ""
        if self.keys is not None and not self._keys_dir:  # keys of its own making
            shutil.rmtree(self.keys.directory, ignore_errors=True)
            self.keys = None

    @property
    def api_token(self) -> str:
        """The bearer token of writes over the HTTP API."""
        with open(self.api_token_file, encoding="utf-8") as f:
            return f.read().strip()

    def host_http_url(self, address: str) -> str:
        """The base URL of the health checks of the host manager of ``address`` and of its processes."""
        info = self.hostmanagers[address].info
        return info.http if isinstance(info, HostManagerReady) else ""  # "": not ready (yet)

    def http_url(self, gid: str | None = None) -> str:
        """The base URL of GCM ``gid``'s HTTP API (default: the first running one; a standby redirects)."""
        child = self.gcms[gid] if gid is not None else next(iter(self.gcms.values()))
        return child.info.http if isinstance(child.info, GcmReady) else ""

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ processes

    def add_gcm(self, *, ports: tuple[int, int, int] = (0, 0, 0), timeout: float = 30.0, http_port: int = 0) -> str:
        """Start one more GCM on 127.0.0.1 (its HTTP API always on 127.0.0.1); return its id."""
        self._gcm_count += 1
        gid = f"gcm{self._gcm_count}"
        lookup, management, broadcast = ports
        self._gcm_ports[gid] = ports
        self._gcm_http[gid] = http_port
        child = self._spawn(gid, "gcm", [
            "--zk", self.zk, "--root", self.root, "--id", gid, "--address", self.bind,
            "--lookup-port", str(lookup), "--management-port", str(management), "--broadcast-port", str(broadcast),
            "--session-timeout", str(self.session_timeout), "--http-port", str(http_port),
            "--api-token-file", self.api_token_file, *self.gcm_args,
        ])  # fmt: skip
        self.gcms[gid] = child
        child.wait_ready(timeout)
        return gid

    def add_host(self, address: str, *, wait: bool = True) -> str:
        """Start the host manager of ``address``."""
        args = [
            "--zk", self.zk, "--root", self.root, "--address", address,
            "--max-exchanges", str(self.max_exchanges), "--session-timeout", str(self.session_timeout),
            "--http-address", address, "--http-port", "0", *self.hostmanager_args,
        ]  # fmt: skip
        if self.log_dir:
            args += ["--log-dir", os.path.join(self.log_dir, address)]
        args += ["--journal-dir", os.path.abspath(self.journal_dir)] if self.journal_dir else []
        enter = None
        budget = None
        if self.emulation is not None:
            named = self.emulation.named(address)
            enter = self.emulation.enter(named)
            budget = self.emulation.budgets[named]
            if budget.bandwidth:
                args += ["--link-rate", budget.bandwidth]
        if (budget is None or not budget.cpus) and "--cpus" not in self.hostmanager_args:
            # the hosts share this machine: each reads the CPU of its own processes (of the machine's cores), not
            # the machine's, which the others' load (and anything else running here) would make its own
            args += ["--cpus", str(psutil.cpu_count() or 1)]
        child = spawn_logged(f"hostmanager-{address}", "hostmanager", args, self.log_dir, self._logs, enter)
        self.hostmanagers[address] = child
        if wait:
            child.wait_ready()
        return address

    def supervise(self) -> list[str]:
        """Start again every GCM and host manager that exited; a line per restart, saying what and why.

        A GCM comes back on the ports it had (the first one's are the cluster's well-known ports) as a
        standby; a host manager registers its host again and restarts what the host is assigned.
        """
        done = []
        for gid, child in list(self.gcms.items()):
            if child.alive():
                continue
            code = child.wait(0)
            del self.gcms[gid]
            new = self.add_gcm(ports=self._gcm_ports.pop(gid, (0, 0, 0)), http_port=self._gcm_http.pop(gid, 0))
            done.append(f"gcm {gid} (pid {child.pid}) exited with code {code}: started {new} "
                        f"(pid {self.gcms[new].pid})")
        for address, child in list(self.hostmanagers.items()):
            if child.alive():
                continue
            code = child.wait(0)
            self.add_host(address)
            done.append(f"host manager {address} (pid {child.pid}) exited with code {code}: started again "
                        f"(pid {self.hostmanagers[address].pid})")
        for line in done:
            log.warning("%s", line)
        return done

    def leader(self) -> str:
        """The id of the current GCM leader."""
        return str(self.manager.leader()["id"])

    def kill_gcm(self, gid: str) -> int:
        child = self.gcms.pop(gid)
        child.kill()
        return child.pid

    def kill_host(self, address: str) -> int:
        """SIGKILL a host manager (its children then get SIGTERM from the kernel)."""
        child = self.hostmanagers.pop(address)
        child.kill()
        return child.pid

    def crash_host(self, address: str) -> list[int]:
        """SIGKILL a host manager and every process it runs at once, as when the machine dies; their pids."""
        return crash(self.hostmanagers.pop(address))

    def pids(self) -> list[int]:
        children = [*self.gcms.values(), *self.hostmanagers.values()]
        pids = [c.pid for c in children if c.alive()]
        if self.zookeeper is not None and self.zookeeper.pid:
            pids.append(self.zookeeper.pid)
        return pids

    # ------------------------------------------------------------------ management

    @property
    def manager(self) -> client.QueueManager:
        if self._manager is None:
            self._manager = client.QueueManager(self.zk, root=self.root, credentials=self.credentials)
        return self._manager

    def connect(self, queue: str, **options: Any) -> client.Connection:
        """A connection to ``queue`` (with the admin's credentials when the cluster is secure, unless
        ``credentials`` is given)."""
        options.setdefault("credentials", self.credentials)
        return client.connect(zk=self.zk, queue=queue, root=self.root, **options)

    def wait_for(self, condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
        """:func:`wait_for`."""
        return wait_for(condition, timeout, what, interval)

    def address_of(self, host: str) -> str:
        """The address of host ``host`` (its loopback address; an emulated host's link has one in 198.18.0.0/15)."""
        return self.emulation.addresses.get(host, host) if self.emulation is not None else host

    def _spawn(self, name: str, module: str, args: list[str]) -> Child:
        return spawn_logged(name, module, args, self.log_dir, self._logs)


def secure(directory: str, gcm_args: list[str], hostmanager_args: list[str]) -> tuple[ClusterKeys, str]:
    """A cluster's keys in ``directory`` ("" = a new temporary one), made where missing, and the flags that
    give them to its GCMs and host managers appended to their arguments; the keys and the admin's
    credentials."""
    keys = ClusterKeys(directory or tempfile.mkdtemp(prefix="roq-keys-"))
    log.info("cluster keys in %s (made: %s)", keys.directory, ", ".join(keys.ensure()) or "none")
    for flags in (gcm_args, hostmanager_args):
        flags += ["--secret-key", keys.secret_key, "--keyring", keys.keyring, "--zk-auth", keys.zk_auth]
    gcm_args += ["--api-tokens", keys.tokens]
    return keys, keys.client("admin")


def new_token(path: str) -> str:
    """Write a new bearer token into ``path`` (a new file, its owner's only); return ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    return path


def crash(child: Child) -> list[int]:
    """SIGKILL ``child`` and every process under it at once, as when a machine dies; their pids."""
    child.signal(signal.SIGSTOP)  # it must not restart its children as they die
    try:
        victims = psutil.Process(child.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        victims = []
    for p in victims:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    child.kill()
    return [child.pid, *(p.pid for p in victims)]


def spawn_logged(name: str, module: str, args: list[str], log_dir: str | None, files: list[IO[Any]],
                 enter: Callable[[], None] | None = None) -> Child:
    """Start ``python -m module args`` logging to ``log_dir/<name>.log`` (None: this process's stderr);
    the opened file is appended to ``files`` for the caller to close. ``enter``: see :func:`roq.process.spawn`."""
    stderr: IO[Any] | None = None
    if log_dir is not None:
        os.makedirs(log_dir, exist_ok=True)
        stderr = open(os.path.join(log_dir, name.replace(" ", "-") + ".log"), "ab")
        files.append(stderr)
    return spawn(name, module, args, stderr=stderr, enter=enter)
