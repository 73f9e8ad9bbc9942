"""The RoQ client library: publish to and subscribe from elastic logical queues.

    import client
    with client.connect(monitor="tcp://127.0.0.11:5500") as conn:
        pub = conn.publisher()
        pub.send(b"orders.eu", b"payload")
        pub.flush()
        sub = conn.subscriber(prefix=b"orders.")
        msg = sub.recv(timeout=1.0)
"""

from __future__ import annotations

from client._connection import Connection, connect
from client._message import Message, SubscriberStats
from client._publisher import Publisher
from client._subscriber import Subscriber
from roq.config import PublisherConfig, SubscriberConfig
from roq.errors import (
    BrokerConnectionError,
    BrokerTimeoutError,
    BufferFullError,
    ClosedError,
    ConfigError,
    NoExchangeError,
    ProtocolError,
    RoQError,
)

__all__ = [
    # connecting
    "connect",
    "Connection",
    # publishing
    "Publisher",
    "PublisherConfig",
    # subscribing
    "Subscriber",
    "SubscriberConfig",
    "Message",
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
]
