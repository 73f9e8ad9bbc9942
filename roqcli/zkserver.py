"""A real Apache ZooKeeper, started from Debian's ``zookeeper`` package, for tests and local clusters.

:class:`ZooKeeperServer` runs one standalone server; :class:`ZooKeeperEnsemble` runs n servers that form
one quorum on a single address. Each server is a JVM started as a child of this process with
``PR_SET_PDEATHSIG``, so a crashed launcher never leaves a ZooKeeper running on; every JVM is stopped by
its pid. The death signal follows the *thread* that started the JVM: start servers from a thread that
lives as long as they should (the main thread, usually).

Readiness is checked with ZooKeeper's four-letter words (``ruok``, ``srvr``) on the client port, and a
server that fails to come up is killed and reported with the tail of its log.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Sequence

from roq.errors import BrokerConnectionError, BrokerTimeoutError, ConfigError
from roq.process import die_with_parent

__all__ = ["ZooKeeperServer", "ZooKeeperEnsemble", "zookeeper_classpath", "free_port"]

_JAVA_DIR = "/usr/share/java"
# zookeeper.jar's manifest names most of its dependencies, but also jars Debian does not ship (Jetty,
# Jackson): we list what the server needs ourselves. slf4j-simple makes the server log to stderr, which
# is our log file.
_JARS = (
    "zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar",
    "netty-handler.jar", "netty-common.jar", "netty-buffer.jar", "netty-transport.jar", "netty-resolver.jar",
    "netty-codec.jar", "netty-transport-native-epoll.jar", "netty-transport-native-unix-common.jar",
    "metrics-core.jar", "snappy-java.jar", "commons-cli.jar",
)  # fmt: skip
_INSTALL_HINT = "install Debian's ZooKeeper with `apt-get install zookeeper` (or `make setup`)"
# Small, fast-starting JVMs: a 2-core machine runs three of them next to the broker. No perf-data
# file either, so a killed JVM leaves nothing behind in /tmp.
_JVM_FLAGS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-XX:-UsePerfData",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
    "-Dzookeeper.jmx.log4j.disable=true",
)
_STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
_QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_POLL_S = 0.1
_LOG_TAIL_LINES = 25


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free on ``address`` right now (another process may take it before you bind it).

    Raises:
        ConfigError: nothing can bind ``address``.
    """
    return _free_ports(1, address)[0]


def _free_ports(n: int, address: str) -> list[int]:
    # All sockets stay bound until every port is read, so the n ports are distinct.
    sockets: list[socket.socket] = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((address, 0))
        return [sock.getsockname()[1] for sock in sockets]
    except OSError as exc:
        raise ConfigError(f"cannot bind a TCP port on address {address!r}: {exc}") from exc
    finally:
        for sock in sockets:
            sock.close()


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise ConfigError(f"no `java` on PATH: {_INSTALL_HINT}, which pulls in a Java runtime")
    return java


def zookeeper_classpath() -> str:
    """The java classpath of Debian's ``zookeeper`` package.

    Returns:
        the jars under /usr/share/java, joined with ``:``.

    Raises:
        ConfigError: a jar or ``java`` is missing; the message names it and how to install it.
    """
    _java()
    jars = [os.path.join(_JAVA_DIR, jar) for jar in _JARS]
    for jar in jars:
        if not os.path.isfile(jar):
            raise ConfigError(f"missing {jar}: {_INSTALL_HINT}")
    return ":".join(jars)


def _zoo_cfg(*, data_dir: str, address: str, client_port: int, tick_ms: int, extra: Sequence[str] = ()) -> str:
    """The content of a ``zoo.cfg``: a standalone server, plus ``extra`` lines (a quorum's)."""
    lines = [
        f"tickTime={tick_ms}",
        f"dataDir={data_dir}",
        f"clientPort={client_port}",
        f"clientPortAddress={address}",
        # The admin server needs Jetty, which Debian's package does not ship.
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,srvr",
        # Every write, create and delete, with who asked and whether it was allowed, in the server's log: the
        # server's own record of what a client without the cluster's identity tried (NoAuth: result=failure).
        "audit.enable=true",
        # Lets clients keep their session over a leader election (the default max is 20 ticks).
        f"maxSessionTimeout={max(20000, 20 * tick_ms)}",
        *extra,
    ]
    return "\n".join(lines) + "\n"


def _four_letter(address: str, port: int, word: bytes, timeout: float = 1.0) -> bytes | None:
    """Send a four-letter word and read the answer to EOF; None if the port does not answer."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.sendall(word)
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks)
    except OSError:
        return None


def _tail(path: str, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class ZooKeeperServer:
    """One standalone ZooKeeper server (a JVM child of this process).

    Its ``zoo.cfg`` and, unless ``log_path`` is given, its log (``zookeeper.log``) are kept in the data
    directory.

    Args:
        address: the address its client port binds to.
        port: its client port; 0 = a free port, chosen once and kept across restarts.
        data_dir: its data directory; None = a fresh temporary directory, removed by :meth:`stop`.
        tick_ms: ZooKeeper's ``tickTime`` in milliseconds.
        log_path: where the JVM's output goes (appended to).
        heap_mb: the JVM's maximum heap (``-Xmx``).

    Raises:
        ConfigError: a value is out of range.
    """

    _MAIN_CLASS = _STANDALONE_MAIN

    def __init__(
        self,
        *,
        address: str = "127.0.0.1",
        port: int = 0,
        data_dir: str | None = None,
        tick_ms: int = 500,
        log_path: str | None = None,
        heap_mb: int = 256,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ConfigError(f"port must be in 0..65535, not {port}")
        if tick_ms <= 0:
            raise ConfigError(f"tick_ms must be positive, not {tick_ms}")
        if heap_mb < 16:
            raise ConfigError(f"heap_mb must be at least 16, not {heap_mb}")
        self.address = address
        self._port = port
        self._data_dir_arg = data_dir
        self._tmp_dir: str | None = None
        self.tick_ms = tick_ms
        self._log_path_arg = log_path
        self.heap_mb = heap_mb
        self._popen: subprocess.Popen | None = None

    # ------------------------------------------------------------------ where it is

    @property
    def port(self) -> int:
        """The client port (a free one is chosen on first use when the constructor got 0)."""
        if self._port == 0:
            self._port = free_port(self.address)
        return self._port

    @property
    def hosts(self) -> str:
        """``address:port``, the connection string for a ZooKeeper client."""
        return f"{self.address}:{self.port}"

    @property
    def data_dir(self) -> str | None:
        """The data directory in use; None while a temporary one is not created yet (or was removed)."""
        return self._data_dir_arg or self._tmp_dir

    @property
    def log_path(self) -> str | None:
        """The JVM's log file; None while it would live in a temporary data directory not yet created."""
        if self._log_path_arg is not None:
            return self._log_path_arg
        directory = self.data_dir
        return os.path.join(directory, "zookeeper.log") if directory else None

    @property
    def pid(self) -> int | None:
        """The JVM's pid; None before :meth:`start` and after :meth:`stop` or :meth:`kill`."""
        return self._popen.pid if self._popen is not None else None

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        """Start the JVM; return once the server serves clients. Returns at once if it already runs.

        A standalone server is ready when ``ruok`` answers ``imok`` and ``srvr`` shows a mode (it
        answers ``imok`` a moment before it loads its data and serves).

        Raises:
            ConfigError: Debian's ZooKeeper or ``java`` is missing.
            BrokerConnectionError: the JVM exited before it was ready (the message has its log's tail).
            BrokerTimeoutError: not ready within ``timeout``; the JVM is killed (the message has its log's tail).
        """
        if self.alive():
            return self
        self._launch()
        try:
            self._await_ready(time.monotonic() + timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the JVM, wait up to ``timeout``, SIGKILL it if needed; remove a temporary data dir.

        Idempotent. A later :meth:`start` gets a fresh temporary directory (empty data) on the same port.
        """
        self._terminate(timeout)
        if self._tmp_dir is not None:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None

    def kill(self) -> None:
        """SIGKILL the JVM now, like a crash; keep the data directory for :meth:`restart`."""
        if self._popen is not None:
            if self._popen.poll() is None:
                self._popen.kill()
            self._popen.wait()
            self._popen = None

    def restart(self, timeout: float = 30.0) -> None:
        """Start again on the same port and data directory (after stopping it gracefully if it runs).

        Raises:
            BrokerConnectionError, BrokerTimeoutError: as :meth:`start`.
        """
        self._terminate(timeout)
        self.start(timeout)

    def alive(self) -> bool:
        """Whether the JVM runs."""
        return self._popen is not None and self._popen.poll() is None

    def mode(self) -> str | None:
        """What ``srvr`` says: ``"standalone"``, ``"leader"``, ``"follower"``...; None if not serving."""
        answer = _four_letter(self.address, self.port, b"srvr")
        for line in (answer or b"").decode("utf-8", "replace").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    # ------------------------------------------------------------------ hooks for quorum members

    def _config_lines(self) -> Sequence[str]:
        return ()

    def _prepare(self, data_dir: str) -> None:
        """Write what the data directory needs besides ``zoo.cfg``."""

    def _ready(self) -> bool:
        return _four_letter(self.address, self.port, b"ruok") == b"imok" and self.mode() is not None

    # ------------------------------------------------------------------ helpers

    def _launch(self) -> None:
        java = _java()
        classpath = zookeeper_classpath()
        if self._data_dir_arg is not None:
            os.makedirs(self._data_dir_arg, exist_ok=True)
        elif self._tmp_dir is None:
            self._tmp_dir = tempfile.mkdtemp(prefix="roq-zookeeper-")
        in_use = self.data_dir
        assert in_use is not None  # given, or made just above
        data_dir = os.path.abspath(in_use)
        config = os.path.join(data_dir, "zoo.cfg")
        with open(config, "w") as f:
            f.write(
                _zoo_cfg(
                    data_dir=data_dir,
                    address=self.address,
                    client_port=self.port,
                    tick_ms=self.tick_ms,
                    extra=self._config_lines(),
                )
            )
        self._prepare(data_dir)
        log_path = self.log_path
        assert log_path is not None  # its data directory is there now
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        with open(log_path, "ab") as log:
            self._popen = subprocess.Popen(
                [java, f"-Xmx{self.heap_mb}m", *_JVM_FLAGS, "-cp", classpath, self._MAIN_CLASS, config],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=data_dir,
                start_new_session=False,
                preexec_fn=functools.partial(die_with_parent, os.getpid()),
            )

    def _await_ready(self, deadline: float) -> None:
        while True:
            self._check_running()
            if self._ready():
                return
            if time.monotonic() >= deadline:
                raise BrokerTimeoutError(f"ZooKeeper on {self.hosts} not ready in time; {self._log_excerpt()}")
            time.sleep(_POLL_S)

    def _check_running(self) -> None:
        code = self._popen.poll() if self._popen is not None else None
        if code is not None:
            self._popen = None
            raise BrokerConnectionError(f"ZooKeeper on {self.hosts} exited with code {code}; {self._log_excerpt()}")

    def _signal_stop(self) -> None:
        """SIGTERM the JVM without waiting for it."""
        if self._popen is not None and self._popen.poll() is None:
            self._popen.terminate()

    def _log_excerpt(self) -> str:
        path = self.log_path
        return f"log {path}:\n{_tail(path)}" if path else "no log"

    def _terminate(self, timeout: float) -> None:
        popen = self._popen
        if popen is None:
            return
        if popen.poll() is None:
            self._signal_stop()
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        self._popen = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.hosts} pid={self.pid}>"


class _QuorumMember(ZooKeeperServer):
    """A :class:`ZooKeeperServer` that is server ``server_id`` of the quorum ``servers``.

    Alone it cannot serve, so it is ready once it answers ``ruok``; the quorum serves once a majority
    of members elected a leader (see :meth:`ZooKeeperEnsemble.start`).
    """

    _MAIN_CLASS = _QUORUM_MAIN

    def __init__(self, server_id: int, servers: Sequence[str], **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.server_id = server_id
        self._servers = tuple(servers)

    def _config_lines(self) -> Sequence[str]:
        # standaloneEnabled=false: a one-member ensemble is a quorum of one too (a leader), not standalone.
        return ("initLimit=10", "syncLimit=5", "standaloneEnabled=false", *self._servers)

    def _prepare(self, data_dir: str) -> None:
        with open(os.path.join(data_dir, "myid"), "w") as f:
            f.write(f"{self.server_id}\n")

    def _ready(self) -> bool:
        return _four_letter(self.address, self.port, b"ruok") == b"imok"


class ZooKeeperEnsemble:
    """n ZooKeeper servers forming one quorum, all on ``address``.

    Every member gets distinct free client, peer and election ports (chosen here, kept across restarts)
    and a temporary data directory. Members are :class:`ZooKeeperServer` objects: kill, stop or
    restart them one by one to inject faults; :meth:`start` again waits for the quorum to serve.

    Args:
        n: how many servers.
        address: the address every port binds to.
        tick_ms: ZooKeeper's ``tickTime`` in milliseconds.
        log_dir: a directory for the members' logs (``zookeeper-<id>.log``), kept after :meth:`stop`;
            None = each log in its member's temporary data directory.

    Raises:
        ConfigError: ``n`` is below 1 or ports cannot be bound on ``address``.
    """

    def __init__(
        self, n: int = 3, *, address: str = "127.0.0.1", tick_ms: int = 500, log_dir: str | None = None
    ) -> None:
        if n < 1:
            raise ConfigError(f"an ensemble needs at least 1 server, not {n}")
        ports = _free_ports(3 * n, address)
        client_ports, peer_ports, election_ports = ports[0::3], ports[1::3], ports[2::3]
        servers = [f"server.{i + 1}={address}:{peer_ports[i]}:{election_ports[i]}" for i in range(n)]
        self.address = address
        self.servers: list[ZooKeeperServer] = [
            _QuorumMember(
                i + 1,
                servers,
                address=address,
                port=client_ports[i],
                tick_ms=tick_ms,
                log_path=os.path.join(log_dir, f"zookeeper-{i + 1}.log") if log_dir else None,
            )
            for i in range(n)
        ]

    @property
    def hosts(self) -> str:
        """Every member's ``address:port``, comma-separated: the connection string for a client."""
        return ",".join(server.hosts for server in self.servers)

    def start(self, timeout: float = 60.0) -> ZooKeeperEnsemble:
        """Start the members that do not run; return once the quorum serves.

        The quorum serves when every member answers ``srvr`` with ``Mode: leader`` or ``Mode: follower``
        and exactly one is the leader. On failure every member is stopped.

        Raises:
            ConfigError: Debian's ZooKeeper or ``java`` is missing.
            BrokerConnectionError: a member's JVM exited (the message has its log's tail).
            BrokerTimeoutError: no serving quorum within ``timeout`` (the message has the modes and log tails).
        """
        deadline = time.monotonic() + timeout
        try:
            # Launch all before waiting on any: the JVMs start in parallel.
            for server in self.servers:
                if not server.alive():
                    server._launch()
            for server in self.servers:
                server._await_ready(deadline)
            self._await_quorum(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every member (SIGTERM all, then wait for each) and remove their temporary directories."""
        for server in self.servers:
            server._signal_stop()
        for server in self.servers:
            server.stop(timeout)

    def _await_quorum(self, deadline: float) -> None:
        while True:
            for server in self.servers:
                server._check_running()
            modes = [server.mode() for server in self.servers]
            if all(mode in ("leader", "follower") for mode in modes) and modes.count("leader") == 1:
                return
            if time.monotonic() >= deadline:
                excerpts = "\n".join(
                    f"-- server {i + 1} ({server.hosts}, mode {mode}): {server._log_excerpt()}"
                    for i, (server, mode) in enumerate(zip(self.servers, modes))
                    if mode not in ("leader", "follower")
                )
                raise BrokerTimeoutError(
                    f"ZooKeeper ensemble {self.hosts} formed no quorum in time: modes {modes}\n{excerpts}"
                )
            time.sleep(_POLL_S)

    def __enter__(self) -> ZooKeeperEnsemble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ZooKeeperEnsemble {self.hosts}>"
