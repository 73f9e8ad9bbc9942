"""Where a queue's monitor is: fixed, or followed in ZooKeeper when the monitor moves to another host.

When the host of a queue's monitor dies, the GCM starts the monitor on another host, on another endpoint.
Publishers and subscribers of a connection made through ZooKeeper follow it: a kazoo watch on
``/queues/<q>/monitor`` replaces :attr:`MonitorLocator.endpoint`; each publisher's sender thread and each
subscriber compares it with the endpoint its socket uses on its next turn (no lock: the watch only ever
replaces the string) and reconnects (:meth:`MonitorLocator.retarget`), then says hello to the new monitor.
"""

from __future__ import annotations

import logging
from typing import Any

import zmq
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import DataWatch

from roq.errors import BrokerConnectionError, ConfigError
from roq.sockets import check_endpoint
from roq.zk import Paths, check_hosts, loads

log = logging.getLogger(__name__)

__all__ = ["MonitorLocator"]


class MonitorLocator:
    """The endpoint of a queue's monitor; :meth:`follow` keeps it current from ZooKeeper.

    Attributes:
        endpoint: the monitor's ``tcp://host:port`` now.
    """

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint  # a user's endpoint is checked where it is given (``connect``)
        self._zk: KazooClient | None = None

    def follow(self, zk: str, root: str, queue: str, *, timeout: float = 10.0) -> None:
        """Watch the queue's monitor node; an endpoint written there replaces :attr:`endpoint`.

        Raises:
            BrokerConnectionError: ZooKeeper could not be reached within ``timeout``.
        """
        client = KazooClient(hosts=check_hosts(zk), timeout=10.0,
                             connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0})
        try:
            client.start(timeout=timeout)
        except (KazooTimeoutError, KazooException) as exc:
            client.close()
            raise BrokerConnectionError(f"cannot reach ZooKeeper at {zk}") from exc
        self._zk = client
        DataWatch(client, Paths(root).monitor(queue), self._changed)

    def _changed(self, data: bytes | None, _stat: Any) -> None:
        # kazoo's thread: never block here
        if data is None:
            return  # gone for now (its host died): keep talking to the last endpoint until a new one is there
        found = loads(data)
        endpoint = found.get("endpoint") if isinstance(found, dict) else None
        try:
            endpoint = check_endpoint(endpoint) if isinstance(endpoint, str) else None
        except ConfigError:
            endpoint = None
        if endpoint is None:
            log.warning("monitor node without a usable endpoint ignored: %r", found)
        elif endpoint != self.endpoint:
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
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None
