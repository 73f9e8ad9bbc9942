"""The journal process of a durable queue: its exchanges' batches in, on disk, acknowledged.

One thread owns the intake (a ROUTER its exchanges' DEALERs send every batch they forward to) and the store,
and runs :meth:`Journal.serve`: a poll loop that reads what has come (a round, at most :data:`ROUND` batches),
appends it (:class:`~exchange.journal._intake.Intake`), writes it in one ``writev``, and then

* with ``always``, syncs (one ``fdatasync`` for the whole round: group commit) and acknowledges;
* with ``interval``, acknowledges at once, and syncs every ``sync_interval``.

An exchange acknowledges a publisher only with what the journal acknowledged it, so acknowledged means
journaled. Every acknowledgement carries the journal's *incarnation* (new at each start): an exchange that sees
a new one sends again what the old one never acknowledged, and the journal drops what it has already.

A write that fails (the disk is full) loses the round, acknowledges none of it and pauses the intake for
:data:`PAUSE_S`; the exchanges send it again. Nothing acknowledged is lost.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from typing import Any

import zmq

from exchange.journal._intake import Intake
from exchange.journal._store import Store
from roq import batch
from roq.batch import BatchError
from roq.config import JournalConfig
from roq.curve import Curve
from roq.errors import JournalError
from roq.runtime import DropCounter, SignalWakeup
from roq.sockets import HandshakeWatch, bind, poll_ms
from roq.zap import CLUSTER, recv_from

log = logging.getLogger(__name__)

__all__ = ["Journal", "ROUND", "PAUSE_S"]

#: batches read before the round is written
ROUND = 1024
#: how long the intake rests after a write failed
PAUSE_S = 1.0
#: seconds between two looks at the gaps, and between two applications of the retention
GAP_CHECK_S, RETAIN_S = 0.1, 5.0


class Journal:
    """One journal process's sockets, store and loop.

    Args:
        config: the queue, the directory, the policy, what to bind.
        context: the ZeroMQ context (default: a new one, terminated by :meth:`close`).
    """

    def __init__(self, config: JournalConfig, *, context: zmq.Context | None = None) -> None:
        self.config = config
        self.id = config.journal_id or f"j-{uuid.uuid4().hex[:8]}"
        self.incarnation = random.getrandbits(63) | 1
        self._own_context = context is None
        self._ctx = context or zmq.Context()
        self.drops = DropCounter(log, f"journal {self.id}")
        self.curve = Curve.of(self._ctx, config.secret_key, config.keyring, self.drops)
        self.store: Store | None = None
        self.intake: Intake | None = None
        self.sock = self._ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.sock.setsockopt(zmq.MAXMSGSIZE, 2 * config.max_batch_bytes + batch.MAX_KEY + 4096)
        if self.curve is not None:
            self.curve.serve(self.sock)
        self._recv = self.sock.recv_multipart
        self.endpoint = ""
        self._watch: HandshakeWatch | None = None
        self._stopping = False
        self._paused_until = 0.0
        self.syncs = 0
        self.sync_seconds = 0.0  # time spent in fdatasync, in all
        self.sync_max = 0.0
        self.write_failures = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Open (recover) the journal and bind the intake.

        Raises:
            JournalError: the directory or a file of it cannot be used.
            BrokerConnectionError: the address cannot be bound.
        """
        cfg = self.config
        self.store, rec = Store.open(cfg.directory, cfg.queue, segment_bytes=cfg.segment_bytes)
        self.intake = Intake(self.store, cfg.max_batch_bytes)
        log.info("journal %s of queue %s in %s: %s", self.id, cfg.queue, cfg.directory, rec.describe())
        for note in rec.notes:
            log.warning("journal %s: %s", self.id, note)
        if self.curve is not None:
            self.curve.start()
        self.endpoint = bind(self.sock, cfg.address, cfg.intake_port)
        self._watch = HandshakeWatch(self.sock, "intake", self.drops)
        log.info("journal %s: intake %s, durability %s%s", self.id, self.endpoint, cfg.durability,
                 f" (synced every {cfg.sync_interval * 1000:g} ms)" if cfg.durability == "interval" else "")
        if self.curve is None:
            log.warning("journal %s: plaintext, no CURVE: anyone who reaches its intake may write to it", self.id)

    def ready_info(self) -> dict[str, Any]:
        """The ready line's fields."""
        store = self.store
        return {"id": self.id, "intake": self.endpoint, "incarnation": self.incarnation,
                "next_offset": store.next_offset if store is not None else 0}

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
        if self.curve is not None:
            self.curve.close()
        self.sock.close()
        if self.store is not None:
            try:
                self.store.close()
            except JournalError as exc:
                log.error("journal %s: %s", self.id, exc)
        if self._own_context:
            self._ctx.term()

    # ------------------------------------------------------------------ loop

    def serve(self, wakeup: SignalWakeup | None = None) -> None:
        """Run until a signal on ``wakeup``."""
        cfg = self.config
        store, intake = self.store, self.intake
        assert store is not None and intake is not None
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        if self._watch is not None:
            poller.register(self._watch.socket, zmq.POLLIN)
        if wakeup is not None:
            poller.register(wakeup.fd, zmq.POLLIN)
        if self.curve is not None:
            for sock in self.curve.sockets:
                poller.register(sock, zmq.POLLIN)
        interval = cfg.durability == "interval"
        now = time.monotonic()
        next_sync = now + cfg.sync_interval if interval else float("inf")
        next_gaps, next_retain = now + GAP_CHECK_S, now
        paused = False
        while not self._stopping:
            timeout = min(next_sync, next_gaps, next_retain, self._paused_until if paused else float("inf"))
            events = dict(poller.poll(poll_ms(max(0.0, timeout - time.monotonic()))))
            if self.curve is not None:
                self.curve.tend(events)
            if self._watch is not None and self._watch.socket in events:
                self._watch.handle()
            if wakeup is not None and wakeup.fd in events and wakeup.consume():
                log.info("journal %s: stopping (signal)", self.id)
                self._stopping = True
            now = time.monotonic()
            if not paused and self.sock in events:
                self._round(now, interval)
            if now >= next_gaps:
                next_gaps = now + GAP_CHECK_S
                if intake.expire(now, time.time_ns()):
                    self._commit(interval)
            if interval and now >= next_sync:
                next_sync = now + cfg.sync_interval
                self._sync()
            if now >= next_retain:
                next_retain = now + RETAIN_S
                self._retain()
            if paused != (now < self._paused_until):
                paused = not paused
                poller.modify(self.sock, 0 if paused else zmq.POLLIN)
        self._sync()
        log.info("journal %s stopped: %s", self.id, self.describe())

    def _round(self, now: float, interval: bool) -> None:
        """Read what has come, append it, write it, sync it (``always``) and acknowledge it."""
        intake = self.intake
        assert intake is not None
        recv = self._recv
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
        self._commit(interval)

    def _commit(self, interval: bool) -> None:
        """Write the round (and sync it, unless ``interval``), then acknowledge it."""
        store, intake = self.store, self.intake
        assert store is not None and intake is not None
        try:
            store.write()
            if not interval:
                self._sync(raising=True)
        except JournalError as exc:
            self.write_failures += 1
            self._paused_until = time.monotonic() + PAUSE_S
            intake.acks()  # nothing of the round is acknowledged
            if self.write_failures <= 10 or self.write_failures % 100 == 0:
                log.error("journal %s: %s; nothing of the last round is acknowledged, the exchanges send it again "
                          "(intake paused for %.1fs; %d failures in all)", self.id, exc, PAUSE_S,
                          self.write_failures)
            return
        send = self.sock.send_multipart
        for source, pairs in intake.acks().items():
            for i in range(0, len(pairs), batch.MAX_JOURNAL_ACKS):
                try:
                    send([source, batch.encode_journal_ack(self.incarnation, pairs[i:i + batch.MAX_JOURNAL_ACKS])],
                         zmq.NOBLOCK)
                except zmq.ZMQError:  # the exchange is gone or its pipe full: it asks again
                    pass

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
            log.error("journal %s: %s", self.id, exc)
            return
        took = time.perf_counter() - started
        self.syncs += 1
        self.sync_seconds += took
        self.sync_max = max(self.sync_max, took)

    def _retain(self) -> None:
        cfg = self.config
        store = self.store
        if store is None or not (cfg.retention_bytes or cfg.retention):
            return
        removed = store.retain(time.time_ns(), cfg.retention_bytes, int(cfg.retention * 1e9))
        if removed:
            log.info("journal %s: retention removed %d segment(s); the oldest offset kept is %d", self.id, removed,
                     store.first_offset)

    def describe(self) -> str:
        store, intake = self.store, self.intake
        if store is None or intake is None:
            return "not started"
        mean = self.sync_seconds / self.syncs * 1000 if self.syncs else 0.0
        return (f"{intake.records} records in {intake.batches} batches journaled, {intake.duplicates} duplicate "
                f"batches, {intake.skipped} records skipped past gaps, offsets {store.first_offset}.."
                f"{store.next_offset}, {store.size_bytes} bytes in {len(store.segments)} segments, {self.syncs} "
                f"syncs (mean {mean:.2f} ms, max {self.sync_max * 1000:.2f} ms), {self.write_failures} failed "
                f"writes, {self.drops.total} inputs dropped")
