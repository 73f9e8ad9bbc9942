"""What every subscriber that reads has taken, and so what publishers may forget: delivery marks.

An exchange acknowledges a batch once it handed it to its subscribers' pipes (:mod:`exchange._acks`). What is
still there (the pipe, the kernel's socket buffers on both sides: megabytes on loopback) is lost when the exchange
is killed, since a reset connection drops what its peer had not read yet. A publisher therefore keeps what was
acknowledged until the exchange says it was *delivered* (:func:`roq.wire.batch.encode_delivered`), and resends
what it keeps after a fail-over; subscribers drop the copies they have.

Every :data:`MARK_INTERVAL` in which it acknowledged something, the exchange sends every subscriber the next
*mark* (:func:`roq.wire.batch.pack_delivery_mark`), after those batches on the same pipe, and remembers what each
publisher's connection had been acknowledged by then. A subscriber's progress report names the last mark it took
(:func:`roq.wire.batch.pack_progress`): the pipe keeps its order, so it took every batch sent before that mark.
Once every subscriber counted took mark ``m``, what was acknowledged up to ``m`` is delivered, and each
publisher concerned is told its highest seq. A subscriber whose pipe is full when a mark is sent, or that a
held batch waits for (the journal may have acknowledged that batch: the mark covers it), is owed the newest
mark: sent before its next new batch, right after the held one, or at the next tick (:meth:`Delivery.send_owed`).

Counted is every subscriber in the table except one *behind* (batches go past it: it sees gaps anyway) and one
that took no new mark for ``hold`` seconds while the mark after the one it took waited as long (one that stopped
reading, a client that names no marks): such a subscriber costs publishers at most that long of their buffer
(``buffer_bytes``), and loses what a killed exchange had on its way to it. One that keeps taking marks is waited
for however far behind it reads (a busy machine, a burst in its socket buffers: seconds): it loses nothing when
the exchange is killed. What publishers keep for it is bounded all the same: an exchange that finds its pipe full
waits for it at its pace (:mod:`exchange._forwarder`), so it is never more than its pipe and socket buffers
behind. (Until 2026-11-28 one that read more than ``hold`` behind was given up on too, however steadily it read.)
A subscriber counts from the mark after it joined; one given up on, from when it took every mark delivered
without it. A relayed
publisher (a link's, :data:`roq.wire.batch.FLAG_RELAYED`) gets no delivered frames: its link resends by its own
rules.
"""

from __future__ import annotations

import collections
import logging
from typing import Any, Callable, Iterable

import zmq

from exchange._acks import Acks
from exchange._subscribers import Subscriber, Subscribers
from roq.errors import ProtocolError
from roq.runtime import counted_log_due
from roq.wire import batch
from roq.sockets import send_frames

__all__ = ["Delivery", "MARK_INTERVAL", "MAX_MARKS"]

log = logging.getLogger(__name__)

#: Seconds between two marks at least (with many subscribers, longer: see :meth:`Delivery.interval`).
MARK_INTERVAL = 0.02
#: Marks not yet taken by every subscriber counted, at most: beyond, the oldest counts as taken.
MAX_MARKS = 4096


class Delivery:
    """The marks an exchange sent on ``backend`` to ``subscribers`` and what ``acks`` had acknowledged by each.

    Args:
        backend: the backend ROUTER.
        subscribers: the table the forward loop sends by.
        acks: what the publishers were acknowledged (:attr:`Acks.given`).
        beacon_id: the id in the marks' headers.
        hold: seconds a subscriber may leave a mark untaken and still be waited for.
        held: the subscribers a held batch waits for (the forward loop's): on a durable queue the journal may have
            acknowledged it already, so a mark made now covers it, and goes to them only after it.
    """

    def __init__(self, backend: zmq.Socket, subscribers: Subscribers, acks: Acks, beacon_id: bytes,
                 hold: float, held: Callable[[], Iterable[Subscriber]] = tuple) -> None:
        self.backend = backend
        self.held = held
        self.subscribers = subscribers
        self.acks = acks
        self.beacon_id = beacon_id
        self.hold = hold
        self.next_mark = 1
        # (mark, when it was sent, what each publisher's connection had been acknowledged by then), marks in order
        self.marks: collections.deque[tuple[int, float, dict[Any, int]]] = collections.deque()
        self._next = 0.0
        self.unwaited = 0  # times a subscriber that took no mark for ``hold`` stopped being waited for

    @property
    def interval(self) -> float:
        """Seconds between two marks: :data:`MARK_INTERVAL`, or longer with thousands of subscribers (each mark is
        a send to every one)."""
        return max(MARK_INTERVAL, len(self.subscribers) * 1e-5)

    @property
    def due(self) -> float:
        """When :meth:`tick` is due (infinity: nothing was acknowledged and no mark waits)."""
        return self._next if self.acks.given or self.marks else float("inf")

    def tick(self, now: float) -> None:
        """Send the next mark if anything was acknowledged since the last one, and tell the publishers what the
        subscribers counted took."""
        self._next = now + self.interval
        given = self.acks.take_given()
        waiting = set(self.held())
        if given:
            mark = self.next_mark
            self.next_mark += 1
            self.marks.append((mark, now, given))
            if len(self.marks) > MAX_MARKS:
                self._deliver(self.marks[0][0])
            frames = [b""] + batch.pack_delivery_mark(self.beacon_id, mark)
            backend = self.backend
            gone = []
            for sub in self.subscribers.all:
                if sub.mark < 0:  # new since the last mark: what that one covers was sent before it came
                    sub.mark = mark - 1
                frames[0] = sub.ident
                if sub in waiting:  # after the batch held for it (retry)
                    sub.mark_owed = True
                    continue
                try:
                    send_frames(backend, frames, zmq.NOBLOCK)
                    sub.mark_owed = False
                except zmq.ZMQError as exc:  # a full pipe: owed, before its next batch; a gone peer: forgotten
                    if exc.errno != zmq.EAGAIN:
                        gone.append(sub)
                    else:
                        sub.mark_owed = True
            for sub in gone:
                self.subscribers.remove(sub)
        elif self.marks:  # nothing new: a mark still owed goes now if it has room (it may get no batch soon)
            for sub in self.subscribers.all:
                if sub.mark_owed and sub not in waiting:
                    self.send_owed(sub)
        if self.marks:
            self._deliver(self.taken(now))

    def send_owed(self, sub: Subscriber) -> None:
        """Send ``sub`` the newest mark, which its full pipe refused, if it has room now: the forward loop calls this
        before it sends it a new batch, and after the held batch it waited for. (A subscriber that reads steadily at
        its pipe's limit found it full at every tick, since the loop fills what room it makes with held batches
        first: it took no mark for the hold, and was no longer waited for, however steadily it read.) A mark sent
        later than made still comes after every batch acknowledged when it was made."""
        try:
            send_frames(self.backend, [sub.ident, *batch.pack_delivery_mark(self.beacon_id, self.next_mark - 1)],
                        zmq.NOBLOCK)
            sub.mark_owed = False
        except zmq.ZMQError:  # still full (or gone: the batch's send finds that)
            pass

    def taken(self, now: float) -> int:
        """The highest mark every subscriber counted took (see the module's doc)."""
        marks = self.marks
        last = marks[-1][0]
        first = marks[0][0]
        hold, floor = self.hold, last
        for sub in self.subscribers.all:
            took = sub.mark
            if took >= floor:
                continue
            if took < 0:  # came after the last mark was sent
                continue
            if took < first - 1 or sub.behind(now):  # given up on before, or batches go past it
                continue
            if now - marks[took + 1 - first][1] >= hold and now - sub.marked >= hold:
                if not sub.unwaited:  # the mark after the one it took waits too long, and it took none newer as long
                    self._unwaited(sub, now - marks[took + 1 - first][1])
                continue
            floor = took
        return floor

    def _unwaited(self, sub: Subscriber, waited: float) -> None:
        """``sub`` stops being waited for: what it has not taken is told delivered without it. Said, since it loses
        what this exchange has on its way to it should the exchange die now."""
        sub.unwaited = True
        self.unwaited += 1
        if counted_log_due(self.unwaited):
            log.warning("subscriber %s left a delivery mark untaken for %.1fs: publishers are told what it has not "
                        "taken is delivered, until it takes one (%d times in all)", sub.id.hex()[:8], waited,
                        self.unwaited)

    def _deliver(self, upto: int) -> None:
        """Every mark up to ``upto`` was taken: tell each publisher what had been acknowledged by then."""
        marks = self.marks
        if not marks or upto < marks[0][0]:
            return
        seqs: dict[Any, int] = {}
        while marks and marks[0][0] <= upto:
            seqs.update(marks.popleft()[2])
        frontend = self.acks.frontend
        for conn, seq in seqs.items():
            if isinstance(conn, tuple):  # a relayed publisher's: its link resends by its own rules
                continue
            try:
                send_frames(frontend, (conn, batch.encode_delivered(seq)), zmq.NOBLOCK)
            except (zmq.ZMQError, ProtocolError):  # gone, or its pipe full: it keeps the batches a while longer
                pass
