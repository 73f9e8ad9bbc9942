"""A subscriber's feeds: one DEALER per exchange of its queue, and the reading of what they carry.

Each DEALER chooses no routing id (the exchange's ROUTER names the connection) and sends the exchange its
subscription (:func:`roq.wire.batch.pack_subscription`, naming the subscriber's id) when it connects and again on every hello (:meth:`Feeds.refresh`), so
that an exchange that lost it has it back within a heartbeat; the exchange answers a new one with a beacon.

**Progress.** While the application takes batches or waits for them (and while the feeds take them from the
sockets, every 16 messages of a burst), the feeds tell every exchange so (:meth:`Feeds.progress`:
:func:`roq.wire.batch.pack_progress`, at most every :data:`PROGRESS_INTERVAL`, with how many batches were taken from
that exchange's socket since, and the last delivery mark taken from it: the exchange then tells its publishers
they may forget what it sent before, :mod:`exchange._delivery`): an exchange that finds our pipe full waits for it as long as we report, and
sends past us only once we reported nothing for its ``subscriber_grace``. ZeroMQ tells the exchange that we
read its pipe only every half a pipe, too seldom to tell a subscriber that reads from one that stopped.

Every frame is checked before anything acts on it: three frames, a header :func:`roq.wire.batch.parse_header`
accepts, a body that splits into its records, a beacon naming the exchange it came from. A frame that fails
is dropped and counted (:attr:`Feeds.dropped`), never raised: a broken exchange cannot break the
application's ``recv``. Data and markers go to the subscriber's :class:`~client._ordering.Reassembler`; what
it releases goes to the subscriber's delivery.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable, Literal, Union

import zmq

from client._ordering import Reassembler
from roq.wire import batch
from roq.wire.batch import BatchError
from roq.config import CurveClient
from roq.errors import ProtocolError
from roq.sockets import RefusalWatch, send_frames

log = logging.getLogger(__name__)

#: Messages read from one socket before looking at the others.
BURST = 128
#: Seconds between two progress reports to an exchange, at least (an exchange's ``subscriber_grace`` is 0.5 s by
#: default: a subscriber that reads reports many times within it).
PROGRESS_INTERVAL = 0.02
#: What is held while replaying, to be ordered later: the arguments of the Reassembler's call of that name.
Held = Union[
    # source, publisher, epoch, first, count, key_prev, key, item, relayed
    tuple[Literal["data"], str, bytes, int, int, int, int, bytes, Any, bool],
    tuple[Literal["marker"], str, bytes, int],  # source, publisher, epoch
    tuple[Literal["lost"], str],  # source
]


class Feed:
    """The DEALER connected to one exchange's backend, and the monitor of its connection (and CURVE handshakes)."""

    __slots__ = ("exchange", "backend", "socket", "heard", "watch", "refused", "floor", "rejoin", "away", "taken",
                 "mark", "last_read")

    def __init__(self, exchange: str, backend: str, socket: zmq.Socket, watch: RefusalWatch | None = None) -> None:
        self.exchange = exchange
        self.backend = backend
        self.socket = socket
        self.heard = False  # a beacon arrived: our subscription is live there
        self.watch = watch
        self.refused = ""  # why the exchange refused our key, if it did
        self.floor = -1  # a durable queue: the journal offset its last beacon carried (what follows is after it)
        self.rejoin = 0  # the tag of the last cut it sent us
        self.away = False  # cut off, and not back yet: no subscription is sent there
        self.taken = 0  # messages read from its socket since the last progress report
        self.mark = 0  # the last delivery mark read from its socket: every report names it
        self.last_read = 0.0  # when a well-formed frame was last read from its socket (monotonic seconds)


class Feeds:
    """The feeds of one subscriber. Used by the subscriber's thread only.

    Args:
        context: the ZeroMQ context.
        poller: the subscriber's poller; each feed's socket is registered in it.
        ident: the subscriber's id (16 bytes), its routing id at every exchange.
        prefix: the key prefix subscribed to (b"" = every record).
        rcvhwm: each socket's receive high-water mark.
        order: the subscriber's reassembler.
        deliver: takes what the reassembler releases (a list of ``(item, skip)``).
        heard: called with an exchange's id when its first beacon arrives.
        who: how log lines name the subscriber.
        curve: CURVE keys for the exchanges (None = plaintext).

    Attributes:
        dropped: malformed frames dropped.
        cuts: times an exchange of a durable queue cut us off.
    """

    def __init__(self, context: zmq.Context, poller: zmq.Poller, ident: bytes, prefix: bytes, rcvhwm: int,
                 order: Reassembler, deliver: Callable[[list], None], heard: Callable[[str], None], who: str, *,
                 curve: CurveClient | None = None, replay: bool = False,
                 on_cut: Callable[[Feed, int, int], None] | None = None) -> None:
        self._ctx = context
        self._curve = curve
        self._poller = poller
        self._ident = ident
        self._prefix = prefix
        self._subscription = batch.pack_subscription(ident, prefix, replay)
        # while the subscriber replays the journal: what the exchanges send is held there, not ordered yet
        self.hold: Callable[[Held, bytes, int, int, int], None] | None = None
        # told of each cut an exchange of a durable queue sends (exchange, journal offset, tag)
        self.on_cut = on_cut
        self._replay = replay
        self._rcvhwm = rcvhwm
        self._order = order
        self._deliver = deliver
        self._heard = heard
        self._who = who
        self._feeds: dict[str, Feed] = {}
        self._by_socket: dict[zmq.Socket, Feed] = {}
        self.dropped = 0
        self.cuts = 0  # times an exchange cut us off
        self._next_progress = 0.0  # no progress report before this (monotonic seconds)

    def hold_in(self, hold: Callable[[Held, bytes, int, int, int], None] | None) -> None:
        """Hold what the exchanges send in ``hold`` (a replay's), not ordered yet; None: order it again."""
        self.hold = hold
    def get(self, exchange: str) -> Feed | None:
        return self._feeds.get(exchange)

    def feeds(self) -> list[Feed]:
        return list(self._feeds.values())

    def heard(self) -> list[str]:
        """The exchanges whose beacon arrived: our subscription is live there."""
        return [f.exchange for f in self._feeds.values() if f.heard]

    def floor(self, offset: int) -> int:
        """The lowest of ``offset`` and the journal offsets the last beacons of the exchanges that did not cut us
        off carried (0 for one that carried none): what they have not sent us yet is after it."""
        return min([offset] + [f.floor if f.floor >= 0 else 0 for f in self._feeds.values() if not f.away])

    def listed(self) -> list[str]:
        """Every exchange the monitor listed, heard or not."""
        return list(self._feeds)

    def deaf(self) -> list[str]:
        """The exchanges not heard yet."""
        return [f.exchange for f in self._feeds.values() if not f.heard]

    def refused(self) -> dict[str, str]:
        """The exchanges that refused our key at the CURVE handshake, and how."""
        return {f.exchange: f.refused for f in self._feeds.values() if f.refused}

    def add(self, exchange: str, backend: str) -> Feed:
        """Subscribe to ``exchange`` at ``backend``."""
        sock = self._ctx.socket(zmq.DEALER)  # no routing id of its own: each connection gets the exchange's
        if self._curve is not None:
            self._curve.apply(sock)
        sock.setsockopt(zmq.RCVHWM, self._rcvhwm)
        sock.setsockopt(zmq.LINGER, 0)
        watch = RefusalWatch(sock, connection=True)
        sock.connect(backend)
        feed = Feed(exchange, backend, sock, watch)
        self._subscribe(feed)
        self._feeds[exchange] = feed
        self._by_socket[sock] = feed
        self._poller.register(sock, zmq.POLLIN)
        if watch is not None:
            self._by_socket[watch.socket] = feed
            self._poller.register(watch.socket, zmq.POLLIN)
        return feed

    def refresh(self) -> None:
        """Send every exchange our subscription again (it keeps one copy)."""
        for feed in self._feeds.values():
            self._subscribe(feed)

    def come_back(self) -> None:
        """We caught up with the journal: subscribe again to the exchanges that cut us off (each marks our seam
        in the journal)."""
        for feed in self._feeds.values():
            if feed.away:
                log.info("%s: caught up with the journal: back to %s", self._who, feed.exchange)
                feed.away = False
                self._subscribe(feed)

    def _subscribe(self, feed: Feed) -> None:
        if feed.away:
            return
        frames = self._subscription
        if feed.rejoin:
            frames = batch.pack_subscription(self._ident, self._prefix, self._replay, feed.rejoin)
        try:
            send_frames(feed.socket, frames, zmq.NOBLOCK)
        except zmq.Again:  # its pipe is full (the exchange is not reading): the next hello sends it again
            pass

    def progress(self) -> None:
        """The application took a batch or waits for one, or we read a socket: tell every exchange we are reading
        (at most every :data:`PROGRESS_INTERVAL`; a report that finds its pipe full is not sent, the next one will
        be)."""
        now = time.monotonic()
        if now < self._next_progress:
            return
        self._next_progress = now + PROGRESS_INTERVAL
        ident = self._ident
        for feed in self._feeds.values():
            if feed.away:
                continue
            try:
                send_frames(feed.socket, batch.pack_progress(ident, feed.taken, feed.mark), zmq.NOBLOCK)
                feed.taken = 0
            except zmq.Again:
                pass

    def remove(self, feed: Feed) -> None:
        """Stop listening to an exchange, after reading what it already sent us."""
        self.read(feed, None)
        self.lost(feed.exchange)
        self._poller.unregister(feed.socket)
        self._close(feed)
        del self._feeds[feed.exchange]
        del self._by_socket[feed.socket]
        if feed.watch is not None:
            self._poller.unregister(feed.watch.socket)
            del self._by_socket[feed.watch.socket]

    def lost(self, exchange: str) -> None:
        """``exchange`` is gone: none of its epochs will send a marker."""
        if self.hold is not None:
            self.hold(("lost", exchange), b"", 0, 0, 0)
        else:
            self._deliver(self._order.source_lost(exchange, time.monotonic()))

    def release(self, held: Iterable[Held]) -> None:
        """Order what was held while replaying, as if it came now (the journal gave what it holds already)."""
        order, deliver, now = self._order, self._deliver, time.monotonic()
        for call in held:
            if call[0] == "data":
                deliver(order.data(*call[1:9], now, relayed=call[9]))
            elif call[0] == "marker":
                deliver(order.marker(*call[1:], now))
            else:
                deliver(order.source_lost(call[1], now))

    def readable(self, sock: zmq.Socket) -> None:
        """The poller says ``sock`` has frames: read a burst of them."""
        feed = self._by_socket.get(sock)
        if feed is None:
            return
        if feed.watch is not None and sock is feed.watch.socket:
            self._watched(feed)
        else:
            self.read(feed, BURST)

    def down(self, feed: Feed) -> bool:
        """Whether ``feed``'s connection dropped (its exchange's process died, or it closed it) and was not made
        again since."""
        if feed.watch is None:
            return False
        self._watched(feed)
        return feed.watch.down

    def _watched(self, feed: Feed) -> None:
        """What befell the connection: if the exchange refused our key, remember why (the subscriber says so), and
        say it once."""
        status = feed.watch.refused() if feed.watch is not None else None
        if status is not None and not feed.refused:
            feed.refused = RefusalWatch.describe(feed.exchange, "subscriber", status)
            log.warning("%s: %s", self._who, feed.refused)

    def read(self, feed: Feed, limit: int | None) -> None:
        """Read at most ``limit`` frames (None: every frame waiting) from ``feed``."""
        recv = feed.socket.recv_multipart
        parse = batch.parse_header
        decode = batch.decode_body
        data_kind, marker_kind, mark_kind, relayed_flag = batch.DATA, batch.MARKER, batch.DELIVERY_MARK, batch.FLAG_RELAYED
        order = self._order
        deliver = self._deliver
        prefix = self._prefix
        exchange = feed.exchange
        clock = time.monotonic
        n = 0
        dropped = self.dropped
        while limit is None or n < limit:
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            n += 1
            if not n & 15:  # taking from the socket is progress too: said within a long burst (a starved process)
                feed.taken += 16
                self.progress()
            if len(frames) != 3:
                self._drop(exchange, f"{len(frames)} frames")
                continue
            key, header, body = frames
            try:
                h = parse(header)
            except BatchError as exc:
                self._drop(exchange, str(exc))
                continue
            kind = h.kind
            if kind == data_kind:
                if prefix and not key.startswith(prefix):
                    continue  # a key that starts like the control topic; not ours
                try:
                    payloads = decode(body, h.count)
                except ProtocolError as exc:
                    self._drop(exchange, str(exc))
                    continue
                pub, first = h.publisher, h.first_seq
                item = (key, payloads, pub, first, h.timestamp_ns)
                relayed = bool(h.flags & relayed_flag)
                if self.hold is not None:
                    self.hold(("data", exchange, pub, h.epoch, first, h.count, h.key_prev, key, item, relayed), pub,
                              first, first + h.count - 1, len(body))
                    continue
                out = order.data(exchange, pub, h.epoch, first, h.count, h.key_prev, key, item, clock(), relayed)
                if out:
                    deliver(out)
            elif kind == marker_kind:
                if self.hold is not None:
                    self.hold(("marker", exchange, h.publisher, h.epoch), h.publisher, 0, 0, 0)
                    continue
                deliver(order.marker(exchange, h.publisher, h.epoch, clock()))
            elif kind == mark_kind:  # we took what this exchange sent before it: said in the next report
                feed.mark = h.first_seq
            elif body != exchange.encode():  # a beacon or a cut (parse_header lets no other kind through)
                self._drop(exchange, f"beacon of {body[:40]!r} on the socket of {exchange}")
            elif kind == batch.CUT:
                if self.on_cut is not None and h.epoch != feed.rejoin:  # (told again: the same cut)
                    self.cuts += 1
                    self.on_cut(feed, h.floor, h.epoch)
            else:
                feed.floor = h.floor
                if not feed.heard:
                    feed.heard = True
                    self._heard(exchange)
        feed.taken += n & 15
        if n > self.dropped - dropped:  # (a frame that was not one says nothing of the exchange)
            feed.last_read = clock()

    def close(self) -> None:
        for feed in self._feeds.values():
            self._close(feed)
        self._feeds.clear()
        self._by_socket.clear()

    @staticmethod
    def _close(feed: Feed) -> None:
        if feed.watch is not None:
            feed.watch.close()
        feed.socket.close(linger=0)

    def _drop(self, exchange: str, detail: str) -> None:
        self.dropped += 1
        if self.dropped <= 10 or self.dropped % 1000 == 0:
            log.warning("%s: dropped a malformed frame from %s: %s (%d in all)", self._who, exchange, detail, self.dropped)
