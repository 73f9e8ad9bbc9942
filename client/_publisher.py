"""The publisher: what the application calls (this module) and its sender thread (:mod:`client._sender`).

The application thread only appends records to an open batch, under a lock. A batch is sealed (given
its sequence numbers) when its key changes, when it is full, on ``flush()``, or by the sender thread
once it has lingered ``linger`` seconds. Sealed batches are handed to the sender thread, which owns
every socket; at most ``max_pending_batches`` wait there, so a fast application yields the GIL to the
sender regularly instead of starving it.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import uuid
from typing import Any

import zmq

from client._locator import MonitorLocator
from roq import batch
from roq.config import PublisherConfig
from roq.errors import (
    BrokerConnectionError,
    BrokerTimeoutError,
    BufferFullError,
    ClosedError,
    NoExchangeError,
    ProtocolError,
)

log = logging.getLogger(__name__)

__all__ = ["Publisher"]

#: Largest record accepted, so that a one-record batch stays within an exchange's default bound.
MAX_RECORD_BYTES = (4 << 20) - 4
#: A publisher remembers the last seq of at most this many keys (for subscribers' gap detection).
MAX_KEYS = 100_000


def _as_bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, got {type(value).__name__}")


class Publisher:
    """Publishes records to one logical queue. Made by :meth:`client.Connection.publisher`.

    Records are ``(key, payload)`` byte strings. Each gets a sequence number; the publisher keeps
    every record until an exchange has acknowledged it (plus a short grace), and resends what is
    needed when the monitor moves it or its exchange dies, so that subscribers that keep up receive
    every record once, in order.

    A publisher may be shared by threads: ``send`` is serialised by a lock.
    """

    def __init__(self, *, context: zmq.Context, monitor: str | MonitorLocator, config: PublisherConfig) -> None:
        from client._sender import Sender

        self.config = config
        self.id = uuid.uuid4().bytes
        self.name = self.id.hex()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # open batch (application side)
        self._key: bytes | None = None
        self._payloads: list[bytes] = []
        self._size = 0
        self._opened = 0.0  # monotonic
        self._opened_ns = 0  # wall clock, for latency
        # handed to the sender: (key, payloads, first, key_prev, timestamp_ns, size, flags)
        self._sealed: collections.deque[tuple] = collections.deque()
        self._next_seq = 1
        self._key_last: dict[bytes, int] = {}
        self._buffered = 0  # payload bytes not yet safe to forget: open + sealed + in the sender
        self._acked = 0
        self._closed = False
        self._closing = False  # close() began: no more sends
        self._error: BaseException | None = None
        self._idle = False  # the sender sleeps in poll and must be woken
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._assigned = threading.Event()
        self._no_exchange = ""
        self.counters = {"relocations": 0, "failovers": 0, "retransmitted": 0, "panics": 0}
        locator = monitor if isinstance(monitor, MonitorLocator) else MonitorLocator(monitor)
        monitor = locator.endpoint
        self._sender = Sender(self, context, locator)
        self._sender.start()
        if not self._assigned.wait(config.connect_timeout) or self._error is not None:
            self._shutdown()
            if self._error is not None:
                raise BrokerConnectionError(f"publisher failed: {self._error}") from self._error
            if self._no_exchange:
                raise NoExchangeError(f"monitor {monitor} has no exchange for a publisher: {self._no_exchange}")
            raise BrokerConnectionError(f"monitor {monitor} assigned no exchange within {config.connect_timeout:.1f}s")

    # ------------------------------------------------------------------ application API

    def send(self, key: bytes, payload: bytes) -> None:
        """Queue one record for sending.

        Raises:
            BufferFullError: the buffer is full and ``full_policy`` is "raise", or the wait timed out.
            ClosedError: the publisher is closed.
            BrokerConnectionError: the sender thread failed.
            ProtocolError: the record is larger than the protocol allows.
            TypeError: key or payload is not bytes.
        """
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        if type(payload) is not bytes:
            payload = _as_bytes(payload, "payload")
        size = len(payload)
        cfg = self.config
        if size > MAX_RECORD_BYTES:
            raise ProtocolError(f"record of {size} bytes exceeds the limit of {MAX_RECORD_BYTES} bytes")
        with self._lock:
            while True:  # the waits below release the lock: look again after each
                if self._closed or self._closing:
                    raise ClosedError("publisher is closed")
                if self._error is not None:
                    raise BrokerConnectionError(f"publisher failed: {self._error}") from self._error
                if self._payloads and (
                    key != self._key or len(self._payloads) >= cfg.batch_records or self._size + size > cfg.batch_bytes
                ):
                    self._seal(wait=True)
                elif self._buffered + size > cfg.buffer_bytes:
                    self._wait_for_space(size)
                else:
                    break
            if not self._payloads:
                self._key = key
                self._opened = time.monotonic()
                self._opened_ns = time.time_ns()
                self._wake()
            self._payloads.append(payload)
            self._size += size
            self._buffered += size

    def flush(self, timeout: float | None = 10.0) -> None:
        """Send what is open and wait until an exchange acknowledged every record sent so far.

        Raises:
            BrokerTimeoutError: not everything was acknowledged within ``timeout`` (nothing is lost:
                the records stay buffered and are still sent).
            BrokerConnectionError: the sender thread failed.
            ClosedError: the publisher is closed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if self._closed:
                raise ClosedError("publisher is closed")
            if self._payloads:
                self._seal(wait=True, flags=batch.FLAG_ACK_NOW)
            target = self._next_seq - 1
            self._wake()
            while self._acked < target:
                if self._error is not None:
                    raise BrokerConnectionError(f"publisher failed: {self._error}") from self._error
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise BrokerTimeoutError(
                        f"{target - self._acked} records not acknowledged after {timeout:.1f}s; they stay buffered"
                    )
                self._changed.wait(left)

    def close(self, timeout: float = 10.0) -> None:
        """Flush (at most ``timeout`` seconds), say goodbye to the monitor and stop the sender.

        Raises:
            BrokerTimeoutError: some records were still unacknowledged when the time ran out; they
                could not be delivered.
        """
        with self._lock:
            if self._closed or self._closing:
                return
            self._closing = True
        try:
            if self._error is None:
                self.flush(timeout)
        finally:
            self._shutdown()

    def stats(self) -> dict[str, Any]:
        """Counters: records sent and acknowledged, bytes buffered, the exchange, moves and resends."""
        with self._lock:
            return {
                "publisher": self.name,
                "sent": self._next_seq - 1,
                "acked": self._acked,
                "buffered_bytes": self._buffered,
                "exchange": self._sender.exchange,
                "epoch": self._sender.epoch,
                **self.counters,
            }

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals (lock held)

    def _seal(self, *, wait: bool, flags: int = 0) -> None:
        """Close the open batch and hand it to the sender. With ``wait``, first wait for a free slot."""
        if wait:
            while len(self._sealed) >= self.config.max_pending_batches and not self._closed and self._error is None:
                self._wake()
                self._changed.wait(0.1)
            if not self._payloads:  # the sender sealed it by linger while we waited
                return
        count = len(self._payloads)
        first = self._next_seq
        self._next_seq += count
        key = self._key
        key_prev = self._key_last.get(key, 0)
        if len(self._key_last) >= MAX_KEYS and not key_prev:
            self._key_last.clear()
        self._key_last[key] = first + count - 1
        self._sealed.append((key, self._payloads, first, key_prev, self._opened_ns, self._size, flags))
        self._payloads = []
        self._size = 0
        self._key = None
        self._wake()

    def _wait_for_space(self, size: int) -> None:
        cfg = self.config
        if size > cfg.buffer_bytes:
            raise BufferFullError(f"record of {size} bytes can never fit the buffer of {cfg.buffer_bytes} bytes")
        if cfg.full_policy == "raise":
            raise BufferFullError(f"buffer full ({self._buffered} of {cfg.buffer_bytes} bytes unacknowledged)")
        deadline = None if cfg.send_timeout is None else time.monotonic() + cfg.send_timeout
        if self._payloads:
            self._seal(wait=True)
        while self._buffered + size > cfg.buffer_bytes:
            if self._closed:
                raise ClosedError("publisher is closed")
            if self._error is not None:
                raise BrokerConnectionError(f"publisher failed: {self._error}") from self._error
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise BufferFullError(
                    f"buffer still full after {cfg.send_timeout:.1f}s ({self._buffered} of {cfg.buffer_bytes} bytes "
                    "unacknowledged): is any exchange alive?"
                )
            self._wake()
            self._changed.wait(left)

    def _wake(self) -> None:
        if self._idle:
            self._idle = False
            try:
                os.write(self._wake_write, b"\x01")
            except BlockingIOError:  # the pipe is full of wake-ups already
                pass

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self._error = exc
            self._changed.notify_all()
        self._assigned.set()

    def _shutdown(self) -> None:
        with self._lock:
            self._closed = True
            self._idle = True
            self._wake()
            self._changed.notify_all()
        self._sender.join()
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass
