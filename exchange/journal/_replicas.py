"""A replicated journal in the process: the leader holds each round's acknowledgements until a majority of the
replicas hold it (:class:`Leading`), and a follower appends the leader's entries at the leader's offsets
(:class:`Following`). The rules are :mod:`exchange.journal._replication`'s.

A follower keeps one fetch waiting at the leader's reads port (:attr:`~roq.wire.control.Fetch.replica`: it is
served what the leader wrote, with each entry's append time, and the leader's commit end). It appends what comes,
writes it, syncs it with ``always``, and asks again from its new end: that fetch is what tells the leader it holds
everything before. The leader counts it (:class:`~exchange.journal._replication.Quorum`); once a round is on a
majority (itself included, after its own write and sync), its acknowledgements go to the exchanges, naming the
commit end, and readers may read it.

What is not here yet: elections (the leader is the one started with ``--followers``, in epoch 1), a follower that
holds entries the leader does not (it stops following and says so), promises kept on disk.
"""

from __future__ import annotations

import collections
import logging
from typing import Callable

import zmq

from exchange.journal._readport import ReadPort
from exchange.journal._replication import Quorum
from exchange.journal._store import Store
from roq.errors import JournalError, ProtocolError
from roq.security.curve import Curve
from roq.wire import batch, control

log = logging.getLogger(__name__)

__all__ = ["Leading", "Following", "FETCH_BYTES", "WAIT_MS", "RECENT_BYTES"]

#: what a follower asks for in one fetch, at most
FETCH_BYTES = 4 << 20
#: how long a follower's fetch waits at the leader's end
WAIT_MS = 1000
#: what a leader keeps of its newest entries in memory, for its followers (:meth:`Store.keep_recent`)
RECENT_BYTES = 32 << 20

Acks = dict[bytes, list[tuple[bytes, int]]]


class Leading:
    """The leader's count of what its followers hold, and the acknowledgements waiting for it.

    Args:
        name: the leader's id.
        followers: the followers' ids.
        store: the journal (what it holds when it starts counts as committed: epoch 1 begins past it).
        reads: its readers, served up to the commit end.
        acknowledge: sends acknowledgements (exchange -> (publisher, seq) pairs) naming the commit end.
    """

    def __init__(self, name: str, followers: tuple[str, ...], store: Store, reads: ReadPort,
                 acknowledge: Callable[[Acks, int], None]) -> None:
        end = store.end_offset
        self.name = name
        self.quorum = Quorum(name, [name, *followers], epoch=1, base=end, committed=end)
        self.committed = end
        self.reads = reads
        self.acknowledge = acknowledge
        self.pending: collections.deque[tuple[int, Acks]] = collections.deque()  # (round's end, its acks)
        reads.commit(end)
        store.keep_recent(RECENT_BYTES)

    def written(self, end: int, acks: Acks, now: float) -> None:
        """The leader wrote (and with ``always`` synced) a round ending at ``end``."""
        if acks:
            self.pending.append((end, acks))
        self.held(self.name, end, now)

    def held(self, replica: str, end: int, now: float) -> None:
        """``replica`` holds the leader's log up to ``end``: acknowledge what is on a majority now."""
        committed = self.quorum.held(replica, end, now)
        if committed <= self.committed:
            return
        self.committed = committed
        ready: Acks = {}
        while self.pending and self.pending[0][0] <= committed:
            for source, pairs in self.pending.popleft()[1].items():
                ready.setdefault(source, []).extend(pairs)
        self.reads.commit(committed)
        if ready:
            self.acknowledge(ready, committed)

    def describe(self, leader_end: int, now: float) -> dict[str, dict[str, int | bool]]:
        """Each replica's end, lag (offsets) and whether it is in sync (heard within 2 s, holding what is committed)."""
        q = self.quorum
        return {r: {"end": end, "lag": q.lag(r, leader_end), "in_sync": q.in_sync(r, now, leader_end, 2.0)}
                for r, end in q.ends.items()}


class Following:
    """A follower replica: one fetch waiting at the leader, what comes appended at the leader's offsets.

    Args:
        context: where its socket is made.
        endpoint: the leader's reads port.
        name: this replica's id (the leader counts it under it).
        store: its journal.
        reads: its own readers, served up to the leader's commit end.
        durable: True with ``always`` (it syncs what it appends before it asks again).
        curve: with CURVE, it connects as a cluster process.
    """

    def __init__(self, context: zmq.Context, endpoint: str, name: str, store: Store, reads: ReadPort,
                 durable: Callable[[], bool], curve: Curve | None = None) -> None:
        self.endpoint = endpoint
        self.name = name
        self.store = store
        self.reads = reads
        self.durable = durable
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.connect(self.socket)
        self.asked_at = 0.0
        self.diverged = ""  # why it stopped following (it holds what the leader does not)
        self.appended = 0

    def start(self, now: float) -> None:
        self.socket.connect(self.endpoint)
        self.ask(now)

    def ask(self, now: float) -> None:
        """Fetch from our end: it tells the leader we hold everything before it."""
        if self.diverged:
            return
        self.asked_at = now
        fetch = control.Fetch(offset=self.store.next_offset, max_bytes=FETCH_BYTES, wait_ms=WAIT_MS, replica=self.name)
        try:
            self.socket.send(control.encode(fetch), zmq.NOBLOCK)
        except zmq.Again:  # the leader is away: asked again by tick
            pass

    def tick(self, now: float) -> None:
        """An answer that did not come (the leader is away, or its answer was lost, or the disk refused): ask
        again, once what we say we hold is synced."""
        if now - self.asked_at <= WAIT_MS / 1000 + 2.0:
            return
        if self.durable() and not self.store.synced:
            try:
                self.store.sync()
            except JournalError as exc:
                self.asked_at = now
                log.error("replica %s: %s", self.name, exc)
                return
        self.ask(now)

    def readable(self, now: float) -> None:
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                self._take(frames)
            except (ProtocolError, batch.BatchError) as exc:
                log.error("replica %s: a bad answer from the leader at %s: %s", self.name, self.endpoint, exc)
            except JournalError as exc:  # nothing of it is said to be held: asked again once it syncs (tick)
                log.error("replica %s: %s; it fetches the entries again", self.name, exc)
                self.asked_at = now
                continue
            self.ask(now)

    def _take(self, frames: list[bytes]) -> None:
        msg = control.decode(frames[0])
        if isinstance(msg, control.Reply):  # refused (a bad request, a key it does not know)
            raise ProtocolError(f"refused: {msg.comment}")
        if not isinstance(msg, control.Fetched):
            raise ProtocolError(f"{type(msg).__name__} where a fetch's answer was due")
        if msg.error:
            raise ProtocolError(msg.error)
        entries = frames[1:]
        if len(entries) != 3 * msg.count or len(msg.offsets) != msg.count or len(msg.times) != msg.count:
            raise ProtocolError(f"{msg.count} entries announced, {len(entries)} frames and {len(msg.times)} times")
        store = self.store
        taken = 0
        for i, offset in enumerate(msg.offsets):
            key, header, body = entries[3 * i:3 * i + 3]
            h = batch.parse_header(header)
            if offset + h.count <= store.next_offset:
                continue  # held already (an answer to a fetch sent again)
            if offset != store.next_offset:
                if store.empty and not taken and not self.appended:
                    store.begin_generation(store.generation, offset)  # the leader's journal begins past 0
                else:
                    self.diverged = (f"the leader's entry at {offset} does not follow ours, which end at "
                                     f"{store.next_offset}")
                    log.error("replica %s stops following %s: %s", self.name, self.endpoint, self.diverged)
                    break
            store.append(key, header, body, h.publisher, h.count, h.last_seq, msg.times[i])
            taken += 1
        if taken:
            store.write()
            if self.durable():
                store.sync()
            self.appended += taken
        if msg.committed >= 0:
            self.reads.commit(min(msg.committed, store.end_offset))
        elif taken:
            self.reads.written()

    def close(self) -> None:
        self.socket.close()
