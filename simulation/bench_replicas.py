"""(q) A replicated journal (a leader and two followers: ``replicas = 3``) beside a single one (``replicas = 1``), in
the same run: real journal processes on loopback, each in its own directory of this machine's one disk,
``durability = always``, fed the way exchanges feed them (batches on the intake, acknowledgements back).

* **acknowledged records/s**: :data:`PUBLISHERS` publishers, each with :data:`IN_FLIGHT` batches of
  :data:`RECORDS_PER_BATCH` records unacknowledged at most, for :data:`SECONDS` s; records of 100 B and of 1 KiB;
* **acknowledgement latency**: one record at a time, :data:`PACED_RATE` a second, from its send to its
  acknowledgement (p50, p99);
* **replay**: once every follower holds what the leader committed (how long that took after the load is shown),
  a reader fetching the journal's first :data:`REPLAY_RECORDS` records, records/s.

The targets (issue: ``replicas = 3`` at 60% or more of one replica's acknowledged records/s, Kafka's published
ratio being 51%; its p99 no more than 2 ms above; its replay no slower) are checked by ``--check``. Every replica
shares this machine's two cores and its disk: three ``fdatasync`` per round where a cluster would have three disks.

The baseline, in the same run: NATS JetStream on a cluster of three servers on loopback (:mod:`simulation.bench_nats`),
a file stream of one replica and one of three (a Raft group over the servers), the same measures driven the way
nats-py's users drive them (``publish_async`` within its window of 4,000 pending for the rate, each paced record's
acknowledgement timed by its future, an ordered consumer from the stream's start for the replay); once with
JetStream's default sync (acknowledged once a majority has it, synced every 2 minutes) and once with
``sync_interval: always`` (synced on each before it acknowledges: ``always``'s guarantee).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from typing import Any, Callable

import zmq

from roq.process import Child, spawn
from roq.wire import batch, control
from roq.wire.ready import JournalReady
from simulation import bench_nats
from simulation.bench_common import Check, Result, percentiles

__all__ = ["run", "render", "checks"]

PUBLISHERS = 4
IN_FLIGHT = 64
RECORDS_PER_BATCH = 64
SECONDS = 4.0
PACED_RATE = 500
PACED_SECONDS = 3.0
QUEUE = "bench-replicas"
#: records a replay reads (the same in every run: a journal acknowledges more in one than in another)
REPLAY_RECORDS = 150_000


def _journals(directory: str, replicas: int, children: list[Child]) -> tuple[str, str, list[str]]:
    """Start a leader and ``replicas - 1`` followers; the leader's intake and reads endpoints, the followers' reads
    endpoints."""
    followers = [f"f{i}" for i in range(1, replicas)]
    common = ["--queue", QUEUE, "--address", "127.0.0.1", "--durability", "always", "--log-level", "WARNING"]
    leader = spawn("journal", "exchange.journal", [*common, "--directory", os.path.join(directory, "lead"), "--id",
                                                   "lead", *[a for f in followers for a in ("--followers", f)]])
    children.append(leader)
    info = leader.wait_ready(30)
    assert isinstance(info, JournalReady), info
    reads = []
    for f in followers:
        child = spawn("journal", "exchange.journal", [*common, "--directory", os.path.join(directory, f), "--id", f,
                                                      "--follow", info.reads])
        children.append(child)
        ready = child.wait_ready(30)
        assert isinstance(ready, JournalReady), ready
        reads.append(ready.reads)
    return info.intake, info.reads, reads


class _Feeder:
    """Publishers' batches into an intake, acknowledgements out (what exchanges do)."""

    def __init__(self, ctx: zmq.Context, intake: str, size: int, publishers: int) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(intake)
        self.publishers = [os.urandom(16) for _ in range(publishers)]
        self.next = {p: 1 for p in self.publishers}
        self.acked = {p: 0 for p in self.publishers}
        self.payload = os.urandom(size)

    def send(self, publisher: bytes, count: int) -> int:
        first = self.next[publisher]
        header = batch.pack_header(batch.DATA, publisher, first, count, timestamp_ns=time.time_ns())
        self.sock.send_multipart([b"bench", header, batch.encode_body([self.payload] * count)])
        self.next[publisher] = first + count
        return first + count - 1

    def read(self, wait_ms: int) -> None:
        while self.sock.poll(wait_ms):
            wait_ms = 0
            _incarnation, _end, pairs = batch.decode_journal_ack(self.sock.recv())
            for publisher, seq in pairs:
                if seq > self.acked.get(publisher, seq):
                    self.acked[publisher] = seq

    def close(self) -> None:
        self.sock.close()


def _throughput(ctx: zmq.Context, intake: str, size: int) -> float:
    feeder = _Feeder(ctx, intake, size, PUBLISHERS)
    try:
        start, acked_start = 0.0, 0
        t0 = time.monotonic()
        warm = t0 + 0.5
        deadline = warm + SECONDS
        while True:
            now = time.monotonic()
            if not start and now >= warm:
                start, acked_start = now, sum(feeder.acked.values())
            if now >= deadline:
                return (sum(feeder.acked.values()) - acked_start) / (now - start)
            sent = 0
            for p in feeder.publishers:  # each window filled, as an exchange forwards what its publishers send
                while feeder.next[p] - 1 - feeder.acked[p] < IN_FLIGHT * RECORDS_PER_BATCH:
                    feeder.send(p, RECORDS_PER_BATCH)
                    sent += 1
            feeder.read(0 if sent else 1)
    finally:
        feeder.close()


def _paced(ctx: zmq.Context, intake: str, size: int) -> list[float]:
    feeder = _Feeder(ctx, intake, size, 1)
    me = feeder.publishers[0]
    samples: list[float] = []
    try:
        period = 1.0 / PACED_RATE
        deadline = time.monotonic() + PACED_SECONDS
        while time.monotonic() < deadline:
            sent = time.monotonic()
            seq = feeder.send(me, 1)
            while feeder.acked[me] < seq:
                feeder.read(100)
                if time.monotonic() - sent > 5:
                    raise TimeoutError("no acknowledgement within 5 s")
            samples.append((time.monotonic() - sent) * 1000)
            time.sleep(max(0.0, sent + period - time.monotonic()))
    finally:
        feeder.close()
    return samples


def _end(ctx: zmq.Context, reads: str) -> int:
    """The end a reader of ``reads`` is told (a follower's: what it holds of what the leader committed)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(reads)
    try:
        sock.send(control.encode(control.Fetch(offset=-2)))
        if not sock.poll(10_000):
            raise TimeoutError("a journal did not answer a fetch")
        meta = control.decode(sock.recv_multipart()[0])
        assert isinstance(meta, control.Fetched), meta
        return meta.end_offset
    finally:
        sock.close()


def _caught_up(ctx: zmq.Context, leader: str, followers: list[str], timeout: float = 120.0) -> float:
    """Seconds until every follower holds all the leader committed (the one a round did not wait for may be
    behind: it takes the machine's cores and disk meanwhile, and a replay would share them)."""
    t0 = time.monotonic()
    end = _end(ctx, leader)
    while any(_end(ctx, f) < end for f in followers):
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"the followers did not catch up within {timeout:.0f} s")
        time.sleep(0.05)
    return time.monotonic() - t0


def _replay(ctx: zmq.Context, reads: str) -> tuple[float, int]:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(reads)
    records, offset, t0 = 0, 0, time.monotonic()
    try:
        while True:
            sock.send(control.encode(control.Fetch(offset=offset, max_bytes=4 << 20)))
            if not sock.poll(10_000):
                raise TimeoutError("the journal did not answer a fetch")
            frames = sock.recv_multipart()
            meta = control.decode(frames[0])
            assert isinstance(meta, control.Fetched), meta
            records += sum(batch.parse_header(h).count for h in frames[2::3])
            if records >= REPLAY_RECORDS or meta.next_offset >= meta.end_offset or not meta.count:
                return records / (time.monotonic() - t0), records
            offset = meta.next_offset
    finally:
        sock.close()


async def _jetstream(url: str, replicas: int, size: int) -> dict[str, Any]:
    """One stream of ``replicas`` on the cluster at ``url``: the acknowledged rate, the paced latencies, the replay."""
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        name = f"bench_r{replicas}_{size}"
        deadline = time.monotonic() + 30
        while True:  # a new cluster elects its meta leader first
            try:
                await js.add_stream(name=name, subjects=[name], storage="file", num_replicas=replicas)
                break
            except Exception:  # nats-py raises several kinds while the cluster forms
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        payload = os.urandom(size)
        for _ in range(1000):  # warm: the stream's group has its leader
            await js.publish(name, payload)
        futures = []
        started = time.monotonic()
        while time.monotonic() - started < SECONDS:
            futures.append(await js.publish_async(name, payload))
        await asyncio.gather(*futures)
        rate = len(futures) / (time.monotonic() - started)

        latencies: list[float] = []

        def timed(at: float) -> Callable[[asyncio.Future], None]:
            return lambda _f: latencies.append((time.monotonic() - at) * 1000)

        pending = []
        started = time.monotonic()
        for i in range(int(PACED_RATE * PACED_SECONDS)):
            wait = started + i / PACED_RATE - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            at = time.monotonic()  # (before the send, as RoQ's records are timed)
            future = await js.publish_async(name, payload)
            future.add_done_callback(timed(at))
            pending.append(future)
        await asyncio.gather(*pending)

        total = min(REPLAY_RECORDS, 1000 + len(futures) + len(pending))
        started = time.monotonic()
        sub = await js.subscribe(name, ordered_consumer=True)
        for _ in range(total):
            await sub.next_msg(timeout=10)
        replay = total / (time.monotonic() - started)
        await sub.unsubscribe()
        return {"rate": rate, "latency": percentiles(latencies), "replay": replay, "replayed": total}
    finally:
        await nc.close()


def _baseline(progress: Callable[[str], None]) -> list[Result]:
    """JetStream on a three-server cluster: streams of one and three replicas, default sync and synced always."""
    missing = bench_nats.available()
    if missing:
        progress(f"(q) {missing}: no JetStream baseline")
        return []
    version = bench_nats.version(bench_nats.server() or "")
    results = []
    for sync_always in (False, True):
        sync = "sync always" if sync_always else "default sync"
        try:
            with bench_nats.Servers(3, sync_always) as servers:
                for replicas in (1, 3):
                    for size in (100, 1024):
                        progress(f"(q) NATS JetStream {version}, R{replicas}, {size} B, {sync}")
                        f = asyncio.run(_jetstream(servers.urls[replicas % 3], replicas, size))
                        results.append(Result(f"(q) JetStream {version} R{replicas}, {size} B, {sync}",
                                              records_per_s=f["rate"], mb_per_s=f["rate"] * size / 1e6,
                                              latency_ms=f["latency"],
                                              notes={"replay_records_per_s": f["replay"], "replayed": f["replayed"],
                                                     "replicas": replicas, "size": size, "jetstream": sync,
                                                     "server": version}))
        except Exception as exc:  # an older server without sync_interval, a client error: no baseline, the rest runs
            progress(f"(q) JetStream, {sync}: {type(exc).__name__}: {exc}")
    return results


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    results = []
    for replicas in (1, 3):
        for size in (100, 1024):
            progress(f"(q) replicas = {replicas}, {size} B records")
            directory = tempfile.mkdtemp(prefix="roq-bench-replicas-")
            ctx = zmq.Context()
            children: list[Child] = []
            try:
                intake, reads, followers = _journals(directory, replicas, children)
                rate = _throughput(ctx, intake, size)
                lat = _paced(ctx, intake, size)
                catch_up = _caught_up(ctx, reads, followers)
                replay, replayed = _replay(ctx, reads)
            finally:
                for child in children:
                    child.stop()
                ctx.destroy(0)
                shutil.rmtree(directory, ignore_errors=True)
            results.append(Result(f"(q) replicas = {replicas}, {size} B, always", records_per_s=rate,
                                  mb_per_s=rate * size / 1e6,
                                  latency_ms=percentiles(lat),
                                  notes={"replay_records_per_s": replay, "replayed": replayed, "replicas": replicas,
                                         "size": size, "caught_up_s": catch_up}))
    return results + _baseline(progress)


def _rows(results: list[Result], jetstream: str = "") -> dict[tuple[int, int], Result]:
    """RoQ's rows by (replicas, size); with ``jetstream`` (its sync), JetStream's instead."""
    return {(r.notes["replicas"], r.notes["size"]): r for r in results
            if r.name.startswith("(q)") and r.notes.get("jetstream", "") == jetstream}


def render(results: list[Result]) -> list[str]:
    rows = _rows(results)
    if not rows:
        return []
    lines = ["", f"{'(q) replicated journal, durability always':46} {'acked rec/s':>12} {'p50 ms':>7} {'p99 ms':>7} "
                 f"{'replay rec/s':>13} {'caught up s':>12}"]
    for (replicas, size), r in sorted(rows.items()):
        lines.append(f"{'replicas = ' + str(replicas) + ', ' + str(size) + ' B':46} {r.records_per_s:12,.0f} "
                     f"{r.latency_ms['p50']:7.2f} {r.latency_ms['p99']:7.2f} {r.notes['replay_records_per_s']:13,.0f} "
                     f"{r.notes['caught_up_s']:12.1f}")
    for size in (100, 1024):
        one, three = rows.get((1, size)), rows.get((3, size))
        if one and three and one.records_per_s:
            acked = three.records_per_s / one.records_per_s
            replay = three.notes["replay_records_per_s"] / one.notes["replay_records_per_s"]
            extra = three.latency_ms["p99"] - one.latency_ms["p99"]
            lines.append(f"{size} B: replicas = 3 / replicas = 1: acknowledged {acked:.2f}x (target >= 0.60), p99 "
                         f"{extra:+.2f} ms (target <= +2), replay {replay:.2f}x (target >= 1, within noise)")
    for sync in ("default sync", "sync always"):
        js = _rows(results, sync)
        if not js:
            continue
        version = next(iter(js.values())).notes["server"]
        lines.append(f"NATS JetStream {version}, three servers, {sync}:")
        for (replicas, size), r in sorted(js.items()):
            lines.append(f"{'  R' + str(replicas) + ', ' + str(size) + ' B':46} {r.records_per_s:12,.0f} "
                         f"{r.latency_ms['p50']:7.2f} {r.latency_ms['p99']:7.2f} "
                         f"{r.notes['replay_records_per_s']:13,.0f}")
        for size in (100, 1024):
            one, three = js.get((1, size)), js.get((3, size))
            if one and three and one.records_per_s:
                lines.append(f"  {size} B: R3 / R1 acknowledged {three.records_per_s / one.records_per_s:.2f}x, p99 "
                             f"{three.latency_ms['p99'] - one.latency_ms['p99']:+.2f} ms")
        for size in (100, 1024):
            ours, theirs = rows.get((3, size)), js.get((3, size))
            if ours and theirs and theirs.records_per_s:
                lines.append(f"  {size} B: RoQ replicas = 3 (always) / JetStream R3 ({sync}): "
                             f"{ours.records_per_s / theirs.records_per_s:.2f}x acknowledged")
    return lines


def checks(results: list[Result]) -> list[Check]:
    rows = _rows(results)
    out = []
    for size in (100, 1024):
        one, three = rows.get((1, size)), rows.get((3, size))
        if not (one and three and one.records_per_s):
            continue
        out.append(Check(f"(q) {size} B: replicas = 3 acknowledged / replicas = 1", three.records_per_s /
                         one.records_per_s, 0.60, False, "x"))
        out.append(Check(f"(q) {size} B: replicas = 3 p99 above replicas = 1",
                         three.latency_ms["p99"] - one.latency_ms["p99"], 2.0, True, " ms"))
    return out
