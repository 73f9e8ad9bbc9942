"""The exchange: forwards publisher batches to subscribers, acknowledges them, reports to its monitor.

Sockets (all owned by the one thread that runs :meth:`Exchange.serve`):

* frontend, ROUTER, bound: publishers' DEALERs send ``[key, header, body]``; the exchange answers
  each publisher with a cumulative acknowledgement after every burst.
* backend, PUB, bound: the same three frames go out untouched; subscribers filter on the key prefix.
  Every heartbeat the exchange also publishes a beacon on :data:`~roq.batch.CONTROL_TOPIC`, by which
  a subscriber knows its subscription is live.
* control, DEALER, connected to the monitor: heartbeats, KPI reports, and the monitor's commands.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid

import psutil
import zmq

from exchange._accounting import Accounting
from roq import batch, control
from roq.config import ExchangeConfig
from roq.errors import ConfigError, ProtocolError
from roq.runtime import DropCounter, LineReader, SignalWakeup
from roq.sockets import HandshakeWatch, bind, check_endpoint, poll_ms

log = logging.getLogger(__name__)

__all__ = ["Exchange"]

#: Batches forwarded before the loop looks at its timers and other sockets again.
BURST = 256
#: Longest key accepted, in bytes.
MAX_KEY = 1 << 16


class Exchange:
    """One exchange process's sockets and loop.

    Args:
        config: what to bind, where the monitor is, periods and bounds.
        context: the ZeroMQ context (default: a new one, terminated by :meth:`close`).
        commands_fd: a pipe on which the host manager writes commands, one JSON line each (for now only
            ``{"monitor": ENDPOINT}``: report to the queue's monitor there from now on); None = no commands.
    """

    def __init__(self, config: ExchangeConfig, *, context: zmq.Context | None = None,
                 commands_fd: int | None = None) -> None:
        self.config = config
        self._commands_fd = commands_fd
        self.id = config.exchange_id or f"x-{uuid.uuid4().hex[:8]}"
        self._own_context = context is None
        self._ctx = context or zmq.Context()
        self.drops = DropCounter(log, f"exchange {self.id}")
        self._process = psutil.Process()
        self._process.cpu_percent(None)
        self._beacon_id = uuid.uuid4().bytes
        self._beacons = 0
        self._draining_since: float | None = None
        self._last_data = 0.0
        self._acks: dict[bytes, int] = {}  # publisher identity -> highest seq forwarded, not yet acknowledged
        self._ack_due = float("inf")
        self._stopping = False
        self.frontend_endpoint = ""
        self.backend_endpoint = ""

        self._frontend = self._ctx.socket(zmq.ROUTER)
        self._frontend.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._frontend.setsockopt(zmq.MAXMSGSIZE, 2 * config.max_batch_bytes + MAX_KEY + 4096)
        self._frontend.setsockopt(zmq.LINGER, 0)
        self._backend = self._ctx.socket(zmq.PUB)
        self._backend.setsockopt(zmq.SNDHWM, config.backend_hwm)
        self._backend.setsockopt(zmq.LINGER, 2000)
        self._backend.setsockopt(zmq.MAXMSGSIZE, 1 << 16)  # subscribers only send subscriptions
        self._control = self._ctx.socket(zmq.DEALER)
        self._control.setsockopt(zmq.LINGER, 1000)
        self._watches: list[HandshakeWatch] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Bind the frontend and backend, connect to the monitor, say hello.

        Raises:
            BrokerConnectionError: an address could not be bound.
        """
        cfg = self.config
        self.frontend_endpoint = bind(self._frontend, cfg.address, cfg.frontend_port)
        self.backend_endpoint = bind(self._backend, cfg.address, cfg.backend_port)
        self._watches = [
            HandshakeWatch(self._frontend, "frontend", self.drops),
            HandshakeWatch(self._backend, "backend", self.drops),
        ]
        self._monitor_endpoint = cfg.monitor
        self._control.connect(cfg.monitor)
        self._send_control(self._heartbeat())
        log.info(
            "exchange %s: frontend %s, backend %s, monitor %s",
            self.id,
            self.frontend_endpoint,
            self.backend_endpoint,
            cfg.monitor,
        )

    def retarget(self, monitor: str) -> None:
        """Report to the monitor at ``monitor`` from now on (the queue's monitor moved to another host)."""
        if monitor == self._monitor_endpoint:
            return
        try:
            self._control.disconnect(self._monitor_endpoint)
        except zmq.ZMQError:
            pass
        self._control.connect(monitor)
        log.info("exchange %s: the queue's monitor moved: %s -> %s", self.id, self._monitor_endpoint, monitor)
        self._monitor_endpoint = monitor
        self._send_control(self._heartbeat())  # the new monitor learns about us at once

    def _on_command(self, line: bytes) -> None:
        """A command of the host manager on standard input: ``{"monitor": ENDPOINT}``."""
        try:
            command = json.loads(line)
            monitor = check_endpoint(command["monitor"])
        except (ValueError, TypeError, KeyError, ConfigError) as exc:
            self.drops.drop("bad command", f"{line[:80]!r}: {exc}")
            return
        self.retarget(monitor)

    def close(self) -> None:
        for watch in self._watches:
            watch.close()
        for sock in (self._frontend, self._backend, self._control):
            sock.close()
        if self._own_context:
            self._ctx.term()

    # ------------------------------------------------------------------ loop

    def serve(self, wakeup: SignalWakeup | None = None) -> None:
        """Run until stopped: by a signal on ``wakeup`` (graceful drain), or a Shutdown from the monitor."""
        cfg = self.config
        poller = zmq.Poller()
        poller.register(self._frontend, zmq.POLLIN)
        poller.register(self._control, zmq.POLLIN)
        for watch in self._watches:
            poller.register(watch.socket, zmq.POLLIN)
        if wakeup is not None:
            poller.register(wakeup.fd, zmq.POLLIN)
        commands = LineReader(self._commands_fd) if self._commands_fd is not None else None
        if commands is not None:
            poller.register(commands.fd, zmq.POLLIN)
        now = time.monotonic()
        acct = Accounting(now)
        dropped_at_report = 0
        next_beat = now + cfg.heartbeat_interval
        self._kpi_period = cfg.kpi_period
        next_kpi = now + self._kpi_period
        while not self._stopping:
            timeout = max(0.0, min(next_beat, next_kpi, self._ack_due) - time.monotonic())
            events = dict(poller.poll(poll_ms(timeout)))
            started = time.monotonic()
            if self._frontend in events:
                self._forward(acct)
            if self._control in events:
                self._on_control()
            if wakeup is not None and wakeup.fd in events and wakeup.consume():
                self._begin_drain("signal")
            if commands is not None and commands.fd in events:
                for line in commands.read():
                    self._on_command(line)
                if commands.closed:
                    poller.unregister(commands.fd)
                    commands = None
            for watch in self._watches:
                if watch.socket in events:
                    watch.handle()
            now = time.monotonic()
            if now >= self._ack_due:
                self._send_acks()
            acct.busy += now - started
            if now >= next_beat:
                next_beat = now + cfg.heartbeat_interval
                self._send_control(self._heartbeat())
                self._beacon()
                self._check_drained(now)
            if now >= min(next_kpi, acct.started + self._kpi_period):
                next_kpi = now + self._kpi_period
                kpi = acct.report(
                    self.id,
                    now,
                    cpu_percent=self._process.cpu_percent(None),
                    rss_bytes=self._process.memory_info().rss,
                    dropped=self.drops.total - dropped_at_report,
                )
                dropped_at_report = self.drops.total
                self._send_control(kpi)
        self._send_acks()
        log.info("exchange %s stopped (%d malformed inputs dropped in all)", self.id, self.drops.total)

    def _forward(self, acct: Accounting) -> None:
        """Forward up to BURST batches; their acknowledgements go out within ``ack_interval``."""
        recv = self._frontend.recv_multipart
        send = self._backend.send_multipart
        unpack = batch.HEADER.unpack
        header_size = batch.HEADER_SIZE
        max_body = self.config.max_batch_bytes
        publishers = acct.publishers
        acks = self._acks
        urgent = False
        for _ in range(BURST):
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) != 4:
                self.drops.drop("wrong frame count", f"{len(frames)} frames, expected 3 after the identity")
                continue
            ident, key, header, body = frames
            if len(header) != header_size:
                self.drops.drop("bad header", f"{len(header)} bytes, expected {header_size}")
                continue
            version, kind, flags, count, pub, _epoch, first, _prev, _ts = unpack(header)
            if version != batch.VERSION:
                self.drops.drop("bad header", f"protocol version {version}")
                continue
            if pub != ident:
                self.drops.drop("bad header", "publisher id does not match the connection's identity")
                continue
            size = len(body)
            if kind == batch.DATA:
                if count == 0 or first == 0 or size < 4 * count or first + count > batch.SEQ_LIMIT:
                    self.drops.drop("bad batch", f"count {count}, first seq {first}, body {size} bytes")
                    continue
                if size > max_body:
                    self.drops.drop("oversized batch", f"body {size} bytes > {max_body}")
                    continue
                if len(key) > MAX_KEY:
                    self.drops.drop("oversized key", f"{len(key)} bytes")
                    continue
                send(frames[1:])
                acks[ident] = first + count - 1
                urgent |= flags & batch.FLAG_ACK_NOW
                acct.records_in += count
                acct.bytes_in += size
                acct.records_out += count
                acct.bytes_out += size
                stat = publishers.get(pub)
                if stat is None:
                    publishers[pub] = [count, size]
                else:
                    stat[0] += count
                    stat[1] += size
            elif kind == batch.MARKER:
                if key != batch.CONTROL_TOPIC or count != 0 or size or first == 0 or first >= batch.SEQ_LIMIT:
                    self.drops.drop("bad marker", f"key {key[:16]!r}, count {count}, body {size} bytes")
                    continue
                send(frames[1:])
                acks[ident] = first - 1
                urgent = True  # the publisher holds its new batches until this one is acknowledged
            else:
                self.drops.drop("bad header", f"frame kind {kind} not accepted from publishers")
        if acks:
            self._last_data = time.monotonic()
            if urgent:
                self._send_acks()
            elif self._ack_due == float("inf"):
                self._ack_due = self._last_data + self.config.ack_interval

    def _send_acks(self) -> None:
        reply = self._frontend.send_multipart
        for ident, seq in self._acks.items():
            try:
                reply((ident, batch.encode_ack(seq)), zmq.NOBLOCK)
            except (zmq.ZMQError, ProtocolError):  # peer gone or its pipe full: it resends or fails over
                pass
        self._acks.clear()
        self._ack_due = float("inf")

    # ------------------------------------------------------------------ control

    def _on_control(self) -> None:
        while True:
            try:
                frames = self._control.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 1:
                self.drops.drop("bad control message", f"{len(frames)} frames from the monitor")
                continue
            try:
                msg = control.decode(frames[0])
            except ProtocolError as exc:
                self.drops.drop("bad control message", str(exc))
                continue
            if isinstance(msg, control.Shutdown):
                log.info("exchange %s: shutdown asked by the monitor (%s)", self.id, msg.reason or "no reason")
                self._stopping = True
            elif isinstance(msg, control.KpiPeriod):
                if not 0.05 <= msg.period <= 3600:
                    self.drops.drop("bad control message", f"KPI period {msg.period!r} out of 0.05..3600 s")
                elif msg.period != self._kpi_period:
                    log.info("exchange %s: KPI period now %.2fs (was %.2fs)", self.id, msg.period, self._kpi_period)
                    self._kpi_period = msg.period
            elif isinstance(msg, control.Reply):
                if msg.result != control.Result.OK:
                    log.warning("exchange %s: monitor answered %d: %s", self.id, msg.result, msg.comment)
            else:
                self.drops.drop("bad control message", f"unexpected {type(msg).__name__}")

    def _heartbeat(self) -> control.Heartbeat:
        return control.Heartbeat(
            exchange=self.id,
            frontend=self.frontend_endpoint,
            backend=self.backend_endpoint,
            pid=os.getpid(),
            draining=self._draining_since is not None,
        )

    def _send_control(self, msg: control.Message) -> None:
        try:
            self._control.send(control.encode(msg), zmq.NOBLOCK)
        except zmq.Again:  # monitor unreachable for long: heartbeats are best effort
            pass

    def _beacon(self) -> None:
        self._beacons += 1
        header = batch.pack_header(
            batch.BEACON, self._beacon_id, self._beacons, 0, timestamp_ns=time.time_ns()
        )
        self._backend.send_multipart((batch.CONTROL_TOPIC, header, self.id.encode()))

    # ------------------------------------------------------------------ draining

    def _begin_drain(self, why: str) -> None:
        if self._draining_since is not None:
            return
        log.info("exchange %s: draining (%s); the monitor moves its publishers away", self.id, why)
        self._draining_since = time.monotonic()
        self._send_control(control.ExchangeBye(exchange=self.id))
        self._send_control(self._heartbeat())

    def _check_drained(self, now: float) -> None:
        """Stop once no publisher has sent for a while after the drain began, or at the drain timeout."""
        if self._draining_since is None:
            return
        idle = now - max(self._last_data, self._draining_since)
        if idle >= 2 * self.config.heartbeat_interval or now - self._draining_since >= self.config.drain_timeout:
            self._stopping = True
