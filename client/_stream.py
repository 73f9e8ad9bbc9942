"""A publisher's stream of batches to its exchange: what waits to be sent, what was sent, through which link.

The sender thread (:mod:`client._sender`) owns one :class:`Stream`; the stream owns the DEALER of every
exchange link it connects (registered in the sender's poller), the queue of batches not yet sent, the
retransmission window (:class:`~client._window.Window`) and the epoch. It sends without ever blocking: when
the link's queue is full it watches the socket for room (``blocked``) and goes on when the poll says so.
Which exchange to send through, and when to change, is the sender's business (the monitor's orders).
"""

from __future__ import annotations

import collections
import logging
import time

import zmq

from client._outbox import Sealed
from client._window import Pressure, Sent, Window
from roq.wire import batch
from roq.config import CurveClient
from roq.errors import ProtocolError
from roq.sockets import RefusalWatch, send_frames

log = logging.getLogger(__name__)

#: Batches queued in a link's DEALER before sending waits for room.
SNDHWM = 1000


class Link:
    """A DEALER connected to one exchange's frontend (and, with CURVE, the monitor of its handshakes)."""

    __slots__ = ("exchange", "frontend", "socket", "watch")

    def __init__(self, exchange: str, frontend: str, socket: zmq.Socket, watch: RefusalWatch | None = None) -> None:
        self.exchange = exchange
        self.frontend = frontend
        self.socket = socket
        self.watch = watch

    def refused(self) -> str:
        """Why the exchange refused our key at the handshake ("" if the watch has nothing to say)."""
        status = self.watch.refused() if self.watch is not None else None
        return "" if status is None else RefusalWatch.describe(self.exchange, "publisher", status)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
        self.socket.close(linger=0)


class Stream:
    """The batches of one publisher on their way to an exchange.

    Args:
        context: the ZeroMQ context (sockets are made in the sender thread, which calls everything here).
        poller: the sender's poller; links are registered in it.
        identity: the publisher's id (routing id at the exchanges, and in every header).
        max_in_flight: batches sent and not acknowledged, at most; then sending waits for acknowledgements.
        who: how log lines name the publisher.
        curve: CURVE keys for the exchanges (None = plaintext).

    Attributes:
        link: the exchange sent through now (None before the first assignment).
        epoch: the publisher's move counter, in every header.
        last_sent: the highest seq handed to a link.
        blocked: the link's queue is full; the poller watches it for room.
        waiting: :attr:`max_in_flight` batches are not acknowledged yet: sending waits for the exchange.
        held: the epoch's marker is out: batches wait for the next link (:meth:`switch`).
        window: batches sent and not yet safe to forget.
        pressure: how much of its time batches wait for the exchange (the window full, or the link's queue).
        dropped: malformed acknowledgements dropped.
    """

    def __init__(self, context: zmq.Context, poller: zmq.Poller, identity: bytes, max_in_flight: int,
                 who: str, *, curve: CurveClient | None = None) -> None:
        self._ctx = context
        self._curve = curve
        self.max_in_flight = max_in_flight
        self._poller = poller
        self._id = identity
        self._who = who
        self._queue: collections.deque[Sent] = collections.deque()
        self.window = Window()
        self.link: Link | None = None
        self.epoch = 0
        self.last_sent = 0
        self.blocked = False
        self.waiting = False
        self.held = False
        self.dropped = 0
        self.pressure = Pressure()

    # ------------------------------------------------------------------ sending

    def add(self, sealed: list[Sealed]) -> None:
        """Queue sealed batches (their bodies encoded here, off the application's thread)."""
        encode = batch.encode_body
        append = self._queue.append
        for s in sealed:
            append(Sent(s.first, len(s.payloads), s.key, encode(s.payloads), s.key_prev, s.timestamp_ns, s.size,
                        s.flags, 0.0))

    @property
    def idle(self) -> bool:
        """True while nothing is queued or waits for an acknowledgement on a link that may be sent through: a
        batch sealed now goes out at once, and nothing else it could have joined is on its way."""
        return not self._queue and not self.window.in_flight and self.link is not None and not self.held

    def send(self, now: float) -> bool:
        """Send what is queued through the link; True once the queue is empty (False: no link, held, the
        link's queue is full, or :attr:`max_in_flight` batches wait for their acknowledgement)."""
        link = self.link
        if link is None or self.held:
            self.pressure.waiting(now, False)  # a move: not the exchange's doing
            return False
        done = self._send(link, now)
        self.pressure.waiting(now, not done)
        return done

    def _send(self, link: Link, now: float) -> bool:
        sock = link.socket
        pack = batch.pack_header
        data, retransmit = batch.DATA, batch.FLAG_RETRANSMIT
        pid = self._id
        epoch = self.epoch
        queue = self._queue
        window = self.window
        add = window.add
        cap = self.max_in_flight
        self.waiting = False
        while queue:
            if window.in_flight >= cap:
                self.waiting = True
                self._block(False)
                return False
            e = queue[0]
            header = pack(data, pid, e.first, e.count, epoch=epoch, key_prev=e.key_prev, timestamp_ns=e.timestamp_ns,
                          flags=e.flags | retransmit if e.sent_at else e.flags)
            try:
                send_frames(sock, (e.key, header, e.body), zmq.NOBLOCK)
            except zmq.Again:
                self._block(True)
                return False
            queue.popleft()
            add(e._replace(sent_at=now))
            self.last_sent = e.first + e.count - 1
        self._block(False)
        return True

    def end_epoch(self, flags: int = 0) -> bool:
        """Send the epoch's MARKER (the stream through this link ends after :attr:`last_sent`) and hold
        further batches until :meth:`switch`; False if the link cannot take it now (the poller then watches
        it for room)."""
        link = self.link
        if link is None:
            return False
        marker = batch.pack_header(batch.MARKER, self._id, self.last_sent + 1, 0, epoch=self.epoch,
                                   timestamp_ns=time.time_ns(), flags=flags)
        try:
            send_frames(link.socket, (batch.CONTROL_TOPIC, marker, b""), zmq.NOBLOCK)
        except zmq.Again:
            self._block(True)
            return False
        self._block(False)
        self.held = True
        return True

    def _block(self, blocked: bool) -> None:
        if blocked == self.blocked or self.link is None:
            return
        self.blocked = blocked
        self._poller.modify(self.link.socket, zmq.POLLIN | zmq.POLLOUT if blocked else zmq.POLLIN)

    # ------------------------------------------------------------------ acknowledgements

    def read_acks(self, sock: zmq.Socket, now: float) -> bool:
        """Read the acknowledgements waiting on ``sock``; True if one acknowledged something new."""
        advanced = False
        recv = sock.recv_multipart
        while True:
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return advanced
            try:
                if len(frames) != 1:
                    raise ProtocolError(f"{len(frames)} frames")
                delivered = batch.decode_delivered(frames[0])
                if delivered is not None:
                    if delivered <= self.last_sent:
                        self.window.deliver(delivered)
                    continue
                seq = batch.decode_ack(frames[0])
            except ProtocolError as exc:
                self.dropped += 1
                if self.dropped <= 10 or self.dropped % 1000 == 0:
                    log.warning("%s: dropped a malformed ack: %s (%d in all)", self._who, exc, self.dropped)
                continue
            if seq <= self.last_sent:  # an ack beyond what we sent is nonsense
                advanced |= self.window.ack(seq, now)

    # ------------------------------------------------------------------ links

    def connect(self, exchange: str, frontend: str) -> Link:
        """A new link to ``exchange`` (registered in the poller); not sent through until :meth:`switch` or
        :meth:`restart`."""
        sock = self._ctx.socket(zmq.DEALER)  # no routing id of its own: each connection gets the exchange's
        if self._curve is not None:
            self._curve.apply(sock)
        sock.setsockopt(zmq.SNDHWM, SNDHWM)
        sock.setsockopt(zmq.LINGER, 0)
        watch = RefusalWatch(sock) if self._curve is not None else None
        sock.connect(frontend)
        self._poller.register(sock, zmq.POLLIN)
        if watch is not None:
            self._poller.register(watch.socket, zmq.POLLIN)
        return Link(exchange, frontend, sock, watch)

    def close(self, link: Link) -> None:
        """Close ``link`` (what its queue holds is dropped: the window still has it)."""
        self._poller.unregister(link.socket)
        if link.watch is not None:
            self._poller.unregister(link.watch.socket)
        link.close()
        if link is self.link:
            self.link = None
            self.blocked = False

    def start(self, link: Link) -> None:
        """Send through ``link``, the first exchange, in the current epoch."""
        self.link = link

    def switch(self, link: Link) -> None:
        """A planned move is complete: close the old link (what it acknowledged is let go) and go on through
        ``link`` in the next epoch."""
        if self.link is not None and self.link is not link:
            self.close(self.link)
        self.window.release()
        self.link = link
        self.epoch += 1
        self.blocked = False
        self.held = False

    def restart(self, link: Link, now: float) -> list[Sent]:
        """A failover: go on through ``link`` in the next epoch and queue the whole window again, ahead of
        the batches waiting (their seqs are older); the batches resent."""
        self.link = link
        self.epoch += 1
        self.blocked = False
        self.held = False
        resend = self.window.take_all()
        self._queue.extendleft(reversed([e._replace(sent_at=e.sent_at or now) for e in resend]))
        if resend:
            self.last_sent = resend[0].first - 1
        return resend
