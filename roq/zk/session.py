"""The ZooKeeper session: the connection to the servers, its identity and timeout, and its events in a poll loop.

:class:`Session` is the one place a kazoo client is made: it connects (or raises naming the servers),
authenticates with the cluster's :class:`ZkAuth`, and reads and writes through :class:`~roq.zk.ops.Znodes`,
every kazoo exception mapped to ours. kazoo calls its watchers and listeners on its own thread; the session
turns every watch and every change of the session's state (suspended, lost, connected) into a readable file
descriptor, so that a process's single poll loop does the work (STYLE: one event loop per process).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import threading
from collections import deque
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, ZnodeStat
from kazoo.security import make_acl, make_digest_acl

from roq import defaults
from roq.errors import BrokerConnectionError, ConfigError
from roq.zk.ops import Znodes

__all__ = ["Fired", "Session", "ZkAuth", "check_hosts"]

log = logging.getLogger(__name__)

_HOSTPORT = re.compile(r"[A-Za-z0-9_.-]+:\d{1,5}\Z")


def check_hosts(hosts: Any) -> str:
    """Return a ZooKeeper connection string ``host:port[,host:port...][/chroot]`` or raise ConfigError."""
    if not isinstance(hosts, str) or not hosts:
        raise ConfigError(f"bad ZooKeeper address {hosts!r}: expected host:port[,host:port...]")
    servers = hosts.split("/", 1)[0]
    for part in servers.split(","):
        if not _HOSTPORT.fullmatch(part) or not 0 < int(part.rsplit(":", 1)[1]) < 65536:
            raise ConfigError(f"bad ZooKeeper address {part!r} in {hosts!r}: expected host:port")
    return hosts


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


@dataclasses.dataclass(frozen=True)
class Fired:
    """The watches that fired since the loop last looked: ``changed``, the nodes whose data changed; ``other``,
    whether one of another kind fired (a node's children, a node made or deleted)."""

    any: bool = False
    changed: frozenset[str] = frozenset()
    other: bool = False


class Session(Znodes):
    """A ZooKeeper session whose watch and session events wake a poll loop; every call is mapped.

    Register :attr:`fd` in the loop's poller; when it is readable, call :meth:`consume`: it returns the
    session states reached since the last call (``"lost"``, ``"suspended"``, ``"connected"``) and
    whether any watch fired. Reads with ``watch=True`` leave a watch that wakes the loop. A client without
    a loop (the management client) simply never looks at :attr:`fd`. The reads and writes are those of
    :class:`~roq.zk.ops.Znodes`.

    Every method raises :class:`~roq.errors.ZooKeeperError` (or the subclass named) instead of kazoo's
    exceptions.

    Args:
        hosts: ZooKeeper connection string (``host:port[,host:port...]``).
        timeout: the session timeout in seconds: ephemeral nodes vanish this long after the process dies.
        auth: the cluster's identity: the session authenticates with it and every node it creates carries its
            ACL (None: no authentication, nodes open to anyone).
    """

    def __init__(self, hosts: str, *, timeout: float = defaults.SESSION_TIMEOUT, auth: ZkAuth | None = None) -> None:
        self.hosts = check_hosts(hosts)
        self.timeout = timeout
        super().__init__(KazooClient(
            hosts=hosts,
            timeout=timeout,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
            command_retry={"max_tries": 3, "delay": 0.1, "max_delay": 1.0},
            auth_data=[("digest", f"{auth.user}:{auth.password}")] if auth is not None else None,
            default_acl=auth.acl() if auth is not None else None,
        ), self.watch)
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._lock = threading.Lock()
        self._states: deque[str] = deque()
        self._fired = False
        self._changed: set[str] = set()  # nodes whose data changed (their watch fired) since the last consume
        self._other = False  # a watch of another kind fired (children, a node made or deleted)
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

    # ------------------------------------------------------------------ the poll loop's side

    def watch(self, event: Any = None) -> None:
        """A kazoo watcher: note what changed (a node's data, or anything else) and wake the loop."""
        with self._lock:
            self._fired = True
            if getattr(event, "type", None) == EventType.CHANGED and getattr(event, "path", None):
                self._changed.add(event.path)
            else:
                self._other = True
        self._wake()

    def consume(self) -> tuple[list[str], bool]:
        """Drain the wake-up pipe; return (session states since last call, whether a watch fired)."""
        states, fired = self.consume_changes()
        return states, fired.any

    def consume_changes(self) -> tuple[list[str], Fired]:
        """Drain the wake-up pipe; return (session states since last call, the watches that fired)."""
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            states = list(self._states)
            self._states.clear()
            fired = Fired(self._fired, frozenset(self._changed), self._other)
            self._fired, self._other = False, False
            self._changed.clear()
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
