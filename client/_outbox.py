"""What a publisher's application thread hands its sender thread, and what comes back.

The :class:`Outbox` is owned by the :class:`~client.Publisher`; its sender thread gets it at start and
knows nothing else of the publisher. Everything the two threads share is here, under one lock:

* the **open batch**: records of one key appended by ``send``, sealed (given its sequence numbers) when its
  key changes, when it is full, on ``flush()``, or by the sender once it has lingered ``linger`` seconds, or
  at once while the publisher has nothing on its way to the exchange (``idle``: as Nagle's algorithm, a
  batch lingers only while an earlier one waits for its acknowledgement, so a lone record does not wait);
* the **sealed batches** waiting for the sender: at most ``max_pending_batches``, so that a fast application
  waits on a condition (handing the GIL over) instead of starving the sender;
* the **counters** both sides read: the highest seq acknowledged and the payload bytes buffered (not yet
  safe to forget), against ``buffer_bytes``;
* the sender's **error**, raised to the application on its next call; the :class:`Assignment` (the first
  exchange, or the error) the publisher's constructor waits for, with the monitor's "no exchange" comment;
* the **wake-up pipe**: written only when the sender sleeps in its poll (``idle``).

Application side: :meth:`Outbox.put`, :meth:`Outbox.put_many`, :meth:`Outbox.flush`, :meth:`Outbox.begin_close`,
:meth:`Outbox.close`.
Sender side: :meth:`Outbox.take`, :meth:`Outbox.idle_until`, :meth:`Outbox.awake`, its :class:`WakePipe`,
:meth:`Outbox.acknowledged`, :meth:`Outbox.forget`, :meth:`Outbox.fail`, its :class:`Assignment`.

A core without sockets, public for tests and tools (``from client._outbox import Outbox``); not part of the
application API (:data:`client.__all__`).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from bisect import bisect_right
from itertools import accumulate
from typing import Any, Iterable, NamedTuple

from roq.wire import batch
from roq.config import PublisherConfig
from roq.errors import (BrokerConnectionError, BrokerTimeoutError, BufferFullError, ClosedError, ForbiddenError,
                        ProtocolError, RoQError)

__all__ = ["Outbox", "Assignment", "Sealed", "WakePipe", "MAX_KEYS", "MAX_RECORD_BYTES", "as_bytes", "measured", "failure"]

#: Largest record accepted, so that a one-record batch stays within an exchange's default bound.
MAX_RECORD_BYTES = (4 << 20) - 4
#: A publisher remembers the last seq of at most this many keys (for subscribers' gap detection).
MAX_KEYS = 100_000
#: Longest wait for a free slot among the sealed batches before looking again, seconds.
_SLOT_WAIT = 0.1


def as_bytes(value: Any, what: str) -> bytes:
    """``value`` as bytes if it is a bytes-like record part.

    Raises:
        TypeError: it is not bytes, a bytearray or a memoryview.
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, got {type(value).__name__}")


def measured(payloads: Iterable[bytes]) -> tuple[list[bytes], list[int]]:
    """``payloads`` as a list of bytes and the running total of their sizes, checked as a whole.

    Raises:
        TypeError: a payload is not bytes-like (a bytearray or memoryview is copied).
        ProtocolError: a payload is larger than :data:`MAX_RECORD_BYTES`.
    """
    payloads = payloads if type(payloads) is list else list(payloads)
    if payloads and set(map(type, payloads)) != {bytes}:  # checked without a Python step per record
        payloads = [as_bytes(p, "payload") for p in payloads]
    sizes = list(map(len, payloads))
    if sizes and max(sizes) > MAX_RECORD_BYTES:
        raise ProtocolError(f"record of {max(sizes)} bytes exceeds the limit of {MAX_RECORD_BYTES} bytes")
    return payloads, list(accumulate(sizes))


class WakePipe:
    """A pipe the application writes to wake the sender sleeping in its poll on :attr:`fd`."""

    def __init__(self) -> None:
        self.fd, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def ring(self) -> None:
        try:
            os.write(self._write, b"\x01")
        except BlockingIOError:  # the pipe is full of wake-ups already
            pass

    def drain(self) -> None:
        """Empty the pipe (the sender, once woken)."""
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        for fd in (self.fd, self._write):
            try:
                os.close(fd)
            except OSError:
                pass


class Assignment:
    """Whether the sender has its first exchange (or failed: the publisher's constructor waits for either), and
    the monitor's comment while it has no exchange for the publisher ("" otherwise)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.no_exchange = ""

    def wait(self, timeout: float) -> bool:
        """False if the sender neither got an exchange nor failed within ``timeout`` seconds."""
        return self._done.wait(timeout)

    def assigned(self) -> None:
        """The sender sends through an exchange."""
        self.no_exchange = ""
        self._done.set()

    def refused(self, comment: str) -> bool:
        """The monitor has no exchange for the publisher now (``comment`` says why); True if that is news."""
        news = not self.no_exchange
        self.no_exchange = comment or "no exchange"
        return news

    def failed(self) -> None:
        self._done.set()


class Sealed(NamedTuple):
    """A batch sealed for the sender: its records and what its header needs."""

    key: bytes
    payloads: list[bytes]
    first: int  # seq of its first record
    key_prev: int  # seq of the previous record with the same key (0 = none or forgotten)
    timestamp_ns: int  # wall clock when its first record was sent
    size: int  # payload bytes
    flags: int  # header flags asked for (FLAG_ACK_NOW on flush)


class Outbox:
    """The hand-over between a publisher's application thread and its sender thread.

    Args:
        config: the publisher's configuration (batching, buffer bound, linger).
    """

    def __init__(self, config: PublisherConfig) -> None:
        self.config = config
        # put()'s bounds at hand (a record over MAX_RECORD_BYTES never fits a batch: the slow path refuses it)
        self._batch_records = config.batch_records
        self._batch_bytes = min(config.batch_bytes, MAX_RECORD_BYTES)
        self._buffer_bytes = config.buffer_bytes
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # a free slot, freed bytes: put's waits
        self._acked_changed = threading.Condition(self._lock)  # flush's wait (a wake-up of its own: taking batches
        # or freeing bytes does not wake a flush)
        # the open batch
        self._key: bytes | None = None
        self._payloads: list[bytes] = []
        self._size = 0
        self._opened = 0.0  # monotonic
        self._opened_ns = 0  # wall clock, for latency
        self._sealed: collections.deque[Sealed] = collections.deque()
        self._next_seq = 1
        self._key_last: dict[bytes, int] = {}
        self._buffered = 0  # payload bytes not yet safe to forget: open + sealed + in the sender
        self._acked = 0
        self._closing = False  # close() began: no more records
        self._closed = False  # the sender stops
        self._error: BaseException | None = None
        self._accepting = True  # none of the three above
        self._idle = False  # the sender sleeps in poll and must be woken
        self.wakeup = WakePipe()  # the sender polls its fd while it sleeps; closed once the sender stopped
        self.assignment = Assignment()

    # ------------------------------------------------------------------ application side

    def put(self, key: bytes, payload: bytes) -> None:
        """Append one record to the open batch, sealing or waiting as needed.

        Raises:
            BufferFullError: the buffer is full and ``full_policy`` is "raise", or the wait timed out.
            ClosedError: the publisher is closed.
            BrokerConnectionError: the sender thread failed.
            ProtocolError: the record is larger than :data:`MAX_RECORD_BYTES`.
            TypeError: key or payload is not bytes (a bytearray or memoryview is copied).
        """
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if type(payload) is not bytes:
            payload = as_bytes(payload, "payload")
        size = len(payload)
        with self._lock:
            payloads = self._payloads
            if (  # the common case first, in as few steps as it takes: one more record of the open batch
                self._accepting
                and key == self._key
                and len(payloads) < self._batch_records
                and self._size + size <= self._batch_bytes
                and self._buffered + size <= self._buffer_bytes
            ):
                payloads.append(payload)
                self._size += size
                self._buffered += size
                return
            self._append(key, payload, size)

    def put_many(self, key: bytes, payloads: Iterable[bytes]) -> None:
        """Append records of one key, as :meth:`put` would one by one, filling each batch with one slice of
        ``payloads`` instead of a call per record. Either every record is checked before any is taken, or
        a :class:`TypeError` or :class:`ProtocolError` takes none; a wait that fails (buffer full, closed)
        leaves the records before it taken.

        Raises:
            As :meth:`put`.
        """
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        payloads, ends = measured(payloads)  # ends[i]: payload bytes of records 0..i
        n, i = len(payloads), 0
        with self._lock:
            while i < n:
                if self._accepting and key == self._key and self._payloads:
                    before = ends[i - 1] if i else 0
                    room = min(self._batch_bytes - self._size, self._buffer_bytes - self._buffered)
                    j = min(n, i + self._batch_records - len(self._payloads), bisect_right(ends, before + room, i))
                    if j > i:  # records i..j-1 fit the open batch
                        self._payloads.extend(payloads[i:j])
                        self._size += ends[j - 1] - before
                        self._buffered += ends[j - 1] - before
                        i = j
                        continue
                self._append(key, payloads[i], ends[i] - (ends[i - 1] if i else 0))  # seals or waits as put()
                i += 1

    def flush(self, timeout: float | None) -> None:
        """Seal the open batch (its acknowledgement asked for at once) and wait until every record put so
        far is acknowledged.

        Raises:
            BrokerTimeoutError: not everything was acknowledged within ``timeout`` (nothing is lost).
            BrokerConnectionError: the sender thread failed.
            ClosedError: the outbox is closed.
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
                    raise failure(self._error) from self._error
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise BrokerTimeoutError(
                        f"{target - self._acked} records not acknowledged after {timeout:.1f}s; they stay buffered"
                    )
                self._acked_changed.wait(left)

    def begin_close(self) -> bool:
        """Refuse records from now on; False if closing had begun already."""
        with self._lock:
            if self._closed or self._closing:
                return False
            self._closing = True
            self._accepting = False
            return True

    def close(self) -> None:
        """Stop the sender (it returns from its loop at its next turn) and every wait."""
        with self._lock:
            self._closed = True
            self._accepting = False
            self._idle = True
            self._wake()
            self._room.notify_all()
            self._acked_changed.notify_all()

    @property
    def error(self) -> BaseException | None:
        """What stopped the sender thread, or None."""
        return self._error

    def counts(self) -> tuple[int, int, int]:
        """(records sealed, records acknowledged, payload bytes buffered)."""
        with self._lock:
            return self._next_seq - 1, self._acked, self._buffered

    # ------------------------------------------------------------------ sender side

    def take(self, now: float, idle: bool = False) -> list[Sealed] | None:
        """The sealed batches (the open batch sealed first if it lingered long enough, or at all if the sender is
        ``idle``: nothing waits for an acknowledgement); None once closed."""
        with self._lock:
            if self._closed:
                return None
            if self._payloads and (idle or now - self._opened >= self.config.linger):
                self._seal(wait=False)
            if not self._sealed:
                return []
            sealed = list(self._sealed)
            self._sealed.clear()
            self._room.notify_all()
            return sealed

    def idle_until(self, now: float, deadline: float, idle: bool = False) -> tuple[float, bool]:
        """The sender will sleep until ``deadline`` unless there is work sooner: the time to wake up (``now``
        if batches wait, the outbox is closed, or records are open and the sender is ``idle``; the end of the
        open batch's linger if earlier) and whether that is the linger. When it sleeps, wake-ups come through
        :attr:`wakeup` until :meth:`awake`."""
        lingering = False
        with self._lock:
            if self._sealed or self._closed or (idle and self._payloads):
                deadline = now
            elif self._payloads and self._opened + self.config.linger < deadline:
                deadline = self._opened + self.config.linger
                lingering = True
            self._idle = deadline > now
        return deadline, lingering

    def awake(self) -> None:
        """The sender left its poll: no more wake-ups needed."""
        with self._lock:
            self._idle = False

    def acknowledged(self, seq: int) -> None:
        """An exchange acknowledged every record up to ``seq``."""
        with self._lock:
            self._acked = seq
            self._acked_changed.notify_all()

    def forget(self, size: int) -> None:
        """``size`` payload bytes became safe to forget: room in the buffer."""
        with self._lock:
            self._buffered -= size
            self._room.notify_all()

    def fail(self, exc: BaseException) -> None:
        """The sender thread failed with ``exc``: every call of the application raises it from now on."""
        with self._lock:
            self._error = exc
            self._accepting = False
            self._room.notify_all()
            self._acked_changed.notify_all()
        self.assignment.failed()

    # ------------------------------------------------------------------ internals (lock held)

    def _append(self, key: bytes, payload: bytes, size: int) -> None:
        """Append one record the open batch may not take: seal it or wait first as needed."""
        self._make_room(key, size)
        if not self._payloads:
            self._key = key
            self._opened = time.monotonic()
            self._opened_ns = time.time_ns()
            self._wake()
        self._payloads.append(payload)
        self._size += size
        self._buffered += size

    def _make_room(self, key: bytes, size: int) -> None:
        """Seal the open batch if the record does not belong in it, and wait for room in the buffer."""
        if size > MAX_RECORD_BYTES:
            raise ProtocolError(f"record of {size} bytes exceeds the limit of {MAX_RECORD_BYTES} bytes")
        cfg = self.config
        while True:  # the waits below release the lock: look again after each
            if self._closed or self._closing:
                raise ClosedError("publisher is closed")
            if self._error is not None:
                raise failure(self._error) from self._error
            if self._payloads and (
                key != self._key or len(self._payloads) >= cfg.batch_records or self._size + size > cfg.batch_bytes
            ):
                self._seal(wait=True)
            elif self._buffered + size > cfg.buffer_bytes:
                self._wait_for_space(size)
            else:
                return

    def _seal(self, *, wait: bool, flags: int = 0) -> None:
        """Close the open batch and hand it to the sender. With ``wait``, first wait for a free slot."""
        if wait:
            while len(self._sealed) >= self.config.max_pending_batches and not self._closed and self._error is None:
                self._wake()
                self._room.wait(_SLOT_WAIT)
            if not self._payloads:  # the sender sealed it by linger while we waited
                return
        count = len(self._payloads)
        first = self._next_seq
        self._next_seq += count
        key = self._key
        assert key is not None
        key_prev = self._key_last.get(key, 0)
        if len(self._key_last) >= MAX_KEYS and not key_prev:
            self._key_last.clear()
        self._key_last[key] = first + count - 1
        self._sealed.append(Sealed(key, self._payloads, first, key_prev, self._opened_ns, self._size, flags))
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
                raise failure(self._error) from self._error
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise BufferFullError(
                    f"buffer still full after {cfg.send_timeout:.1f}s ({self._buffered} of {cfg.buffer_bytes} bytes "
                    "unacknowledged): is any exchange alive?"
                )
            self._wake()
            self._room.wait(left)

    def _wake(self) -> None:
        if self._idle:
            self._idle = False
            self.wakeup.ring()


def failure(error: BaseException) -> RoQError:
    """What the application is told of the sender's ``error``: the same refusal (a key the cluster no longer
    lets publish), or that the publisher failed."""
    if isinstance(error, ForbiddenError):
        return ForbiddenError(f"publisher failed: {error}", data=error.data)
    return BrokerConnectionError(f"publisher failed: {error}")
