"""The publisher: what the application calls. Its sender thread (:mod:`client._sender`) does the sending.

The application thread only appends records to the open batch of the publisher's
:class:`~client._outbox.Outbox`; the sender thread, which owns every socket, takes the sealed batches from
there. The outbox is all the two threads share.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Iterable

import zmq

from client._sender import Sender
from client._locator import MonitorLocator
from client._outbox import Outbox, failure
from roq.config import PublisherConfig
from roq.federation import address
from roq.security.zap import identity_for, seeded_id
from roq.errors import BrokerConnectionError, NoExchangeError

log = logging.getLogger(__name__)

__all__ = ["Publisher"]


class Publisher:
    """Publishes records to one logical queue. Made by :meth:`client.Connection.publisher`.

    Records are ``(key, payload)`` byte strings. Each gets a sequence number; the publisher keeps
    every record until its exchange says every subscriber that reads took it, and resends what is
    needed when the monitor moves it or its exchange dies, so that subscribers that keep up receive
    every record once, in order.

    A publisher may be shared by threads: ``send`` is serialised by a lock.
    """

    def __init__(self, *, context: zmq.Context, monitor: str | MonitorLocator, config: PublisherConfig) -> None:
        self.config = config
        # with CURVE the id begins with the key's digest: an exchange takes it from nobody else
        seed = config.id_seed.encode()
        self.id = (identity_for(config.curve.public_key.encode(), seed) if config.curve else
                   seeded_id(seed) if seed else uuid.uuid4().bytes)
        self.name = self.id.hex()
        self._outbox = Outbox(config)
        # send() runs for every record: on an instance it is the outbox's put itself, one call instead of two
        # (about 7% of a publisher's CPU at full speed); the method below documents it
        self.send = self._outbox.put  # type: ignore[method-assign]
        self._address = address(config.to) if config.to else b""
        if self._address:  # records for another cluster: each key addressed to it
            self.send = self._send_addressed  # type: ignore[method-assign]
        locator = monitor if isinstance(monitor, MonitorLocator) else MonitorLocator(monitor)
        endpoint = locator.endpoint
        self._sender = Sender(self._outbox, context, locator, self.id, config)
        self._sender.start()
        outbox = self._outbox
        if not outbox.assignment.wait(config.connect_timeout) or outbox.error is not None:
            self._shutdown()
            if outbox.error is not None:
                raise failure(outbox.error) from outbox.error
            if outbox.assignment.no_exchange:
                raise NoExchangeError(f"monitor {endpoint} has no exchange for a publisher: {outbox.assignment.no_exchange}")
            raise BrokerConnectionError(f"monitor {endpoint} assigned no exchange within {config.connect_timeout:.1f}s")

    # ------------------------------------------------------------------ application API

    def send(self, key: bytes, payload: bytes) -> None:
        """Queue one record for sending.

        Raises:
            BufferFullError: the buffer is full and ``full_policy`` is "raise", or the wait timed out.
            ClosedError: the publisher is closed.
            BrokerConnectionError: the sender thread failed.
            ProtocolError: the record is larger than the protocol allows (4 MiB - 4 bytes).
            TypeError: key or payload is not bytes.
        """
        self._outbox.put(key, payload)

    def send_many(self, key: bytes, payloads: Iterable[bytes]) -> None:
        """Queue records that share ``key``, in order: as ``send`` for each, without a call per record
        (each batch takes a slice of ``payloads``). The records' types and sizes are checked before any
        is queued.

        Raises:
            As :meth:`send`.
        """
        self._outbox.put_many(self._addressed(key) if self._address else key, payloads)

    def _send_addressed(self, key: bytes, payload: bytes) -> None:
        self._outbox.put(self._addressed(key), payload)

    def _addressed(self, key: bytes) -> bytes:
        if not isinstance(key, bytes):
            raise TypeError(f"a key is bytes, got {type(key).__name__}")
        return self._address + key

    def flush(self, timeout: float | None = 10.0) -> None:
        """Send what is open and wait until an exchange acknowledged every record sent so far.

        Raises:
            BrokerTimeoutError: not everything was acknowledged within ``timeout`` (nothing is lost:
                the records stay buffered and are still sent).
            BrokerConnectionError: the sender thread failed.
            ClosedError: the publisher is closed.
        """
        self._outbox.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Flush (at most ``timeout`` seconds), say goodbye to the monitor and stop the sender.

        Raises:
            BrokerTimeoutError: some records were still unacknowledged when the time ran out; they
                could not be delivered.
        """
        if not self._outbox.begin_close():
            return
        try:
            if self._outbox.error is None:
                self._outbox.flush(timeout)
        finally:
            self._shutdown()

    def stats(self) -> dict[str, Any]:
        """Counters: records sent and acknowledged, bytes buffered, the exchange, moves and resends."""
        sent, acked, buffered = self._outbox.counts()
        return {
            "publisher": self.name,
            "sent": sent,
            "acked": acked,
            "buffered_bytes": buffered,
            "exchange": self._sender.exchange,
            "epoch": self._sender.epoch,
            **self._sender.counters,
        }

    @property
    def counters(self) -> dict[str, int]:
        """Moves and resends so far: relocations, failovers, records retransmitted, panics."""
        return dict(self._sender.counters)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _shutdown(self) -> None:
        self._outbox.close()
        self._sender.join()
        self._outbox.wakeup.close()
