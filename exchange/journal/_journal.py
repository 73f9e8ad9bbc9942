"""The journal process of a durable queue: its exchanges' batches in, on disk, acknowledged.

One thread owns the intake (a ROUTER its exchanges' DEALERs send every batch they forward to) and the store,
and runs :meth:`Journal.serve`: a poll loop that reads what has come (a round, at most :data:`ROUND` batches),
appends it (:class:`~exchange.journal._intake.Intake`), writes it in one ``writev``, and then

* with ``always``, syncs (one ``fdatasync`` for the whole round: group commit) and acknowledges;
* with ``interval``, acknowledges at once, and syncs every ``sync_interval``.

An exchange acknowledges a publisher only with what the journal acknowledged, so acknowledged means
journaled. Every acknowledgement carries the journal's *incarnation* (new at each start): an exchange that sees
a new one sends again what the old one never acknowledged, and the journal drops what it has already.

It reports to the queue's monitor (``--monitor``) like an exchange: a heartbeat with its intake, its policy's
digest and its figures; the monitor answers with the queue's policy (:class:`~roq.wire.control.JournalPolicy`:
durability, sync interval, retention) when it holds another. Its host manager tells it on standard input
where the monitor moved (:class:`~roq.wire.control.Retarget`).

A write that fails (the disk is full) loses the round, acknowledges none of it and pauses the intake for
:data:`PAUSE_S`; the exchanges send it again. Nothing acknowledged is lost. A sync that fails (``always``) does
the same and cuts the log back to what is known on the disk (:meth:`Journal._distrust_unsynced`): a leader stops
leading first.

**A journal waits for its policy.** Its host manager starts it with the queue's journal *generation*
(:attr:`~roq.config.JournalConfig.generation`: how many times the queue's journal was started anew after its
host was lost, read from the queue's document once the GCM placed the journal). One that has a monitor reads
no intake until the monitor's first policy, which carries the highest offset the monitor heard of the queue's
journals (:attr:`~roq.wire.control.JournalPolicy.last`). A journal of an earlier generation than its config's
(a new one, or the files of a lost host that came back and was given the journal again) then begins at an
offset past any the queue's journals gave (the wall clock's seconds times 2**21, and past that highest
offset), so that offsets only grow; the files of an earlier generation are set aside
(:meth:`~exchange.journal._store.Store.begin_generation`). A journal of the queue's generation, started again
in place, goes on from its files.
"""

from __future__ import annotations

import collections
import logging
import os
import random
import sys
import time
import uuid
from typing import Any

import zmq

from exchange._admission import Admission
from exchange._control import MAX_CONTROL_BYTES, CommandPipe, MonitorLink
from exchange.journal._format import EPOCH_PUBLISHER, POSITION_PUBLISHER, epoch_entry, position_entry
from exchange.journal._intake import Intake
from exchange.journal._meter import Meter
from exchange.journal._readport import ReadPort
from exchange.journal._reads import Positions
from exchange.journal._replicas import Following, Leading, elect, fetch_range, load_replica, promise
from exchange.journal._replication import Replica
from exchange.journal._store import Store
from roq.wire import batch, control
from roq.wire.batch import BatchError
from roq.config import DURABILITIES, JournalConfig
from roq.security.curve import Curve
from roq.errors import JournalError, ProtocolError, Result, UnavailableError
from roq.wire.pipe import MAX_FRAME
from roq.wire.ready import JournalReady
from roq.runtime import DropCounter, SignalWakeup, counted_log_due, run_main
from roq.server import Dispatcher, Request
from roq.wire.control import Reply
from roq.loop import Loop
from roq.sockets import HandshakeWatch, bind, check_endpoint, send_frames
from roq.security.zap import CLUSTER, recv_from

log = logging.getLogger(__name__)

__all__ = ["Journal", "ROUND", "PAUSE_S", "REBASE_SHIFT"]

#: batches read before the round is written
ROUND = 1024
#: how long the intake rests after a write failed
PAUSE_S = 1.0
#: a journal of a new generation begins at the wall clock's seconds shifted by this (a journal gives
#: fewer than 2**21 offsets a second; 2**52 in 2106, within the integers a JSON reader keeps exactly)
REBASE_SHIFT = 21
#: with ``sync_log``, the file that says where what is on the disk ends
SYNC_LOG = "synced"
#: seconds between two looks at the gaps, and between two applications of the retention
GAP_CHECK_S, RETAIN_S = 0.1, 5.0


class Journal:
    """One journal process's sockets, store and loop.

    Args:
        config: the queue, the directory, the policy until the monitor says, what to bind.
        context: the ZeroMQ context (default: a new one, terminated by :meth:`close`).
        commands_fd: a pipe on which the host manager writes commands; None = no commands.
    """

    def __init__(self, config: JournalConfig, *, context: zmq.Context | None = None,
                 commands_fd: int | None = None) -> None:
        self.config = config
        self.id = config.journal_id or f"j-{uuid.uuid4().hex[:8]}"
        self.incarnation = random.getrandbits(63) | 1
        self._own_context = context is None
        self._ctx = context or zmq.Context()
        self.drops = DropCounter(log, f"journal {self.id}")
        self.curve = Curve.of(self._ctx, config.secret_key, config.keyring, self.drops)
        self.policy = control.JournalPolicy(config.durability, max(1, round(config.sync_interval * 1000)),
                                            config.retention_bytes, config.retention)
        self.told = False  # the policy came from the monitor
        self.store: Store | None = None
        self.intake: Intake | None = None
        self.reads: ReadPort | None = None
        self.leading: Leading | None = None  # with followers: acknowledged once on a majority of the replicas
        self.following: Following | None = None  # a follower replica of another journal
        self.admission = Admission() if self.curve is not None else None  # who may read: the monitor says
        self.meter = Meter()
        self.sock = self._ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, 2 * config.max_batch_bytes + batch.MAX_KEY + 4096)
        if self.curve is not None:
            self.curve.serve(self.sock)
        self.endpoint = ""
        self._watch: HandshakeWatch | None = None
        self.loop = Loop(f"journal {self.id}", self.drops)
        self._paused_until = 0.0
        self._next_sync = float("inf")
        self.replicated = config.replicas > 1  # a replica: it leads or follows as its monitor says
        self.standby: Replica | None = None  # a replica's promise and log, while it neither leads nor follows
        self.peers: dict[str, str] = {}  # the other replicas' reads endpoints, as the last order to lead named them
        self._scrubbed = -1  # the first offset of the sealed segment the scrub read last
        self.repairs = 0
        # a leader's durable subscribers' commits: (the end of their position entry, the request to answer, offset)
        self._commits: collections.deque[tuple[int, Request, int]] = collections.deque()
        orders = Dispatcher(f"journal {self.id} (monitor)", {control.JournalPolicy: self._on_policy,
                                                            control.JournalRole: self._on_role,
                                                            control.AclRules: self._on_permissions,
                                                            control.Reply: lambda msg, request: None},
                            self.drops, max_bytes=MAX_CONTROL_BYTES)
        self.monitor = MonitorLink(self._ctx, config.monitor, orders, self.curve) if config.monitor else None
        commands = Dispatcher(f"journal {self.id} (commands)", {control.Retarget: self._on_retarget}, self.drops,
                              max_bytes=MAX_FRAME)
        self._commands = CommandPipe(commands_fd, commands, self.drops) if commands_fd is not None else None

    @property
    def interval(self) -> bool:
        return self.policy.durability == "interval"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Open (recover) the journal, bind the intake, say hello to the monitor.

        Raises:
            JournalError: the directory or a file of it cannot be used.
            BrokerConnectionError: the address cannot be bound.
        """
        cfg = self.config
        if self.curve is not None:
            self.curve.start()  # before anyone can connect, and before an election asks the other replicas
        self.store, rec = Store.open(cfg.directory, cfg.queue, segment_bytes=cfg.segment_bytes)
        if cfg.sync_log:
            self.store.log_syncs(os.path.join(cfg.directory, SYNC_LOG))
        replica = bool(cfg.followers or cfg.follow or self.replicated)
        self.reads = ReadPort(self._ctx, self.store, cfg.directory, self.drops, self.curve, self.admission,
                              on_replica=self._on_replica if cfg.followers or self.replicated else None,
                              on_promise=self._on_promise if replica else None,
                              on_commit=self._on_position if self.replicated else None)
        self.intake = Intake(self.store, cfg.max_batch_bytes, on_seam=self.reads.reads.seam)
        if self.replicated:  # a standby until told: it serves no reader what no leader said is committed
            self.standby = load_replica(cfg.directory, self.id, self.store, cfg.learner)
            self.reads.epochs(self.standby.promised, self.standby.history.to_list())
            self.reads.commit(0)
        if cfg.peers:
            elect(self._ctx, self.id, cfg.epoch, dict(p.split("=", 1) for p in cfg.peers), self.store, self.curve)
        if cfg.followers:
            self.leading = Leading(self.id, cfg.followers, cfg.epoch, self.store, self.reads, self._acknowledge,
                                   committed=0 if cfg.peers else None)
        if cfg.peers:  # elected: the epoch's first entry commits the log taken over, once on a majority
            key, header, body = epoch_entry(cfg.epoch)
            self.store.append(key, header, body, EPOCH_PUBLISHER, 1, cfg.epoch, time.time_ns())
            self._commit()
        if cfg.follow:
            self.following = Following(self._ctx, cfg.follow, self.id, self.store, self.reads,
                                       lambda: not self.interval, self.curve)
        log.info("journal %s of queue %s in %s: %s", self.id, cfg.queue, cfg.directory, rec.describe())
        if self.monitor is not None:  # its monitor's first policy says where a new generation begins
            self._paused_until = float("inf")
        for note in rec.notes:
            log.warning("journal %s: %s", self.id, note)
        self.endpoint = bind(self.sock, cfg.address, cfg.intake_port)
        self.reads.bind(cfg.address, cfg.reads_port)
        self._watch = HandshakeWatch(self.sock, "intake", self.drops)
        log.info("journal %s: intake %s, reads %s, %s", self.id, self.endpoint, self.reads.endpoint,
                 _describe(self.policy))
        if self.curve is None:
            log.warning("journal %s: plaintext, no CURVE: anyone who reaches its intake may write to it", self.id)
        if self.monitor is not None:
            self.monitor.connect()
            self.monitor.send(self.heartbeat())
        if self.leading is not None:
            log.info("journal %s leads epoch %d of the replicas %s: a round is acknowledged once %d of the %d hold it",
                     self.id, cfg.epoch, ", ".join(cfg.followers), self.leading.quorum.needed, len(cfg.followers) + 1)
        if self.following is not None:
            log.info("journal %s follows %s as a replica (it takes no batch from exchanges)", self.id, cfg.follow)
            self.following.start(time.monotonic())
        if self.replicated:
            log.info("journal %s is one of the queue's %d replicas: a standby until its monitor says who leads",
                     self.id, cfg.replicas)

    def ready_info(self) -> JournalReady:
        """The ready line."""
        store = self.store
        return JournalReady(pid=os.getpid(), id=self.id, intake=self.endpoint, incarnation=self.incarnation,
                            reads=self.reads.endpoint if self.reads is not None else "",
                            next_offset=store.next_offset if store is not None else 0)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
        if self.curve is not None:
            self.curve.close()
        self.sock.close()
        if self.following is not None:
            self.following.close()
        if self.reads is not None:
            self.reads.close()
        if self.monitor is not None:
            self.monitor.close()
        if self.store is not None:
            try:
                self.store.close()
            except JournalError as exc:
                log.error("journal %s: %s", self.id, exc)
        if self._own_context:
            self._ctx.term()

    # ------------------------------------------------------------------ loop

    def serve(self, wakeup: SignalWakeup | None = None) -> None:
        """Run until a signal on ``wakeup``: the loop's table of registrations."""
        reads, loop = self.reads, self.loop
        assert reads is not None
        if wakeup is not None:
            loop.on_signal(wakeup, self._on_signal)
        if self.curve is not None:
            self.curve.attach(loop)
        if self._watch is not None:
            loop.add(self._watch.socket, self._watch.handle, "handshakes")
        loop.add(self.sock, lambda: self._round(time.monotonic()), "the intake")
        loop.add(reads.socket, lambda: reads.readable(time.monotonic()), "the reads port")
        if self.monitor is not None:
            loop.add(self.monitor.socket, self.monitor.readable, "the monitor")
        if self.following is not None:
            self._attach(self.following)
        loop.every(0.5, self._tick, "the fetch from the leader")
        if self._commands is not None:
            self._commands.attach(loop, self.config.heartbeat_interval)
        self._follow_pause(time.monotonic())
        loop.deadline(self._pause_ends, self._follow_pause, "the end of a pause")
        loop.after_turn(self._follow_pause, "pausing")
        self._next_sync = time.monotonic() + self.policy.sync_interval_ms / 1000 if self.interval else float("inf")
        loop.deadline(lambda: self._next_sync, self._on_sync_due, "the sync")
        loop.every(GAP_CHECK_S, self._expire, "the gaps")
        loop.every(RETAIN_S, lambda now: self._retain(), "the retention", first=0.0)
        if self.config.scrub_interval:
            loop.every(self.config.scrub_interval, self._scrub, "the scrub")
        loop.every(self.config.heartbeat_interval, self._beat, "the heartbeat")
        loop.run()
        self._sync()
        log.info("journal %s stopped: %s", self.id, self.describe())

    def _on_signal(self) -> None:
        log.info("journal %s: stopping (signal)", self.id)
        self.loop.stop()

    def _pause_ends(self) -> float:
        """When a pause of the intake ends, for the loop to wake then (inf: no pause under way). A pause that ended
        is not waited for: a replica that follows never reads its intake, and its loop woke at once on every turn
        for an end long past (a quarter of a core, each follower, with nothing to do). The deadline only wakes the
        loop: the after-turn step (:meth:`_follow_pause`) reads the intake again once the pause ended."""
        until = self._paused_until
        return until if until > time.monotonic() else float("inf")

    def _follow_pause(self, now: float) -> None:
        """The intake is read exactly while not paused; the reads port too, or before the first policy."""
        paused = now < self._paused_until
        reads = self.reads
        assert reads is not None
        writer = self.leading is not None if self.replicated else self.following is None
        self.loop.want(self.sock, zmq.POLLIN if writer and not paused else 0)
        self.loop.want(reads.socket, 0 if paused and not self.told else zmq.POLLIN)

    def _on_sync_due(self, now: float) -> None:
        self._next_sync = now + self.policy.sync_interval_ms / 1000 if self.interval else float("inf")
        self._sync()

    def _expire(self, now: float) -> None:
        assert self.intake is not None and self.reads is not None
        if self.intake.expire(now, time.time_ns()):
            self._commit()
        self.reads.expire(now)

    def _beat(self, now: float) -> None:
        if self.monitor is not None:
            self.monitor.send(self.heartbeat())

    def _round(self, now: float) -> None:
        """Read what has come, append it, write it, sync it (``always``) and acknowledge it."""
        intake = self.intake
        assert intake is not None
        recv = self.sock.recv_multipart
        curve = self.curve is not None
        time_ns = time.time_ns()
        for _ in range(ROUND):
            try:
                if curve:
                    frames, principal = recv_from(self.sock, zmq.NOBLOCK)
                    if principal != CLUSTER:
                        self.drops.drop("refused: not a cluster process", f"{principal} sent to the intake")
                        continue
                else:
                    frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) != 4:
                self.drops.drop("wrong frame count", f"{len(frames)} frames, expected 3 after the identity")
                continue
            try:
                intake.take(frames[0], frames[1], frames[2], frames[3], now, time_ns)
            except BatchError as exc:
                self.drops.drop(exc.reason, str(exc))
        self._commit()

    def _commit(self) -> None:
        """Write the round (and sync it, unless ``interval``), then acknowledge it."""
        store, intake = self.store, self.intake
        assert store is not None and intake is not None
        try:
            store.write()
            if self.leading is not None and self.reads is not None:
                self.reads.written()  # the followers take the round now, and sync it while we do
            if not self.interval:
                self._sync(raising=True)
        except JournalError as exc:
            self._paused_until = time.monotonic() + PAUSE_S
            intake.acks()  # nothing of the round is acknowledged
            if store.sync_failed:  # (also the sync of a segment sealed as it rolled)
                self._distrust_unsynced()
            failures = self.meter.failed(str(exc))
            if counted_log_due(failures):
                log.error("journal %s: %s; nothing of the last round is acknowledged, the exchanges send it again "
                          "(intake paused for %.1fs; %d failures in all)", self.id, exc, PAUSE_S, failures)
            return
        if self.leading is not None:  # acknowledged once a majority of the replicas hold it
            self.leading.written(store.end_offset, intake.acks(), time.monotonic())
        else:
            self._acknowledge(intake.acks(), store.next_offset)
        if self.reads is not None:
            self.reads.written()  # readers waiting at the end (after the acknowledgements: publishers wait on them)

    def _distrust_unsynced(self) -> None:
        """A sync failed: what was written since the last good one is cut away (a later sync could succeed without
        it, the kernel having marked its pages clean, and the exchanges' resends would then be taken for records
        the journal holds). A leader stands down first: its followers may have taken the round, and it must not
        give those offsets to other records; the monitor elects another, and this replica follows it."""
        store = self.store
        assert store is not None
        if self.leading is not None:
            log.error("journal %s: a sync failed; it stops leading epoch %d (what it wrote since its last good sync "
                      "is cut away)", self.id, self.leading.epoch)
            self._step_down()
        try:
            store.cut_to_synced()
        except JournalError as exc:  # what it cannot cut it must not take for held: it takes no batch any more
            self._paused_until = float("inf")
            log.error("journal %s: %s; it takes no batch until it is started again", self.id, exc)
            return
        if self.standby is not None:
            self.standby.truncated(store.next_offset)

    def _acknowledge(self, acks: dict[bytes, list[tuple[bytes, int]]], end: int) -> None:
        """Tell each exchange its publishers' highest seqs journaled, and the journal's end ``end``."""
        sock = self.sock
        most = batch.MAX_JOURNAL_ACKS
        for source, pairs in acks.items():
            for i in range(0, len(pairs), most):
                try:
                    send_frames(sock, [source, batch.encode_journal_ack(self.incarnation, pairs[i:i + most], end)],
                                zmq.NOBLOCK)
                except zmq.ZMQError:  # the exchange is gone or its pipe full: it sends again, and is answered
                    pass

    def _on_replica(self, replica: str, offset: int, epoch: int, now: float) -> None:
        if self.leading is not None:
            self.leading.fetched(replica, offset, epoch, now)

    def _on_promise(self, epoch: int) -> dict[str, Any]:
        if self.following is not None:
            return self.following.promise(epoch)
        if self.leading is not None:
            return self.leading.promise(epoch)
        assert self.standby is not None and self.store is not None
        return promise(self.store.directory, self.standby, epoch)

    # ------------------------------------------------------------------ a replica's role, as its monitor says

    def _attach(self, following: Following) -> None:
        self.loop.add(following.socket, lambda: following.readable(time.monotonic()), "the leader")

    def _tick(self, now: float) -> None:
        if self.following is not None:
            self.following.tick(now)

    def _replica(self) -> Replica | None:
        """This replica's promise and log, whatever its role."""
        role = self.leading or self.following
        return role.replica if role is not None else self.standby

    def _on_role(self, msg: control.JournalRole, _request: Request) -> None:
        """The monitor says what this replica is to be: follow a leader, or stand for an epoch and lead it."""
        if not self.replicated:
            raise ProtocolError("this journal is not a replica of a replicated journal")
        if msg.role == control.FOLLOWER:
            check_endpoint(msg.leader)
            leading = self.leading
            if self.following is not None and self.following.endpoint == msg.leader:
                return
            if leading is not None and not leading.fenced and leading.epoch >= msg.epoch:
                return  # an order older than our own epoch
            self._step_down()
            store, reads, standby = self.store, self.reads, self.standby
            assert store is not None and reads is not None and standby is not None
            following = Following(self._ctx, msg.leader, self.id, store, reads, lambda: not self.interval, self.curve,
                                  learner=standby.learner)
            self.following = following
            self._attach(following)
            following.start(time.monotonic())
            log.info("replica %s follows the leader of epoch %d at %s", self.id, msg.epoch, msg.leader)
        elif msg.role == control.LEADER:
            leading = self.leading
            if leading is not None and leading.epoch == msg.epoch:
                if msg.replicas:
                    try:  # the replica set changed (one lost, replaced by a learner): counted from now on
                        leading.members(msg.replicas, msg.version)
                    except ValueError as exc:
                        raise ProtocolError(str(exc)) from None
                self._beat(time.monotonic())
                return
            replica = self._replica()
            if replica is not None and (msg.epoch <= replica.promised or replica.learner):
                log.warning("replica %s does not stand for epoch %d: %s", self.id, msg.epoch,
                            replica.refusal(msg.epoch))  # a late order, or a learner's (it holds not all yet)
                return
            self._lead(msg)
        else:
            raise ProtocolError(f"role {msg.role!r}: a replica is told {control.LEADER!r} or {control.FOLLOWER!r}")
        self._beat(time.monotonic())

    def _on_position(self, name: str, offset: int, request: Request) -> Reply | None:
        """A durable subscriber commits its position: a leader keeps it in its log, for its replicas to keep too,
        and answers once that is on a majority."""
        leading, store, reads = self.leading, self.store, self.reads
        assert store is not None and reads is not None
        if leading is None or leading.fenced:
            raise UnavailableError(f"replica {self.id} does not lead the queue's journal: commit at the leader")
        reads.positions.check(name, offset)  # ProtocolError: answered BAD_REQUEST
        now_ns = time.time_ns()
        key, header, body = position_entry(name, offset, now_ns)
        store.append(key, header, body, POSITION_PUBLISHER, 1, now_ns, now_ns)
        try:
            reads.positions.commit(name, offset)
        except JournalError as exc:
            raise UnavailableError(str(exc)) from exc
        self._commits.append((store.next_offset, request, offset))
        self._commit()
        return None

    def _answer_commits(self, committed: int) -> None:
        commits = self._commits
        while commits and commits[0][0] <= committed:
            _, request, offset = commits.popleft()
            request.answer(Reply(request=control.Commit.CMD, comment="committed", data={"offset": offset}))

    def _scrub(self, now: float) -> None:
        """Read the next sealed segment whole (one per ``scrub_interval``, in turn); one that does not check is
        rewritten from another replica's copy (a replicated journal's), else reported."""
        store = self.store
        if store is None:
            return
        sealed = store.sealed()
        if not sealed:
            return
        base, end = next(((b, e) for b, e in sealed if b > self._scrubbed), sealed[0])
        self._scrubbed = base
        problem = store.check_segment(base, end)
        if not problem:
            return
        log.error("journal %s: %s", self.id, problem)
        self._repair(base, end)

    def _repair(self, base: int, end: int) -> None:
        """Rewrite the sealed segment at ``base`` from a good copy: the leader's (a follower's), a peer's (a
        leader's)."""
        store, replica = self.store, self._replica()
        assert store is not None
        sources = [self.following.endpoint] if self.following is not None else list(self.peers.values())
        if replica is None or not sources:
            log.error("journal %s: the segment at offset %d is damaged and no other replica is known to copy it "
                      "from: its reads stop there with an error (roq journal verify)", self.id, base)
            return
        for source in sources:
            try:
                entries = fetch_range(self._ctx, source, self.id, replica.promised, base, end, self.curve)
                store.repair(base, entries)
            except JournalError as exc:
                log.error("journal %s: the segment at offset %d not repaired from %s: %s", self.id, base, source, exc)
                continue
            self.repairs += 1
            log.warning("journal %s: the segment at offset %d..%d repaired from the copy at %s (%d entries)", self.id,
                        base, end, source, len(entries))
            return

    def _step_down(self) -> None:
        """Neither lead nor follow any more: a standby (what a leader held unacknowledged, its exchanges send to
        the next)."""
        store = self.store
        assert store is not None
        was = self._replica()
        if self.following is not None:
            self.loop.remove(self.following.socket)
            self.following.close()
            self.following = None
        self.leading = None
        self.standby = load_replica(store.directory, self.id, store, was is not None and was.learner)
        while self._commits:
            self._commits.popleft()[1].answer(Reply(request=control.Commit.CMD, result=Result.UNAVAILABLE,
                                                    comment=f"replica {self.id} no longer leads: commit again at the "
                                                            "leader"))

    def _lead(self, msg: control.JournalRole) -> None:
        """Stand for the epoch among the peers; won, lead it from its first entry."""
        store, reads = self.store, self.reads
        assert store is not None and reads is not None
        self._step_down()
        self.peers = {n: e for n, e in msg.peers.items() if n != self.id}
        started = time.monotonic()
        try:
            elect(self._ctx, self.id, msg.epoch, {n: check_endpoint(e) for n, e in msg.peers.items() if n != self.id},
                  store, self.curve, reads.positions, members=msg.replicas or None)
            followers = tuple(n for n in msg.replicas if n != self.id)
            self.leading = Leading(self.id, followers, msg.epoch, store, reads, self._acknowledge, committed=0,
                                   on_commit=self._answer_commits, version=msg.version)
        except JournalError as exc:
            log.error("replica %s: %s", self.id, exc)
            self.standby = load_replica(store.directory, self.id, store)
            return
        self.standby = None
        key, header, body = epoch_entry(msg.epoch)
        store.append(key, header, body, EPOCH_PUBLISHER, 1, msg.epoch, time.time_ns())
        self._commit()
        log.warning("replica %s leads epoch %d (elected in %.0f ms): it takes the exchanges' batches", self.id,
                    msg.epoch, (time.monotonic() - started) * 1000)

    def _sync(self, raising: bool = False) -> None:
        store = self.store
        if store is None or store.synced:
            return
        started = time.perf_counter()
        try:
            store.sync()
        except JournalError as exc:
            if raising:
                raise
            self.meter.failed(str(exc))
            log.error("journal %s: %s", self.id, exc)
            return
        self.meter.synced(time.perf_counter() - started)

    def _retain(self) -> None:
        policy, store = self.policy, self.store
        if store is None or not (policy.retention_bytes or policy.retention_s):
            return
        removed = store.retain(time.time_ns(), policy.retention_bytes, int(policy.retention_s * 1e9))
        if removed:
            log.info("journal %s: retention removed %d segment(s); the oldest offset kept is %d", self.id, removed,
                     store.first_offset)

    def describe(self) -> str:
        """What the journal did, for its last log line."""
        store, intake = self.store, self.intake
        if store is None or intake is None:
            return "not started"
        return (f"{intake.records} records in {intake.batches} batches journaled, {intake.duplicates} duplicate "
                f"batches, {intake.skipped} records skipped past gaps, offsets {store.first_offset}.."
                f"{store.next_offset}, {store.size_bytes} bytes in {len(store.segments)} segments, "
                f"{self.meter.describe()}, {self.drops.total} inputs dropped")

    def _begin(self, msg: control.JournalPolicy) -> bool:
        """The first policy: a journal of an earlier generation than its config's (new, or the files of a lost host
        that came back) begins anew past every offset the queue's journals gave; False if it could not."""
        store, reads = self.store, self.reads
        generation = self.config.generation
        if store is None or reads is None or generation <= store.generation:
            return True
        base = max(int(time.time()) << REBASE_SHIFT, msg.last + 1)
        was = store.generation
        try:
            moved = store.begin_generation(generation, base)
        except JournalError as exc:
            log.error("journal %s: %s", self.id, exc)
            return False
        if moved:
            reads.positions = Positions(store.directory)
            log.warning("journal %s: these files are of the queue's journal before it was started anew (generation "
                        "%d of %d): set aside in %s, with the durable subscribers' positions", self.id, was, generation,
                        moved)
        log.warning("journal %s is the queue's journal of generation %d (started anew after its host was lost): it "
                    "begins at offset %d, past every offset the lost one gave (the highest heard: %d); the records "
                    "that one held stay on its host's disk", self.id, generation, base, msg.last)
        return True

    def heartbeat(self) -> control.JournalHeartbeat:
        """What the journal tells its monitor every heartbeat."""
        store, intake = self.store, self.intake
        syncs, sync_ms, sync_max_ms, error = self.meter.period()
        figures: dict[str, Any] = {}
        if store is not None and intake is not None:
            figures = dict(first_offset=store.first_offset, next_offset=store.next_offset,
                           size_bytes=store.size_bytes, segments=len(store.segments),
                           unsynced_bytes=store.unsynced_bytes, records=intake.records,
                           duplicates=intake.duplicates, skipped=intake.skipped)
        replica = self._replica()
        if replica is not None:
            leading, following = self.leading, self.following
            role = (control.FENCED if leading is not None and leading.fenced else control.LEADER if leading is not None
                    else control.FOLLOWER if following is not None else control.STANDBY)
            figures.update(replica=self.id, role=role, epoch=replica.promised, last_epoch=replica.history.last_epoch,
                           end=replica.end, leader=following.endpoint if following is not None else "",
                           committed=leading.committed if leading is not None else 0,
                           followers=dict(leading.quorum.ends) if leading is not None else {},
                           reached=leading.reached(time.monotonic()) if leading is not None else 0,
                           repairs=self.repairs, learner=replica.learner)
        reads, admission = self.reads, self.admission
        return control.JournalHeartbeat(journal=self.id, intake=self.endpoint, pid=os.getpid(),
                                        incarnation=self.incarnation,
                                        policy=self.policy.digest() if self.told else "",
                                        reads=reads.endpoint if reads is not None else "",
                                        permissions=admission.digest if admission is not None else "-",
                                        syncs=syncs, sync_ms=sync_ms, sync_max_ms=sync_max_ms,
                                        write_failures=self.meter.write_failures, error=error[:500], **figures)

    # ------------------------------------------------------------------ the monitor and the host manager

    def _on_policy(self, msg: control.JournalPolicy, _request: Request) -> None:
        """The queue's policy, from the monitor: in force from the next round."""
        if msg.durability not in DURABILITIES[1:]:
            raise ProtocolError(f"durability {msg.durability!r}: a journal is 'interval' or 'always'")
        if not 1 <= msg.sync_interval_ms <= 3_600_000 or msg.retention_bytes < 0 or msg.retention_s < 0:
            raise ProtocolError(f"policy out of range: {msg}")
        if self._paused_until == float("inf"):
            if not self._begin(msg):
                return  # told again with the next heartbeat
            self._paused_until = 0.0
        was, self.told = self.policy, True
        if msg == was:
            return
        self.policy = msg
        if self.interval:
            self._next_sync = min(self._next_sync, time.monotonic() + msg.sync_interval_ms / 1000)
        else:
            self._sync()  # what was acknowledged under "interval" is on disk before "always" acknowledges more
        log.info("journal %s: %s (was %s)", self.id, _describe(msg), _describe(was))
        self._retain()

    def _on_permissions(self, msg: control.AclRules, _request: Request) -> None:
        """The cluster's permissions, from the monitor: who may read from now on."""
        if self.admission is not None and self.admission.adopt(msg):  # ConfigError: a rule that does not read
            log.info("journal %s: permissions %s", self.id, self.admission.digest)

    def _on_retarget(self, msg: control.Retarget, _request: Request) -> None:
        """The queue's monitor moved to another host: report there from now on."""
        monitor = check_endpoint(msg.monitor)
        if self.monitor is not None and self.monitor.retarget(monitor):
            log.info("journal %s: the queue's monitor moved to %s", self.id, monitor)
            self.monitor.send(self.heartbeat())


def _describe(policy: control.JournalPolicy) -> str:
    sync = ("acknowledged once synced" if policy.durability == "always"
            else f"acknowledged once written, synced every {policy.sync_interval_ms} ms")
    keep = [f"{policy.retention_bytes} bytes" if policy.retention_bytes else "",
            f"{policy.retention_s:g} s" if policy.retention_s else ""]
    kept = " and ".join(k for k in keep if k) or "everything"
    return f"durability {policy.durability} ({sync}), keeps {kept}"


DESCRIPTION = (
    "Run the journal of one durable RoQ queue: its exchanges send it every batch they forward, it appends them "
    "to segment files in --directory (each publisher's records once, in order), and acknowledges them once "
    "they are on disk (--durability always: one fdatasync covers every batch waiting) or written "
    "(--durability interval: synced every --sync-interval seconds). Recovery at start cuts a torn tail off the "
    "last segment and keeps the bytes cut beside it. With --monitor it reports to the queue's monitor and takes "
    "the queue's policy from it. SIGTERM syncs and stops it. It prints one line 'READY {json}' with its "
    "intake's endpoint when bound."
)


def make_journal(config: JournalConfig) -> Journal:
    return Journal(config, commands_fd=sys.stdin.fileno() if config.commands else None)


def main(argv: list[str] | None = None) -> int:
    return run_main("journal", JournalConfig, make_journal, argv, description=DESCRIPTION, module="exchange.journal")
