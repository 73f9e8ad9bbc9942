"""Connections: the entry point of the client library."""

from __future__ import annotations

import logging
import threading
from typing import Any

import zmq

from client._management import QueueManager
from client._publisher import Publisher
from client._subscriber import Subscriber
from client._locator import MonitorLocator
from roq import defaults
from roq.wire import control
from roq.config import CurveClient, PublisherConfig, SubscriberConfig, replace
from roq.errors import BrokerConnectionError, ClosedError, ConfigError, ProtocolError
from roq.federation import split_address
from roq.sockets import PLAINTEXT_HINT, RefusalWatch, check_endpoint, poll_ms
from roq.wire.status import JournalStatus, QueueStatus, decode, decode_journal

log = logging.getLogger(__name__)

__all__ = ["Connection", "connect"]


class Connection:
    """A connection to one logical queue, through its monitor. Made by :func:`connect`.

    It owns a ZeroMQ context and every publisher and subscriber made from it; ``close()`` closes them.
    Made through ZooKeeper, it follows the queue's monitor when the monitor moves to another host.
    """

    def __init__(
        self,
        monitor: str,
        *,
        publisher_config: PublisherConfig | None = None,
        subscriber_config: SubscriberConfig | None = None,
    ) -> None:
        self._locator = MonitorLocator(check_endpoint(monitor))
        self.publisher_config = publisher_config or PublisherConfig()
        self.subscriber_config = subscriber_config or SubscriberConfig()
        self._ctx = zmq.Context()
        self._lock = threading.Lock()
        self._children: list[Publisher | Subscriber] = []
        self._closed = False

    @property
    def monitor(self) -> str:
        """The endpoint of the queue's monitor (the current one, when followed through ZooKeeper)."""
        return self._locator.endpoint

    def ping(self, timeout: float = 5.0) -> dict[str, Any]:
        """Ask the monitor whether it is there; the data of its reply (``queue``).

        Raises:
            BrokerConnectionError: no answer within ``timeout``, or an answer that is not a reply.
            ManagementError: the monitor refused (the subclass of its RESULT code).
        """
        return self._ask(control.Ping(), timeout)

    def status(self, timeout: float = 5.0) -> QueueStatus:
        """The monitor's view of the queue: exchanges, publishers, subscribers, counters, events (its fields:
        :class:`roq.wire.status.QueueStatus`).

        Raises:
            BrokerConnectionError: no answer within ``timeout``, or an answer that is not a reply.
            ManagementError: the monitor refused (the subclass of its RESULT code).
            ProtocolError: the monitor's answer is not a status (the message names the field).
        """
        return decode(self._ask(control.Status(), timeout))

    def journal(self, prefix: bytes = b"", timeout: float = 5.0) -> JournalStatus:
        """Where the queue's journal is read and how it is, as its monitor last heard it (what a reader of the keys
        under ``prefix`` may ask: the permission to subscribe to them is enough).

        Raises:
            As :meth:`status`.
        """
        return decode_journal(self._ask(control.JournalWhere(prefix=prefix), timeout))

    def relocate(self, publisher: str = "", target: str = "", timeout: float = 5.0) -> dict[str, Any]:
        """Ask the monitor to move a publisher now (default: its busiest, to the least loaded exchange).

        Returns:
            The move started: ``relocation``, ``publisher``, ``source``, ``target``.

        Raises:
            BrokerConnectionError: no answer within ``timeout``, or an answer that is not a reply.
            NotFoundError: no such publisher or live target exchange, or no publisher can be moved now.
            UnavailableError: the publisher is already moving, or there is no other exchange to move to.
            BadRequestError: the publisher already sends through the target.
        """
        return self._ask(control.ForceRelocate(publisher=publisher, target=target), timeout)

    def publisher(self, **options: Any) -> Publisher:
        """A new publisher; ``options`` override fields of :class:`~roq.config.PublisherConfig`.

        Raises:
            ConfigError: an unknown option or a bad value.
            NoExchangeError: the queue has no live exchange.
            BrokerConnectionError: the monitor did not answer.
        """
        config = replace(self.publisher_config, **options) if options else self.publisher_config
        return self._adopt(lambda: Publisher(context=self._ctx, monitor=self._locator, config=config))

    def subscriber(self, prefix: bytes = b"", *, start: Any = "latest", durable: str = "",
                   **options: Any) -> Subscriber:
        """A new subscriber to the records whose key starts with ``prefix`` (b"" = all).

        ``start``: "latest" (what is published from now on), or, on a durable queue, where in its journal to
        begin: "earliest", an offset (int), or a datetime with its time zone; the subscriber reads the journal
        from there, then the live stream, each record once, in each publisher's order.

        ``durable``: a name (1-128 of A-Z a-z 0-9 _ . : @ -): the subscriber reads the durable queue's journal
        for good, from the position it last kept under that name (:meth:`Subscriber.commit`; without one, from
        ``start``, "earliest" by default). At least once: what it was handed after its last commit comes again.

        Raises:
            ConfigError: an unknown option or a bad value.
            ValueError: a ``start`` of none of those kinds.
            BrokerConnectionError: the monitor did not answer; a ``start`` on a queue that is not durable.
        """
        if self.publisher_config.to:
            raise ConfigError(f"this connection sends to the queue of cluster {self.publisher_config.to}: its "
                              f"records are heard there (subscribe at {self.publisher_config.to})")
        config = replace(self.subscriber_config, **options) if options else self.subscriber_config
        return self._adopt(lambda: Subscriber(context=self._ctx, monitor=self._locator, prefix=prefix, config=config,
                                              start=start, durable=durable))

    def close(self) -> None:
        """Close every publisher (flushing it) and subscriber, then the context."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            children, self._children = self._children, []
        errors = []
        for child in children:
            try:
                child.close()
            except Exception as exc:  # close the others anyway; report the first failure
                errors.append(exc)
        self._ctx.term()
        self._locator.close()
        if errors:
            raise errors[0]

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _adopt(self, make: Any) -> Any:
        with self._lock:
            if self._closed:
                raise ClosedError("connection is closed")
        child = make()
        with self._lock:
            self._children.append(child)
        return child

    def _ask(self, request: control.Message, timeout: float) -> dict[str, Any]:
        """Send ``request`` to the monitor; the data of its reply, or the error of its refusal."""
        with self._lock:
            if self._closed:
                raise ClosedError("connection is closed")
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        curve = self.publisher_config.curve or self.subscriber_config.curve
        watch = None
        if curve is not None:
            curve.apply(sock)
            watch = RefusalWatch(sock)
        try:
            sock.connect(self.monitor)
            sock.send(control.encode(request))
            if not (watch.wait(timeout, f"monitor {self.monitor}") if watch else sock.poll(poll_ms(timeout))):
                raise BrokerConnectionError(f"monitor {self.monitor} did not answer within {timeout:.1f}s"
                                            f"{watch.silence() if watch else PLAINTEXT_HINT}")
            reply = control.Reply.parse(sock.recv())
        except ProtocolError as exc:
            raise BrokerConnectionError(f"monitor {self.monitor} answered garbage: {exc}") from exc
        finally:
            if watch is not None:
                watch.close()
            sock.close()
        return reply.raise_for()


def connect(
    monitor: str | None = None,
    *,
    zk: str | None = None,
    queue: str | None = None,
    root: str = defaults.ROOT,
    timeout: float = 5.0,
    publisher_config: PublisherConfig | None = None,
    subscriber_config: SubscriberConfig | None = None,
    credentials: str | CurveClient | None = None,
) -> Connection:
    """Connect to a logical queue: through its monitor's endpoint (``monitor="tcp://127.0.0.11:5500"``), or
    by name through ZooKeeper (``zk="127.0.0.1:2181", queue="q"``): the GCM leader found there looks the
    queue's monitor up, and the connection follows that monitor if it moves to another host (its host died).
    In a tree of clusters, ``queue="store-417/orders"`` is the queue ``orders`` of the cluster ``store-417``:
    the connection's publishers send there (through this cluster's ``orders``, then the links on the way), and
    it has no subscribers (subscribe at ``store-417``).
    ``credentials``: a directory with the client's secret key (``NAME.key_secret``, from ``roq keys new``) and
    the cluster's public key (``cluster.key``): the look-up, its requests to the monitor, its publishers and
    its subscribers then speak CURVE to the cluster, whose keyring must hold the client's public key (or the
    keys themselves, a :class:`~roq.config.CurveClient`).

    Raises:
        ConfigError: neither or both ways given, a malformed endpoint, or credentials that cannot be used
            (missing, or a secret key others may read).
        ManagementError: the queue does not exist (NotFoundError) or is stopped (UnavailableError).
        BrokerConnectionError: the monitor did not answer within ``timeout`` seconds, or the cluster refused
            the client's key (the message says so).
        BrokerTimeoutError: no GCM leader answered the look-up in time.
    """
    if (monitor is None) == (zk is None):
        raise ConfigError("give either monitor=ENDPOINT or zk=SERVERS with queue=NAME")
    curve = CurveClient.load(credentials) if isinstance(credentials, str) else credentials
    to = ""
    if zk is not None:
        if queue is None:
            raise ConfigError("connecting by ZooKeeper needs queue=NAME")
        with QueueManager(zk, root=root, credentials=curve) as manager:
            monitor, to = manager.route(queue, timeout=max(timeout, 10.0))
        queue = split_address(queue)[1]
    if not isinstance(monitor, str):
        raise ConfigError(f"monitor must be an endpoint string, got {type(monitor).__name__}")
    given = {name: value for name, value in (("curve", curve), ("to", to)) if value}
    if given:
        publisher_config = replace(publisher_config or PublisherConfig(), **given)
    if curve is not None:
        subscriber_config = replace(subscriber_config or SubscriberConfig(), curve=curve)
    conn = Connection(monitor, publisher_config=publisher_config, subscriber_config=subscriber_config)
    try:
        if zk is not None:
            conn._locator.follow(zk, root, str(queue), timeout=max(timeout, 10.0))
        conn.ping(timeout)
    except BaseException:
        conn.close()
        raise
    return conn
