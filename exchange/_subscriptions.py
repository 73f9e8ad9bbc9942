"""The exchange's side of its subscribers' connections: their subscriptions read from the backend, the beacons
that tell them their subscription is live, and, with CURVE, who may subscribe to what.

A subscription (:func:`roq.wire.batch.pack_subscription`) puts its subscriber in the table
(:class:`~exchange._subscribers.Subscribers`), and a new one gets a beacon at once. A progress report
(:func:`roq.wire.batch.pack_progress`) marks when its subscriber last took batches
(:meth:`~exchange._subscribers.Subscriber.progress`): the forward loop waits for a full pipe while its
subscriber keeps reporting. On a durable queue, a
subscription that asks to replay the journal has its *seam* sent to the journal (:attr:`Subscriptions.journal`)
once the subscriber is in the table: the journal then knows it holds everything this exchange forwarded
before the subscriber gets it live. There each beacon also carries the journal's end as the exchange last heard
it: every batch sent after the beacon is in the journal at or after it.

**Cuts.** A subscriber the forward loop cut off (a durable queue's slow subscriber) is told so
(:func:`roq.wire.batch.pack_cut`) as soon as its pipe has room, and again on each of its subscriptions that does not
name the cut's tag; the one that does brings it back, with a seam named ``<exchange>#<tag>``. With CURVE the id its
subscription names (and a routing id it chose) must be its key's own and its principal must be allowed to subscribe to the queue's keys under its prefix
(:class:`~exchange._admission.Admission`); when the permissions change, every subscriber they no longer allow
is dropped from the table at once (:meth:`Subscriptions.revoke`): nothing more is sent to it.
"""

from __future__ import annotations

import logging
import secrets
import time

import zmq

from exchange._admission import Admission
from exchange._journaling import JournalFeed
from exchange._subscribers import Cut, Subscriber, Subscribers
from roq.wire import batch
from roq.wire.batch import BatchError
from roq.runtime import DropCounter, counted_log_due
from roq.security.zap import Keyring, recv_from
from roq.sockets import send_frames

log = logging.getLogger(__name__)

__all__ = ["Subscriptions", "MAX_SUBSCRIPTIONS_READ"]

#: Subscription messages read at most per turn of the loop.
MAX_SUBSCRIPTIONS_READ = 1000


class Subscriptions:
    """Subscriptions and beacons on an exchange's backend.

    Args:
        backend: the backend ROUTER.
        subscribers: the table the forward loop sends by.
        drops: counts what is dropped, per reason.
        name: the exchange's id, which its beacons carry.
        beacon_id: the id in its beacons' headers.
        keyring, admission: with CURVE, whose keys own which ids and who may subscribe (both None: plaintext).
    """

    def __init__(self, backend: zmq.Socket, subscribers: Subscribers, drops: DropCounter, *, name: str,
                 beacon_id: bytes, keyring: Keyring | None = None, admission: Admission | None = None) -> None:
        self.backend = backend
        self.subscribers = subscribers
        self.drops = drops
        self.name = name
        self.beacon_id = beacon_id
        self.keyring = keyring
        self.admission = admission
        self.beacons = 0
        self.cuts = 0  # subscribers cut off (a durable queue's: they read the journal instead)
        self.journal: JournalFeed | None = None  # a durable queue's: replaying subscribers' seams go there


    def read_from(self, journal: JournalFeed | None) -> None:
        """The queue's journal from now on (None: not durable): replaying subscribers' seams go there."""
        self.journal = journal
    def readable(self) -> None:
        """Read what subscribers sent (their subscriptions and progress reports); anything else is dropped and
        counted."""
        keyring, admission = self.keyring, self.admission
        principal = ""
        for _ in range(MAX_SUBSCRIPTIONS_READ):
            try:
                if keyring is None:
                    frames = self.backend.recv_multipart(zmq.NOBLOCK)
                else:
                    frames, principal = recv_from(self.backend, zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                progress = batch.progress_of(frames[1:])
            except BatchError as exc:
                self.drops.drop(exc.reason, str(exc))
                continue
            if progress is not None:
                self._progress(frames[0], progress[0], progress[2], principal)
                continue
            try:
                subscriber, prefix = batch.check_subscription(frames[1:])
            except BatchError as exc:
                self.drops.drop(exc.reason, str(exc))
                continue
            if keyring is not None:  # its id, and a routing id it chose, must be its key's own
                refused = keyring.may_use(principal, frames[0]) or keyring.may_claim(principal, subscriber)
                if refused:
                    self.drops.drop(refused, f"{principal} subscribed as {subscriber.hex()[:32]} on the connection "
                                             f"{frames[0].hex()[:32]}")
                    continue
            if admission is not None and not admission.may_subscribe(principal, prefix):
                self.drops.drop("refused: may not subscribe", f"{principal} to {prefix[:40]!r}")
                continue
            rejoin = batch.rejoins(frames[1:])
            cut = self.subscribers.cuts.get(subscriber)
            if cut is not None:
                cut.ident = frames[0]  # (its latest connection)
                if rejoin != cut.tag:  # it has not read its cut yet (or lost it): told again when there is room
                    self.tell(cut)
                    continue
                del self.subscribers.cuts[subscriber]
            sub, new = self.subscribers.subscribe(frames[0], prefix, principal, subscriber)
            if sub is None:
                self.drops.drop("too many subscribers", f"{len(self.subscribers)} subscribers already")
                continue
            if new:
                self._beacon_to(sub, self._beacon_frames())
            journal = self.journal
            if not sub.seamed and journal is not None and batch.replays(frames[1:]):
                # not sent (the journal's pipe is full): with its next subscription
                sub.seamed = journal.mark_seam(subscriber, f"{self.name}#{rejoin}" if rejoin else self.name)

    def _progress(self, ident: bytes, subscriber: bytes, mark: int, principal: str) -> None:
        """``subscriber`` reports on the connection ``ident`` that it took batches, and delivery mark ``mark``: the
        forward loop's grace for its full pipe runs from now. Naming another subscriber than the one that subscribed on this connection (whose
        id was checked against its key then), it is dropped; on a connection with no subscriber in the table (not
        subscribed yet, or cut off) it is ignored."""
        sub = self.subscribers.get(ident)
        if sub is None:
            return
        if sub.id != subscriber:
            self.drops.drop("bad progress", f"{principal or 'a subscriber'} reported as {subscriber.hex()[:32]}, not "
                                            "as the subscriber of its connection")
            return
        sub.progress(time.monotonic(), mark)

    def cut_off(self, sub: Subscriber, floor: int, waited: float) -> None:
        """A durable queue's subscriber whose pipe stayed full for ``waited`` seconds: send it nothing more, and
        tell it (once its pipe has room) to read the journal from ``floor``, where the batch it missed went."""
        self.cuts += 1
        cut = self.subscribers.cut(sub, floor, secrets.randbits(32) or 1)
        self.tell(cut)
        if counted_log_due(self.cuts):
            log.warning("subscriber %s: its pipe stayed full for %.1fs: cut off, it reads the journal from offset %d "
                        "(%d cut in all)", sub.id.hex()[:8], waited, cut.floor, self.cuts)

    def tell(self, cut: Cut) -> None:
        """Tell a subscriber it was cut off (once its pipe has room; one that is gone is forgotten)."""
        floor = max(cut.floor, 0)  # not known: from the journal's start
        try:
            send_frames(self.backend, [cut.ident] + batch.pack_cut(self.beacon_id, self.name, floor, cut.tag),
                        zmq.NOBLOCK)
            cut.told = True
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EAGAIN:
                self.subscribers.cuts.pop(cut.id, None)

    def revoke(self) -> list[Subscriber]:
        """Drop every subscriber the permissions held no longer allow, or whose key left the keyring; those
        dropped."""
        admission, keyring = self.admission, self.keyring
        if admission is None or keyring is None:
            return []
        gone = [s for s in self.subscribers.all
                if not keyring.has(s.principal) or not admission.may_subscribe(s.principal, s.prefix)]
        for sub in gone:
            self.subscribers.remove(sub)
        return gone

    def beacon(self) -> None:
        """Tell every subscriber its subscription is live (and which exchange this is)."""
        self.beacons += 1
        frames = self._beacon_frames()
        for sub in self.subscribers.all:
            self._beacon_to(sub, frames)
        for cut in [c for c in self.subscribers.cuts.values() if not c.told]:
            self.tell(cut)

    def _beacon_frames(self) -> list[bytes]:
        floor = self.journal.end if self.journal is not None else -1
        return [b""] + batch.pack_beacon(self.beacon_id, self.beacons, self.name, floor, time.time_ns())

    def _beacon_to(self, sub: Subscriber, frames: list[bytes]) -> None:
        frames[0] = sub.ident
        try:
            send_frames(self.backend, frames, zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # a full pipe: the next heartbeat's beacon; a gone peer: forgotten
            if exc.errno != zmq.EAGAIN:
                self.subscribers.remove(sub)
