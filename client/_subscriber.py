"""The subscriber: one SUB socket per exchange of the queue, a DEALER to the monitor, no thread.

All the work happens inside ``recv`` (and iteration): reading the exchanges, ordering per publisher
(:mod:`client._ordering`), answering the monitor. A subscriber that is not read stops answering the
monitor after a while and is then no longer waited for: it does not keep up.
"""

from __future__ import annotations

import collections
import logging
import time
import uuid
from itertools import count as counting
from itertools import islice, repeat
from typing import Iterator

import zmq

from client._locator import MonitorLocator
from client._message import Message, SubscriberStats
from client._ordering import Reassembler
from roq import batch, control
from roq.config import SubscriberConfig
from roq.errors import BrokerConnectionError, ClosedError, ProtocolError
from roq.sockets import poll_ms

log = logging.getLogger(__name__)

__all__ = ["Subscriber"]

#: Messages read from one socket before looking at the others.
BURST = 128


class _Feed:
    __slots__ = ("exchange", "backend", "socket", "heard")

    def __init__(self, exchange: str, backend: str, socket: zmq.Socket) -> None:
        self.exchange = exchange
        self.backend = backend
        self.socket = socket
        self.heard = False  # a beacon arrived: our subscription is live there


class Subscriber:
    """Receives the records of a logical queue whose key starts with ``prefix``.

    Made by :meth:`client.Connection.subscriber`. Use from one thread. Late subscribers receive what is
    published after they joined. Records of each publisher arrive once and in the publisher's order,
    across relocations and failovers, as long as the subscriber keeps up.
    """

    def __init__(self, *, context: zmq.Context, monitor: str | MonitorLocator, prefix: bytes,
                 config: SubscriberConfig) -> None:
        if not isinstance(prefix, bytes):
            raise TypeError(f"prefix must be bytes, got {type(prefix).__name__}")
        self.config = config
        self.prefix = prefix
        self.id = uuid.uuid4().bytes
        self.name = self.id.hex()
        self._ctx = context
        self._closed = False
        self._ready: collections.deque[Message] = collections.deque()
        self._order = Reassembler(filtered=bool(prefix), hold_timeout=config.hold_timeout, max_held=config.max_held_batches)
        self._feeds: dict[str, _Feed] = {}
        self._by_socket: dict[zmq.Socket, _Feed] = {}
        self._prepares: dict[int, str] = {}  # relocation -> target exchange, until we hear it
        self._names: dict[bytes, str] = {}
        self._latency: collections.deque[float] = collections.deque(maxlen=config.latency_samples)
        self._latency_count = 0  # batches measured in all
        self._kpi_from = (0.0, 0, 0)  # the previous hello: when, records received, batches measured
        self._received = 0
        self._dropped = 0
        self._listed = False
        self._next_hello = 0.0
        self._poller = zmq.Poller()
        self._locator = monitor if isinstance(monitor, MonitorLocator) else MonitorLocator(monitor)
        self._monitor_endpoint = self._locator.endpoint
        self._monitor = context.socket(zmq.DEALER)
        self._monitor.setsockopt(zmq.ROUTING_ID, self.id)
        self._monitor.setsockopt(zmq.LINGER, 200)
        self._monitor.connect(self._monitor_endpoint)
        self._poller.register(self._monitor, zmq.POLLIN)
        try:
            self._join(self._monitor_endpoint)
        except BaseException:
            self.close()
            raise

    def _join(self, monitor: str) -> None:
        """Wait for the exchange list and for a beacon from each exchange."""
        deadline = time.monotonic() + self.config.connect_timeout
        while time.monotonic() < deadline:
            self._pump(min(0.05, max(0.0, deadline - time.monotonic())))
            if self._listed and all(f.heard for f in self._feeds.values()):
                return
        if not self._listed:
            raise BrokerConnectionError(f"monitor {monitor} did not answer within {self.config.connect_timeout:.1f}s")
        deaf = [f.exchange for f in self._feeds.values() if not f.heard]
        log.warning("subscriber %s: no beacon yet from %s; continuing", self.name[:8], ", ".join(deaf))

    # ------------------------------------------------------------------ application API

    def recv(self, timeout: float | None = None) -> Message | None:
        """The next record, or None if none arrived within ``timeout`` seconds (None = wait forever).

        Raises:
            ClosedError: the subscriber is closed.
        """
        if self._ready:
            return self._ready.popleft()
        if self._closed:
            raise ClosedError("subscriber is closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            self._pump(1.0 if left is None else max(0.0, min(left, 1.0)))
            if self._ready:
                return self._ready.popleft()
            if left is not None and left <= 0:
                return None

    def __iter__(self) -> Iterator[Message]:
        """Yield records as they arrive, forever (until ``close()`` or ``break``)."""
        ready = self._ready
        while not self._closed:
            while ready:
                yield ready.popleft()
            self._pump(1.0)

    def stats(self) -> SubscriberStats:
        """Counters and a latency summary (see :class:`SubscriberStats`)."""
        samples = sorted(self._latency)
        latency: dict[str, float] = {"count": len(samples)}
        if samples:
            latency.update(
                mean=sum(samples) / len(samples),
                p50=samples[len(samples) // 2],
                p99=samples[min(len(samples) - 1, int(len(samples) * 0.99))],
                max=samples[-1],
            )
        o = self._order
        return SubscriberStats(
            received=self._received,
            duplicates=o.duplicates,
            gaps=o.gaps,
            lost=o.lost,
            hold_timeouts=o.hold_timeouts,
            held=o.held,
            dropped=self._dropped,
            exchanges=sum(1 for f in self._feeds.values() if f.heard),
            latency=latency,
        )

    def close(self) -> None:
        """Leave the queue and close the sockets. Records not yet read are discarded."""
        if self._closed:
            return
        self._closed = True
        self._send_monitor(control.SubscriberBye(subscriber=self.name))
        for feed in self._feeds.values():
            feed.socket.close(linger=0)
        self._feeds.clear()
        self._by_socket.clear()
        self._monitor.close()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the loop, run from recv

    def _pump(self, timeout: float) -> None:
        now = time.monotonic()
        if self._locator.endpoint != self._monitor_endpoint:  # the monitor moved to another host
            self._monitor_endpoint = self._locator.retarget(self._monitor, self._monitor_endpoint)
            self._next_hello = now
        if now >= self._next_hello:
            self._hello(now)
        limit = min(now + timeout, self._next_hello)
        held_until = self._order.next_deadline()
        if held_until is not None:
            limit = min(limit, held_until)
        events = self._poller.poll(poll_ms(limit - now))
        for sock, _ in events:
            if sock is self._monitor:
                self._on_monitor()
            else:
                feed = self._by_socket.get(sock)
                if feed is not None:
                    self._read(feed, BURST)
        if held_until is not None and time.monotonic() >= held_until:
            self._deliver(self._order.expire(time.monotonic()))

    def _read(self, feed: _Feed, limit: int | None) -> None:
        recv = feed.socket.recv_multipart
        unpack = batch.HEADER.unpack
        header_size = batch.HEADER_SIZE
        order = self._order
        prefix = self.prefix
        n = 0
        while limit is None or n < limit:
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            n += 1
            if len(frames) != 3 or len(frames[1]) != header_size:
                self._drop(feed, f"{len(frames)} frames / header of {len(frames[1]) if len(frames) > 1 else 0} bytes")
                continue
            key, header, body = frames
            version, kind, _flags, count, pub, epoch, first, key_prev, ts = unpack(header)
            if version != batch.VERSION:
                self._drop(feed, f"protocol version {version}")
                continue
            if kind == batch.DATA:
                if prefix and not key.startswith(prefix):
                    continue  # a key that starts like the control topic; not ours
                try:
                    payloads = batch.decode_body(body, count)
                except ProtocolError as exc:
                    self._drop(feed, str(exc))
                    continue
                if count == 0 or first == 0:
                    self._drop(feed, "empty batch")
                    continue
                out = order.data(feed.exchange, pub, epoch, first, count, key_prev, key, (key, payloads, pub, first, ts), time.monotonic())
                if out:
                    self._deliver(out)
            elif kind == batch.MARKER:
                self._deliver(order.marker(feed.exchange, pub, epoch, time.monotonic()))
            elif kind == batch.BEACON:
                if body != feed.exchange.encode():
                    self._drop(feed, f"beacon of {body[:40]!r} on the socket of {feed.exchange}")
                elif not feed.heard:
                    feed.heard = True
                    self._heard(feed.exchange)
            else:
                self._drop(feed, f"frame kind {kind}")

    def _deliver(self, out: list) -> None:
        now = time.time()
        ready = self._ready
        names = self._names
        for (key, payloads, pub, first, ts), skip in out:
            name = names.get(pub)
            if name is None:
                name = names[pub] = pub.hex()
            if skip:
                payloads = payloads[skip:]
                first += skip
            stamp = ts / 1e9
            ready.extend(map(Message, zip(repeat(key), payloads, repeat(name), counting(first), repeat(stamp))))
            self._received += len(payloads)
            self._latency.append(now - stamp)
            self._latency_count += 1

    def _drop(self, feed: _Feed, detail: str) -> None:
        self._dropped += 1
        if self._dropped <= 10 or self._dropped % 1000 == 0:
            log.warning("subscriber %s: dropped a malformed frame from %s: %s (%d in all)",
                        self.name[:8], feed.exchange, detail, self._dropped)

    # ------------------------------------------------------------------ monitor

    def _on_monitor(self) -> None:
        while True:
            try:
                frames = self._monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                if len(frames) != 1:
                    raise ProtocolError(f"{len(frames)} frames")
                msg = control.decode(frames[0])
            except ProtocolError as exc:
                log.warning("subscriber %s: dropped a malformed message from the monitor: %s", self.name[:8], exc)
                continue
            if isinstance(msg, control.Exchanges):
                self._on_exchanges(msg)
            elif isinstance(msg, control.Prepare):
                self._on_prepare(msg)

    def _on_exchanges(self, msg: control.Exchanges) -> None:
        self._listed = True
        listed = {x.exchange: x.backend for x in msg.exchanges}
        for feed in list(self._feeds.values()):
            if feed.exchange not in listed or listed[feed.exchange] != feed.backend:
                self._remove(feed)
        for gone in msg.lost:
            self._deliver(self._order.source_lost(gone, time.monotonic()))
        for exchange, backend in listed.items():
            if exchange not in self._feeds:
                self._add(exchange, backend)

    def _on_prepare(self, msg: control.Prepare) -> None:
        if msg.source:
            self._order.note(bytes.fromhex(msg.publisher), msg.source, time.monotonic())
        feed = self._feeds.get(msg.target)
        if feed is None:
            feed = self._add(msg.target, msg.target_backend)
        if feed.heard:
            self._send_monitor(control.Ready(subscriber=self.name, relocation=msg.relocation))
        else:
            self._prepares[msg.relocation] = msg.target

    def _heard(self, exchange: str) -> None:
        for relocation, target in list(self._prepares.items()):
            if target == exchange:
                del self._prepares[relocation]
                self._send_monitor(control.Ready(subscriber=self.name, relocation=relocation))
        self._hello(time.monotonic())  # the monitor places publishers only where every subscriber listens

    def _add(self, exchange: str, backend: str) -> _Feed:
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, self.config.rcvhwm)
        sock.setsockopt(zmq.LINGER, 0)
        # the data subscription first: a beacon heard afterwards proves both are in place
        sock.setsockopt(zmq.SUBSCRIBE, self.prefix)
        if not batch.CONTROL_TOPIC.startswith(self.prefix):
            sock.setsockopt(zmq.SUBSCRIBE, batch.CONTROL_TOPIC)
        sock.connect(backend)
        feed = _Feed(exchange, backend, sock)
        self._feeds[exchange] = feed
        self._by_socket[sock] = feed
        self._poller.register(sock, zmq.POLLIN)
        return feed

    def _remove(self, feed: _Feed) -> None:
        """Stop listening to an exchange, after reading what it already sent us."""
        self._read(feed, None)
        self._deliver(self._order.source_lost(feed.exchange, time.monotonic()))
        self._poller.unregister(feed.socket)
        feed.socket.close(linger=0)
        del self._feeds[feed.exchange]
        del self._by_socket[feed.socket]

    def _hello(self, now: float) -> None:
        self._next_hello = now + self.config.heartbeat_interval
        confirmed = [f.exchange for f in self._feeds.values() if f.heard]
        since, received, measured = self._kpi_from
        self._kpi_from = (now, self._received, self._latency_count)
        fresh = min(self._latency_count - measured, len(self._latency))
        window = sorted(islice(reversed(self._latency), fresh)) if fresh else []
        o = self._order
        self._send_monitor(control.SubscriberHello(
            subscriber=self.name, prefix=self.prefix, confirmed=confirmed,
            period=round(now - since, 3) if since else 0.0, records=self._received - received,
            latency_p50_ms=round(window[len(window) // 2] * 1000, 3) if window else -1.0,
            latency_p99_ms=round(window[min(len(window) - 1, int(len(window) * 0.99))] * 1000, 3) if window else -1.0,
            gaps=o.gaps, lost=o.lost, duplicates=o.duplicates))

    def _send_monitor(self, msg: control.Message) -> None:
        try:
            self._monitor.send(control.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            pass
