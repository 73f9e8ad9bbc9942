"""ZooKeeper: the layout of RoQ's znodes, a session a poll loop can watch, and operations as data.

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

What each node holds is a typed document of :mod:`roq.documents`, written and read only through it.

An exchange *slot* (``x3``) is a place in the queue's placement; each process started for it has a name
of its own, its *incarnation* (``x3-1a2b``, see :func:`incarnation` and :func:`exchange_slot`).

:class:`Session` is the one place kazoo is called: every kazoo exception becomes a
:class:`~roq.errors.ZooKeeperError` there (:class:`~roq.errors.NodeMissingError`,
:class:`~roq.errors.NodeExistsError`, :class:`~roq.errors.VersionConflictError` for the three a caller acts
on). kazoo calls its watchers on its own thread; the session turns every watch and session event into a
readable file descriptor so that a process's single poll loop does the work (STYLE: one event loop per
process). A decision that changes several znodes is a list of :data:`Op` applied by :meth:`Session.commit`
as one transaction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import secrets
import threading
from collections import deque
from typing import Any, Callable, Iterator, Sequence, TypeVar

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch
from kazoo.security import make_acl, make_digest_acl

from roq import defaults
from roq.errors import (
    BrokerConnectionError,
    ConfigError,
    NodeExistsError,
    NodeMissingError,
    ProtocolError,
    VersionConflictError,
    ZooKeeperError,
)

__all__ = [
    "Paths",
    "Session",
    "ZkAuth",
    "Create",
    "SetData",
    "Delete",
    "Op",
    "check_queue_name",
    "check_hosts",
    "incarnation",
    "exchange_slot",
    "EVENT_SOURCES",
    "MAX_EVENTS",
]

log = logging.getLogger(__name__)

_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")
_HOSTPORT = re.compile(r"[A-Za-z0-9_.-]+:\d{1,5}\Z")


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


class Paths:
    """Znode paths under ``root``."""

    def __init__(self, root: str = defaults.ROOT) -> None:
        if not root.startswith("/") or root.endswith("/") or "//" in root:
            raise ConfigError(f"bad ZooKeeper root {root!r}: expected an absolute path like /roq")
        self.root = root
        self.gcm = f"{root}/gcm"
        self.election = f"{root}/gcm/election"
        self.leader = f"{root}/gcm/leader"
        self.hosts = f"{root}/hosts"
        self.assignments = f"{root}/assignments"
        self.queues = f"{root}/queues"
        self.acl = f"{root}/acl"  # who may do what (an AclDoc)
        self.audit = f"{root}/audit"  # who did what, when, with what result (an AuditDoc)

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

    def journal(self, name: str) -> str:
        return f"{self.queues}/{name}/journal"

    def exchange(self, name: str, exchange_id: str) -> str:
        return f"{self.queues}/{name}/exchanges/{exchange_id}"

    def events(self, name: str, source: str | None = None) -> str:
        return f"{self.queues}/{name}/events" + (f"/{source}" if source else "")


@dataclasses.dataclass(frozen=True)
class Create:
    """Create ``path`` holding ``data``."""

    path: str
    data: bytes = b""
    ephemeral: bool = False


@dataclasses.dataclass(frozen=True)
class SetData:
    """Replace the data of ``path`` (only if it is at ``version``; -1 = any)."""

    path: str
    data: bytes
    version: int = -1


@dataclasses.dataclass(frozen=True)
class Delete:
    """Delete ``path`` (only if it is at ``version``; -1 = any)."""

    path: str
    version: int = -1


Op = Create | SetData | Delete
D = TypeVar("D")

_MAPPED: tuple[tuple[type[Exception], type[ZooKeeperError]], ...] = (
    (kz.NoNodeError, NodeMissingError),
    (kz.NodeExistsError, NodeExistsError),
    (kz.BadVersionError, VersionConflictError),
    (kz.NotEmptyError, VersionConflictError),
)


@contextlib.contextmanager
def _mapped(what: str) -> Iterator[None]:
    """kazoo's exceptions, and the timeouts of its handler, as :class:`~roq.errors.ZooKeeperError`."""
    try:
        yield
    except (kz.KazooException, KazooTimeoutError) as exc:
        for kazoo_error, ours in _MAPPED:
            if isinstance(exc, kazoo_error):
                raise ours(f"{what}: {type(exc).__name__}") from exc
        raise ZooKeeperError(f"{what}: ZooKeeper did not answer ({type(exc).__name__}); retry") from exc


_RACES = 5  # reads again of a node that appeared between a read and the watch set for its creation


@dataclasses.dataclass(frozen=True)
class ZkAuth:
    """The cluster's identity in ZooKeeper (the ``digest`` scheme): its processes authenticate with it, and the
    nodes they create may be changed by it alone; anyone may read them (nothing secret is kept in ZooKeeper:
    keys stay in files). A file holds it, ``USER:PASSWORD`` on one line, readable by its owner only."""

    user: str
    password: str

    def __repr__(self) -> str:  # never the password
        return f"ZkAuth(user={self.user!r})"

    def acl(self) -> list[Any]:
        """The ACL of every node the cluster creates: all to the cluster, read to anyone."""
        return [make_digest_acl(self.user, self.password, all=True), make_acl("world", "anyone", read=True)]

    @classmethod
    def load(cls, path: str) -> ZkAuth:
        """The identity in the file ``path``.

        Raises:
            ConfigError: missing or unreadable, readable by others, or not ``USER:PASSWORD``.
        """
        try:
            mode = os.stat(path).st_mode
            with open(path, encoding="utf-8") as f:
                text = f.read(1024).strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"ZooKeeper credentials {path!r} cannot be read: {exc}") from exc
        if mode & 0o077:
            raise ConfigError(f"ZooKeeper credentials {path!r} may be read by others (mode {mode & 0o777:o}): "
                              f"refused; chmod 600 {path}")
        user, sep, password = text.partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", user) or not 16 <= len(password) <= 256 or \
                "\n" in password:
            raise ConfigError(f"ZooKeeper credentials {path!r} must be one line USER:PASSWORD (a password of 16 to "
                              "256 characters)")
        return cls(user, password)

    @classmethod
    def new(cls, path: str, user: str = "roq") -> ZkAuth:
        """Write a new identity with a random password into ``path`` (a new file, its owner's only).

        Raises:
            ConfigError: the file exists or cannot be written.
        """
        auth = cls(user, secrets.token_urlsafe(32))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(f"{auth.user}:{auth.password}\n")
        except OSError as exc:
            raise ConfigError(f"cannot write ZooKeeper credentials {path!r}: {exc.strerror or exc}") from exc
        return auth


class Session:
    """A ZooKeeper session whose watch and session events wake a poll loop; every call is mapped.

    Register :attr:`fd` in the loop's poller; when it is readable, call :meth:`consume`: it returns the
    session states reached since the last call (``"lost"``, ``"suspended"``, ``"connected"``) and
    whether any watch fired. Reads with ``watch=True`` leave a watch that wakes the loop. A client without
    a loop (the management client) simply never looks at :attr:`fd`.

    Every method raises :class:`~roq.errors.ZooKeeperError` (or the subclass named) instead of kazoo's
    exceptions.

    Args:
        hosts: ZooKeeper connection string (``host:port[,host:port...]``).
        timeout: the session timeout in seconds: ephemeral nodes vanish this long after the process dies.
        auth: the cluster's identity: the session authenticates with it and every node it creates carries its
            ACL (None: no authentication, nodes open to anyone).
    """

    @contextlib.contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        """A call to ZooKeeper: refused at once while the session is not connected (kazoo would queue it until
        a server answers, and with none reachable the caller's loop would wait for ever: the GCM stopped
        serving even its health checks), and its errors mapped."""
        if not self._zk.connected:
            raise ZooKeeperError(f"{what}: not connected to ZooKeeper; retry")
        with _mapped(what):
            yield

    def __init__(self, hosts: str, *, timeout: float = defaults.SESSION_TIMEOUT, auth: ZkAuth | None = None) -> None:
        self.hosts = check_hosts(hosts)
        self.timeout = timeout
        self._zk = KazooClient(
            hosts=hosts,
            timeout=timeout,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
            command_retry={"max_tries": 3, "delay": 0.1, "max_delay": 1.0},
            auth_data=[("digest", f"{auth.user}:{auth.password}")] if auth is not None else None,
            default_acl=auth.acl() if auth is not None else None,
        )
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._lock = threading.Lock()
        self._states: deque[str] = deque()
        self._fired = False
        self._started = False
        self._zk.add_listener(self._on_state)

    @property
    def fd(self) -> int:
        return self._read

    @property
    def session_id(self) -> int:
        cid = self._zk.client_id
        return cid[0] if cid else 0

    @property
    def connected(self) -> bool:
        """Whether the session is connected right now (a write would not wait for a reconnection)."""
        return bool(self._zk.connected)

    def owns(self, stat: ZnodeStat) -> bool:
        """Whether the ephemeral node of ``stat`` belongs to this session."""
        return stat.ephemeralOwner == self.session_id

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 15.0) -> Session:
        """Connect, or raise BrokerConnectionError naming the servers."""
        try:
            self._zk.start(timeout=timeout)
        except (KazooTimeoutError, kz.KazooException, OSError) as exc:
            self._zk.stop()
            self._zk.close()
            raise BrokerConnectionError(f"cannot reach ZooKeeper at {self.hosts} within {timeout:.0f}s") from exc
        self._started = True
        return self

    def close(self) -> None:
        """Close the session (its ephemeral nodes go at once) and the wake-up pipe."""
        if self._started:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:  # closing on the way out: nothing left to do about it
                log.debug("closing the ZooKeeper session failed", exc_info=True)
            self._started = False
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass
        self._read = self._write = -1

    # ------------------------------------------------------------------ reads

    def get(self, path: str, *, watch: bool = False) -> tuple[bytes, ZnodeStat] | None:
        """The data and stat of ``path``, None if it does not exist (with ``watch``, the loop wakes when it
        changes, appears or goes)."""
        with self._mapped(f"reading {path}"):
            for _ in range(_RACES):
                try:
                    return self._zk.get(path, watch=self.watch if watch else None)
                except kz.NoNodeError:
                    # watch for it to appear; if it appeared between the two calls, no event will say so (the
                    # watch is on a node that exists): read it again (a monitor missed a new GCM leader so)
                    if not watch or self._zk.exists(path, watch=self.watch) is None:
                        return None
            return None  # it keeps coming and going: the watch wakes the loop

    def read(self, path: str, document: Callable[[bytes], D], *, watch: bool = False) -> tuple[D | None, int]:
        """The document at ``path`` decoded by ``document`` (e.g. ``QueueDoc.decode``) and its version;
        ``(None, -1)`` if the node does not exist. A node that does not decode is logged and read as None.
        """
        found = self.get(path, watch=watch)
        if found is None:
            return None, -1
        data, stat = found
        try:
            return document(data), stat.version
        except ProtocolError as exc:
            log.warning("%s holds no valid document (%s); ignored", path, exc)
            return None, stat.version

    def children(self, path: str, *, watch: bool = False) -> list[str]:
        """The children of ``path`` ([] if it does not exist)."""
        with self._mapped(f"listing {path}"):
            for _ in range(_RACES):
                try:
                    return self._zk.get_children(path, watch=self.watch if watch else None)
                except kz.NoNodeError:
                    if not watch or self._zk.exists(path, watch=self.watch) is None:  # as in get()
                        return []
            return []

    def exists(self, path: str, *, watch: bool = False) -> ZnodeStat | None:
        with self._mapped(f"looking for {path}"):
            return self._zk.exists(path, watch=self.watch if watch else None)

    def watch_data(self, path: str, callback: Callable[[bytes | None], None]) -> None:
        """Call ``callback(data)`` (None: no node) now and whenever ``path`` changes, on kazoo's thread:
        the callback must not block."""
        with self._mapped(f"watching {path}"):
            DataWatch(self._zk, path, lambda data, _stat: callback(data))

    # ------------------------------------------------------------------ writes

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
               makepath: bool = False) -> str:
        """Create ``path``; the path created (with its sequence number if ``sequence``).

        Raises:
            NodeExistsError: it exists. NodeMissingError: its parent does not (and not ``makepath``).
        """
        with self._mapped(f"creating {path}"):
            return self._zk.create(path, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath)

    def set(self, path: str, data: bytes, *, version: int = -1) -> int:
        """Replace the data of ``path``; its new version.

        Raises:
            NodeMissingError: no such node. VersionConflictError: not at ``version``.
        """
        with self._mapped(f"writing {path}"):
            return self._zk.set(path, data, version=version).version

    def put(self, path: str, data: bytes, *, ephemeral: bool = False) -> None:
        """Create ``path`` with ``data``, or replace its data if it exists (its parent must exist)."""
        try:
            self.create(path, data, ephemeral=ephemeral)
        except NodeExistsError:
            self.set(path, data)

    def delete(self, path: str, *, version: int = -1, recursive: bool = False) -> bool:
        """Delete ``path``; False if it was not there.

        Raises:
            VersionConflictError: not at ``version`` (or not empty, without ``recursive``).
        """
        with self._mapped(f"deleting {path}"):
            try:
                self._zk.delete(path, version=version, recursive=recursive)
                return True
            except kz.NoNodeError:
                return False

    def ensure(self, *paths: str) -> None:
        """Create each of ``paths`` and its parents if missing."""
        for path in paths:
            with self._mapped(f"creating {path}"):
                self._zk.ensure_path(path)

    def commit(self, ops: Sequence[Op]) -> None:
        """Apply ``ops`` as one transaction: all of them or none.

        Raises:
            NodeExistsError, NodeMissingError, VersionConflictError: the first operation that failed, and
                why (then nothing was written); ZooKeeperError: ZooKeeper did not answer.
        """
        if not ops:
            return
        with self._mapped("a transaction"):
            t = self._zk.transaction()
            for op in ops:
                if isinstance(op, Create):
                    t.create(op.path, op.data, ephemeral=op.ephemeral)
                elif isinstance(op, SetData):
                    t.set_data(op.path, op.data, version=op.version)
                else:
                    t.delete(op.path, version=op.version)
            results = t.commit()
        for op, r in zip(ops, results):
            if isinstance(r, Exception) and not isinstance(r, kz.RolledBackError):
                with self._mapped(f"{type(op).__name__} {op.path}"):
                    raise r

    # ------------------------------------------------------------------ the poll loop's side

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
