"""The RoQ client library: publish to and subscribe from elastic logical queues.

    import client
    with client.connect(zk="127.0.0.1:2181", queue="orders") as conn:   # or monitor="tcp://..."
        pub = conn.publisher()
        pub.send(b"orders.eu", b"payload")
        pub.flush()
        sub = conn.subscriber(prefix=b"orders.")
        msg = sub.recv(timeout=1.0)
        pub.send_many(b"orders.eu", payloads)          # many records of one key, no call per record
        for batch in sub.recv_many(timeout=1.0):       # what is ready, a list of records per batch
            handle(batch.payloads)

Applications import from ``client`` itself (:data:`__all__`): connecting, managing queues, publishing,
subscribing, and the errors. Everything else is private; its unit tests import the cores from their modules
(``client._ordering``, ``client._window``, ``client._outbox``, ``client._locator``).
"""

from __future__ import annotations

from client._connection import Connection, connect
from client._management import QueueManager
from client._message import Batch, Message, SubscriberStats
from client._publisher import Publisher
from client._subscriber import Subscriber
from roq.config import PublisherConfig, SubscriberConfig
from roq.errors import (
    BrokerConnectionError,
    BadRequestError,
    BrokerTimeoutError,
    BufferFullError,
    ClosedError,
    ConfigError,
    ConflictError,
    ForbiddenError,
    ManagementError,
    NoExchangeError,
    NotFoundError,
    NotLeaderError,
    ProtocolError,
    RoQError,
    UnavailableError,
)

__all__ = [
    # connecting
    "connect",
    "Connection",
    # managing queues
    "QueueManager",
    # publishing
    "Publisher",
    "PublisherConfig",
    # subscribing
    "Subscriber",
    "SubscriberConfig",
    "Message",
    "Batch",
    "SubscriberStats",
    # errors
    "RoQError",
    "BrokerConnectionError",
    "NoExchangeError",
    "BrokerTimeoutError",
    "BufferFullError",
    "ClosedError",
    "ConfigError",
    "ProtocolError",
    "ManagementError",
    "NotFoundError",
    "NotLeaderError",
    "BadRequestError",
    "ForbiddenError",
    "UnavailableError",
    "ConflictError",
]
