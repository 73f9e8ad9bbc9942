"""The management client: queue lifecycle and look-ups through the GCM leader found in ZooKeeper."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import zmq
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from roq import management as m
from roq.control import Message, Result, encode
from roq.errors import BrokerConnectionError, BrokerTimeoutError, ClosedError, ProtocolError, UnavailableError
from roq.sockets import poll_ms
from roq.zk import DEFAULT_ROOT, Paths, check_hosts, check_queue_name, loads

__all__ = ["QueueManager"]

log = logging.getLogger(__name__)

_SLICE = 0.25  # how often a waiting call checks whether the leader changed


class QueueManager:
    """Manage the queues of a cluster. It finds the GCM leader in ZooKeeper and follows it when it changes.

    Args:
        zk: ZooKeeper servers, ``host:port[,host:port...]``.
        root: the cluster's ZooKeeper root.
        timeout: default seconds a call may take (changes wait for the processes; see each method).

    Every method raises a :class:`~roq.errors.ManagementError` subclass carrying the RESULT code when the
    GCM refuses (:class:`~roq.errors.NotFoundError`, :class:`~roq.errors.BadRequestError`,
    :class:`~roq.errors.UnavailableError`), and :class:`~roq.errors.BrokerTimeoutError` when no leader
    answered in time.
    """

    def __init__(self, zk: str, *, root: str = DEFAULT_ROOT, timeout: float = 30.0) -> None:
        self.paths = Paths(root)
        self.timeout = timeout
        self._zk = KazooClient(hosts=check_hosts(zk), timeout=10.0,
                               connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0})
        self._ctx = zmq.Context()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------ queues

    def create(self, queue: str, host: str | None = None, *, exchanges: int = 1, timeout: float | None = None) -> dict[str, Any]:
        """Create ``queue`` on ``host`` (None = the host with most headroom); idempotent.

        With ``exchanges`` above 1 the queue's rules get ``min_exchanges`` = ``exchanges``, so the autoscaler
        keeps what was asked for (lower it with :meth:`set_rules` to let the queue shrink).

        Returns once the queue's monitor and exchanges run: its summary (Name, Host, State, Monitor, Exchanges).
        """
        check_queue_name(queue)
        if host is None:
            return self._call(m.CreateQueueAnywhere(QName=queue, Exchanges=exchanges), timeout)
        return self._call(m.CreateQueue(QName=queue, Host=host, Exchanges=exchanges), timeout)

    def remove(self, queue: str, *, timeout: float | None = None) -> None:
        """Stop every process of ``queue`` and delete it."""
        self._call(m.RemoveQueue(QName=check_queue_name(queue)), timeout)

    def stop(self, queue: str, *, timeout: float | None = None) -> None:
        """Stop the processes of ``queue``; its definition and rules stay."""
        self._call(m.StopQueue(QName=check_queue_name(queue)), timeout)

    def start(self, queue: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Start a stopped queue again; returns its summary once it runs."""
        return self._call(m.StartQueue(QName=check_queue_name(queue)), timeout)

    def add_exchange(self, queue: str, host: str | None = None, *, timeout: float | None = None) -> dict[str, Any]:
        """One more exchange for ``queue`` (on ``host``, or the host with most headroom)."""
        return self._call(m.CreateExchange(QName=check_queue_name(queue), Host=host or ""), timeout)

    def exists(self, queue: str) -> bool:
        return bool(self._call(m.QueueExists(QName=check_queue_name(queue)), None, read=True)["Exists"])

    def list(self) -> list[dict[str, Any]]:
        """Every queue: Name, Host, State, Monitor, Exchanges."""
        return list(self._call(m.ListQueues(), None, read=True)["Queues"])

    def stats(self, queue: str) -> dict[str, Any]:
        """The queue's topology, rules and its monitor's status (exchanges' loads, publishers, subscribers)."""
        return self._call(m.QueueStats(QName=check_queue_name(queue)), None, read=True)

    def hosts(self) -> list[dict[str, Any]]:
        """Every live host: address, capacity, exchanges placed on it and its CPU/memory/network KPIs."""
        return list(self._call(m.ListHosts(), None, read=True)["Hosts"])

    def set_rules(self, queue: str, rules: dict[str, Any]) -> dict[str, Any]:
        """Set some of the queue's rules (see :data:`roq.rules.RULE_DOCS`); a ``None`` value unsets one.

        Returns:
            Every rule now in force: the defaults, overridden by the tuner's thresholds, overridden by the
            rules an operator set (those alone: :meth:`explicit_rules`).

        Raises:
            BadRequestError: a bad value (the rules in force stay unchanged); NotFoundError: no such queue.
        """
        return dict(self._call(m.SetRules(QName=check_queue_name(queue), Rules=dict(rules)), None)["Rules"])

    def get_rules(self, queue: str) -> dict[str, Any]:
        """Every rule in force for ``queue`` (as :meth:`set_rules` returns them).

        Raises:
            NotFoundError: no such queue.
        """
        return dict(self._call(m.GetRules(QName=check_queue_name(queue)), None, read=True)["Rules"])

    def explicit_rules(self, queue: str) -> dict[str, Any]:
        """Only the rules an operator set on ``queue`` (the rest come from thresholds and defaults).

        Raises:
            NotFoundError: no such queue.
        """
        return dict(self._call(m.GetRules(QName=check_queue_name(queue)), None, read=True).get("Explicit", {}))

    def set_thresholds(self, queue: str, thresholds: dict[str, float], evidence: dict[str, Any] | None = None) -> dict[str, Any]:
        """Set some thresholds (the queue's rules still win over them); ``evidence`` (what they were derived
        from) is kept beside them. Returns every threshold stored."""
        msg = m.SetThresholds(QName=check_queue_name(queue), Thresholds=dict(thresholds), Evidence=dict(evidence or {}))
        return dict(self._call(msg, None)["Thresholds"])

    def get_thresholds(self, queue: str) -> dict[str, Any]:
        return dict(self._call(m.GetThresholds(QName=check_queue_name(queue)), None, read=True)["Thresholds"])

    def get_tuning(self, queue: str) -> dict[str, Any]:
        """The evidence stored with the thresholds last set with some: {thresholds, evidence, time}, or {}."""
        return dict(self._call(m.GetThresholds(QName=check_queue_name(queue)), None, read=True).get("Tuning") or {})

    def scale_out(self, queue: str, exchanges: int, reason: str = "") -> dict[str, Any]:
        """Have ``exchanges`` exchanges placed for ``queue``, the missing ones on the hosts with most headroom.

        Idempotent: asking again for the same total adds nothing. Returns once the placement is stored (the
        processes start right after): ``Placed`` [{Exchange, Host}] (empty if as many were placed already) and
        ``Exchanges``, how many are placed now: fewer than asked when only some fitted.

        Raises:
            BadRequestError: beyond the queue's ``max_exchanges``; NotFoundError: no such queue;
            UnavailableError: the queue is not running, or no host can take an exchange (the message says
            why for each host).
        """
        request = m.ScaleOut(QName=check_queue_name(queue), Exchanges=int(exchanges), Reason=reason)
        return self._call(request, None)

    def remove_exchange(self, queue: str, exchange: str, reason: str = "") -> dict[str, Any]:
        """Take exchange slot ``exchange`` (``x3``, or an incarnation name ``x3-1a2b``) out of ``queue``.

        Its host manager stops the process (an exchange drains first: see the monitor). Idempotent: a slot
        already gone answers as removed. Returns ``Exchange``, ``Exchanges`` (how many are left) and, when it
        was removed now, ``Host``.

        Raises:
            BadRequestError: it would leave fewer than the queue's ``min_exchanges``; NotFoundError: no such
            queue; UnavailableError: the queue is being removed.
        """
        request = m.RemoveExchange(QName=check_queue_name(queue), Exchange=exchange, Reason=reason)
        return self._call(request, None)

    def events(self, queue: str, limit: int = 200) -> list[dict[str, Any]]:
        """The queue's most recent topology events of its monitor and the GCM, oldest first.

        Each is a document with ``seq``, ``time`` (seconds since the epoch), ``source`` (``monitor`` or
        ``gcm``), ``kind``, ``text`` (a sentence with the numbers) and fields of its kind.

        Raises:
            BadRequestError: ``limit`` is not between 1 and 1000; NotFoundError: no such queue.
        """
        return list(self._call(m.GetEvents(QName=check_queue_name(queue), Limit=int(limit)), None, read=True)["Events"])

    def counters(self, queue: str) -> dict[str, Any]:
        """The counters the queue's monitor keeps (moves, scale-outs, failovers...; ``{}`` before it wrote any).

        Raises:
            NotFoundError: no such queue.
        """
        return dict(self._call(m.GetEvents(QName=check_queue_name(queue), Limit=1), None, read=True)["Counters"])

    def lookup(self, queue: str, *, timeout: float = 10.0) -> str:
        """The endpoint of ``queue``'s monitor (waits while the queue is starting)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return str(self._call(m.Lookup(QName=check_queue_name(queue)), deadline - time.monotonic(),
                                      read=True, port="lookup")["Monitor"])
            except UnavailableError:  # starting, or its monitor restarting
                if time.monotonic() + 0.1 >= deadline:
                    raise
                time.sleep(0.1)

    def leader(self, timeout: float = 10.0) -> dict[str, Any]:
        """The leader's published endpoints (id, lookup, management, broadcast)."""
        return self._leader(time.monotonic() + timeout)[0]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._started:
            self._zk.stop()
            self._zk.close()
        self._ctx.term()

    def __enter__(self) -> QueueManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing

    def _leader(self, deadline: float) -> tuple[dict[str, Any], int]:
        """(the leader's endpoints, the czxid of its node) once one is elected."""
        with self._lock:
            if self._closed:
                raise ClosedError("queue manager is closed")
            if not self._started:
                try:
                    self._zk.start(timeout=max(0.1, deadline - time.monotonic()))
                except (KazooTimeoutError, KazooException) as exc:
                    self._zk.stop()
                    raise BrokerConnectionError(f"cannot reach ZooKeeper at {self._zk.hosts}") from exc
                self._started = True
        while True:
            try:
                data, stat = self._zk.get(self.paths.leader)
                info = loads(data)
                if isinstance(info, dict) and info.get("management"):
                    return info, stat.czxid
            except NoNodeError:
                pass
            except KazooException as exc:
                log.debug("reading the GCM leader failed: %s", exc)
            if time.monotonic() >= deadline:
                raise BrokerTimeoutError("no GCM leader registered in ZooKeeper")
            time.sleep(0.1)

    def _leader_changed(self, czxid: int) -> bool:
        try:
            stat = self._zk.exists(self.paths.leader)
        except KazooException:
            return False
        return stat is None or stat.czxid != czxid

    def _call(self, request: Message, timeout: float | None, *, read: bool = False, port: str = "management") -> dict[str, Any]:
        """Send ``request`` to the leader and return the reply's data; follow the leader when it changes."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        body = encode(request)
        while True:
            leader, czxid = self._leader(deadline)
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            try:
                sock.connect(leader[port])
                sock.send(body)
                while True:
                    if sock.poll(poll_ms(min(_SLICE, max(0.0, deadline - time.monotonic())))):
                        result, comment, data = m.parse_reply(sock.recv())
                        break
                    if time.monotonic() >= deadline:
                        raise BrokerTimeoutError(f"GCM {leader.get('id')} did not answer {type(request).__name__} in {timeout:.0f}s")
                    if self._leader_changed(czxid):
                        result = -1  # a new leader: ask it
                        break
            except ProtocolError as exc:
                raise BrokerConnectionError(f"GCM answered garbage: {exc}") from exc
            finally:
                sock.close()
            if result == -1:
                continue
            if result == Result.NOT_LEADER and time.monotonic() < deadline:
                time.sleep(0.05)  # the election is settling: read the leader again
                continue
            if data.get("Retry") is True and time.monotonic() + 0.2 < deadline:
                time.sleep(0.2)  # ZooKeeper was briefly unreachable (e.g. electing its leader); every request is idempotent
                continue
            m.raise_for(result, comment, data)
            return data
