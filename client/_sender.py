"""A publisher's sender thread: owns its sockets, takes sealed batches from the outbox, follows the monitor.

It knows the publisher only through its :class:`~client._outbox.Outbox` (batches in; acknowledgements,
freed bytes, assignment and errors out). Sending is the :class:`~client._stream.Stream`'s; this module
runs the loop, talks to the monitor and carries out its moves:

* ``assign``: the first exchange.
* ``relocate`` (make before break): connect to the new exchange B; end the epoch on the old exchange A
  with a MARKER right after what A was sent (epoch e ends after seq m); hold every batch not sent yet
  until A has acknowledged up to m; then switch to B with epoch e+1 and send them there. Holding them until
  A's acknowledgement means B never gets a batch older than one it already has, even if A dies mid-move.
  A saturated A acknowledges slowly, and the move waits for at most the ``max_in_flight`` batches A was
  sent; an A that holds its publishers back for a slow reader repeats its latest acknowledgement while it does
  (:mod:`exchange._acks`), and the move waits for it too, telling the monitor in every hello that it is still
  under way; only an A that says nothing at all for ``max(2 * ack_timeout, 2 s)`` is failed over from.
* ``failover``: the old exchange is dead. Switch to B with a new epoch and resend the whole window
  (every batch its exchange did not say was delivered), then continue.

The publisher asks the monitor for another exchange (a Panic) when its exchange has acknowledged nothing
for ``ack_timeout`` while batches wait: not when acknowledgements merely lag behind a busy exchange.
"""

from __future__ import annotations

import logging
import select
import threading
import time

import zmq

from client._channel import MonitorChannel
from client._stream import Link, Stream
from client._locator import MonitorLocator
from client._outbox import Outbox
from roq.wire import batch, control
from roq.config import PublisherConfig
from roq.errors import BrokerConnectionError, ForbiddenError, Result
from roq.sockets import poll_ms

log = logging.getLogger(__name__)

#: How often the sender looks at acknowledgement ages and trims its window, seconds.
CHECK_INTERVAL = 0.05
#: zmq_poll counts whole milliseconds: a linger ending sooner than this is waited out in select (Sender._linger).
FINE_SLEEP = 0.002


class _Move:
    """A planned move in progress: the target's link, and the marker that ends the epoch on the old one."""

    __slots__ = ("target", "relocation", "marker_last", "marker_sent", "started")

    def __init__(self, target: Link, relocation: int, started: float) -> None:
        self.target = target
        self.relocation = relocation
        self.marker_last = 0
        self.marker_sent = False
        self.started = started


class Sender(threading.Thread):
    """The thread that sends a publisher's batches and carries out the monitor's moves.

    Args:
        outbox: the publisher's outbox (the only thing of the publisher it touches).
        context: the ZeroMQ context; every socket is made in this thread.
        locator: where the queue's monitor is.
        identity: the publisher's 16-byte id.
        config: the publisher's configuration.

    Attributes:
        exchange: the exchange sent through now ("" before the first).
        epoch: the publisher's move counter.
        counters: relocations, failovers, records retransmitted, panics.
    """

    def __init__(self, outbox: Outbox, context: zmq.Context, locator: MonitorLocator, identity: bytes,
                 config: PublisherConfig) -> None:
        self._hex = identity.hex()
        super().__init__(name=f"roq-publisher-{self._hex[:8]}", daemon=True)
        self._outbox = outbox
        self._ctx = context
        self._locator = locator
        self._id = identity
        self._cfg = config
        self._who = f"publisher {self._hex[:8]}"
        self._channel: MonitorChannel | None = None
        self._poller = zmq.Poller()
        self._stream = Stream(context, self._poller, identity, config.max_in_flight, self._who,
                              curve=config.curve)
        self._moving: _Move | None = None
        self._next_hello = 0.0
        self._next_check = 0.0
        self._next_panic = 0.0
        self.exchange = ""
        self.counters = {"relocations": 0, "failovers": 0, "retransmitted": 0, "panics": 0}

    @property
    def epoch(self) -> int:
        return self._stream.epoch

    # ------------------------------------------------------------------ thread

    def run(self) -> None:
        try:
            self._channel = MonitorChannel(self._ctx, self._locator, self._who, self._cfg.curve)
            self._poller.register(self._channel.socket, zmq.POLLIN)
            self._poller.register(self._outbox.wakeup.fd, zmq.POLLIN)
            self._loop()
            self._channel.send(control.PublisherBye(publisher=self._hex))
        except (BrokerConnectionError, ForbiddenError) as exc:  # refused: the application learns it on its next call
            log.error("%s: %s", self._who, exc)
            self._outbox.fail(exc)
        except Exception as exc:  # the application learns it on its next call
            log.exception("%s: sender failed", self._who)
            self._outbox.fail(exc)
        finally:
            for link in self._links():
                link.close()
            if self._channel is not None:
                self._channel.close()

    def _loop(self) -> None:
        outbox, stream, channel = self._outbox, self._stream, self._channel
        assert channel is not None
        monitor, wake_fd = channel.socket, outbox.wakeup.fd
        while True:
            now = time.monotonic()
            sealed = outbox.take(now, stream.idle)
            if sealed is None:
                return
            if sealed:
                stream.add(sealed)
            self._send(now)
            if now >= self._next_check:
                self._next_check = now + CHECK_INTERVAL
                self._check(now)
            if channel.follow():  # the monitor moved to another host
                self._next_hello = now
            if now >= self._next_hello:
                self._next_hello = now + self._cfg.heartbeat_interval
                moving = self._moving.relocation if self._moving is not None else 0
                channel.send(control.PublisherHello(publisher=self._hex, exchange=self.exchange, epoch=stream.epoch,
                                                    pressure=round(stream.pressure.fraction(now), 3), moving=moving))
            for sock, _ in self._wait(now):
                if isinstance(sock, zmq.Socket) and sock.closed:
                    continue  # closed by a failover handled earlier in this round
                if sock is monitor:
                    self._on_monitor()
                elif sock == wake_fd:
                    outbox.wakeup.drain()
                else:
                    self._on_exchange(sock)

    def _wait(self, now: float) -> list:
        """Sleep until a socket, a wake-up, the open batch's linger or a timer needs us."""
        deadline, lingering = self._outbox.idle_until(now, min(self._next_check, self._next_hello), self._stream.idle)
        timeout = deadline - now
        if lingering and 0 < timeout < FINE_SLEEP and not self._stream.blocked:
            self._linger(timeout)
            timeout = 0
        events = self._poller.poll(poll_ms(timeout))
        self._outbox.awake()
        return events

    def _linger(self, timeout: float) -> None:
        """Wait out the rest of a linger shorter than ``zmq_poll``'s millisecond, or until the application
        wakes the sender or (a batch being on its way) the exchange acknowledges it: then nothing waits for the
        open batch (:attr:`Stream.idle <client._stream.Stream.idle>`)."""
        fds = [self._outbox.wakeup.fd]
        link = self._stream.link
        if link is not None and self._stream.window.in_flight:
            if self._poller.poll(0):  # (which also lets the link's descriptor signal what arrives from now on)
                return
            fd = link.socket.getsockopt(zmq.FD)
            assert isinstance(fd, int)  # a socket's descriptor is a number (only some options are bytes)
            fds.append(fd)
        select.select(fds, [], [], timeout)

    # ------------------------------------------------------------------ sending and acknowledgements

    def _send(self, now: float) -> None:
        """Send what waits; during a planned move, end the epoch on the old link after what it was sent: what
        waits goes to the new one (its seqs are all newer)."""
        move = self._moving
        if move is None:
            self._stream.send(now)
        elif not move.marker_sent and self._stream.end_epoch():
            move.marker_last = self._stream.last_sent
            move.marker_sent = True
            self._maybe_switch()

    def _on_exchange(self, sock: zmq.Socket) -> None:
        """Batches' acknowledgements, room in a full link, or (CURVE) a link's handshake refused.

        Raises:
            BrokerConnectionError: an exchange refused this publisher's key.
        """
        for link in self._links() if self._cfg.curve is not None else ():
            if link.watch is not None and sock is link.watch.socket:
                refused = link.refused()
                if refused:
                    raise BrokerConnectionError(refused)
                return
        stream = self._stream
        if stream.blocked and stream.link is not None and sock is stream.link.socket:
            self._send(time.monotonic())  # room again
        if stream.read_acks(sock, time.monotonic()):
            self._outbox.acknowledged(stream.window.acked)
            self._maybe_switch()

    def _check(self, now: float) -> None:
        """Trim the window, and ask for another exchange when acknowledgements stop coming."""
        stream = self._stream
        freed = stream.window.trim()
        if freed:
            self._outbox.forget(freed)
        stalled = stream.window.stalled_for(now)
        move = self._moving
        silent = stream.window.silent_for(now)
        if move is not None and silent > max(2 * self._cfg.ack_timeout, 2.0):
            # a saturated exchange still acknowledges, slowly, and one that holds us back for a slow reader says
            # it is alive: the move waits for them; a silent one is dead
            log.warning("%s: old exchange %s said nothing for %.1fs; failing over to %s",
                        self._who, self.exchange, silent, move.target.exchange)
            self._failover(move.target.exchange, move.target.frontend, move.relocation, now)
            return
        if stream.link is not None and move is None and stalled > self._cfg.ack_timeout and now >= self._next_panic:
            self._next_panic = now + self._cfg.ack_timeout
            self.counters["panics"] += 1
            log.warning("%s: no ack from %s for %.1fs; asking the monitor", self._who, self.exchange, stalled)
            self._tell(control.Panic(publisher=self._hex, exchange=self.exchange,
                                     reason=f"no acknowledgement for {stalled:.1f}s"))

    # ------------------------------------------------------------------ the monitor's orders

    def _on_monitor(self) -> None:
        assert self._channel is not None
        for msg in self._channel.receive():
            if isinstance(msg, control.Relocate) and msg.publisher == self._hex:
                self._on_relocate(msg)
            elif isinstance(msg, control.NoExchange) and self._outbox.assignment.refused(msg.comment):
                log.warning("%s: %s; buffering until an exchange appears", self._who, msg.comment)
            elif isinstance(msg, control.Reply) and msg.result == Result.FORBIDDEN:
                raise ForbiddenError(f"monitor refused this publisher: {msg.comment}")

    def _on_relocate(self, msg: control.Relocate) -> None:
        now = time.monotonic()
        stream = self._stream
        if msg.reason == "assign" or stream.link is None:
            if stream.link is None:
                stream.start(stream.connect(msg.exchange, msg.frontend))
                self._adopted(msg.exchange)
                log.info("%s: sending through exchange %s", self._who, msg.exchange)
                if msg.relocation:
                    self._report_moved(msg.relocation)
            return
        if msg.reason == "failover":
            self._failover(msg.exchange, msg.frontend, msg.relocation, now)
            return
        if self._moving is not None:
            return  # one move at a time; the monitor waits for our Moved
        if msg.exchange == stream.link.exchange:
            self._report_moved(msg.relocation)
            return
        self._moving = _Move(stream.connect(msg.exchange, msg.frontend), msg.relocation, now)
        self._send(now)

    def _maybe_switch(self) -> None:
        move = self._moving
        if move is None or not move.marker_sent or self._stream.window.acked < move.marker_last:
            return
        self._moving = None
        self._stream.switch(move.target)
        self._adopted(move.target.exchange)
        self.counters["relocations"] += 1
        log.info("%s: moved to exchange %s (epoch %d) in %.1f ms",
                 self._who, move.target.exchange, self._stream.epoch, (time.monotonic() - move.started) * 1000)
        self._report_moved(move.relocation)
        self._send(time.monotonic())

    def _failover(self, exchange: str, frontend: str, relocation: int, now: float) -> None:
        stream = self._stream
        keep = stream.link if stream.link is not None and stream.link.exchange == exchange else None
        # failing over to the exchange we send through (a move away from it was abandoned): end the epoch
        # there with a marker, so that subscribers need not wait for a timeout; a full link starts afresh
        if keep is not None and not stream.end_epoch(batch.FLAG_ACK_NOW):
            keep = None
        for link in self._links():
            if link is not keep:
                stream.close(link)
        self._moving = None
        resend = stream.restart(keep or stream.connect(exchange, frontend), now)
        self._adopted(exchange)
        self.counters["failovers"] += 1
        self.counters["retransmitted"] += sum(e.count for e in resend)
        log.info("%s: failed over to exchange %s (epoch %d), resending %d batches",
                 self._who, exchange, stream.epoch, len(resend))
        self._report_moved(relocation)
        self._send(now)

    # ------------------------------------------------------------------ helpers

    def _adopted(self, exchange: str) -> None:
        self.exchange = exchange
        self._outbox.assignment.assigned()

    def _links(self) -> list[Link]:
        links = [self._stream.link] if self._stream.link is not None else []
        if self._moving is not None:
            links.append(self._moving.target)
        return links

    def _report_moved(self, relocation: int) -> None:
        if relocation:
            self._tell(control.Moved(publisher=self._hex, exchange=self.exchange, relocation=relocation,
                                     epoch=self._stream.epoch))
        self._next_hello = 0.0  # tell the monitor where we are now

    def _tell(self, msg: control.Message) -> None:
        assert self._channel is not None
        self._channel.send(msg)
