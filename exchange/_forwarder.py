"""The data plane of an exchange: publishers' batches out to subscribers, acknowledgements back.

* frontend, ROUTER, bound: publishers' DEALERs send ``[key, header, body]``; every batch is checked by
  :func:`roq.batch.check_incoming` (a bad one is dropped and counted under its reason) and its publisher
  gets a cumulative acknowledgement, coalesced over ``ack_interval`` unless the batch asks for it now.
* backend, XPUB, bound: the same three frames go out untouched; subscribers filter on the key prefix.
  Every heartbeat the exchange also publishes a beacon on :data:`~roq.batch.CONTROL_TOPIC`. The
  subscriptions the XPUB hands up are read and dropped (:meth:`Forwarder.read_subscriptions`).

**Back-pressure, not loss, for subscribers that keep up.** The backend does not drop (``XPUB_NODROP``): a
batch that a subscriber's full pipe cannot take now is *held*, the forward loop stops reading publishers
(whose acknowledgements then wait, and whose ``max_in_flight`` stops them) and retries every
:data:`RETRY_S` until the pipe has room. A pipe fills when its subscriber or ZeroMQ's I/O thread falls behind
a burst: an exchange starved of CPU by a quota forwards what piled up while it was stopped faster than its
I/O thread writes it out, and ZeroMQ learns that a subscriber read its pipe only every half a pipe. Only a
subscriber whose pipe stays full for ``subscriber_grace`` is dropped for: that batch goes out lossy (to the
subscribers with room; the full one sees a gap), and so does every batch that finds a pipe full until none
has for ``subscriber_grace`` again (:data:`LOSSY_HOLD` graces), so a subscriber that stays behind costs the
others one wait, not one per batch.

Memory is bounded in bytes although ZeroMQ bounds its pipes in messages, and fixes a pipe's bound when the
peer connects (so the bounds are set once, before binding):

* each publisher's receive pipe holds :data:`PUBLISHER_QUEUE_BYTES` of batches, counted as if every batch
  were the largest accepted, but never fewer than :data:`MIN_PUBLISHER_HWM`: a pipe of a few batches makes
  ZeroMQ's I/O thread and the forward loop hand over every few batches (measured: 15 batches cost a fifth of
  the throughput of one-record batches). A full pipe only makes the publisher wait: nothing is lost; and a
  publisher of the client library never has more than its ``buffer_bytes`` unacknowledged anyway;
* each subscriber's pipe holds :attr:`~roq.config.ExchangeConfig.subscriber_hwm` batches (its
  ``subscriber_queue_bytes`` of the largest batch, but never fewer than
  :data:`~roq.config.MIN_SUBSCRIBER_HWM`, nor more than ``backend_hwm``). A PUB drops what does not fit, and
  the forward loop learns how far a subscriber's pipe was read only from ZeroMQ's notices (one per half a pipe
  read, taken in at most once a millisecond while sending, sooner when asked: the loop asks every
  :data:`SYNC_MASK` + 1 batches). The byte bound is exact for batches up to a 512th of
  ``subscriber_queue_bytes`` (128 KiB by default); a subscriber that does not keep up with larger ones costs
  at most 512 of them.

The tables keyed by a publisher's identity (acknowledgements due, the KPI period's per-publisher counts) are
bounded too: a flood of identities cannot grow them.
"""

from __future__ import annotations

import logging
import time

import zmq

from exchange._accounting import Accounting
from roq import batch
from roq.batch import BatchError
from roq.config import ExchangeConfig
from roq.errors import ProtocolError
from roq.runtime import DropCounter
from roq.sockets import bind

log = logging.getLogger(__name__)

__all__ = ["Forwarder", "BURST", "MAX_PENDING_ACKS", "PUBLISHER_QUEUE_BYTES", "MIN_PUBLISHER_HWM",
           "SYNC_MASK", "RETRY_S", "LOSSY_HOLD", "MAX_SUBSCRIPTIONS_READ"]

#: Batches forwarded before the loop looks at its timers and other sockets again.
BURST = 256
#: Publishers owed an acknowledgement at most; beyond, acknowledgements go out at once.
MAX_PENDING_ACKS = 1024
#: What the exchange may hold of one publisher's batches not yet read, in bytes.
PUBLISHER_QUEUE_BYTES = 64 << 20
#: Fewest batches a publisher's pipe holds: a burst (see the module's documentation).
MIN_PUBLISHER_HWM = BURST
#: The forward loop catches up with the subscribers' reads every SYNC_MASK + 1 batches.
SYNC_MASK = 63
#: How often a held batch is tried again, seconds.
RETRY_S = 0.001
#: Once a subscriber was dropped for, batches that find a pipe full go out lossy until none has for this many
#: ``subscriber_grace``.
LOSSY_HOLD = 2.0
#: Subscription messages read at most per turn of the loop.
MAX_SUBSCRIPTIONS_READ = 1000


class Forwarder:
    """The frontend and backend sockets of an exchange and its forward loop.

    Args:
        context: the ZeroMQ context the sockets are made in.
        config: the bounds, the ack interval.
        drops: counts what is dropped, per reason.
    """

    def __init__(self, context: zmq.Context, config: ExchangeConfig, drops: DropCounter) -> None:
        self.config = config
        self.drops = drops
        largest = config.max_batch_bytes + batch.MAX_KEY + batch.HEADER_SIZE
        self.publisher_hwm = max(MIN_PUBLISHER_HWM, PUBLISHER_QUEUE_BYTES // largest)
        self.subscriber_hwm = config.subscriber_hwm
        self.acct = Accounting(time.monotonic())
        self.acks: dict[bytes, int] = {}  # publisher identity -> highest seq forwarded, not yet acknowledged
        self.max_pending_acks = MAX_PENDING_ACKS
        self.ack_due = float("inf")
        self.last_data = 0.0
        self.held: tuple[list[bytes], batch.Header] | None = None  # a batch a full pipe could not take yet
        self.held_since = 0.0
        self.lossy_until = 0.0  # until then, a batch that finds a pipe full goes out lossy at once
        self.lossy_sends = 0  # batches sent while some subscriber's pipe was full (it missed them)
        self.stalls = 0  # times a pipe stayed full for subscriber_grace
        self.frontend_endpoint = ""
        self.backend_endpoint = ""

        self.frontend = context.socket(zmq.ROUTER)
        self.frontend.setsockopt(zmq.ROUTER_HANDOVER, 1)
        # room for a body over the bound, so that an oversized batch is counted rather than cut off unseen
        self.frontend.setsockopt(zmq.MAXMSGSIZE, 2 * config.max_batch_bytes + batch.MAX_KEY + 4096)
        self.frontend.setsockopt(zmq.RCVHWM, self.publisher_hwm)
        self.frontend.setsockopt(zmq.LINGER, 0)
        self.backend = context.socket(zmq.XPUB)
        self.backend.setsockopt(zmq.XPUB_NODROP, 1)
        self.backend.setsockopt(zmq.SNDHWM, self.subscriber_hwm)
        self.backend.setsockopt(zmq.LINGER, 2000)
        self.backend.setsockopt(zmq.MAXMSGSIZE, 1 << 16)  # subscribers only send subscriptions

    def bind(self, address: str, frontend_port: int, backend_port: int) -> None:
        """Bind the frontend and the backend.

        Raises:
            BrokerConnectionError: an address could not be bound.
        """
        self.frontend_endpoint = bind(self.frontend, address, frontend_port)
        self.backend_endpoint = bind(self.backend, address, backend_port)

    def bounds(self) -> str:
        """The memory bounds in force, for the log."""
        largest = self.config.max_batch_bytes + batch.MAX_KEY + batch.HEADER_SIZE
        return (f"{self.subscriber_hwm} batches per subscriber (at most {self.subscriber_hwm * largest >> 20} MiB of "
                f"batches up to {largest} bytes; subscriber_queue_bytes {self.config.subscriber_queue_bytes >> 20} "
                f"MiB), {self.publisher_hwm} batches per publisher (at most {self.publisher_hwm * largest >> 20} "
                f"MiB), {self.acct.max_publishers} publishers counted per KPI period, {self.max_pending_acks} "
                "acknowledgements pending at most")

    def close(self) -> None:
        for sock in (self.frontend, self.backend):
            sock.close()

    # ------------------------------------------------------------------ the hot path

    def forward(self) -> None:
        """Forward up to :data:`BURST` batches; their acknowledgements go out within ``ack_interval``. Nothing
        while a batch is held (see :meth:`retry`)."""
        if self.held is not None and not self.retry(time.monotonic()):
            return
        recv = self.frontend.recv_multipart
        send = self.backend.send_multipart
        events = self.backend.getsockopt
        check = batch.check_incoming
        data_kind = batch.DATA
        ack_now = batch.FLAG_ACK_NOW
        max_body = self.config.max_batch_bytes
        acct = self.acct
        publishers = acct.publishers
        room = acct.max_publishers - len(publishers)
        acks = self.acks
        urgent = False
        records = size_in = 0
        nowait = zmq.NOBLOCK
        for i in range(BURST):
            if not i & SYNC_MASK:  # learn how far the subscribers' pipes were read (see the module's doc)
                events(zmq.EVENTS)
            try:
                frames = recv(nowait)
            except zmq.Again:
                break
            if len(frames) != 4:
                self.drops.drop("wrong frame count", f"{len(frames)} frames, expected 3 after the identity")
                continue
            ident, key, header, body = frames
            try:
                h = check(key, header, body, max_body)
            except BatchError as exc:
                self.drops.drop(exc.reason, str(exc))
                continue
            if h.publisher != ident:
                self.drops.drop("bad header", "publisher id does not match the connection's identity")
                continue
            try:
                send(frames[1:], nowait)
            except zmq.Again:  # a subscriber's pipe is full
                if not self._full(frames[1:], h):
                    break  # held: no more reading until it is out
            if h.kind == data_kind:
                count = h.count
                size = len(body)
                acks[ident] = h.first_seq + count - 1
                urgent |= h.flags & ack_now
                records += count
                size_in += size
                stat = publishers.get(ident)
                if stat is not None:
                    stat[0] += count
                    stat[1] += size
                elif room > 0:
                    room -= 1
                    publishers[ident] = [count, size]
            else:  # a marker: check_incoming lets nothing else through
                acks[ident] = h.first_seq - 1
                urgent = True  # the publisher holds its new batches until this one is acknowledged
        self._counted(records, size_in, urgent)

    def _counted(self, records: int, size: int, urgent: bool) -> None:
        """Count what went out and schedule its acknowledgements."""
        acct = self.acct
        acks = self.acks
        acct.records_in += records
        acct.records_out += records
        acct.bytes_in += size
        acct.bytes_out += size
        if acks:
            self.last_data = time.monotonic()
            if urgent or len(acks) >= self.max_pending_acks:
                self.send_acks()
            elif self.ack_due == float("inf"):
                self.ack_due = self.last_data + self.config.ack_interval

    # ------------------------------------------------------------------ back-pressure

    def _full(self, frames: list[bytes], h: batch.Header) -> bool:
        """A subscriber's pipe could not take ``frames``: send them lossy if one was found stuck lately (True),
        else hold them (False)."""
        if self._send_past(frames):
            return True
        self.held = (frames, h)
        self.held_since = time.monotonic()
        return False

    def _send_past(self, frames: list[bytes]) -> bool:
        """Send ``frames`` lossy if a subscriber was found stuck lately (True); False: not now."""
        now = time.monotonic()
        if now >= self.lossy_until:
            return False
        self._send_lossy(frames, now)
        return True

    def _send_lossy(self, frames: list[bytes], now: float) -> None:
        """Send to the subscribers with room; a full pipe misses it (its subscriber sees a gap)."""
        backend = self.backend
        backend.setsockopt(zmq.XPUB_NODROP, 0)
        try:
            backend.send_multipart(frames)
        finally:
            backend.setsockopt(zmq.XPUB_NODROP, 1)
        self.lossy_sends += 1
        self.lossy_until = now + LOSSY_HOLD * self.config.subscriber_grace

    def retry(self, now: float) -> bool:
        """Try the held batch again (lossy once a pipe has stayed full for ``subscriber_grace``); True once it
        is out, and the loop may read publishers again."""
        if self.held is None:
            return True
        frames, h = self.held
        self.backend.getsockopt(zmq.EVENTS)  # take in the subscribers' reads
        try:
            self.backend.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            if now - self.held_since < self.config.subscriber_grace:
                return False
            self.stalls += 1
            self._send_lossy(frames, now)
            if self.stalls <= 10 or self.stalls % 100 == 0:
                log.warning("a subscriber's pipe stayed full for %.1fs: the exchange sends past it (it misses "
                            "batches) until no pipe is full for %.1fs (%d times in all)", now - self.held_since,
                            LOSSY_HOLD * self.config.subscriber_grace, self.stalls)
        self.held = None
        if h.kind != batch.DATA:  # a marker
            self.acks[h.publisher] = h.first_seq - 1
            self._counted(0, 0, True)
            return True
        self.acks[h.publisher] = h.last_seq
        self.acct.count_publisher(h.publisher, h.count, len(frames[2]))
        self._counted(h.count, len(frames[2]), bool(h.flags & batch.FLAG_ACK_NOW))
        return True

    def read_subscriptions(self) -> None:
        """Read what subscribers sent the backend (their subscriptions; the XPUB keeps its own table)."""
        recv = self.backend.recv
        for _ in range(MAX_SUBSCRIPTIONS_READ):
            try:
                recv(zmq.NOBLOCK)
            except zmq.Again:
                return

    def send_acks(self) -> None:
        """Acknowledge every publisher owed one, without blocking."""
        reply = self.frontend.send_multipart
        for ident, seq in self.acks.items():
            try:
                reply((ident, batch.encode_ack(seq)), zmq.NOBLOCK)
            except (zmq.ZMQError, ProtocolError):  # peer gone or its pipe full: it resends or fails over
                pass
        self.acks.clear()
        self.ack_due = float("inf")

    def beacon(self, exchange_id: str, number: int, beacon_id: bytes) -> None:
        """Tell subscribers their subscription is live (and which exchange this is)."""
        header = batch.pack_header(batch.BEACON, beacon_id, number, 0, timestamp_ns=time.time_ns())
        frames = [batch.CONTROL_TOPIC, header, exchange_id.encode()]
        try:
            self.backend.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:  # a pipe is full: past it if it is known stuck, else at the next heartbeat
            self._send_past(frames)
