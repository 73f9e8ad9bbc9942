"""Operations on znodes: reads and writes with their versions, transactions of operations as data, and the
one boundary where kazoo's exceptions become ours.

A decision that changes several znodes is a list of :data:`Op` (:class:`Create`, :class:`SetData`,
:class:`Delete`) applied by :meth:`Znodes.commit` as one transaction. Every call of :class:`Znodes` raises a
:class:`~roq.errors.ZooKeeperError` instead of kazoo's exceptions (:class:`~roq.errors.NodeMissingError`,
:class:`~roq.errors.NodeExistsError`, :class:`~roq.errors.VersionConflictError` for the three a caller acts
on). :class:`roq.zk.Session` is a :class:`Znodes` that owns its connection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Callable, Iterator, Sequence, TypeVar

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from roq.errors import NodeExistsError, NodeMissingError, ProtocolError, VersionConflictError, ZooKeeperError

__all__ = ["Create", "SetData", "Delete", "Op", "Znodes"]

log = logging.getLogger(__name__)


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


class Znodes:
    """Reads and writes of znodes through a kazoo client; every call is mapped.

    Args:
        zk: the kazoo client the calls go through.
        watcher: the kazoo watcher that reads with ``watch=True`` leave (the session's, which wakes its loop).
    """

    def __init__(self, zk: KazooClient, watcher: Callable[..., None]) -> None:
        self._zk = zk
        self._watcher = watcher

    @contextlib.contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        """A call to ZooKeeper: refused at once while the session is not connected (kazoo would queue it until
        a server answers, and with none reachable the caller's loop would wait for ever: the GCM stopped
        serving even its health checks), and its errors mapped."""
        if not self._zk.connected:
            raise ZooKeeperError(f"{what}: not connected to ZooKeeper; retry")
        with _mapped(what):
            yield

    # ------------------------------------------------------------------ reads

    def get(self, path: str, *, watch: bool = False) -> tuple[bytes, ZnodeStat] | None:
        """The data and stat of ``path``, None if it does not exist (with ``watch``, the loop wakes when it
        changes, appears or goes)."""
        with self._mapped(f"reading {path}"):
            for _ in range(_RACES):
                try:
                    return self._zk.get(path, watch=self._watcher if watch else None)
                except kz.NoNodeError:
                    # watch for it to appear; if it appeared between the two calls, no event will say so (the
                    # watch is on a node that exists): read it again (a monitor missed a new GCM leader so)
                    if not watch or self._zk.exists(path, watch=self._watcher) is None:
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
                    return self._zk.get_children(path, watch=self._watcher if watch else None)
                except kz.NoNodeError:
                    if not watch or self._zk.exists(path, watch=self._watcher) is None:  # as in get()
                        return []
            return []

    def exists(self, path: str, *, watch: bool = False) -> ZnodeStat | None:
        with self._mapped(f"looking for {path}"):
            return self._zk.exists(path, watch=self._watcher if watch else None)

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
