"""``python -m simulation.bench``: RoQ-Py's throughput and latency beside a raw-pyzmq baseline, in one run.

Configurations (100-byte payloads unless ``--size``):

(a) baseline: raw pyzmq PUB -> SUB, each record its own ZeroMQ message ``[key, payload]`` (as the
    original system sent them), one publisher process, one subscriber process;
(b) RoQ end to end through the client API: 1 publisher -> 1 exchange -> 1 subscriber;
(c) RoQ: 4 publishers over 2 exchanges to 2 subscribers (every subscriber receives everything);
(d) control plane on a real ZooKeeper, a GCM and 3 host managers: time from a create-queue request to the
    queue accepting publishers (a publisher's first record acknowledged), beside the 2 s the original
    slept by design; time from a topology change in ZooKeeper (a host node appearing or going) to the
    GCM's broadcast saying so at a subscriber;
(e) elasticity (:mod:`simulation.bench_elastic`): on the same kind of cluster, from an exchange's overload
    to a new exchange carrying traffic, beside the floor of an add-exchange request; the longest send of
    a moved publisher beside one not moved; then records/s from 4 publishers through 1, 2, 3 exchanges;
(f) the KPI pipeline (:mod:`simulation.bench_kpi`): archive write cost per record beside decoding the KPI
    message, and ``roq kpi report`` over a 1,000,000-record archive beside parsing it in one process.

For each: delivered records/s and MB/s of payload when publishers send as fast as they can (records
lost are reported), then p50/p99 latency (send time in the payload -> receipt) with publishers paced
at ``--rate`` records/s in all. Only ratios within one run mean something: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import struct
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

STAMP = struct.Struct("<q")
END = b"\x00end"
#: Publishers send bursts this often when paced (seconds).
TICK = 0.001


@dataclass
class Result:
    name: str
    records_per_s: float = 0.0
    mb_per_s: float = 0.0
    lost: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------- helpers


def _payload(size: int) -> bytes:
    return b"\x00" * max(0, size - STAMP.size)


def _paced(rate: float, duration: float, send_one: Any) -> int:
    """Call ``send_one()`` ``rate`` times a second for ``duration`` seconds; return the count."""
    sent = 0
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= duration:
            return sent
        due = int(elapsed * rate) - sent
        for _ in range(due):
            send_one()
        sent += max(due, 0)
        time.sleep(TICK / 2)


def _percentiles(samples: list[float]) -> dict[str, float]:
    from simulation.load import percentiles

    return {k: round(v, 3) if isinstance(v, float) else v for k, v in percentiles(samples).items()}


# ---------------------------------------------------------------------------------------- (a) raw


def _raw_publisher(endpoint: str, mode: str, n: int, rate: float, duration: float, size: int, ready: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(endpoint)
    while not ready.is_set():  # the slow joiner: send probes until the subscriber hears one
        sock.send_multipart((b"probe", b""))
        time.sleep(0.01)
    key, pad, stamp = b"k", _payload(size), STAMP.pack
    if mode == "throughput":
        payload = stamp(0) + pad
        send = sock.send_multipart
        for _ in range(n):
            send((key, payload))
    else:
        _paced(rate, duration, lambda: sock.send_multipart((key, stamp(time.time_ns()) + pad)))
    sock.send_multipart((END, b""))
    sock.close(linger=10_000)
    ctx.term()


def _raw_subscriber(mode: str, n: int, results: Any, ready: Any, endpoint_out: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    endpoint_out.put(f"tcp://127.0.0.1:{port}")
    recv = sock.recv_multipart
    key, payload = recv()
    while key == b"probe":
        ready.set()
        key, payload = recv()
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    # the loop is as tight as the RoQ subscriber's: the baseline must not be handicapped
    count, latency = 0, []
    unpack = STAMP.unpack_from
    first = last = time.perf_counter()
    try:
        while key != END:
            if key != b"probe":  # late probes
                last = time.perf_counter()
                count += 1
                if mode == "latency":
                    latency.append((time.time_ns() - unpack(payload)[0]) / 1e6)
            key, payload = recv()
    except zmq.Again:
        pass
    results.put({"count": count, "elapsed": last - first, "latency": latency})
    sock.close(linger=0)
    ctx.term()


def bench_raw(mode: str, n: int, rate: float, duration: float, size: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    results, endpoint, ready = ctx.Queue(), ctx.Queue(), ctx.Event()
    sub = ctx.Process(target=_raw_subscriber, args=(mode, n, results, ready, endpoint))
    sub.start()
    pub = ctx.Process(target=_raw_publisher, args=(endpoint.get(timeout=30), mode, n, rate, duration, size, ready))
    pub.start()
    out = results.get(timeout=600)
    pub.join(60)
    sub.join(60)
    return out


# ---------------------------------------------------------------------------------------- RoQ


def _roq_publisher(monitor: str, mode: str, n: int, rate: float, duration: float, size: int, key: bytes,
                   go: Any, done: Any) -> None:
    import client

    with client.connect(monitor) as conn:
        pub = conn.publisher()
        done.put(("ready", pub.name))
        go.wait()
        pad, stamp = _payload(size), STAMP.pack
        if mode == "throughput":
            payload = stamp(0) + pad
            send = pub.send
            for _ in range(n):
                send(key, payload)
        else:
            _paced(rate, duration, lambda: pub.send(key, stamp(time.time_ns()) + pad))
        pub.send(END, b"")
        pub.flush(60)
        done.put(("done", pub.stats()))


def _roq_subscriber(monitor: str, mode: str, publishers: int, results: Any, ready: Any) -> None:
    import client

    with client.connect(monitor) as conn:
        sub = conn.subscriber()
        ready.put(sub.name)
        count, first, last, ends, latency = 0, 0.0, 0.0, 0, []
        unpack = STAMP.unpack_from
        while ends < publishers:
            msg = sub.recv(timeout=10)
            if msg is None:
                break
            if msg[0] == END:
                ends += 1
                continue
            last = time.perf_counter()
            if not count:
                first = last
            count += 1
            if mode == "latency":
                latency.append((time.time_ns() - unpack(msg[1])[0]) / 1e6)
        results.put({"count": count, "elapsed": last - first, "latency": latency, "stats": sub.stats().as_dict()})


def bench_roq(cluster: Any, mode: str, publishers: int, subscribers: int, n: int, rate: float, duration: float,
              size: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    results, ready, go, done = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Queue()
    subs = [ctx.Process(target=_roq_subscriber, args=(cluster.monitor_endpoint, mode, publishers, results, ready))
            for _ in range(subscribers)]
    for p in subs:
        p.start()
    for _ in subs:
        ready.get(timeout=60)
    pubs = [
        ctx.Process(
            target=_roq_publisher,
            args=(cluster.monitor_endpoint, mode, n // publishers, rate / publishers, duration, size,
                  f"bench.{i}".encode(), go, done),
        )
        for i in range(publishers)
    ]
    for p in pubs:
        p.start()
    for _ in pubs:
        assert done.get(timeout=60)[0] == "ready"
    go.set()
    outs = [results.get(timeout=600) for _ in subs]
    pub_stats = [done.get(timeout=120)[1] for _ in pubs]
    for p in pubs + subs:
        p.join(60)
    return {
        "count": sum(o["count"] for o in outs),
        "elapsed": max(o["elapsed"] for o in outs),
        "latency": [x for o in outs for x in o["latency"]],
        "subscriber_stats": [o["stats"] for o in outs],
        "publisher_stats": pub_stats,
    }


# ---------------------------------------------------------------------------------------- runs


def run(args: argparse.Namespace) -> list[Result]:
    from simulation.cluster import LocalCluster

    results = []
    n, size = args.records, args.size

    def throughput(name: str, raw: dict[str, Any], expected: int) -> Result:
        rate = raw["count"] / raw["elapsed"] if raw["elapsed"] else 0.0
        return Result(name, rate, rate * size / 1e6, expected - raw["count"])

    def progress(text: str) -> None:
        print(f"  .. {text}", file=sys.stderr, flush=True)

    if "a" in args.only:
        progress("(a) raw pyzmq throughput")
        r = throughput("(a) raw pyzmq PUB->SUB, [key, payload] per record", bench_raw("throughput", n, 0, 0, size), n)
        progress("(a) raw pyzmq latency")
        r.latency_ms = _percentiles(bench_raw("latency", 0, args.rate, args.latency_seconds, size)["latency"])
        results.append(r)
    for label, pubs, subs, exchanges in (("b", 1, 1, 1), ("c", 4, 2, 2)):
        if label not in args.only:
            continue
        name = (f"({label}) RoQ {pubs} publisher{'s' * (pubs > 1)} -> {exchanges} exchange{'s' * (exchanges > 1)} "
                f"-> {subs} subscriber{'s' * (subs > 1)}")
        log_dir = tempfile.mkdtemp(prefix="roq-bench-")
        with LocalCluster(address="127.0.0.11", exchanges=exchanges, log_dir=log_dir,
                          monitor_args=["--no-relocation-rule"]) as cluster:
            progress(f"({label}) RoQ throughput")
            raw = bench_roq(cluster, "throughput", pubs, subs, n, 0, 0, size)
            r = throughput(name, raw, n * subs)
            r.notes["subscriber_stats"] = raw["subscriber_stats"]
            progress(f"({label}) RoQ latency")
            lat = bench_roq(cluster, "latency", pubs, subs, 0, args.rate, args.latency_seconds, size)
            r.latency_ms = _percentiles(lat["latency"])
            status = cluster.status()
            r.notes["exchange_rss_mb"] = [round(x["rss_bytes"] / 2**20, 1) for x in status["exchanges"]]
        results.append(r)
    if "d" in args.only:
        results += bench_control(args.trials, progress)
    if "e" in args.only:
        from simulation import bench_elastic

        results += bench_elastic.run(args, progress)
    if "f" in args.only:
        from simulation import bench_kpi

        results += bench_kpi.run(args, progress)
    return results


def bench_control(trials: int, progress: Any) -> list[Result]:
    """(d): queue creation and broadcast latency on an embedded cluster."""
    import zmq
    from kazoo.client import KazooClient

    import client
    from roq import management as m
    from roq.zk import Paths
    from roqcli.embedded import EmbeddedCluster

    log_dir = tempfile.mkdtemp(prefix="roq-bench-")
    with EmbeddedCluster(hosts=3, log_dir=log_dir) as cluster:
        qm = cluster.manager
        progress(f"(d) create queue -> accepting publishers, {trials} queues")
        created = []
        for i in range(trials):
            started = time.monotonic()
            qm.create(f"bench{i}")
            with client.connect(zk=cluster.zk, queue=f"bench{i}", root=cluster.root) as conn:
                pub = conn.publisher()
                pub.send(b"k", b"first")
                pub.flush(10)
                created.append((time.monotonic() - started) * 1000)
            qm.remove(f"bench{i}")
        progress(f"(d) topology change -> broadcast, {trials} changes")
        paths = Paths(cluster.root)
        kz = KazooClient(hosts=cluster.zk)
        kz.start(timeout=10)
        ctx = zmq.Context.instance()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.LINGER, 0)
        sub.connect(qm.leader()["broadcast"])
        time.sleep(0.3)  # let the subscription reach the GCM's PUB before the first change
        broadcast = []
        try:
            for i in range(trials):
                for present in (True, False):
                    started = time.monotonic()
                    if present:
                        kz.create(paths.host("127.0.0.99"), b'{"max_exchanges": 0}', ephemeral=True)
                    else:
                        kz.delete(paths.host("127.0.0.99"))
                    while True:
                        if not sub.poll(5000):
                            raise RuntimeError("no broadcast within 5 s of a topology change")
                        _, hosts = m.parse_broadcast(sub.recv_multipart())
                        if ("127.0.0.99" in {h["Address"] for h in hosts}) == present:
                            break
                    broadcast.append((time.monotonic() - started) * 1000)
        finally:
            sub.close()
            kz.stop()
            kz.close()
    return [
        Result("(d) create queue -> accepting publishers", latency_ms=_percentiles(created),
               notes={"trials": trials, "target_median_ms": 1000, "original_ms": 2000}),
        Result("(d) topology change -> broadcast received", latency_ms=_percentiles(broadcast),
               notes={"trials": 2 * trials, "target_ms": 200}),
    ]


def render(results: list[Result], args: argparse.Namespace) -> str:
    import zmq

    lines = [
        f"RoQ-Py benchmark, {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()}: {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, pyzmq {zmq.__version__} / libzmq {zmq.zmq_version()}",
        f"payload {args.size} B; throughput over {args.records:,} records per publisher group; "
        f"latency at {args.rate:,.0f} records/s in all for {args.latency_seconds:.0f} s",
        "",
        f"{'configuration':58} {'records/s':>11} {'MB/s':>7} {'lost':>6} {'p50 ms':>7} {'p99 ms':>7}",
    ]
    for r in results:
        lat = r.latency_ms
        if r.name.startswith(("(d)", "(e)", "(f)")):
            continue
        lines.append(
            f"{r.name:58} {r.records_per_s:11,.0f} {r.mb_per_s:7.1f} {r.lost:6d} "
            f"{lat.get('p50', float('nan')):7.2f} {lat.get('p99', float('nan')):7.2f}"
        )
    by = {r.name[:3]: r for r in results}
    if "(a)" in by and "(b)" in by and by["(a)"].records_per_s:
        ratio = by["(b)"].records_per_s / by["(a)"].records_per_s
        lines.append("")
        lines.append(f"(b) / (a) throughput: {ratio:.2f}x (target >= 2x); "
                     f"(b) p99 at {args.rate:,.0f} records/s: {by['(b)'].latency_ms.get('p99', float('nan')):.2f} ms "
                     "(target <= 5 ms)")
    control = [r for r in results if r.name.startswith("(d)")]
    if control:
        lines += ["", f"{'control plane':58} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}  trials"]
        for r in control:
            lat = r.latency_ms
            lines.append(f"{r.name:58} {lat.get('p50', 0):9.1f} {lat.get('p99', 0):9.1f} {lat.get('max', 0):9.1f}  "
                         f"{r.notes['trials']}")
        lines.append("targets: create median <= 1000 ms (the original slept 2000 ms by design); "
                     "broadcast <= 200 ms")
    for r in results:
        if "exchange_rss_mb" in r.notes:
            lines.append(f"{r.name[:3]} exchange RSS after the runs (MB): {r.notes['exchange_rss_mb']}")
    from simulation import bench_elastic

    lines += bench_elastic.render(results)
    from simulation import bench_kpi

    lines += bench_kpi.render(results)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulation.bench", description=__doc__.split("\n\n")[0],
                                epilog="Configurations are described in the module's documentation.")
    p.add_argument("--records", type=int, default=1_000_000, help="records sent in a throughput run (default 1,000,000)")
    p.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    p.add_argument("--rate", type=float, default=20_000, help="records/s in all for the latency runs (default 20,000)")
    p.add_argument("--latency-seconds", type=float, default=5.0, help="length of a latency run (default 5)")
    p.add_argument("--only", default="abcdef", help="which configurations to run (default abcdef)")
    p.add_argument("--kpi-records", type=int, default=1_000_000,
                   help="records in the synthetic KPI archive of (f) (default 1,000,000)")
    p.add_argument("--trials", type=int, default=10,
                   help="queues created and topology changes in (d), at most 3 overloads in (e) (default 10)")
    p.add_argument("--json", default=None, help="also write the results as JSON to this file")
    args = p.parse_args(argv)
    if args.size < STAMP.size:
        p.error(f"--size must be at least {STAMP.size}")
    try:
        results = run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(render(results, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
