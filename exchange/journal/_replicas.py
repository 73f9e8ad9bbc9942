"""A replicated journal in the process: the leader holds each round's acknowledgements until a majority of the
replicas hold it (:class:`Leading`), and a follower appends the leader's entries at the leader's offsets
(:class:`Following`). The rules are :mod:`exchange.journal._replication`'s.

A follower keeps one fetch waiting at the leader's reads port (:attr:`~roq.wire.control.Fetch.replica`: it is
served what the leader wrote, with each entry's append time, and the leader's commit end). It appends what comes,
writes it, syncs it with ``always``, and asks again from its new end: that fetch is what tells the leader it holds
everything before. The leader counts it (:class:`~exchange.journal._replication.Quorum`); once a round is on a
majority (itself included, after its own write and sync), its acknowledgements go to the exchanges, naming the
commit end, and readers may read it.

**Epochs and promises in the process.** Every replica keeps its promised epoch and its log's epoch history in
``replica.json`` beside its segments (:func:`load_replica`, :func:`save_replica`: replaced atomically and synced
before anything depends on it), so a restart keeps the fence. A leader leads the epoch it was started with
(``--epoch``) and refuses to start below one its replica promised. Each answer to a follower names the leader's
epoch and history; the follower checks them (:meth:`~exchange.journal._replication.Replica.check`): it refuses
the entries of an older epoch than it promised, cuts back a tail the leader's log does not have
(:meth:`~exchange.journal._store.Store.truncate`), and names its promised epoch in its next fetch. A leader that
sees a newer epoch in a follower's fetch, or is asked to promise one (:class:`~roq.wire.control.Promise`), is
*fenced*: it acknowledges nothing more.

**An election** (:func:`elect`, a journal started with ``--peers``): the candidate promises its epoch itself, asks
the other replicas' promises, and with a majority takes the most advanced log of those that promised (cutting back
its own tail where that log differs, fetching what it lacks), begins its epoch past a jump in offsets
(:meth:`~exchange.journal._store.Store.jump`) and leads. Its first entry is the epoch's (:func:`~exchange.journal.
_format.epoch_entry`, served to no reader): once it is on a majority, the log it took over is committed behind it.

What is not here yet: who stands, and when (the monitor seeing the leader gone), the epoch counter in ZooKeeper,
followers told where the new leader is.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable

import zmq

from exchange.journal._files import replace_synced
from exchange.journal._format import Entry, read_position
from exchange.journal._readport import ReadPort
from exchange.journal._reads import Positions
from exchange.journal._replication import (ACCEPT, STALE, TRUNCATE, Election, EpochHistory, Promise, Quorum, Replica,
                                           Waiting)
from exchange.journal._store import Store
from roq.errors import ConflictError, JournalError, ProtocolError, Result, UnavailableError
from roq.runtime import counted_log_due
from roq.security.curve import Curve
from roq.wire import batch, control

log = logging.getLogger(__name__)

__all__ = ["Leading", "Following", "elect", "append_entries", "load_replica", "save_replica", "REPLICA_FILE",
           "promise",
           "promise_answer", "fetch_range", "FETCH_BYTES", "WAIT_MS", "REACHED_S", "RECENT_BYTES", "PROMISE_TIMEOUT_S"]

#: a replica's promised epoch and its log's epoch history, beside its segments
REPLICA_FILE = "replica.json"
#: how long a candidate waits for the other replicas' promises
PROMISE_TIMEOUT_S = 2.0

#: what a follower asks for in one fetch, at most
FETCH_BYTES = 4 << 20
#: how long a follower's fetch waits at the leader's end
WAIT_MS = 1000
#: a follower that has not fetched for this long is out of the leader's reach
REACHED_S = 2.5 * WAIT_MS / 1000
#: what a leader keeps of its newest entries in memory, for its followers (:meth:`Store.keep_recent`)
RECENT_BYTES = 32 << 20

Acks = dict[bytes, list[tuple[bytes, int]]]


def load_replica(directory: str, name: str, store: Store, learner: bool = False) -> Replica:
    """The replica ``name`` whose log is ``store``, as ``replica.json`` left it (a new one: no promise, no history);
    a ``learner`` (new to the replica set: it votes once admitted, :meth:`Replica.admit`) whatever its files say.

    Raises:
        JournalError: the file does not read, or says the log goes further than it does (it was cut back by hand).
    """
    path = os.path.join(directory, REPLICA_FILE)
    try:
        with open(path) as f:
            doc = json.load(f)
        promised, history = int(doc["promised"]), EpochHistory.from_list(doc["history"])
    except FileNotFoundError:
        return Replica(name, store.next_offset, learner=learner)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise JournalError(f"{path} does not read ({exc}): the replica's promise and history are unknown") from exc
    if history.starts and history.starts[-1][1] > store.next_offset:
        history.truncate(store.next_offset)  # an epoch begun and never written (a crash between the two)
    return Replica(name, store.next_offset, history, promised, learner=learner)


def promise(directory: str, replica: Replica, epoch: int) -> dict[str, Any]:
    """A candidate for ``epoch`` asks ``replica`` (its files in ``directory``): its promise, on disk before the
    answer.

    Raises:
        ConflictError: it promised that epoch or a newer one. UnavailableError: it is a learner (it holds not yet
            what its leader committed: its promise does not count, and the candidate looks for a majority without
            it). JournalError: the promise cannot be written.
    """
    why = replica.refusal(epoch)
    if why:
        raise (UnavailableError if replica.learner else ConflictError)(why)
    replica.promise(epoch)
    save_replica(directory, replica)
    return promise_answer(replica)


def save_replica(directory: str, replica: Replica) -> None:
    """Keep ``replica``'s promise and history on disk before this returns.

    Raises:
        JournalError: the file cannot be written.
    """
    path = os.path.join(directory, REPLICA_FILE)
    try:
        replace_synced(path, json.dumps({"promised": replica.promised, "history": replica.history.to_list()}).encode())
    except OSError as exc:
        raise JournalError(f"cannot write {path}: {exc.strerror}") from exc


def append_entries(store: Store, replica: Replica, history: EpochHistory, offsets: list[int], times: list[int],
                   entries: list[bytes], durable: bool, positions: Positions | None = None) -> tuple[int, str]:
    """Append another replica's entries (an answer's frames, three each) at its offsets and times, written (and
    synced when ``durable``); past a jump where its ``history`` begins an epoch, so does this log. A durable
    subscriber's position among them is kept in ``positions`` too, once written. The entries appended, and why it
    stopped before the end ("": it did not).

    Raises:
        JournalError: a write, a sync or a jump failed (nothing unwritten is counted as held).
    """
    taken, why = 0, ""
    kept: list[tuple[str, int]] = []
    starts = {start for _, start in history.starts}
    for i, offset in enumerate(offsets):
        key, header, body = entries[3 * i:3 * i + 3]
        h = batch.parse_header(header)
        if offset + h.count <= store.next_offset:
            continue  # held already (an answer to a fetch sent again)
        if offset != store.next_offset:
            if store.empty:
                store.begin_generation(store.generation, offset)  # its journal begins past 0
            elif offset in starts and offset > store.next_offset and \
                    history.end_of(history.epoch_at(offset - 1), offset) == store.next_offset:
                _write(store, replica, durable)
                store.jump(offset)  # a new epoch begins past a gap: here too
            else:
                why = f"its entry at {offset} does not follow ours, which end at {store.next_offset}"
                break
        store.append(key, header, body, h.publisher, h.count, h.last_seq, times[i])
        replica.appended(history.epoch_at(offset), [offset], offset + h.count)
        taken += 1
        if key == batch.POSITION_KEY and positions is not None:
            try:
                kept.append(read_position(body))
            except ProtocolError as exc:
                log.error("replica %s: a position entry at %d does not read: %s", replica.name, offset, exc)
    _write(store, replica, durable)
    for name, position in kept:
        try:
            assert positions is not None
            positions.commit(name, position)
        except ProtocolError as exc:
            log.error("replica %s: the position of %s not kept: %s", replica.name, name[:40], exc)
    return taken, why


def _write(store: Store, replica: Replica, durable: bool) -> None:
    try:
        store.write()
        if durable:
            store.sync()
    except JournalError:
        # a sync failed (also one of a segment sealed as it rolled): what it covered cannot be trusted, and is
        # fetched again (Store.cut_to_synced); a write that failed wrote nothing
        try:
            if store.sync_failed:
                store.cut_to_synced()
        finally:
            replica.truncated(store.next_offset)
        raise


def elect(context: zmq.Context, name: str, epoch: int, peers: dict[str, str], store: Store,
          curve: Curve | None = None, positions: Positions | None = None, members: list[str] | None = None) -> None:
    """Stand for ``epoch`` among this replica (``name``, its log ``store``) and ``peers`` (name -> reads endpoint):
    ask every one's promise, and with a majority take the most advanced log of those that promised (cutting back
    what this log has that it does not, fetching what it lacks), then begin the epoch's offsets past every end heard
    and the wall clock's seconds times 2**21 (:meth:`~exchange.journal._replication.Election.base`). The replica's
    promise and history are on disk before it returns; the caller then leads (:class:`Leading`).

    Raises:
        JournalError: this replica promised that epoch or a newer one, no majority promised within
            :data:`PROMISE_TIMEOUT_S`, a replica promised a newer epoch, or the log could not be taken or written.
    """
    directory = store.directory
    replica = load_replica(directory, name, store)
    own = replica.promise(epoch)
    if own is None:
        raise JournalError(f"{replica.refusal(epoch)}: it cannot stand for epoch {epoch}")
    save_replica(directory, replica)
    # a majority of every replica of the queue, not of those heard of (a name not heard of never promises)
    election = Election(name, sorted({name, *(members or peers)}), epoch)
    election.promised(own)
    logs: dict[str, tuple[EpochHistory, int]] = {}
    asked: dict[zmq.Socket, str] = {}
    poller = zmq.Poller()
    try:
        for peer, endpoint in peers.items():
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            if curve is not None:
                curve.connect(sock)
            sock.connect(endpoint)
            sock.send(control.encode(control.Promise(epoch=epoch, candidate=name)))
            asked[sock] = peer
            poller.register(sock, zmq.POLLIN)
        deadline = time.monotonic() + PROMISE_TIMEOUT_S
        while len(logs) < len(peers) and not election.won and not election.lost and time.monotonic() < deadline:
            for sock, _ in poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                peer = asked[sock]
                reply = control.decode(sock.recv_multipart()[-1])
                poller.unregister(sock)
                if isinstance(reply, control.Reply) and reply.result == Result.UNAVAILABLE:
                    log.info("replica %s, standing for epoch %d: %s does not vote (%s)", name, epoch, peer,
                             reply.comment)  # a learner: a majority is looked for among the others
                    continue
                if not isinstance(reply, control.Reply) or reply.result != Result.OK:
                    election.refused(epoch)
                    log.warning("replica %s, standing for epoch %d: %s refused (%s)", name, epoch, peer,
                                getattr(reply, "comment", type(reply).__name__))
                    continue
                data = reply.data
                history = EpochHistory.from_list(data["history"])
                logs[peer] = (history, int(data["end"]))
                election.promised(Promise(peer, int(data["epoch"]), history.last_epoch, int(data["end"])))
        if not election.won:
            raise JournalError(f"replica {name} did not win epoch {epoch}: {len(election.promises)} of "
                               f"{len(election.replicas)} replicas promised it")
        source = election.source()
        if source.replica != name:
            history, end = logs[source.replica]
            keep = replica.history.shared_end(replica.end, history, end)
            if keep < replica.end:
                log.warning("replica %s cuts its log back from %d to %d: %s's is the most advanced", name,
                            replica.end, keep, source.replica)
                store.truncate(keep)
                replica.truncated(keep)
            _take_log(context, name, epoch, peers[source.replica], store, replica, history, end, curve, positions)
        base = election.base(time.time())
        if base > store.next_offset:
            store.jump(base)
        replica.lead(epoch, store.next_offset)
        save_replica(directory, replica)
        log.warning("replica %s won epoch %d (%d of %d replicas promised; the most advanced log: %s's, ending at "
                    "%d): it leads from offset %d", name, epoch, len(election.promises), len(election.replicas),
                    source.replica, source.end, base)
    except (ProtocolError, ValueError, KeyError, TypeError) as exc:
        raise JournalError(f"replica {name}, standing for epoch {epoch}: a bad answer: {exc}") from exc
    finally:
        for sock in asked:
            sock.close()


def _take_log(context: zmq.Context, name: str, epoch: int, endpoint: str, store: Store, replica: Replica,
              history: EpochHistory, end: int, curve: Curve | None, positions: Positions | None = None) -> None:
    """Fetch from ``endpoint`` (the most advanced log) everything up to ``end`` that this log lacks."""
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        curve.connect(sock)
    sock.connect(endpoint)
    try:
        while store.next_offset < end:
            sock.send(control.encode(control.Fetch(offset=store.next_offset, max_bytes=FETCH_BYTES, replica=name,
                                                   epoch=epoch)))
            if not sock.poll(int(PROMISE_TIMEOUT_S * 1000)):
                raise JournalError(f"the most advanced log, at {endpoint}, did not answer a fetch from "
                                   f"{store.next_offset}")
            frames = sock.recv_multipart()
            msg = control.decode(frames[0])
            if not isinstance(msg, control.Fetched) or msg.error or not msg.count:
                raise JournalError(f"the most advanced log, at {endpoint}, gave nothing from {store.next_offset}: "
                                   f"{getattr(msg, 'error', '') or type(msg).__name__}")
            _, why = append_entries(store, replica, history, msg.offsets, msg.times, frames[1:], True, positions)
            if why:
                raise JournalError(f"the most advanced log, at {endpoint}: {why}")
    finally:
        sock.close()


def fetch_range(context: zmq.Context, endpoint: str, name: str, epoch: int, start: int, end: int,
                curve: Curve | None = None) -> list[Entry]:
    """Another replica's entries from ``start`` to ``end`` (its copy of a sealed segment, to repair ours with),
    fetched from its reads port as a replica (``name``, who promised ``epoch``) does.

    Raises:
        JournalError: it did not answer, refused, or its entries do not reach ``end``.
    """
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        curve.connect(sock)
    sock.connect(endpoint)
    out: list[Entry] = []
    at = start
    try:
        while at < end:
            sock.send(control.encode(control.Fetch(offset=at, max_bytes=FETCH_BYTES, replica=name, epoch=epoch)))
            if not sock.poll(int(PROMISE_TIMEOUT_S * 1000)):
                raise JournalError(f"{endpoint} did not answer a fetch from {at}")
            frames = sock.recv_multipart()
            msg = control.decode(frames[0])
            if not isinstance(msg, control.Fetched) or msg.error or not msg.count or \
                    len(frames) != 1 + 3 * msg.count or len(msg.times) != msg.count:
                raise JournalError(f"{endpoint} gave nothing from {at}: "
                                   f"{getattr(msg, 'error', '') or getattr(msg, 'comment', '') or 'no entries'}")
            for i, offset in enumerate(msg.offsets):
                key, header, body = frames[1 + 3 * i:4 + 3 * i]
                if offset < at:
                    continue
                if offset >= end:
                    return out
                out.append(Entry(offset, msg.times[i], key, header, body, 0))
                at = offset + batch.parse_header(header).count
    except (ProtocolError, batch.BatchError) as exc:
        raise JournalError(f"{endpoint}: a bad answer: {exc}") from exc
    finally:
        sock.close()
    return out


def promise_answer(replica: Replica) -> dict[str, Any]:
    """What a promise answers: the replica's log."""
    return {"epoch": replica.promised, "last_epoch": replica.history.last_epoch, "end": replica.end,
            "history": replica.history.to_list()}


class Leading:
    """The leader's count of what its followers hold, and the acknowledgements waiting for it.

    Args:
        name: the leader's id.
        followers: the followers' ids.
        epoch: the epoch it leads.
        store: the journal.
        reads: its readers, served up to the commit end.
        acknowledge: sends acknowledgements (exchange -> (publisher, seq) pairs) naming the commit end.
        committed: what is known to be on a majority (None: everything the journal holds, for the first leader;
            an elected one knows nothing: the tail it took over is committed behind its first entry on a majority).
        on_commit: called with the commit end each time it moves.
        version: the queue document's version of the replica set (-1: not known).

    Raises:
        JournalError: its replica promised a newer epoch (it would be fenced), or ``replica.json`` does not read or
            cannot be written.
    """

    def __init__(self, name: str, followers: tuple[str, ...], epoch: int, store: Store, reads: ReadPort,
                 acknowledge: Callable[[Acks, int], None], committed: int | None = None,
                 on_commit: Callable[[int], None] | None = None, version: int = -1) -> None:
        end = store.end_offset
        self.directory = store.directory
        self.replica = load_replica(store.directory, name, store)
        try:
            self.replica.lead(epoch)
        except ValueError as exc:
            raise JournalError(str(exc)) from None
        save_replica(self.directory, self.replica)
        self.name = name
        self.epoch = epoch
        self.fenced = 0  # a newer epoch heard of: nothing more is acknowledged
        known = end if committed is None else committed
        self.quorum = Quorum(name, [name, *followers], epoch=epoch, base=end, committed=known)
        self.committed = known
        self.reads = reads
        self.acknowledge = acknowledge
        self.on_commit = on_commit
        self.pending: Waiting[Acks] = Waiting()
        self.version = version  # the queue document's version of the replica set counted (-1: not known)
        reads.epochs(epoch, self.replica.history.to_list())
        reads.members([name, *followers])
        reads.commit(known)
        store.keep_recent(RECENT_BYTES)

    def members(self, replicas: list[str], version: int) -> bool:
        """The replica set is ``replicas`` as of the queue document's ``version`` (one lost replaced by a learner):
        counted from here on, and named to each follower (a learner votes once it holds what a leader that counts it
        committed). A set of an older version than the one counted is ignored (a monitor that read an older
        document). True if the set counted changed.

        Raises:
            ValueError: this leader is not one of them.
        """
        if version < self.version or sorted(replicas) == sorted(self.quorum.ends):
            self.version = max(self.version, version)
            return False
        self.quorum.members(list(replicas))
        self.version = version
        self.reads.members(list(replicas))
        log.warning("journal %s, leading epoch %d, counts the replicas %s from now on: a round is acknowledged once "
                    "%d of them hold it", self.name, self.epoch, ", ".join(sorted(replicas)), self.quorum.needed)
        return True

    def written(self, end: int, acks: Acks, now: float) -> None:
        """The leader wrote (and with ``always`` synced) a round ending at ``end``."""
        self.replica.wrote(end)  # what its promise says, should a candidate ask
        if acks:
            self.pending.add(end, acks)
        self.held(self.name, end, now)

    def fetched(self, replica: str, end: int, epoch: int, now: float) -> None:
        """A follower's fetch: it holds the leader's log up to ``end`` and promised ``epoch``."""
        if epoch > self.epoch:
            self.fence(epoch, f"replica {replica} promised epoch {epoch}")
        elif epoch == self.epoch:
            self.held(replica, end, now)

    def promise(self, epoch: int) -> dict[str, Any]:
        """A candidate for ``epoch`` asks this replica too: it promises (fenced from then on), as a follower would.

        Raises:
            ConflictError: it promised that epoch or a newer one. UnavailableError: it is a learner.
        """
        answer = promise(self.directory, self.replica, epoch)
        self.fence(epoch, f"a candidate for epoch {epoch} asked")
        return answer

    def reached(self, now: float) -> int:
        """How many followers fetched in the last :data:`REACHED_S` (a follower in touch fetches at least every
        :data:`WAIT_MS`)."""
        return sum(1 for name, at in self.quorum.heard_at.items() if name != self.name and now - at < REACHED_S)

    def fence(self, epoch: int, why: str) -> None:
        if epoch <= self.fenced:
            return
        self.fenced = epoch
        log.error("journal %s no longer leads epoch %d (%s): it acknowledges nothing more", self.name, self.epoch, why)

    def held(self, replica: str, end: int, now: float) -> None:
        """``replica`` holds the leader's log up to ``end``: acknowledge what is on a majority now."""
        if self.fenced:
            return
        committed = self.quorum.held(replica, end, now)
        moved = committed > self.committed
        if moved:
            self.committed = committed
            self.reads.commit(committed)
        ready: Acks = {}
        for acks in self.pending.due(self.committed):  # (a round adding nothing may be due with no move)
            for source, pairs in acks.items():
                ready.setdefault(source, []).extend(pairs)
        if ready:
            self.acknowledge(ready, self.committed)
        if moved and self.on_commit is not None:
            self.on_commit(committed)


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
                 durable: Callable[[], bool], curve: Curve | None = None, learner: bool = False) -> None:
        self.endpoint = endpoint
        self.name = name
        self.replica = load_replica(store.directory, name, store, learner)  # JournalError: it does not read
        reads.epochs(self.replica.promised, self.replica.history.to_list())
        self.stale = 0  # answers of a leader of an older epoch than we promised, refused
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
        fetch = control.Fetch(offset=self.store.next_offset, max_bytes=FETCH_BYTES, wait_ms=WAIT_MS, replica=self.name,
                              epoch=self.replica.promised)
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
        try:
            history = EpochHistory.from_list(msg.history)
        except ValueError as exc:
            raise ProtocolError(str(exc)) from exc
        store, replica = self.store, self.replica
        promised = replica.promised
        verdict = replica.check(msg.epoch, store.next_offset, msg.offsets, history, msg.end_offset)
        if replica.promised != promised:
            save_replica(store.directory, replica)  # a leader of a newer epoch: promised to it
        if verdict.action == STALE:
            self.stale += 1
            if counted_log_due(self.stale):
                log.warning("replica %s refuses the entries of the leader of epoch %d at %s: it promised epoch %d "
                            "(%d answers refused)", self.name, msg.epoch, self.endpoint, verdict.epoch, self.stale)
            return
        if verdict.action == TRUNCATE:
            log.warning("replica %s cuts its log back from %d to %d: the leader of epoch %d does not have that tail",
                        self.name, store.end_offset, verdict.at, msg.epoch)
            store.truncate(verdict.at)
            replica.truncated(verdict.at)
            save_replica(store.directory, replica)
            return
        if verdict.action != ACCEPT:
            return  # (it lacks entries before these: it asks again from its end)
        epochs = len(replica.history.starts)
        taken, why = append_entries(store, replica, history, msg.offsets, msg.times, entries, self.durable(),
                                    self.reads.positions)
        self.appended += taken
        if why:
            self.diverged = why
            log.error("replica %s stops following %s: %s", self.name, self.endpoint, why)
        if len(replica.history.starts) != epochs:
            save_replica(store.directory, replica)
            self.reads.epochs(replica.promised, replica.history.to_list())
        if msg.committed >= 0:
            self.reads.commit(min(msg.committed, store.end_offset))
        elif taken:
            self.reads.written()
        if replica.learner and replica.admit(msg.members, msg.epoch, history, msg.committed):
            log.warning("replica %s holds what the leader of epoch %d committed (to offset %d): it is a learner no "
                        "more, and votes in elections from now on", self.name, msg.epoch, msg.committed)

    def promise(self, epoch: int) -> dict[str, Any]:
        """A candidate for ``epoch`` asks: promise it, kept on disk before the answer.

        Raises:
            ConflictError: this replica promised that epoch or a newer one. UnavailableError: it is a learner.
        """
        answer = promise(self.store.directory, self.replica, epoch)
        self.reads.epochs(self.replica.promised, self.replica.history.to_list())
        log.warning("replica %s promised epoch %d: it takes no entry of an older one from now on", self.name, epoch)
        return answer

    def close(self) -> None:
        self.socket.close()
