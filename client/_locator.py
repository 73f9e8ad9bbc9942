"""Where a queue's monitor is: fixed, or followed in ZooKeeper when the monitor moves to another host.

When the host of a queue's monitor dies, the GCM starts the monitor on another host, on another endpoint.
Publishers and subscribers of a connection made through ZooKeeper follow it: a watch on
``/queues/<q>/monitor`` (:meth:`roq.zk.Session.watch_data`, a :class:`~roq.wire.documents.MonitorDoc`) replaces
:attr:`MonitorLocator.endpoint`; each publisher's sender thread and each subscriber compares it with the
endpoint its socket uses on its next turn (no lock: the watch only ever replaces the string) and reconnects
(:meth:`MonitorLocator.retarget`), then says hello to the new monitor.

Public for tests and tools (``from client._locator import MonitorLocator``); not part of the application
API (:data:`client.__all__`).
"""

from __future__ import annotations

import logging
from typing import Callable

import zmq

from roq.wire.documents import MonitorDoc
from roq.errors import BrokerConnectionError, ConfigError, ProtocolError, ZooKeeperError
from roq.sockets import check_endpoint
from roq.zk import Paths, Session

log = logging.getLogger(__name__)

__all__ = ["MonitorLocator", "watch"]

#: ZooKeeper session timeout of a watching client, seconds (it owns no ephemeral node).
SESSION_TIMEOUT = 10.0


class MonitorLocator:
    """The endpoint of a queue's monitor; :meth:`follow` keeps it current from ZooKeeper.

    Attributes:
        endpoint: the monitor's ``tcp://host:port`` now.
    """

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint  # a user's endpoint is checked where it is given (``connect``)
        self._session: Session | None = None

    @classmethod
    def of(cls, where: str | MonitorLocator) -> MonitorLocator:
        """``where`` if it is a locator already, else a locator of that fixed endpoint."""
        return where if isinstance(where, MonitorLocator) else cls(where)

    def follow(self, zk: str, root: str, queue: str, *, timeout: float = 10.0) -> None:
        """Watch the queue's monitor node; an endpoint written there replaces :attr:`endpoint`.

        Raises:
            ConfigError: a malformed ZooKeeper address or root.
            BrokerConnectionError: ZooKeeper could not be reached within ``timeout``.
        """
        self._session = watch(zk, Paths(root).monitor(queue), self.update, timeout)

    def update(self, data: bytes | None) -> None:
        """The monitor's node now holds ``data`` (None: the node is gone).

        Called on the ZooKeeper client's thread: it never blocks. A node that is gone (its host died), holds
        no :class:`~roq.wire.documents.MonitorDoc` or no usable endpoint keeps the last endpoint.
        """
        if data is None:
            return  # keep talking to the last endpoint until a new one is there
        try:
            endpoint = check_endpoint(MonitorDoc.decode(data).endpoint)
        except (ProtocolError, ConfigError) as exc:
            log.warning("monitor node without a usable endpoint ignored (%s)", exc)
            return
        if endpoint != self.endpoint:
            log.info("the queue's monitor moved: %s -> %s", self.endpoint, endpoint)
            self.endpoint = endpoint

    def retarget(self, sock: zmq.Socket, used: str) -> str:
        """Connect ``sock`` (connected to ``used``) to the current endpoint instead; return that endpoint."""
        endpoint = self.endpoint
        if endpoint != used:
            try:
                sock.disconnect(used)
            except zmq.ZMQError:
                pass  # never connected there
            sock.connect(endpoint)
        return endpoint

    def close(self) -> None:
        """Stop following (close the ZooKeeper session)."""
        if self._session is not None:
            self._session.close()
            self._session = None


def watch(zk: str, path: str, on_data: Callable[[bytes | None], None], timeout: float) -> Session:
    """A session of its own that calls ``on_data`` with what ``path`` holds now and after each change (on the
    ZooKeeper client's thread; None: no node).

    Raises:
        ConfigError: a malformed ZooKeeper address.
        BrokerConnectionError: ZooKeeper could not be reached within ``timeout``.
    """
    session = Session(zk, timeout=SESSION_TIMEOUT)
    try:
        session.start(timeout=timeout)
        session.watch_data(path, on_data)
    except ZooKeeperError as exc:
        session.close()
        raise BrokerConnectionError(f"cannot watch {path} in ZooKeeper at {zk}: {exc}") from exc
    except BaseException:
        session.close()
        raise
    return session
