"""(k) durable queues: what acknowledged-means-durable costs, beside NATS JetStream's file store in the same run.

On one queue of real processes (a monitor, an exchange and, when durable, the queue's journal), 1 KiB records
from one publisher that speaks the batch protocol itself (64 records a batch, 16 batches in flight at most),
so that each batch's acknowledgement is timed exactly:

* throughput: records acknowledged per second, durability ``none``, ``interval`` (100 ms) and ``always``;
* acknowledgement latency: p50/p99 from a batch sent to its acknowledgement, paced at ``--rate`` records/s;
* replay: a subscriber of the client library from ``start="earliest"`` over what was published, records/s.

The baseline: Debian's ``nats-server`` with JetStream's file store (a stream of the same 1 KiB records), the
Python client (``nats-py``): publishes acknowledged by the stream (a window of as many records in flight),
the latency of one acknowledged publish paced at the same rate, and an ordered consumer reading the stream
from its start. JetStream's file store acknowledges once the server has the record, and syncs it to disk
every ``sync_interval`` (2 minutes by default): its acknowledgement is not ``always``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any, Callable

import zmq

from roq import batch
from roq.process import spawn
from simulation.bench_common import Result, percentiles

__all__ = ["run"]

SIZE = 1024
PER_BATCH = 64
WINDOW = 16
ADDRESS = "127.0.0.17"


def _queue(durability: str, directory: str) -> tuple[str, str, list[Any]]:
    """A monitor, a journal (unless ``none``) and an exchange: (monitor endpoint, exchange frontend, children)."""
    monitor = spawn("monitor", "monitor", ["--address", ADDRESS, "--port", "0", "--queue", "bench",
                                           "--durability", durability, "--log-level", "WARNING"])
    children = [monitor]
    try:
        endpoint = monitor.wait_ready()["endpoint"]
        if durability != "none":
            journal = spawn("journal", "exchange.journal", [
                "--queue", "bench", "--directory", directory, "--address", ADDRESS, "--monitor", endpoint,
                "--durability", durability, "--log-level", "WARNING"])
            children.append(journal)
            journal.wait_ready()
        exchange = spawn("exchange", "exchange", ["--monitor", endpoint, "--address", ADDRESS,
                                                  "--log-level", "WARNING"])
        children.append(exchange)
        frontend = exchange.wait_ready()["frontend"]
        return endpoint, frontend, children
    except BaseException:
        for child in reversed(children):
            child.stop()
        raise


def _publish(frontend: str, records: int, rate: float) -> tuple[float, list[float]]:
    """Send ``records`` 1 KiB records in batches (paced at ``rate`` records/s; 0 = as fast as acknowledged);
    (records/s acknowledged, each batch's acknowledgement latency in ms)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    me = os.urandom(16)
    sock.setsockopt(zmq.ROUTING_ID, me)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(frontend)
    body = batch.encode_body([b"x" * SIZE] * PER_BATCH)
    sent: dict[int, float] = {}  # last seq of a batch -> when it was sent
    latencies: list[float] = []
    seq, acked = 1, 0
    started = time.perf_counter()
    deadline = time.monotonic() + 120
    try:
        while acked < records and time.monotonic() < deadline:
            due = records if not rate else int((time.perf_counter() - started) * rate)
            while seq <= min(records, due) and len(sent) < WINDOW:
                header = batch.pack_header(batch.DATA, me, seq, PER_BATCH, timestamp_ns=time.time_ns())
                sock.send_multipart([b"bench", header, body])
                sent[seq + PER_BATCH - 1] = time.perf_counter()
                seq += PER_BATCH
            if sock.poll(1):
                while True:
                    try:
                        high = batch.decode_ack(sock.recv(zmq.NOBLOCK))
                    except zmq.Again:
                        break
                    now = time.perf_counter()
                    for last in [s for s in sent if s <= high]:
                        latencies.append((now - sent.pop(last)) * 1000)
                    acked = max(acked, high)
        elapsed = time.perf_counter() - started
    finally:
        sock.close()
        ctx.term()
    return acked / elapsed if elapsed else 0.0, latencies


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


def _roq(durability: str, records: int, rate: float, seconds: float) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="roq-bench-journal-")
    try:
        monitor, frontend, children = _queue(durability, directory)
        try:
            throughput, _ = _publish(frontend, records, 0)
            _, latencies = _publish(frontend, int(rate * seconds), rate)
            replay = _replay(monitor, records) if durability != "none" else 0.0
        finally:
            for child in reversed(children):
                child.stop()
        return {"throughput": throughput, "latency": percentiles(latencies), "replay": replay}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# ---------------------------------------------------------------------------- the baseline


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _nats(port: int, records: int, rate: float, seconds: float) -> dict[str, Any]:
    import nats

    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        js = nc.jetstream()
        await js.add_stream(name="bench", subjects=["bench"], storage="file")
        payload = b"x" * SIZE
        started = time.perf_counter()
        pending: set[asyncio.Future] = set()
        for _ in range(records):  # a window of as many records in flight as RoQ's publisher has
            if len(pending) >= WINDOW * PER_BATCH:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            pending.add(asyncio.ensure_future(js.publish("bench", payload)))
        await asyncio.gather(*pending)
        throughput = records / (time.perf_counter() - started)
        latencies = []
        started = next_at = time.perf_counter()
        while next_at - started < seconds:  # paced: one publish every 1/rate s, each waited for
            now = time.perf_counter()
            if now < next_at:
                await asyncio.sleep(next_at - now)
            t = time.perf_counter()
            await js.publish("bench", payload)
            latencies.append((time.perf_counter() - t) * 1000)
            next_at += PER_BATCH / rate  # as often as RoQ's publisher sends a batch at that rate
        started = time.perf_counter()
        sub = await js.subscribe("bench", ordered_consumer=True)
        got = 0
        while got < records:
            await sub.next_msg(timeout=10)
            got += 1
        replay = got / (time.perf_counter() - started)
        return {"throughput": throughput, "latency": percentiles(latencies), "replay": replay}
    finally:
        await nc.close()


def _baseline(records: int, rate: float, seconds: float, progress: Callable[[str], None]) -> dict[str, Any] | None:
    server = shutil.which("nats-server")
    try:
        import nats  # noqa: F401
    except ImportError:
        server = None
    if server is None:
        progress("(k) no nats-server or nats-py: no baseline (make bench installs them)")
        return None
    directory = tempfile.mkdtemp(prefix="roq-bench-nats-")
    port = _free_port()
    proc = subprocess.Popen([server, "-js", "-sd", directory, "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        return asyncio.run(_nats(port, records, rate, seconds))
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    """(k): RoQ none / interval / always, and JetStream's file store, with 1 KiB records."""
    records = min(args.records, 200_000)
    out = []
    figures = {}
    for durability in ("none", "interval", "always"):
        progress(f"(k) durability {durability}")
        figures[durability] = _roq(durability, records, args.rate, args.latency_seconds)
    progress("(k) NATS JetStream, file store")
    nats_figures = _baseline(records, args.rate, args.latency_seconds, progress)
    for name, f in [*((f"(k) RoQ durability {d}, 1 KiB records", figures[d]) for d in figures),
                    *([("(k) NATS JetStream file store, 1 KiB records", nats_figures)] if nats_figures else [])]:
        r = Result(name, f["throughput"], f["throughput"] * SIZE / 1e6, 0, f["latency"],
                   {"replay_records_per_s": round(f["replay"])})
        out.append(r)
    return out


def render(results: list[Result]) -> list[str]:
    """The (k) lines: replay beside throughput, and the targets."""
    rows = {r.name: r for r in results if r.name.startswith("(k)")}
    if not rows:
        return []
    lines = ["", f"{'durable queues, 1 KiB records (k)':62} {'acked/s':>11} {'p99 ack ms':>11} {'replay/s':>11}"]
    lines += [f"{r.name:62} {r.records_per_s:11,.0f} {r.latency_ms.get('p99', float('nan')):11.2f} "
              f"{r.notes.get('replay_records_per_s', 0):11,.0f}" for r in rows.values()]
    by = {name.split("durability ")[-1].split(",")[0]: r for name, r in rows.items() if "durability" in name}
    if {"none", "interval", "always"} <= by.keys() and by["none"].records_per_s:
        always, interval = by["always"], by["interval"]
        lines.append(f"targets: always >= 20,000 records/s ({always.records_per_s:,.0f}) with p99 <= 10 ms "
                     f"({always.latency_ms.get('p99', float('nan')):.2f}); interval >= 50% of none "
                     f"({interval.records_per_s / by['none'].records_per_s:.0%}); replay >= 200,000 records/s "
                     f"({always.notes.get('replay_records_per_s', 0):,.0f})")
    return lines
