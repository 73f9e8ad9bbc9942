"""ZooKeeper: the layout of RoQ's znodes, their JSON encoding, and a session a poll loop can watch.

Everything durable about a cluster lives under one root (default ``/roq``)::

    /roq/gcm/election/n_0000000007   ephemeral sequential: a GCM candidate, data = its endpoints
    /roq/gcm/leader                  ephemeral: the active GCM's endpoints (clients read this)
    /roq/hosts/<address>             ephemeral: a host manager, its capacity and latest host KPIs
    /roq/assignments/<address>/<q>@<role>   persistent: a process the host must run (monitor or exchange id)
    /roq/queues/<q>                  persistent: state (running / stopped / removing), placement
    /roq/queues/<q>/rules            persistent: the queue's rules (management API)
    /roq/queues/<q>/thresholds       persistent: thresholds (management API, the KPI tuner)
    /roq/queues/<q>/tuning           persistent: the evidence behind the thresholds last set with some
    /roq/queues/<q>/monitor          ephemeral (host manager's session): the monitor's endpoint
    /roq/queues/<q>/exchanges/<id>   ephemeral (host manager's session): an exchange's endpoints
    /roq/queues/<q>/events/<source>  persistent: the recent topology events and counters written by
                                     ``monitor`` or ``gcm`` ({"events": [...], "counters": {...}})

An exchange *slot* (``x3``) is a place in the queue's placement; each process started for it has a name
of its own, its *incarnation* (``x3-1a2b``, see :func:`incarnation` and :func:`exchange_slot`).

Data is UTF-8 JSON, so ``zkCli.sh get`` shows it as it is. kazoo calls its watchers on its own thread;
:class:`Session` turns every watch and session event into a readable file descriptor so that a process's
single poll loop does the work (STYLE: one event loop per process).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections import deque
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from roq.errors import BrokerConnectionError, ConfigError

__all__ = [
    "Paths",
    "Session",
    "dumps",
    "loads",
    "check_queue_name",
    "check_hosts",
    "incarnation",
    "exchange_slot",
    "DEFAULT_ROOT",
    "EVENT_SOURCES",
    "MAX_EVENTS",
]

log = logging.getLogger(__name__)

DEFAULT_ROOT = "/roq"
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_HOSTPORT = re.compile(r"^[A-Za-z0-9_.-]+:\d{1,5}$")


def check_queue_name(name: Any) -> str:
    """Return ``name`` if it can name a queue (1-64 of ``A-Z a-z 0-9 _ . -``), else raise ConfigError."""
    if not isinstance(name, str) or not _QUEUE_NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(f"bad queue name {name!r}: use 1 to 64 characters among A-Z a-z 0-9 _ . -")
    return name


def check_hosts(hosts: Any) -> str:
    """Return a ZooKeeper connection string ``host:port[,host:port...][/chroot]`` or raise ConfigError."""
    if not isinstance(hosts, str) or not hosts:
        raise ConfigError(f"bad ZooKeeper address {hosts!r}: expected host:port[,host:port...]")
    servers = hosts.split("/", 1)[0]
    for part in servers.split(","):
        if not _HOSTPORT.fullmatch(part) or not 0 < int(part.rsplit(":", 1)[1]) < 65536:
            raise ConfigError(f"bad ZooKeeper address {part!r} in {hosts!r}: expected host:port")
    return hosts


EVENT_SOURCES = ("monitor", "gcm")
MAX_EVENTS = 200  # events kept per source in ZooKeeper


def incarnation(slot: str) -> str:
    """A fresh name for a process started for exchange ``slot``: ``x3`` -> ``x3-1a2b``."""
    return f"{slot}-{os.urandom(2).hex()}"


def exchange_slot(name: str) -> str:
    """The slot of an exchange's incarnation name (``x3-1a2b`` -> ``x3``); a name of another form is its own."""
    slot, sep, tail = name.rpartition("-")
    return slot if sep and slot and len(tail) == 4 and all(c in "0123456789abcdef" for c in tail) else name


def dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def loads(data: bytes | None) -> Any:
    """Decode a znode's JSON; an empty or unreadable node reads as ``{}`` (and is logged)."""
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        log.warning("znode holds no JSON (%d bytes); read as empty", len(data))
        return {}


class Paths:
    """Znode paths under ``root``."""

    def __init__(self, root: str = DEFAULT_ROOT) -> None:
        if not root.startswith("/") or root.endswith("/") or "//" in root:
            raise ConfigError(f"bad ZooKeeper root {root!r}: expected an absolute path like /roq")
        self.root = root
        self.gcm = f"{root}/gcm"
        self.election = f"{root}/gcm/election"
        self.leader = f"{root}/gcm/leader"
        self.hosts = f"{root}/hosts"
        self.assignments = f"{root}/assignments"
        self.queues = f"{root}/queues"

    def host(self, address: str) -> str:
        return f"{self.hosts}/{address}"

    def host_assignments(self, address: str) -> str:
        return f"{self.assignments}/{address}"

    def assignment(self, address: str, queue: str, role: str) -> str:
        return f"{self.assignments}/{address}/{queue}@{role}"

    def queue(self, name: str) -> str:
        return f"{self.queues}/{name}"

    def rules(self, name: str) -> str:
        return f"{self.queues}/{name}/rules"

    def thresholds(self, name: str) -> str:
        return f"{self.queues}/{name}/thresholds"

    def tuning(self, name: str) -> str:
        return f"{self.queues}/{name}/tuning"

    def monitor(self, name: str) -> str:
        return f"{self.queues}/{name}/monitor"

    def exchanges(self, name: str) -> str:
        return f"{self.queues}/{name}/exchanges"

    def exchange(self, name: str, exchange_id: str) -> str:
        return f"{self.queues}/{name}/exchanges/{exchange_id}"

    def events(self, name: str, source: str | None = None) -> str:
        return f"{self.queues}/{name}/events" + (f"/{source}" if source else "")


class Session:
    """A kazoo client whose watch and session events wake a poll loop.

    Register :attr:`fd` in the loop's poller; when it is readable, call :meth:`consume`: it returns the
    session states reached since the last call (``"lost"``, ``"suspended"``, ``"connected"``) and
    whether any watch fired. Use :meth:`watch` as the ``watch=`` argument of kazoo reads.

    Args:
        hosts: ZooKeeper connection string (``host:port[,host:port...]``).
        timeout: the session timeout in seconds: ephemeral nodes vanish this long after the process dies.
    """

    def __init__(self, hosts: str, *, timeout: float = 6.0) -> None:
        self.hosts = check_hosts(hosts)
        self.timeout = timeout
        self.zk = KazooClient(
            hosts=hosts,
            timeout=timeout,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
            command_retry={"max_tries": 3, "delay": 0.1, "max_delay": 1.0},
        )
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._lock = threading.Lock()
        self._states: deque[str] = deque()
        self._fired = False
        self.zk.add_listener(self._on_state)

    @property
    def fd(self) -> int:
        return self._read

    @property
    def session_id(self) -> int:
        cid = self.zk.client_id
        return cid[0] if cid else 0

    def start(self, timeout: float = 15.0) -> Session:
        """Connect, or raise BrokerConnectionError naming the servers."""
        try:
            self.zk.start(timeout=timeout)
        except (KazooTimeoutError, KazooException, OSError) as exc:
            self.zk.stop()
            self.zk.close()
            raise BrokerConnectionError(f"cannot reach ZooKeeper at {self.hosts} within {timeout:.0f}s") from exc
        return self

    def watch(self, *_event: Any) -> None:
        """A kazoo watcher: note that something changed and wake the loop."""
        with self._lock:
            self._fired = True
        self._wake()

    def consume(self) -> tuple[list[str], bool]:
        """Drain the wake-up pipe; return (session states since last call, whether a watch fired)."""
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            states = list(self._states)
            self._states.clear()
            fired, self._fired = self._fired, False
        return states, fired

    def close(self) -> None:
        """Close the session (its ephemeral nodes go at once) and the wake-up pipe."""
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # closing on the way out: nothing left to do about it
            log.debug("closing the ZooKeeper session failed", exc_info=True)
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass

    def _on_state(self, state: str) -> None:
        name = {KazooState.LOST: "lost", KazooState.SUSPENDED: "suspended", KazooState.CONNECTED: "connected"}[state]
        with self._lock:
            self._states.append(name)
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._write, b"x")
        except (BlockingIOError, OSError):  # the pipe is full (the loop will wake anyway) or closed
            pass
