"""A subscriber's replay of a durable queue's journal, and the seam where the live stream takes over.

A subscriber made with ``start=`` (anything but ``"latest"``) subscribes to every exchange *asking to replay*
(:data:`roq.wire.batch.FLAG_REPLAY`): each exchange then sends the journal a seam once the subscription is live
there, after every batch it sent the journal before. Meanwhile the subscriber holds what the exchanges send
it live (:class:`Replay` ``.live``, bounded) and fetches the journal from the start asked for, two fetches in
flight; each publisher's records from the journal go straight to delivery, in order
(:meth:`client._ordering.Reassembler.ordered`).

**The seam.** Once the fetches have passed the seam of every exchange it listens to, everything that did not
reach the subscriber live has come from the journal: the live batches held are handed to the reassembler,
which drops what the journal already gave (publisher and seq), and the journal is no longer read. So the
records arrive once each, in each publisher's order, with no gap at the seam.

**Catching up.** On a durable queue an exchange cuts off a subscriber whose pipe stays full, and tells it
where the journal has what it missed (:data:`roq.wire.batch.CUT`). The subscriber then reads the journal the same
way (:meth:`Replay.catching_up`), from the lowest of that offset and the offsets the other exchanges' last
beacons carried (everything they had not given it yet is after those), holding the live stream; once at the
journal's end it comes back to the exchange that cut it, which marks a seam named ``<exchange>#<tag>``, and
the live stream takes over past that seam.

A seam that does not come within :data:`SEAM_WAIT_S` of reaching the journal's end (its exchange died, the
journal restarted and forgot it) is given up: the live stream takes over there, and a record missed shows as
a gap. Live batches beyond :data:`MAX_HELD_BYTES` are dropped while replaying: they are in the journal
after the seams, and the fetches go on until every publisher has been delivered up to its last record
dropped.
"""

from __future__ import annotations

import collections
import datetime
import logging
import time
from typing import Any, Callable

import zmq

from roq.wire import batch, control
from roq.config import CurveClient
from client._ordering import Reassembler
from roq.errors import BrokerConnectionError, BrokerTimeoutError, ProtocolError

log = logging.getLogger(__name__)

__all__ = ["Replay", "start_fetch", "SEAM_WAIT_S", "MAX_HELD_BYTES", "FETCH_BYTES", "NOT_DURABLE"]

NOT_DURABLE = ("the queue is not durable (or its journal has not started yet): there is no journal to start from; "
               "set its rule durability, or start 'latest'")

#: how long the seams may keep the live stream waiting once the journal's end is reached
SEAM_WAIT_S = 5.0
#: live batches held while replaying, at most (bytes of bodies)
MAX_HELD_BYTES = 256 << 20
#: what one fetch asks for
FETCH_BYTES = 4 << 20
#: fetches in flight at once: the first from an offset, the next ones from where the one before ends (-3)
IN_FLIGHT = 2
#: the offset of a fetch that goes on from where this reader's previous one ended
CONTINUE = -3
#: how long a fetch at the end waits for more
WAIT_MS = 100


def start_fetch(start: Any) -> tuple[int, float]:
    """The (offset, since) of the first fetch for ``start``: "earliest", an offset (int >= 0) or a datetime.

    Raises:
        ValueError: anything else.
    """
    if start == "earliest":
        return 0, 0.0
    if isinstance(start, bool):
        raise ValueError(f"start must be 'earliest', 'latest', an offset or a datetime, got {start!r}")
    if isinstance(start, int) and start >= 0:
        return start, 0.0
    if isinstance(start, datetime.datetime):
        if start.tzinfo is None:
            raise ValueError("start: a datetime needs its time zone (datetime.now(timezone.utc), ...)")
        return -1, start.timestamp()
    raise ValueError(f"start must be 'earliest', 'latest', an offset or a datetime, got {start!r}")


class Replay:
    """The journal's side of a replaying subscriber.

    Args:
        context: where the socket is made.
        poller: the subscriber's poller (the socket is registered there once the journal is known).
        subscriber: the subscriber's id.
        prefix: its prefix (the journal sends only the keys that start with it).
        start: where to start (see :func:`start_fetch`).
        curve: CURVE keys for the journal (None = plaintext).
    """

    def __init__(self, context: zmq.Context, poller: zmq.Poller, subscriber: bytes, prefix: bytes, start: Any,
                 curve: CurveClient | None = None, durable: str = "") -> None:
        self._ctx = context
        self._poller = poller
        self._curve = curve
        self.subscriber = subscriber
        self.prefix = prefix
        self.offset, self._since = start_fetch(start)
        self.endpoint = ""
        self.socket: zmq.Socket | None = None
        self.in_flight = 0
        self.end_offset = -1
        self.at_end_since = 0.0
        self.seams: dict[str, int] = {}
        self.live: collections.deque[tuple] = collections.deque()  # what the exchanges sent, held
        self.live_bytes = 0
        self.live_dropped = 0
        self.spilled = False  # live batches were dropped: the journal gives them
        self.need: dict[bytes, int] = {}  # publisher -> the seq the journal must deliver it up to
        self.records = 0  # records read from the journal
        self.done = False
        self.error = ""
        # a durable subscriber reads the journal for good, from its position (asked first: -2 until answered)
        self.durable = durable
        self.position = -2 if durable else -1
        self.committed = -1  # the last position the journal confirmed
        self.refused = ""  # why the journal refused a commit or a position
        self.initial = True  # a replay from where the subscriber started (not a catch-up after a cut)
        self.rejoins: dict[str, str] = {}  # exchange that cut us off -> the name of the seam that brings us back

    # ------------------------------------------------------------------ the journal

    @classmethod
    def of(cls, context: zmq.Context, poller: zmq.Poller, subscriber: bytes, prefix: bytes, start: Any,
           curve: CurveClient | None, durable: str) -> Replay | None:
        """What a subscriber of ``start`` (and ``durable`` name) reads of the journal; None: the live stream
        alone ("latest", not durable).

        Raises:
            ValueError: a start of no known kind, or a durable name that is not 1-128 of A-Z a-z 0-9 _ . : @ -.
        """
        if durable and not control.DURABLE_NAME.fullmatch(durable):
            raise ValueError(f"durable: a name of 1-128 of A-Z a-z 0-9 _ . : @ -, got {durable[:40]!r}")
        if durable and start == "latest":
            start = "earliest"  # where a durable subscriber that never committed begins
        return cls(context, poller, subscriber, prefix, start, curve, durable) if start != "latest" else None

    @classmethod
    def catching_up(cls, context: zmq.Context, poller: zmq.Poller, subscriber: bytes, prefix: bytes, offset: int,
                    curve: CurveClient | None) -> Replay:
        """A subscriber cut off by an exchange reads the journal from ``offset`` until it is back there."""
        replay = cls(context, poller, subscriber, prefix, offset, curve)
        replay.initial = False
        return replay

    def cut(self, exchange: str, tag: int, offset: int) -> None:
        """``exchange`` cut us off (``tag``): it is back once the journal is read past the seam it will mark, and
        what it did not send us is from ``offset`` on (read again from there if the reading is past it)."""
        self.rejoins[exchange] = f"{exchange}#{tag}"
        if 0 <= offset < self.offset:
            self.offset = offset  # what is in flight from further on is dropped when it comes (_answer)

    @property
    def at_end(self) -> bool:
        """True once the journal was read to its end."""
        return 0 <= self.end_offset <= self.offset

    def connect(self, endpoint: str) -> str:
        """Read the journal at ``endpoint`` (its reads port; "" none); again from where it was if it moved.
        ``endpoint``."""
        if not endpoint or endpoint == self.endpoint or self.done:
            return endpoint
        self.close_socket()
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self._curve is not None:
            self._curve.apply(sock)
        sock.connect(endpoint)
        self._poller.register(sock, zmq.POLLIN)
        self.socket, self.endpoint, self.in_flight = sock, endpoint, 0
        if self.position == -2:  # where it goes on: asked once; fetching begins with the answer
            sock.send(control.encode(control.Position(name=self.durable)))
            return endpoint
        self.fetch()
        return endpoint

    def fetch(self) -> None:
        """Keep :data:`IN_FLIGHT` fetches asked for."""
        sock = self.socket
        while sock is not None and not self.done and self.in_flight < IN_FLIGHT and self.position != -2:
            at_end = self.offset >= 0 and self.end_offset >= 0 and self.offset >= self.end_offset
            if self.in_flight and at_end:
                return  # at the end: one fetch waits there
            offset = CONTINUE if self.in_flight else self.offset
            msg = control.Fetch(offset=offset, prefix=self.prefix, max_bytes=FETCH_BYTES, wait_ms=WAIT_MS,
                                since=self._since, subscriber=self.subscriber.hex())
            try:
                sock.send(control.encode(msg), zmq.NOBLOCK)
            except zmq.Again:
                return
            self.in_flight += 1

    def readable(self) -> list[tuple[bytes, batch.Header, list[bytes], int]]:
        """The journal's answers: the entries to deliver, in order (key, header, payloads, offset).

        Raises:
            BrokerConnectionError: the journal could not read (a corrupt entry): replaying cannot go on.
        """
        out: list[tuple[bytes, batch.Header, list[bytes], int]] = []
        sock = self.socket
        while sock is not None:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                out += self._answer(frames)
            except ProtocolError as exc:
                log.warning("replay: a bad answer from the journal: %s", exc)
        self.fetch()
        return out

    def _reply(self, msg: control.Reply) -> list:
        """The answer to a Position or a Commit (a refused Fetch too)."""
        if msg.result != control.Result.OK:
            self.refused = msg.comment
            if msg.request == control.Fetch.CMD:
                self.in_flight = max(0, self.in_flight - 1)
                raise BrokerConnectionError(f"the journal refused to be read: {msg.comment}")
            return []
        offset = msg.data.get("offset")
        if type(offset) is not int:
            return []
        if msg.request == control.Position.CMD and self.position == -2:
            self.position = offset
            if offset >= 0:
                self.offset, self._since = offset, 0.0
            log.info("durable subscriber %s goes on from %s", self.durable,
                     f"offset {offset}" if offset >= 0 else "where it was told to start (no position kept)")
        elif msg.request == control.Commit.CMD:
            self.committed = max(self.committed, offset)
        return []

    def commit(self, offset: int, timeout: float, pump: Callable[[float], None]) -> int:
        """Have the journal keep ``offset`` as this durable subscriber's position, running ``pump`` until it
        confirms; the position kept.

        Raises:
            BrokerTimeoutError: no confirmation within ``timeout``.
            BrokerConnectionError: the journal refused (the comment says why).
        """
        if offset < 0 or offset <= self.committed:
            return max(offset, self.committed)
        if self.socket is None:
            raise BrokerConnectionError("the journal is not known yet: nothing to commit to")
        self.refused = ""
        self.socket.send(control.encode(control.Commit(name=self.durable, offset=offset)))
        deadline = time.monotonic() + timeout
        while self.committed < offset and not self.refused and time.monotonic() < deadline:
            pump(min(0.05, max(0.0, deadline - time.monotonic())))
        if self.refused:
            raise BrokerConnectionError(f"the journal refused the commit: {self.refused}")
        if self.committed < offset:
            raise BrokerTimeoutError(f"the journal did not confirm the commit of offset {offset} within {timeout}s")
        return offset

    def take(self, order: Reassembler, deliver: Callable[[list], None], exchanges: list[str]) -> bool:
        """Deliver what the journal gave (each publisher's records in order, past what was delivered); True once
        the live stream may take over (:meth:`seamed`)."""
        now = time.monotonic()
        for key, h, payloads, offset in self.readable():
            pub, first = h.publisher, h.first_seq
            deliver(order.ordered(pub, h.epoch, first, h.count, h.key_prev, key,
                                  (key, payloads, pub, first, h.timestamp_ns, offset), now,
                                  bool(h.flags & batch.FLAG_RELAYED)))
        return self.seamed(exchanges, order.delivered(), now)

    def _answer(self, frames: list[bytes]) -> list[tuple[bytes, batch.Header, list[bytes], int]]:
        msg = control.decode(frames[0])
        if isinstance(msg, control.Reply):
            return self._reply(msg)
        self.in_flight = max(0, self.in_flight - 1)
        if not isinstance(msg, control.Fetched) or len(frames) != 1 + 3 * msg.count:
            raise ProtocolError(f"not an answer to a fetch: {len(frames)} frames")
        if msg.error == control.NO_CURSOR:  # the journal restarted between two fetches: from our offset again
            return []
        if msg.error:
            self.error = msg.error
            raise BrokerConnectionError(f"the journal cannot be read at offset {msg.next_offset}: {msg.error}")
        self.seams.update(msg.seams)
        self.end_offset = msg.end_offset
        if 0 <= self.offset < msg.first_offset:  # (the answer starts there)
            log.warning("replay: the journal keeps the offsets from %d on: the records from %d to %d are not in it "
                        "(removed by its retention, or held by a journal lost with its host)", msg.first_offset,
                        self.offset, msg.first_offset - 1)
            self.offset = msg.first_offset
        out = []
        if self.offset >= 0 and msg.start_offset > self.offset:
            return []  # not from where we are (it went on from an answer we did not take): fetched again
        if msg.next_offset > self.offset or self.offset < 0:
            for i in range(msg.count):
                key, header, body = frames[1 + 3 * i: 4 + 3 * i]
                h = batch.parse_header(header)
                payloads = batch.decode_body(body, h.count)
                offset = msg.offsets[i] if i < len(msg.offsets) else -1
                skip = self.offset - offset if 0 <= offset < self.offset else 0
                if skip >= h.count:
                    continue
                if skip:  # the entry holding the offset asked for comes whole: not the records before it
                    payloads = payloads[skip:]
                    h = h._replace(first_seq=h.first_seq + skip, count=h.count - skip)
                    offset += skip
                out.append((key, h, payloads, offset))
                self.records += h.count
            self.offset = msg.next_offset
        if self.offset >= msg.end_offset:
            self.at_end_since = self.at_end_since or time.monotonic()
        else:
            self.at_end_since = 0.0
        return out

    # ------------------------------------------------------------------ the live stream, held

    def hold(self, call: tuple, publisher: bytes, first: int, last: int, size: int) -> None:
        """Keep what an exchange sent live until the seam (``first``..``last``: the seqs of a data batch, 0 for
        a marker). Beyond :data:`MAX_HELD_BYTES` it and everything after is dropped (*spilled*): the journal
        has it, after the seams, and must then deliver each publisher up to its last record dropped."""
        if first:
            self.need.setdefault(publisher, first - 1)  # the journal gives what came before the first held
        if self.spilled or self.live_bytes + size > MAX_HELD_BYTES:
            self.spilled = True
            self.live_dropped += 1
            if first:
                self.need[publisher] = max(self.need[publisher], last)
            return
        self.live.append(call)
        self.live_bytes += size

    def seamed(self, exchanges: list[str], delivered: dict[bytes, int], now: float) -> bool:
        """Whether the live stream may take over: the journal was read past the seam of every exchange listed
        (``exchanges``: heard from or not, since an exchange not heard yet may already forward what the journal
        was not read up to), and up to what each publisher needs (``delivered``: publisher -> highest seq
        delivered); or the seams waited :data:`SEAM_WAIT_S` at the journal's end. With no exchange listed yet,
        only that wait ends a first replay: nothing says yet where the live stream begins."""
        if self.offset < 0 or self.end_offset < 0 or self.durable:
            return False  # (a durable subscriber reads the journal for good)
        if any(delivered.get(p, 0) < seq for p, seq in self.need.items()):
            return False
        rejoins = self.rejoins
        # (a catch-up waits only for the exchanges that cut it off and are still listed)
        wanted = [rejoins.get(x, x) for x in exchanges] if self.initial else [
            tag for x, tag in rejoins.items() if x in exchanges]
        if (wanted or not self.initial) and all(x in self.seams and self.offset >= self.seams[x] for x in wanted):
            return True
        if self.at_end_since and now - self.at_end_since >= SEAM_WAIT_S:
            missing = [x for x in wanted if x not in self.seams]
            log.warning("replay: no seam from %s within %.0fs at the journal's end: the live stream takes over "
                        "there", ", ".join(missing) or "-", SEAM_WAIT_S)
            return True
        return False

    def close_socket(self) -> None:
        if self.socket is not None:
            self._poller.unregister(self.socket)
            self.socket.close(linger=0)
            self.socket = None

    def finish(self, who: str) -> collections.deque[tuple]:
        """The replay is over: the live batches held, to hand on in order."""
        self.done = True
        self.close_socket()
        live, self.live, self.live_bytes = self.live, collections.deque(), 0
        log.info("%s: %d records %s from the journal (to offset %d); the live stream takes over (%d batches "
                 "held, %d dropped)", who, self.records, "replayed" if self.initial else "caught up", self.offset,
                 len(live), self.live_dropped)
        return live
