"""The data plane of an exchange: publishers' batches out to subscribers, acknowledgements back.

* frontend, ROUTER, bound: publishers' DEALERs send ``[key, header, body]``; every batch is checked by
  :func:`roq.wire.batch.check_incoming` (a bad one is dropped and counted under its reason) and its publisher
  gets a cumulative acknowledgement: at once when the forward loop has read everything waiting (a publisher
  then waits for nothing else), coalesced over ``ack_interval`` while more waits to be read.
* backend, ROUTER, bound: subscribers' DEALERs send their subscription (:mod:`exchange._subscribers`, checked
  by :func:`roq.wire.batch.check_subscription`) and get the same three frames, untouched, of every batch whose key
  starts with their prefix, one send per subscriber. Every heartbeat each subscriber also gets a beacon on
  :data:`~roq.wire.batch.CONTROL_TOPIC`, and a new one gets one at once: "your subscription is live".

**Back-pressure, not loss, for subscribers that keep up.** A batch that a subscriber's full pipe cannot take
now (``ROUTER_MANDATORY``: the send says so) is *held* for that subscriber, the forward loop stops reading
publishers (whose acknowledgements then wait, and whose ``max_in_flight`` stops them) and retries every
:data:`RETRY_S` until the pipe has room. A pipe fills when its subscriber or ZeroMQ's I/O thread falls behind
a burst: an exchange starved of CPU by a quota forwards what piled up while it was stopped faster than its
I/O thread writes it out, and ZeroMQ learns that a subscriber read its pipe only every half a pipe, so a pipe
looks full for as long as its subscriber takes to read half of it (512 batches: a second and more at full
speed). What says that a subscriber still reads is its progress reports (:meth:`Subscriber.progress
<exchange._subscribers.Subscriber.progress>`, read by :mod:`exchange._subscriptions`): a held batch waits
for a subscriber that reported within ``subscriber_grace`` (counted from the later of the hold's start and its
last report, so a subscriber that never reports, an older client, has the grace from the hold's start; a turn
that comes :data:`PAUSED_S` late, after the exchange itself was not running, sends past nobody). Only a
subscriber whose pipe stays full with no progress for ``subscriber_grace`` is sent past: it is *behind*, the
batches that find its pipe full go on without it (it sees a gap) until its pipe has had room for
:data:`~exchange._subscribers.BEHIND_HOLD` graces (one that reports progress: until it reports again, however
long the loop held batches for others meanwhile), so a subscriber that stays behind costs the others one
wait, not one per batch, and never a batch: the exchange knows each subscriber's pipe, not only that some
pipe is full. On a durable queue nobody is sent past: such a subscriber is cut off instead
(:meth:`~exchange._subscriptions.Subscriptions.cut_off`) and reads what it missed from the journal.

Memory is bounded in bytes although ZeroMQ bounds its pipes in messages, and fixes a pipe's bound when the
peer connects (so the bounds are set once, before binding):

* each publisher's receive pipe holds :data:`PUBLISHER_QUEUE_BYTES` of batches, counted as if every batch
  were the largest accepted, but never fewer than :data:`MIN_PUBLISHER_HWM`: a pipe of a few batches makes
  ZeroMQ's I/O thread and the forward loop hand over every few batches (measured: 15 batches cost a fifth of
  the throughput of one-record batches). A full pipe only makes the publisher wait: nothing is lost; and a
  publisher of the client library never has more than its ``buffer_bytes`` unacknowledged anyway;
* each subscriber's pipe holds :attr:`~roq.config.ExchangeConfig.subscriber_hwm` batches (its
  ``subscriber_queue_bytes`` of the largest batch, but never fewer than
  :data:`~roq.config.MIN_SUBSCRIBER_HWM`, nor more than ``backend_hwm``). What does not fit waits or goes
  past (above), and the forward loop learns how far a subscriber's pipe was read only from ZeroMQ's notices
  (one per half a pipe read, taken in at most once a millisecond while sending, sooner when asked: the loop
  asks every
  :data:`SYNC_MASK` + 1 batches). The byte bound is exact for batches up to a 512th of
  ``subscriber_queue_bytes`` (128 KiB by default); a subscriber that does not keep up with larger ones costs
  at most 512 of them.

**Who may connect.** With CURVE (``curve``), the frontend and backend serve with the cluster's server key,
and the process's ZAP handler (:class:`roq.security.zap.ZapServer`) admits only the keys of its keyring; every batch
and subscription then comes with its sender's principal (``User-Id``). **An identity is its key**: the
publisher id a batch's header names, and the subscriber id a subscription names, must be one of its sender's
key's own (:meth:`roq.security.zap.Keyring.owns`), and so must a routing id the peer chose (:meth:`roq.security.zap.Keyring.may_use`);
anything else is dropped and counted as ``forged id``. Neither ROUTER hands an id over to a second connection
(no ``ROUTER_HANDOVER``), and our clients choose no routing id: each connection has the ROUTER's own, new at
every reconnection, so a stranger cannot end, replace or redirect another's connection by presenting its id,
and a publisher or subscriber that reconnects is served at once on its new connection. Acknowledgements go
to the connection a batch came on; a subscriber's latest subscription names the connection it is sent to.

The tables keyed by a peer's identity (acknowledgements due, the KPI period's per-publisher counts, the
subscribers) are bounded too: a flood of identities cannot grow them.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Callable

import zmq

from exchange._accounting import Accounting
from exchange._acks import REMIND_S, Acks, owed_to
from exchange._delivery import Delivery
from exchange._admission import Admission
from exchange._journaling import JournalFeed
from exchange._subscribers import BEHIND_HOLD, Subscriber, Subscribers
from exchange._subscriptions import Subscriptions
from roq.wire import batch
from roq.wire.batch import BatchError
from roq.config import ExchangeConfig
from roq.loop import Loop
from roq.runtime import DropCounter, counted_log_due
from roq.sockets import bind, send_frames
from roq.security.curve import Curve
from roq.security.zap import Keyring, recv_from

log = logging.getLogger(__name__)

__all__ = ["Forwarder", "BURST", "BURST_S", "PUBLISHER_QUEUE_BYTES", "MIN_PUBLISHER_HWM",
           "SYNC_MASK", "RETRY_S", "PAUSED_S"]

#: Batches forwarded before the loop looks at its timers and other sockets again...
BURST = 256
#: ...or seconds, whichever comes first (checked every SYNC_MASK + 1 batches): a process starved of CPU still
#: beats on time whenever it runs (a turn took 1.3 s on two cores shared by four busy clusters).
BURST_S = 0.1
#: What the exchange may hold of one publisher's batches not yet read, in bytes.
PUBLISHER_QUEUE_BYTES = 64 << 20
#: Fewest batches a publisher's pipe holds: a burst (see the module's documentation).
MIN_PUBLISHER_HWM = BURST
#: The forward loop catches up with the subscribers' reads every SYNC_MASK + 1 batches.
SYNC_MASK = 63
#: How often a held batch is tried again, seconds.
RETRY_S = 0.001
#: A retry of a held batch this long after the last one means the exchange itself did not run meanwhile (its
#: I/O thread neither): progress reports sent then may not be read yet, so nobody is sent past in that turn.
PAUSED_S = 0.1



class Forwarder:
    """The frontend and backend sockets of an exchange and its forward loop.

    Args:
        context: the ZeroMQ context the sockets are made in.
        config: the bounds, the ack interval.
        drops: counts what is dropped, per reason.
        name: the exchange's id, which its beacons carry.
        beacon_id: the id in its beacons' headers.
        curve: the process's CURVE (its ZAP handler must answer for ``context`` before anyone connects);
            None = plaintext.
        admission: with ``curve``, who may publish and subscribe (None: every key of the keyring).
    """

    def __init__(self, context: zmq.Context, config: ExchangeConfig, drops: DropCounter, *, name: str = "x",
                 beacon_id: bytes = bytes(16), curve: Curve | None = None, admission: Admission | None = None) -> None:
        self.config = config
        self.drops = drops
        self.keyring = curve.keyring if curve is not None else None
        self.subscribers = Subscribers()
        largest = config.max_batch_bytes + batch.MAX_KEY + batch.HEADER_SIZE
        self.publisher_hwm = max(MIN_PUBLISHER_HWM, PUBLISHER_QUEUE_BYTES // largest)
        self.subscriber_hwm = config.subscriber_hwm
        self.acct = Accounting(time.monotonic())
        self.last_data = 0.0
        # a batch that full pipes could not take yet, the subscribers it waits for (None: it waits for the
        # journal's pipe, and then goes to every subscriber) and the connection it came on
        self.held: tuple[list[bytes], batch.Header, list[Subscriber] | None, bytes] | None = None
        self.held_since = 0.0
        self.retried = 0.0  # when the held batch was last tried again
        self.held_floor = -1  # the journal's end when the held batch went there: it is at or after it
        self.missed = 0  # batches a subscriber behind did not get
        self.stalls = 0  # times a subscriber's pipe stayed full for subscriber_grace
        self.frontend_endpoint = ""
        self.backend_endpoint = ""
        self.journal: JournalFeed | None = None  # a durable queue's journal (see set_journal)
        self.hold_for_journal = False  # a durable queue with no journal known: read no publisher
        self._loop: Loop | None = None  # the process's loop, once attached
        self._admitted = False  # publishers and subscribers may be read
        self._retrying_at_poll = False
        self._next_retry = 0.0  # a held batch or the journal's backlog is tried again then
        self._remind_at = float("inf")  # while publishers are held back, when they next hear the exchange is alive

        self.frontend = context.socket(zmq.ROUTER)  # no handover: a second connection never takes an id
        # room for a body over the bound, so that an oversized batch is counted rather than cut off unseen
        self.frontend.setsockopt(zmq.MAXMSGSIZE, 2 * config.max_batch_bytes + batch.MAX_KEY + 4096)
        self.frontend.setsockopt(zmq.RCVHWM, self.publisher_hwm)
        self.frontend.setsockopt(zmq.LINGER, 0)
        self.acks = Acks(self.frontend, config.ack_interval)  # what the publishers are owed
        self.backend = context.socket(zmq.ROUTER)
        self.backend.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a full pipe says so (EAGAIN), a gone peer too
        self.backend.setsockopt(zmq.SNDHWM, self.subscriber_hwm)
        self.backend.setsockopt(zmq.LINGER, 2000)
        self.backend.setsockopt(zmq.MAXMSGSIZE, batch.MAX_KEY + 4096)  # subscribers only send subscriptions
        if curve is not None:
            curve.serve(self.frontend)
            curve.serve(self.backend)
        # how a batch is read: with CURVE, only if its id is its sender's key's own and its sender may publish
        self._recv_batch = self.frontend.recv_multipart
        if self.keyring is not None:
            self._recv_batch = functools.partial(recv_owned, self.frontend, self.keyring, drops,
                                                 admission.may_publish if admission is not None else None)
        self.subscriptions = Subscriptions(self.backend, self.subscribers, drops, name=name, beacon_id=beacon_id,
                                           keyring=self.keyring, admission=admission if curve is not None else None)
        # what every subscriber that reads took, so what the publishers may forget
        self.delivery = Delivery(self.backend, self.subscribers, self.acks, beacon_id, config.delivery_hold,
                                 held=self._held_for)

    def bind(self, address: str, frontend_port: int, backend_port: int) -> None:
        """Bind the frontend and the backend.

        Raises:
            BrokerConnectionError: an address could not be bound.
        """
        self.frontend_endpoint = bind(self.frontend, address, frontend_port)
        self.backend_endpoint = bind(self.backend, address, backend_port)

    def describe_bounds(self) -> str:
        """The memory bounds the forwarder keeps, for the log."""
        largest = self.config.max_batch_bytes + batch.MAX_KEY + batch.HEADER_SIZE
        return (f"{self.subscriber_hwm} batches per subscriber (at most {self.subscriber_hwm * largest >> 20} MiB "
                f"of batches up to {largest} bytes; subscriber_queue_bytes "
                f"{self.config.subscriber_queue_bytes >> 20} MiB), {self.publisher_hwm} batches per publisher (at "
                f"most {self.publisher_hwm * largest >> 20} MiB), {self.acct.max_publishers} publishers counted per "
                f"KPI period, {self.acks.limit} acknowledgements pending at most, {self.subscribers.limit} "
                f"subscribers at most")

    def close(self) -> None:
        for sock in (self.frontend, self.backend):
            sock.close()
        if self.journal is not None:
            self.journal.close()

    # ------------------------------------------------------------------ in the process's loop

    def attach(self, loop: Loop, heartbeat_interval: float) -> None:
        """Serve in ``loop``: the frontend read exactly while publishers may be (:meth:`admit`, and not
        :attr:`blocked`), the subscriptions once admitted, the journal's acknowledgements, a held batch tried
        again every :data:`RETRY_S`, the acknowledgements when due, the beacons every ``heartbeat_interval``, and
        the time spent handling traffic (waiting on a held batch counts: the exchange forwards no faster)."""
        self._loop = loop
        loop.add(self.backend, self.subscriptions.readable, "subscriptions", flags=zmq.POLLIN if self._admitted else 0)
        if self.journal is not None:
            loop.add(self.journal.socket, self.read_journal, "the journal's acknowledgements")
        loop.add(self.frontend, self.forward, "the publishers' batches", flags=0)
        loop.deadline(lambda: self._next_retry if self.retrying else float("inf"), self._retry_due,
                      "a held batch, the journal's backlog")
        loop.deadline(lambda: self.acks.due, lambda now: self.acks.send(), "the acknowledgements")
        loop.deadline(lambda: self._remind_at, self._remind, "the publishers held back")
        loop.deadline(lambda: self.delivery.due, self.delivery.tick, "the delivery marks")
        loop.every(heartbeat_interval, self._beat, "the beacons")
        loop.before_poll(self._before_poll, "the traffic's accounting")
        loop.after_turn(self._after_turn, "the traffic's accounting")
        self.acct.restart(time.monotonic())

    def admit(self) -> None:
        """Publishers and subscribers may be read from now on (the exchange knows whether the queue is durable,
        and who may)."""
        self._admitted = True
        if self._loop is not None:
            self._loop.want(self.backend, zmq.POLLIN)

    def hold(self, holding: bool) -> None:
        """A durable queue with no journal known (``holding``): read no publisher, acknowledge nothing new."""
        self.hold_for_journal = holding

    def revoke(self) -> list[Subscriber]:
        """Drop the subscribers the permissions no longer allow (see :meth:`Subscriptions.revoke`)."""
        return self.subscriptions.revoke()

    def finish(self) -> None:
        """At the end: the acknowledgements owed go out."""
        self.acks.send()

    def _retry_due(self, now: float) -> None:
        self._next_retry = now + RETRY_S
        self.forward()

    def _before_poll(self) -> None:
        self._retrying_at_poll = self.retrying

    def _after_turn(self, now: float) -> None:
        loop = self._loop
        assert loop is not None
        self.acct.spent(now - (loop.polled if self._retrying_at_poll else loop.woke))
        # a full pipe or the journal holds the publishers back, or lets them go: whatever changed it (a held batch
        # out, the monitor naming a journal or none), the frontend is polled exactly while it may be read
        blocked = self.blocked
        loop.want(self.frontend, zmq.POLLIN if self._admitted and not blocked else 0)
        if not blocked:
            self._remind_at = float("inf")
        elif self._remind_at == float("inf"):
            self._remind_at = now + REMIND_S

    def _remind(self, now: float) -> None:
        """Publishers held back this long hear that the exchange is alive (:meth:`Acks.remind`)."""
        self.acks.remind()
        self._remind_at = now + REMIND_S

    def _beat(self, now: float) -> None:
        self.subscriptions.beacon()
        if self.journal is not None:
            self.journal.tick(now)

    # ------------------------------------------------------------------ the hot path

    def forward(self) -> None:
        """Forward up to :data:`BURST` batches; their acknowledgements go out at once if that read everything
        waiting, else within ``ack_interval``. Nothing while a batch is held (see :meth:`retry`)."""
        if self.held is not None and not self.retry(time.monotonic()):
            return
        journal = self.journal
        if self.hold_for_journal or (journal is not None and (not journal.flush() or journal.full)):
            return  # the journal is behind, or none is known: publishers wait
        recv = self._recv_batch
        events = self.backend.getsockopt
        check = batch.check_incoming
        data_kind = batch.DATA
        ack_now, relayed, compressed = batch.FLAG_ACK_NOW, batch.FLAG_RELAYED, batch.FLAG_COMPRESSED
        max_body = self.config.max_batch_bytes
        acct = self.acct
        publishers = acct.publishers
        room = acct.max_publishers - len(publishers)
        acks = self.acks.owed
        urgent = False
        records = size_in = forwarded = 0
        nowait = zmq.NOBLOCK
        clock = time.monotonic
        until = clock() + BURST_S
        for i in range(BURST):
            if not i & SYNC_MASK:  # learn how far the subscribers' pipes were read (see the module's doc)
                events(zmq.EVENTS)
                if i and clock() > until:
                    break
            try:
                frames = recv(nowait)
            except zmq.Again:
                urgent = True  # nothing more to read: no acknowledgement waits for what comes later
                break
            if frames is None:  # CURVE: its id is not its key's own
                continue
            if len(frames) != 4:
                self.drops.drop("wrong frame count", f"{len(frames)} frames, expected 3 after the identity")
                continue
            ident, key, header, body = frames
            try:
                h = check(key, header, body, max_body)
                if h.flags & compressed:  # a link's: what it was, before anything else sees it
                    header, body, h = batch.inflate(key, header, body, max_body)
                    frames = [ident, key, header, body]
            except BatchError as exc:
                self.drops.drop(exc.reason, str(exc))
                continue
            if journal is not None:
                if not journal.send([key, header, body], h):
                    self.held = ([key, header, body], h, None, ident)  # the journal's pipe is full: nobody gets it yet
                    self.held_since = time.monotonic()
                    break
                self.acks.via(h.publisher, owed_to(ident, h))  # where the journal's acknowledgement goes
            waiting = self._send_out(frames, key)
            if waiting is not None:  # held: no more reading until it is out
                self._hold([key, header, body], h, waiting, ident)
                break
            if h.kind == data_kind:
                count = h.count
                size = len(body)
                if journal is None:  # with a journal, its acknowledgements are relayed (read_journal); owed_to, inline:
                    acks[(ident, h.publisher) if h.flags & relayed else ident] = h.first_seq + count - 1
                if h.flags & ack_now:
                    urgent = True
                records += count
                size_in += size
                stat = publishers.get(h.publisher)
                if stat is not None:
                    stat[0] += count
                    stat[1] += size
                elif room > 0:
                    room -= 1
                    publishers[h.publisher] = [count, size]
            elif journal is None:  # a marker: check_incoming lets nothing else through
                acks[owed_to(ident, h)] = h.first_seq - 1
                urgent = True  # the publisher holds its new batches until this one is acknowledged
            forwarded += 1
        if forwarded:
            self.last_data = time.monotonic()
        self._counted(records, size_in, urgent)

    def _send_out(self, frames: list[bytes], key: bytes) -> list[Subscriber] | None:
        """Send a batch (``frames[0]`` replaced by each subscriber's id in turn) to every subscriber whose
        prefix its key starts with; the subscribers whose full pipe it waits for (None: none). A record for
        another cluster on its way there (:data:`roq.wire.batch.ADDRESSED`) goes to none: its journal keeps it
        for the link toward it."""
        if key[:2] == batch.ADDRESSED:
            return None
        backend = self.backend
        waiting = None
        for sub in self.subscribers.all:
            if key.startswith(sub.prefixes):
                frames[0] = sub.ident
                if sub.mark_owed:
                    self.delivery.send_owed(sub)
                try:
                    send_frames(backend, frames, zmq.NOBLOCK)
                except zmq.ZMQError as exc:
                    if self._refused(sub, exc):
                        waiting = [sub] if waiting is None else waiting + [sub]
        return waiting

    def _counted(self, records: int, size: int, urgent: bool) -> None:
        """Count what went out and schedule its acknowledgements."""
        acct = self.acct
        acct.records_in += records
        acct.records_out += records
        acct.bytes_in += size
        acct.bytes_out += size
        self.acks.schedule(urgent, self.last_data)

    # ------------------------------------------------------------------ back-pressure

    def _refused(self, sub: Subscriber, exc: zmq.ZMQError) -> bool:
        """A send to ``sub`` failed: True if the batch waits for its pipe; False if it goes on without it (it is
        behind, or gone)."""
        if exc.errno != zmq.EAGAIN:  # EHOSTUNREACH: its connection is gone
            self.subscribers.remove(sub)
            return False
        now = time.monotonic()
        if not sub.behind(now):
            return True
        self._past(sub, now)
        return False

    def _past(self, sub: Subscriber, now: float) -> None:
        """``sub``'s full pipe misses a batch (it sees a gap); it stays behind a while longer."""
        sub.behind_until = now + BEHIND_HOLD * self.config.subscriber_grace
        sub.missed_at = now
        sub.missed += 1
        self.missed += 1

    def retry(self, now: float) -> bool:
        """Try the held batch again for the subscribers it waits for (past those whose pipe stayed full with no
        progress for ``subscriber_grace``); True once it is out, and the loop may read publishers again."""
        if self.held is None:
            return True
        frames, h, waiting, conn = self.held
        key, header, body = frames
        if waiting is None:  # the journal's pipe was full: it goes there first, then to the subscribers
            if self.journal is not None:
                if not self.journal.send(frames, h):
                    return False
                self.acks.via(h.publisher, owed_to(conn, h))
            waiting = self._send_out([conn, key, header, body], key)
            if waiting is None:
                return self._released(h, body, conn)
            self._hold(frames, h, waiting, conn)
            return False
        self.backend.getsockopt(zmq.EVENTS)  # take in the subscribers' reads
        paused, self.retried = now - self.retried > PAUSED_S, now
        backend = self.backend
        still = []
        for sub in waiting:
            try:
                send_frames(backend, (sub.ident, key, header, body), zmq.NOBLOCK)
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EAGAIN:
                    self.subscribers.remove(sub)
                elif paused or now - max(self.held_since, sub.progressed) < self.config.subscriber_grace:
                    still.append(sub)  # it took batches within the grace (or the hold is younger): it reads on
                elif self.journal is not None:  # a durable queue: it reads the journal instead
                    self.subscriptions.cut_off(sub, self.held_floor, now - self.held_since)
                else:
                    self.stalls += 1
                    self._past(sub, now)
                    _log_stall(sub, now - self.held_since, BEHIND_HOLD * self.config.subscriber_grace, self.stalls)
            else:
                if sub.mark_owed:  # after the held batch: the mark may cover it (the journal acknowledged it)
                    self.delivery.send_owed(sub)
        if still:
            self.held = (frames, h, still, conn)
            return False
        return self._released(h, body, conn)

    def _held_for(self) -> list[Subscriber]:
        """The subscribers the held batch waits for (none while it waits for the journal's pipe: nobody has it)."""
        held = self.held
        return (held[2] or []) if held is not None else []

    def _hold(self, frames: list[bytes], h: batch.Header, waiting: list[Subscriber], conn: bytes) -> None:
        """Hold a batch that came on ``conn`` for the full pipes of ``waiting`` (it went to the journal first, if
        there is one)."""
        self.held, self.held_since = (frames, h, waiting, conn), time.monotonic()
        self.held_floor = self.journal.end if self.journal is not None else -1

    def _released(self, h: batch.Header, body: bytes, conn: bytes) -> bool:
        """The held batch is out: count it and schedule its acknowledgement to ``conn`` (with a journal, the
        journal's)."""
        self.held = None
        self.last_data = time.monotonic()
        if self.journal is None and not self.hold_for_journal:  # (with a journal, the journal's acknowledgement)
            self.acks.owed[owed_to(conn, h)] = h.last_seq if h.kind == batch.DATA else h.first_seq - 1
        if h.kind != batch.DATA:  # a marker
            self._counted(0, 0, True)
            return True
        self.acct.count_publisher(h.publisher, h.count, len(body))
        self._counted(h.count, len(body), bool(h.flags & batch.FLAG_ACK_NOW))
        return True

    @property
    def blocked(self) -> bool:
        """True while the forward loop reads no publisher: a batch is held, the journal is behind, or none is
        known."""
        return self.retrying or self.hold_for_journal

    @property
    def retrying(self) -> bool:
        """True while a held batch or the journal's backlog is tried again every :data:`RETRY_S` (busy time: the
        exchange forwards no faster); waiting for the monitor to name a journal is neither."""
        return self.held is not None or (self.journal is not None and self.journal.full)

    # ------------------------------------------------------------------ the journal

    def set_journal(self, feed: JournalFeed | None) -> None:
        """Feed ``feed``'s journal from now on; None: no journal, the queue is not durable any more (what the
        previous one had not acknowledged is acknowledged by the exchange, as everything is from now on)."""
        old, self.journal = self.journal, feed
        self.subscriptions.read_from(feed)
        if self._loop is not None:
            if old is not None:
                self._loop.remove(old.socket)
            if feed is not None:
                self._loop.add(feed.socket, self.read_journal, "the journal's acknowledgements")
        if old is None:
            return
        if feed is not None:
            feed.take_over(old)
        else:
            self.acks.relay(old.last_seqs())
            self._counted(0, 0, True)
        old.close()

    def read_journal(self) -> None:
        """Relay the journal's acknowledgements to the publishers they are for, at once."""
        pairs = self.journal.readable(self.drops) if self.journal is not None else []
        if pairs:
            self.acks.relay(pairs)
            self.acks.send()


def recv_owned(sock: zmq.Socket, keyring: Keyring, drops: DropCounter, may_publish: Callable[[str], bool] | None,
               flags: int) -> list[bytes] | None:
    """A message from the CURVE socket ``sock``, as ``recv_multipart`` reads it, if the publisher id its header
    names (and the routing id, if its sender chose one) is its sender's key's own (the principal its handshake
    gave it, :meth:`roq.security.zap.Keyring.owns`) and its principal may publish; None (dropped and counted as
    ``forged id`` or ``refused: may not publish``) if not.

    Raises:
        zmq.Again: nothing to read.
    """
    frames, principal = recv_from(sock, flags)
    if len(frames) != 4:
        return frames  # the frame count is checked by the caller
    publisher = frames[2][batch.PUBLISHER_OFFSET:batch.PUBLISHER_OFFSET + 16]
    refused = keyring.may_use(principal, frames[0])
    if not refused and len(frames[2]) == batch.HEADER_SIZE:  # (a header of another size: check_incoming drops it)
        refused = keyring.may_claim(principal, publisher)
    if refused:
        drops.drop(refused, f"{principal} sent a batch of publisher {publisher.hex()} on the connection "
                            f"{frames[0].hex()[:32]}")
        return None
    if may_publish is not None and not may_publish(principal):
        drops.drop("refused: may not publish", str(principal))
        return None
    return frames


def _log_stall(sub: Subscriber, waited: float, hold: float, stalls: int) -> None:
    if counted_log_due(stalls):
        log.warning("subscriber %s: its pipe stayed full for %.1fs: it misses what finds its pipe full until its pipe "
                    "has had room for %.1fs (%d times in all)", sub.id.hex()[:8], waited, hold, stalls)


