"""A publisher's sender thread: owns its sockets, sends batches, follows the monitor's moves.

Moves, as the monitor orders them:

* ``assign``: the first exchange.
* ``relocate`` (make before break): connect to the new exchange B; send everything sealed so far
  through the old exchange A, then a MARKER (epoch e ends after seq m); hold new batches until A has
  acknowledged up to m; then switch to B with epoch e+1. Holding the handful of new batches until A's
  acknowledgement means B never gets a batch older than one it already has, even if A dies mid-move.
* ``failover``: the old exchange is dead. Switch to B with a new epoch and resend the whole window
  (unacknowledged batches and those still in their grace), then continue.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

import zmq

from client._locator import MonitorLocator
from client._window import Sent, Window
from roq import batch, control
from roq.errors import ProtocolError
from roq.sockets import poll_ms

if TYPE_CHECKING:
    from client._publisher import Publisher

log = logging.getLogger(__name__)

#: How often the sender looks at acknowledgement ages and trims its window, seconds.
CHECK_INTERVAL = 0.05


class _Link:
    __slots__ = ("exchange", "frontend", "socket")

    def __init__(self, exchange: str, frontend: str, socket: zmq.Socket) -> None:
        self.exchange = exchange
        self.frontend = frontend
        self.socket = socket


class _Move:
    __slots__ = ("target", "relocation", "marker_last", "marker_sent", "started")

    def __init__(self, target: _Link, relocation: int, started: float) -> None:
        self.target = target
        self.relocation = relocation
        self.marker_last = 0
        self.marker_sent = False
        self.started = started


class Sender(threading.Thread):
    def __init__(self, publisher: Publisher, context: zmq.Context, monitor: MonitorLocator) -> None:
        super().__init__(name=f"roq-publisher-{publisher.name[:8]}", daemon=True)
        self._pub = publisher
        self._cfg = publisher.config
        self._ctx = context
        self._locator = monitor
        self._monitor_endpoint = monitor.endpoint
        self._monitor: zmq.Socket | None = None
        self._poller = zmq.Poller()
        self._current: _Link | None = None
        self._moving: _Move | None = None
        self._window = Window(self._cfg.ack_grace)
        self._outbox: collections.deque[Sent] = collections.deque()
        self._last_sent = 0
        self._blocked = False
        self._next_hello = 0.0
        self._next_check = 0.0
        self._next_panic = 0.0
        self._drops = 0
        self.epoch = 0
        self.exchange = ""

    # ------------------------------------------------------------------ thread

    def run(self) -> None:
        try:
            self._monitor = self._ctx.socket(zmq.DEALER)
            self._monitor.setsockopt(zmq.ROUTING_ID, self._pub.id)
            self._monitor.setsockopt(zmq.LINGER, 200)
            self._monitor.connect(self._monitor_endpoint)
            self._poller.register(self._monitor, zmq.POLLIN)
            self._poller.register(self._pub._wake_read, zmq.POLLIN)
            self._loop()
            self._send_monitor(control.PublisherBye(publisher=self._pub.name))
        except Exception as exc:  # the application learns it on its next call
            log.exception("publisher %s: sender failed", self._pub.name[:8])
            self._pub._fail(exc)
        finally:
            for link in self._links():
                link.socket.close(linger=0)
            if self._monitor is not None:
                self._monitor.close()

    def _loop(self) -> None:
        pub = self._pub
        linger = self._cfg.linger
        while True:
            now = time.monotonic()
            with pub._lock:
                if pub._payloads and now - pub._opened >= linger:
                    pub._seal(wait=False)
                sealed = list(pub._sealed) if pub._sealed else None
                if sealed:
                    pub._sealed.clear()
                    pub._changed.notify_all()
                if pub._closed:
                    return
            if sealed:
                self._take(sealed)
            self._send_outbox(now)
            if now >= self._next_check:
                self._next_check = now + CHECK_INTERVAL
                self._check(now)
            if self._locator.endpoint != self._monitor_endpoint:  # the monitor moved to another host
                assert self._monitor is not None
                self._monitor_endpoint = self._locator.retarget(self._monitor, self._monitor_endpoint)
                self._next_hello = now
            if now >= self._next_hello:
                self._next_hello = now + self._cfg.heartbeat_interval
                self._send_monitor(
                    control.PublisherHello(publisher=pub.name, exchange=self.exchange, epoch=self.epoch)
                )
            events = self._wait(now)
            for sock, _ in events:
                if isinstance(sock, zmq.Socket) and sock.closed:
                    continue  # closed by a failover handled earlier in this round
                if sock is self._monitor:
                    self._on_monitor()
                elif sock == pub._wake_read:
                    try:
                        while os.read(pub._wake_read, 4096):
                            pass
                    except BlockingIOError:
                        pass
                else:
                    self._on_acks(sock)

    def _wait(self, now: float) -> list:
        """Sleep until a socket, a wake-up, the open batch's linger or a timer needs us."""
        pub = self._pub
        deadline = min(self._next_check, self._next_hello)
        lingering = False
        with pub._lock:
            if pub._sealed or pub._closed:
                deadline = now
            elif pub._payloads and pub._opened + self._cfg.linger < deadline:
                deadline = pub._opened + self._cfg.linger
                lingering = True
            pub._idle = deadline > now
        timeout = deadline - now
        if lingering and 0 < timeout < 0.002 and not self._blocked:
            time.sleep(timeout)  # zmq_poll counts whole milliseconds; the linger is finer
            timeout = 0
        events = self._poller.poll(poll_ms(timeout))
        with pub._lock:
            pub._idle = False
        return events

    # ------------------------------------------------------------------ sending

    def _take(self, sealed: list[tuple]) -> None:
        encode = batch.encode_body
        for key, payloads, first, key_prev, ts, size, flags in sealed:
            self._outbox.append(Sent(first, len(payloads), key, encode(payloads), key_prev, ts, size, flags, 0.0))

    def _send_outbox(self, now: float) -> None:
        link = self._current
        move = self._moving
        if link is None or (move is not None and move.marker_sent):
            return
        send = link.socket.send_multipart
        pack = batch.HEADER.pack
        pid = self._pub.id
        epoch = self.epoch
        outbox = self._outbox
        window = self._window
        while outbox:
            e = outbox[0]
            flags = e.flags | batch.FLAG_RETRANSMIT if e.sent_at else e.flags
            header = pack(batch.VERSION, batch.DATA, flags, e.count, pid, epoch, e.first, e.key_prev, e.timestamp_ns)
            try:
                send((e.key, header, e.body), zmq.NOBLOCK)
            except zmq.Again:
                self._block(True)
                return
            outbox.popleft()
            window.add(e._replace(sent_at=now))
            self._last_sent = e.last
        self._block(False)
        if move is not None and not move.marker_sent:
            move.marker_last = self._last_sent
            marker = batch.pack_header(
                batch.MARKER, pid, self._last_sent + 1, 0, epoch=epoch, timestamp_ns=time.time_ns()
            )
            try:
                send((batch.CONTROL_TOPIC, marker, b""), zmq.NOBLOCK)
            except zmq.Again:
                self._block(True)
                return
            move.marker_sent = True
            self._maybe_switch()

    def _block(self, blocked: bool) -> None:
        if blocked == self._blocked or self._current is None:
            return
        self._blocked = blocked
        flags = zmq.POLLIN | zmq.POLLOUT if blocked else zmq.POLLIN
        self._poller.modify(self._current.socket, flags)

    # ------------------------------------------------------------------ acknowledgements

    def _on_acks(self, sock: zmq.Socket) -> None:
        if self._blocked and self._current is not None and sock is self._current.socket:
            self._send_outbox(time.monotonic())
        now = time.monotonic()
        advanced = False
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                if len(frames) != 1:
                    raise ProtocolError(f"{len(frames)} frames")
                seq = batch.decode_ack(frames[0])
            except ProtocolError as exc:
                self._drops += 1
                log.warning("publisher %s: dropped a malformed ack: %s", self._pub.name[:8], exc)
                continue
            if seq <= self._last_sent:  # an ack beyond what we sent is nonsense
                advanced |= self._window.ack(seq, now)
        if advanced:
            with self._pub._lock:
                self._pub._acked = self._window.acked
                self._pub._changed.notify_all()
            self._maybe_switch()

    def _check(self, now: float) -> None:
        """Trim the window, and ask for another exchange when acknowledgements stop coming."""
        freed = self._window.trim(now)
        if freed:
            with self._pub._lock:
                self._pub._buffered -= freed
                self._pub._changed.notify_all()
        move = self._moving
        if move is not None and now - move.started > max(2 * self._cfg.ack_timeout, 2.0):
            log.warning(
                "publisher %s: old exchange %s never acknowledged the marker; failing over to %s",
                self._pub.name[:8], self.exchange, move.target.exchange,
            )
            self._failover(move.target.exchange, move.target.frontend, move.relocation, now)
            return
        oldest = self._window.oldest_unacked()
        if (
            oldest is not None
            and self._current is not None
            and move is None
            and now - oldest.sent_at > self._cfg.ack_timeout
            and now >= self._next_panic
        ):
            self._next_panic = now + self._cfg.ack_timeout
            self._pub.counters["panics"] += 1
            age = now - oldest.sent_at
            log.warning("publisher %s: no ack from %s for %.1fs; asking the monitor", self._pub.name[:8], self.exchange, age)
            self._send_monitor(
                control.Panic(publisher=self._pub.name, exchange=self.exchange, reason=f"no acknowledgement for {age:.1f}s")
            )

    # ------------------------------------------------------------------ monitor

    def _on_monitor(self) -> None:
        assert self._monitor is not None
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
                log.warning("publisher %s: dropped a malformed message from the monitor: %s", self._pub.name[:8], exc)
                continue
            if isinstance(msg, control.Relocate) and msg.publisher == self._pub.name:
                self._on_relocate(msg)
            elif isinstance(msg, control.NoExchange):
                if not self._pub._no_exchange:
                    log.warning("publisher %s: %s; buffering until an exchange appears", self._pub.name[:8], msg.comment)
                self._pub._no_exchange = msg.comment or "no exchange"

    def _on_relocate(self, msg: control.Relocate) -> None:
        now = time.monotonic()
        if msg.reason == "assign" or self._current is None:
            if self._current is None:
                self._adopt(self._connect(msg.exchange, msg.frontend))
                log.info("publisher %s: sending through exchange %s", self._pub.name[:8], msg.exchange)
                if msg.relocation:
                    self._report_moved(msg.relocation)
            return
        if msg.reason == "failover":
            self._failover(msg.exchange, msg.frontend, msg.relocation, now)
            return
        if self._moving is not None:
            return  # one move at a time; the monitor waits for our Moved
        if msg.exchange == self._current.exchange:
            self._report_moved(msg.relocation)
            return
        self._moving = _Move(self._connect(msg.exchange, msg.frontend), msg.relocation, now)
        self._send_outbox(now)

    def _maybe_switch(self) -> None:
        move = self._moving
        if move is None or not move.marker_sent or self._window.acked < move.marker_last:
            return
        old = self._current
        self._moving = None
        if old is not None:
            self._poller.unregister(old.socket)
            old.socket.close(linger=0)
        self.epoch += 1
        self._blocked = False
        self._adopt(move.target)
        self._pub.counters["relocations"] += 1
        log.info(
            "publisher %s: moved to exchange %s (epoch %d) in %.1f ms",
            self._pub.name[:8], move.target.exchange, self.epoch, (time.monotonic() - move.started) * 1000,
        )
        self._report_moved(move.relocation)
        self._send_outbox(time.monotonic())

    def _failover(self, exchange: str, frontend: str, relocation: int, now: float) -> None:
        keep = self._current if self._current is not None and self._current.exchange == exchange else None
        if keep is not None and self._blocked:
            keep = None  # its queue is full: start afresh on a new connection
        if keep is not None:
            # failing over to the exchange we send through (a move away from it was abandoned):
            # end the epoch there with a marker, so that subscribers need not wait for a timeout
            marker = batch.pack_header(
                batch.MARKER, self._pub.id, self._last_sent + 1, 0, epoch=self.epoch,
                timestamp_ns=time.time_ns(), flags=batch.FLAG_ACK_NOW,
            )
            try:
                keep.socket.send_multipart((batch.CONTROL_TOPIC, marker, b""), zmq.NOBLOCK)
            except zmq.Again:
                keep = None
        for link in self._links():
            if link is not keep:
                self._poller.unregister(link.socket)
                link.socket.close(linger=0)
        self._current = None
        self._moving = None
        self._blocked = False
        self.epoch += 1
        self._adopt(keep or self._connect(exchange, frontend))
        resend = self._window.take_all()
        # resent batches go first: their seqs are older than anything waiting in the outbox
        self._outbox.extendleft(reversed([e._replace(sent_at=e.sent_at or now) for e in resend]))
        self._last_sent = resend[0].first - 1 if resend else self._last_sent
        self._pub.counters["failovers"] += 1
        self._pub.counters["retransmitted"] += sum(e.count for e in resend)
        log.info(
            "publisher %s: failed over to exchange %s (epoch %d), resending %d batches",
            self._pub.name[:8], exchange, self.epoch, len(resend),
        )
        self._report_moved(relocation)
        self._send_outbox(now)

    # ------------------------------------------------------------------ helpers

    def _connect(self, exchange: str, frontend: str) -> _Link:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, self._pub.id)
        sock.setsockopt(zmq.SNDHWM, 1000)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(frontend)
        self._poller.register(sock, zmq.POLLIN)
        return _Link(exchange, frontend, sock)

    def _adopt(self, link: _Link) -> None:
        self._current = link
        self.exchange = link.exchange
        self._pub._no_exchange = ""
        self._pub._assigned.set()

    def _links(self) -> list[_Link]:
        links = [self._current] if self._current is not None else []
        if self._moving is not None:
            links.append(self._moving.target)
        return links

    def _report_moved(self, relocation: int) -> None:
        if relocation:
            self._send_monitor(
                control.Moved(publisher=self._pub.name, exchange=self.exchange, relocation=relocation, epoch=self.epoch)
            )
        self._next_hello = 0.0  # tell the monitor where we are now

    def _send_monitor(self, msg: control.Message) -> None:
        assert self._monitor is not None
        try:
            self._monitor.send(control.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            pass
