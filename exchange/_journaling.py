"""An exchange's feed of a durable queue's journal: every batch it forwards, and the journal's answers.

With a journal (:class:`~roq.wire.control.Journaling` from the monitor), the forward loop sends each batch and
marker it reads to the journal's intake on a DEALER of its own, *before* any subscriber gets it, and keeps
it here until the journal acknowledges its publisher up to it. A publisher is acknowledged only with what the
journal acknowledged (:meth:`JournalFeed.readable`), so acknowledged means journaled under the queue's
durability.

What the journal has not acknowledged is sent again, in each publisher's order:

* when an acknowledgement comes from a new *incarnation* (the journal restarted: what was in flight to the
  old one, or written and not synced, may be gone);
* when nothing has been acknowledged for :data:`RESEND_S` while batches wait (a lost connection).

The journal drops what it has already (publisher and seq), so sending again is always safe.

Bounded: at most :data:`MAX_UNCONFIRMED_BYTES` wait for the journal; beyond, the forward loop reads no
publisher (:attr:`JournalFeed.full`), which holds the publishers back as a full subscriber pipe does.
"""

from __future__ import annotations

import collections
import logging
import time

import zmq

from roq.wire import batch
from roq.security.curve import Curve
from roq.errors import ProtocolError
from roq.runtime import DropCounter
from roq.sockets import send_frames

log = logging.getLogger(__name__)

__all__ = ["JournalFeed", "RESEND_S", "MAX_UNCONFIRMED_BYTES", "JOURNAL_HWM"]

#: how long batches wait for an acknowledgement before they are sent again
RESEND_S = 1.0
#: bytes of batches waiting for the journal, at most
MAX_UNCONFIRMED_BYTES = 64 << 20
#: batches in the pipe to the journal, at most (ZeroMQ's bound)
JOURNAL_HWM = 10_000


class JournalFeed:
    """The DEALER to one journal's intake and the batches it has not acknowledged.

    Args:
        context: where the socket is made.
        endpoint: the journal's intake.
        durability: "interval" or "always" (for the log: the journal applies it).
        curve: with CURVE, the socket connects as the cluster.
    """

    def __init__(self, context: zmq.Context, endpoint: str, durability: str, curve: Curve | None = None) -> None:
        self.endpoint = endpoint
        self.durability = durability
        self.socket = context.socket(zmq.DEALER)  # the journal's ROUTER gives each connection its routing id
        self.socket.setsockopt(zmq.SNDHWM, JOURNAL_HWM)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, batch.JOURNAL_ACK.size + batch.MAX_JOURNAL_ACKS * 24)
        if curve is not None:
            curve.connect(self.socket)
        self.socket.connect(endpoint)
        # publisher -> [(last seq, frames, size)] in seq order, not yet acknowledged
        self.unconfirmed: dict[bytes, collections.deque[tuple[int, list[bytes], int]]] = {}
        self.bytes = 0
        self.incarnation = 0
        self.progress_at = time.monotonic()  # the last acknowledgement, or when waiting began
        self.resent = 0  # batches sent again
        self.acknowledged = 0  # acknowledgements read
        # the journal's end as its last acknowledgement said: every batch sent from now on goes at or after it
        # (whatever was written before it was acknowledged then); -1 until one came
        self.end = -1
        self._resend: collections.deque[list[bytes]] = collections.deque()  # to send before anything new

    @property
    def full(self) -> bool:
        """True while the forward loop must read no publisher: too much waits, or a resend is not out yet."""
        return self.bytes >= MAX_UNCONFIRMED_BYTES or bool(self._resend)

    def send(self, frames: list[bytes], h: batch.Header) -> bool:
        """Send one batch or marker (``[key, header, body]``); False if the pipe is full (then nothing was sent
        or kept: the caller holds it and tries again)."""
        if not self._put(frames):
            return False
        last = h.last_seq if h.kind == batch.DATA else h.first_seq - 1
        size = len(frames[0]) + len(frames[1]) + len(frames[2])
        waiting = self.unconfirmed.get(h.publisher)
        if waiting is None:
            waiting = self.unconfirmed[h.publisher] = collections.deque()
            if len(self.unconfirmed) == 1:
                self.progress_at = time.monotonic()
        waiting.append((last, frames, size))
        self.bytes += size
        return True

    def mark_seam(self, subscriber: bytes, exchange: str) -> bool:
        """Tell the journal that ``subscriber`` gets what this exchange forwards from now on (it replays the
        journal up to there); False if the pipe is full (not sent)."""
        return self._put(batch.pack_seam(subscriber, exchange))

    def _put(self, frames: list[bytes]) -> bool:
        """Send ``frames`` behind what waits to be sent again; False if the pipe is full (nothing sent)."""
        if self._resend and not self.flush():
            return False
        try:
            send_frames(self.socket, frames, zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def flush(self) -> bool:
        """Send what waits to be sent again; True once all of it is out."""
        resend = self._resend
        while resend:
            try:
                send_frames(self.socket, resend[0], zmq.NOBLOCK)
            except zmq.Again:
                return False
            resend.popleft()
        return True

    def readable(self, drops: DropCounter) -> list[tuple[bytes, int]]:
        """Read the journal's acknowledgements: (publisher, highest seq journaled) to acknowledge. A frame that is
        not an acknowledgement is counted in ``drops`` and read past."""
        out: list[tuple[bytes, int]] = []
        while True:
            try:
                frame = self.socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return out
            try:
                incarnation, end, pairs = batch.decode_journal_ack(frame)
            except ProtocolError as exc:
                drops.drop("bad journal acknowledgement", str(exc))
                continue
            self.acknowledged += 1
            self.end = end
            if incarnation != self.incarnation:
                if self.incarnation:  # (the first one heard from is the one everything went to, or RESEND_S says)
                    log.warning("journal %s started again (incarnation %x): sending again the %d batches it had "
                                "not acknowledged", self.endpoint, incarnation, self.waiting)
                    self._schedule_resend()
                self.incarnation = incarnation
            for publisher, seq in pairs:
                if self._confirm(publisher, seq):
                    out.append((publisher, seq))

    def _confirm(self, publisher: bytes, seq: int) -> bool:
        """Forget ``publisher``'s batches up to ``seq``; True if that acknowledged some (then its publisher is
        told)."""
        waiting = self.unconfirmed.get(publisher)
        if waiting is None or waiting[0][0] > seq:
            return False
        self.progress_at = time.monotonic()
        while waiting and waiting[0][0] <= seq:
            self.bytes -= waiting.popleft()[2]
        if not waiting:
            del self.unconfirmed[publisher]
        return True

    @property
    def waiting(self) -> int:
        """Batches sent and not acknowledged."""
        return sum(len(w) for w in self.unconfirmed.values())

    def tick(self, now: float) -> None:
        """Send again what waited :data:`RESEND_S` without any acknowledgement."""
        if self.unconfirmed and not self._resend and now - self.progress_at >= RESEND_S:
            log.warning("journal %s: no acknowledgement for %.1fs; sending again the %d batches waiting",
                        self.endpoint, now - self.progress_at, self.waiting)
            self.progress_at = now
            self._schedule_resend()

    def _schedule_resend(self) -> None:
        self._resend.clear()
        for waiting in self.unconfirmed.values():
            self._resend.extend(frames for _last, frames, _size in waiting)
        self.resent += len(self._resend)
        self.flush()

    def take_over(self, old: JournalFeed) -> None:
        """What ``old``'s journal had not acknowledged goes to this one (now: it drops what it has), and again after
        :data:`RESEND_S` without an acknowledgement, like anything sent to it. (Until 2026-11-29 the send now left
        the time of the last progress at infinity, so that nothing was ever sent again: a new journal killed before
        its first acknowledgement, and started again at the same endpoint, held the exchange back for good.)"""
        self.unconfirmed.update(old.unconfirmed)
        self.bytes += old.bytes
        if self.unconfirmed:
            log.warning("journal %s: sending it the %d batches the journal before it had not acknowledged",
                        self.endpoint, self.waiting)
            self.progress_at = time.monotonic()
            self._schedule_resend()

    def last_seqs(self) -> list[tuple[bytes, int]]:
        """Each publisher with batches waiting, and the last seq of them."""
        return [(publisher, waiting[-1][0]) for publisher, waiting in self.unconfirmed.items()]

    def close(self) -> None:
        self.socket.close()

