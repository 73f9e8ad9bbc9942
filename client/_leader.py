"""The GCM leader as ZooKeeper names it: find it, ask it, follow it when another GCM takes over.

The leader publishes its endpoints in ``/gcm/leader`` (a :class:`~roq.wire.documents.GcmDoc`). A request goes
to the port it names; every reply is a :class:`~roq.wire.control.Reply`. While waiting for the reply the client
watches the node's czxid: a new node is a new leader, asked again (every request is idempotent). A reply
NOT_LEADER (the election is settling) or with ``Retry: true`` (the leader could not reach ZooKeeper for a
moment) is asked again too, until the call's deadline; any other refusal raises the
:class:`~roq.errors.ManagementError` of its code (:meth:`~roq.wire.control.Reply.raise_for`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import zmq

from roq.config import CurveClient
from roq.wire.control import Message, Reply, Result, encode
from roq.wire.documents import GcmDoc
from roq.errors import (
    BadRequestError,
    BrokerConnectionError,
    BrokerTimeoutError,
    ClosedError,
    ProtocolError,
    ZooKeeperError,
)
from roq.sockets import PLAINTEXT_HINT, RefusalWatch, poll_ms
from roq.zk import Paths, Session, check_hosts

log = logging.getLogger(__name__)

SLICE = 0.25  # how often a waiting call checks whether the leader changed, seconds
SESSION_TIMEOUT = 10.0  # ZooKeeper session timeout, seconds (the client owns no ephemeral node)
LEADER_POLL = 0.1  # seconds between reads of the leader's node while none is elected
NOT_LEADER_PAUSE = 0.05  # the election is settling: read the leader again after this
RETRY_PAUSE = 0.2  # a request answered with Retry: true is sent again after this


class GcmLeader:
    """Requests to whichever GCM leads, through a ZooKeeper session opened on first use.

    Args:
        zk: ZooKeeper servers, ``host:port[,host:port...]``.
        paths: the cluster's znode paths.
        curve: the client's CURVE keys, for a cluster that serves CURVE (None: plaintext).

    Raises:
        ConfigError: a malformed ZooKeeper address.
    """

    def __init__(self, zk: str, paths: Paths, curve: CurveClient | None = None) -> None:
        self._hosts = check_hosts(zk)
        self._curve = curve
        self._paths = paths
        self._session: Session | None = None
        self._ctx = zmq.Context()
        self._lock = threading.Lock()
        self._closed = False

    def call(self, request: Message, timeout: float, port: str = "management") -> dict[str, Any]:
        """Send ``request`` to the leader's ``port`` and return the data of its reply.

        Raises:
            ManagementError: the leader refused (the subclass of the RESULT code); BadRequestError too when
                ``request`` cannot be encoded.
            BrokerTimeoutError: no leader, or no answer, within ``timeout``.
            BrokerConnectionError: ZooKeeper cannot be reached, or the leader answered garbage.
            ClosedError: closed.
        """
        deadline = time.monotonic() + timeout
        try:
            body = encode(request)
        except ProtocolError as exc:
            raise BadRequestError(str(exc)) from exc
        while True:
            leader, czxid = self.find(deadline, port)
            reply = self._ask(leader, port, body, czxid, deadline, f"{type(request).__name__} in {timeout:.0f}s")
            if reply is None:
                continue  # a new leader: ask it
            if reply.result == Result.NOT_LEADER and time.monotonic() < deadline:
                time.sleep(NOT_LEADER_PAUSE)
                continue
            if reply.data.get("Retry") is True and time.monotonic() + RETRY_PAUSE < deadline:
                time.sleep(RETRY_PAUSE)
                continue
            return reply.raise_for()

    def find(self, deadline: float, port: str) -> tuple[GcmDoc, int]:
        """The leader's document and the czxid of its node, once a leader serving ``port`` is registered.

        Raises:
            BrokerTimeoutError: none by ``deadline`` (monotonic).
            BrokerConnectionError: ZooKeeper cannot be reached.
            ClosedError: closed.
        """
        session = self._connected(deadline)
        while True:
            try:
                found = session.get(self._paths.leader)
            except ZooKeeperError as exc:
                log.debug("reading the GCM leader failed: %s", exc)
                found = None
            if found is not None:
                data, stat = found
                try:
                    doc = GcmDoc.decode(data)
                except ProtocolError as exc:
                    log.debug("the GCM leader's node holds no GCM document: %s", exc)
                else:
                    if doc.endpoint(port):
                        return doc, stat.czxid
            if time.monotonic() >= deadline:
                raise BrokerTimeoutError("no GCM leader registered in ZooKeeper")
            time.sleep(LEADER_POLL)

    def close(self) -> None:
        """Close the ZooKeeper session and the sockets' context."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            session, self._session = self._session, None
        if session is not None:
            session.close()
        self._ctx.term()

    def _connected(self, deadline: float) -> Session:
        """The ZooKeeper session, connected on first use (and again after a failed attempt)."""
        with self._lock:
            if self._closed:
                raise ClosedError("queue manager is closed")
            if self._session is None:
                session = Session(self._hosts, timeout=SESSION_TIMEOUT)
                try:
                    session.start(timeout=max(0.1, deadline - time.monotonic()))
                except BaseException:
                    session.close()
                    raise
                self._session = session
            return self._session

    def _changed(self, czxid: int) -> bool:
        """Whether the leader's node is gone or another one (another leader)."""
        session = self._session
        if session is None:
            return False
        try:
            stat = session.exists(self._paths.leader)
        except ZooKeeperError:
            return False
        return stat is None or stat.czxid != czxid

    def _ask(self, leader: GcmDoc, port: str, body: bytes, czxid: int, deadline: float, what: str) -> Reply | None:
        """The leader's reply to ``body``; None if another leader was elected while we waited."""
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        watch = None
        if self._curve is not None:
            self._curve.apply(sock)
            watch = RefusalWatch(sock)
        try:
            sock.connect(leader.endpoint(port))
            sock.send(body)
            while True:
                wait = min(SLICE, max(0.0, deadline - time.monotonic()))
                if watch.wait(wait, f"GCM {leader.id}") if watch else sock.poll(poll_ms(wait)):
                    return Reply.parse(sock.recv())
                if time.monotonic() >= deadline:
                    raise BrokerTimeoutError(f"GCM {leader.id} did not answer {what}"
                                             f"{watch.silence() if watch else PLAINTEXT_HINT}")
                if self._changed(czxid):
                    return None
        except ProtocolError as exc:
            raise BrokerConnectionError(f"GCM answered garbage: {exc}") from exc
        finally:
            if watch is not None:
                watch.close()
            sock.close()
