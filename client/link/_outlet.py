"""Where a link's relay enters a queue of the far cluster: a publisher there, of many relayed ids at once.

The outlet says hello to the queue's monitor as one publisher (its own id) and sends the relay's batches,
each under its relayed id, through the exchange the monitor assigns, on one connection; the exchange
acknowledges each relayed id by name (:func:`roq.wire.batch.decode_relayed_ack`), and the acknowledgements go
back into the :class:`~roq.federation.Relay`, which decides what is done. The monitor moves it as it moves
any publisher, and as one: on a planned move the markers of every relayed id go through the exchange it
leaves, then what is on its way goes again through the new one under the next epoch (the far side drops
what it had); on a fail-over, the same without markers. An exchange that acknowledges nothing for
``ack_timeout`` while batches wait is reported to the monitor (a Panic), as a publisher does. A monitor that
refuses the link (its key may not publish into the queue: FORBIDDEN) is asked again with every hello, and the
refusal is said once and kept (:attr:`Outlet.refused`) until the monitor assigns an exchange.

Everything runs in the link's one loop (:meth:`Outlet.attach`); nothing blocks: a batch the exchange's pipe
cannot take now waits here, in order, and the relay's bound on what is on its way bounds it. So does a batch
the link's rate limit holds back (:class:`~roq.federation.pace.Pace`): it goes when the limit lets it, and the
relay, full, stops the link reading its source meanwhile. With ``compress`` each batch's body goes compressed
where that makes it smaller; the rate limit and the figures count what goes on the wire.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Callable

import zmq

from client._channel import MonitorChannel
from client._locator import MonitorLocator
from roq.config import CurveClient
from roq.errors import ProtocolError, Result
from roq.federation import Pace, Relay
from roq.loop import Loop
from roq.wire import batch, control
from roq.sockets import send_frames

log = logging.getLogger(__name__)

__all__ = ["Outlet"]

#: what the outlet's connection to an exchange may queue, in messages (the relay bounds it in bytes first)
SNDHWM = 10_000


class Outlet:
    """One relay's way into one queue of the far cluster.

    Args:
        context: the ZeroMQ context.
        monitor: the queue's monitor's endpoint (or where it is followed from, a locator).
        relay: what crosses, and what is done.
        identity: the outlet's own publisher id (16 bytes; with CURVE, one of its key's ids).
        curve: the link's CURVE keys in the far cluster (None: plaintext).
        hello_interval: seconds between hellos to the monitor.
        ack_timeout: seconds without an acknowledgement, while batches wait, before the monitor is asked for
            another exchange.
        interest: makes what the link tells the monitor with each hello of what it wants of the queue (None:
            nothing), and ``on_interest`` takes what the monitor says the queue wants (:mod:`client.link._wants`).
        pace: the link's rate limit (None: none).
        compress: each batch's body goes compressed where that makes it smaller (:func:`roq.wire.batch.compress`;
            the exchange takes it back).
    """

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], monitor: str | MonitorLocator, relay: Relay,
                 identity: bytes, *, curve: CurveClient | None = None, hello_interval: float = 0.5,
                 ack_timeout: float = 2.0, who: str = "link",
                 interest: Callable[[], control.Interest] | None = None,
                 on_interest: Callable[[control.Interest], None] | None = None, pace: Pace | None = None,
                 compress: bool = False) -> None:
        if len(identity) != 16:
            raise ValueError("an outlet's id is 16 bytes")
        self.relay = relay
        self.identity = identity
        self.who = who
        self.hello_interval = hello_interval
        self.ack_timeout = ack_timeout
        self.exchange = ""  # the exchange sent through ("" none yet)
        self.socket: zmq.Socket[bytes] | None = None
        self.moves = 0  # moves and fail-overs carried out
        self.sent_records = 0  # records put on the socket (resent ones too)
        self.sent_bytes = 0  # and their frames' bytes
        self.dropped = 0  # malformed acknowledgements
        self.refused = ""  # why the monitor refuses the link ("": it does not)
        self._context = context
        self._curve = curve
        locator = MonitorLocator.of(monitor)
        self._channel = MonitorChannel(context, locator, who, curve)
        self._waiting: collections.deque[list[bytes]] = collections.deque()  # taken, not yet on the socket
        self._last_ack = time.monotonic()
        self._loop: Loop | None = None
        self._interest = interest
        self._on_interest = on_interest
        self.pace = pace
        self.compress = compress
        self._resume_at = float("inf")  # when the rate limit lets the next batch go (inf: nothing waits for it)

    # ------------------------------------------------------------------ the loop's registrations

    def attach(self, loop: Loop) -> None:
        """Serve in ``loop``: the monitor's messages, the hellos, and the exchange's acknowledgements."""
        self._loop = loop
        loop.add(self._channel.socket, self.from_monitor, f"{self.who}: the monitor")
        loop.every(self.hello_interval, self.hello, f"{self.who}: hello", first=0.0)
        loop.deadline(lambda: self._resume_at, self._resume, f"{self.who}: the rate limit")

    def send(self, frames: list[bytes]) -> None:
        """A batch the relay took: out now, after what waits before it."""
        self._waiting.append(batch.compress(frames) if self.compress else frames)
        self._push()

    def hello(self, now: float) -> None:
        """Say hello (the monitor knows it is alive, and where it sends); ask for another exchange if this one
        acknowledged nothing for ``ack_timeout`` while batches wait."""
        if self._channel.follow():
            log.info("%s: the monitor moved to %s", self.who, self._channel.endpoint)
        me = self.identity.hex()
        self.relay.trim(now)
        self._channel.send(control.PublisherHello(me, self.exchange, self.relay.epoch))
        if self._interest is not None:
            self._channel.send(self._interest())
        self._push()
        if (self.exchange and self.relay.on_the_way() and now - self._last_ack > self.ack_timeout):
            self._channel.send(control.Panic(me, self.exchange, "no acknowledgement"))
            self._last_ack = now  # asked: not again at every hello

    def from_monitor(self) -> None:
        for msg in self._channel.receive():
            if isinstance(msg, control.Relocate) and msg.publisher == self.identity.hex():
                if self.refused:
                    log.info("%s: the monitor admits the link now", self.who)
                    self.refused = ""
                self._move(msg)
            elif isinstance(msg, control.Reply) and msg.result == Result.FORBIDDEN:
                if msg.comment != self.refused:
                    log.error("%s: the far queue's monitor refuses the link: %s (asked again with every hello)",
                              self.who, msg.comment)
                self.refused = msg.comment
            elif isinstance(msg, control.Interest):
                if self._on_interest is not None:
                    self._on_interest(msg)
            elif isinstance(msg, control.NoExchange):
                log.info("%s: no exchange yet for the relay (%s)", self.who, msg.comment)

    def from_exchange(self) -> None:
        """The exchange's acknowledgements: each relayed id's into the relay."""
        sock = self.socket
        if sock is None:
            return
        while True:
            try:
                frame = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frame) == batch.RELAYED_ACK.size:
                try:
                    publisher, seq = batch.decode_relayed_ack(frame)
                except ProtocolError:
                    self.dropped += 1
                    continue
                self._last_ack = time.monotonic()
                self.relay.acked(publisher, seq, self._last_ack)
            # (a plain acknowledgement answers a marker: nothing waits for it)
        self._push()

    def close(self) -> None:
        self._channel.send(control.PublisherBye(self.identity.hex()))
        self._channel.close()
        self._close_socket()

    # ------------------------------------------------------------------ moves

    def _move(self, msg: control.Relocate) -> None:
        if msg.exchange == self.exchange and msg.reason == "assign":
            return  # told again what it already does
        if self.socket is not None and msg.reason == "relocate":
            for marker in self.relay.markers():  # the streams through the old exchange end here
                try:
                    send_frames(self.socket, marker, zmq.NOBLOCK)
                except zmq.Again:
                    break  # its pipe is full: the far side's subscribers wait out their hold instead
        had = self.socket is not None
        self._close_socket()
        self._connect(msg.frontend)
        self.exchange = msg.exchange
        self._waiting.clear()
        if had or self.relay.on_the_way():  # everything not acknowledged, in order, under a new epoch (after a
            again = self.relay.moved(failover=msg.reason != "relocate")  # fail-over, with the grace's too)
            self._waiting.extend(map(batch.compress, again) if self.compress else again)
            self.moves += had
        self._last_ack = time.monotonic()
        self._channel.send(control.Moved(self.identity.hex(), msg.exchange, msg.relocation, self.relay.epoch))
        log.info("%s: sending through %s (%s), epoch %d, %d batches again", self.who, msg.exchange, msg.reason,
                 self.relay.epoch, len(self._waiting))
        self._push()

    def _connect(self, frontend: str) -> None:
        sock = self._context.socket(zmq.DEALER)
        if self._curve is not None:
            self._curve.apply(sock)
        sock.setsockopt(zmq.SNDHWM, SNDHWM)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(frontend)
        self.socket = sock
        if self._loop is not None:
            self._loop.add(sock, self.from_exchange, f"{self.who}: the exchange's acknowledgements")

    def _close_socket(self) -> None:
        if self.socket is None:
            return
        if self._loop is not None:
            self._loop.remove(self.socket)
        self.socket.close(linger=0)
        self.socket = None

    def _resume(self, now: float) -> None:
        self._resume_at = float("inf")
        self._push()

    def _push(self) -> None:
        """Put what waits on the socket, in order, as far as its pipe and the rate limit take it."""
        sock, waiting, pace = self.socket, self._waiting, self.pace
        if sock is None:
            return
        while waiting:
            if pace is not None:
                now = time.monotonic()
                ready = pace.ready_at(now)
                if ready > now:
                    self._resume_at = ready  # the loop comes back then
                    return
            try:
                send_frames(sock, waiting[0], zmq.NOBLOCK)
            except zmq.Again:
                return  # the next acknowledgement or hello tries again
            frames = waiting.popleft()
            size = len(frames[0]) + len(frames[1]) + len(frames[2])
            self.sent_bytes += size
            self.sent_records += batch.parse_header(frames[1]).count
            if pace is not None:
                pace.take(size, now)
