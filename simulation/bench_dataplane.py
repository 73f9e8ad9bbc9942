"""The data-plane benchmarks: (a) raw pyzmq PUB -> SUB, (b) and (c) RoQ through its client API, (g) as (b)
through its batch API (``send_many``, ``recv_many``).

Every publisher and subscriber is a process of its own (``multiprocessing``, spawned); see
:mod:`simulation.bench` for what each configuration measures.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from typing import Any, Callable

from simulation.bench_common import END, STAMP, Check, Result, paced, padding, percentiles

__all__ = ["run", "checks", "bench_raw", "bench_roq"]


def _raw_publisher(endpoint: str, mode: str, n: int, rate: float, duration: float, size: int, ready: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(endpoint)
    while not ready.is_set():  # the slow joiner: send probes until the subscriber hears one
        sock.send_multipart((b"probe", b""))
        time.sleep(0.01)
    key, pad, stamp = b"k", padding(size), STAMP.pack
    if mode == "throughput":
        payload = stamp(0) + pad
        send = sock.send_multipart
        for _ in range(n):
            send((key, payload))
    else:
        paced(rate, duration, lambda k: [sock.send_multipart((key, stamp(time.time_ns()) + pad)) for _ in range(k)])
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


#: Records per ``send_many`` call of the batch API's publisher.
MANY = 1000


def _roq_publisher(monitor: str, mode: str, n: int, rate: float, duration: float, size: int, key: bytes,
                   go: Any, done: Any, many: bool = False, curve: Any = None) -> None:
    import client

    with client.connect(monitor, publisher_config=client.PublisherConfig(curve=curve)) as conn:  # CURVE: the monitor too
        pub = conn.publisher(curve=curve)
        done.put(("ready", pub.name))
        go.wait()
        pad, stamp = padding(size), STAMP.pack
        started = time.perf_counter()
        if mode == "throughput" and many:
            chunk = [stamp(0) + pad] * MANY
            for _ in range(n // MANY):
                pub.send_many(key, chunk)
            pub.send_many(key, chunk[:n % MANY])
        elif mode == "throughput":
            payload = stamp(0) + pad
            send = pub.send
            for _ in range(n):
                send(key, payload)
        elif many:  # each paced tick's records in one call
            paced(rate, duration, lambda k: pub.send_many(key, [stamp(time.time_ns()) + pad] * k))
        else:
            def send_each(k: int) -> None:
                for _ in range(k):
                    pub.send(key, stamp(time.time_ns()) + pad)

            paced(rate, duration, send_each)
        sending = time.perf_counter() - started
        pub.send(END, b"")
        pub.flush(60)
        done.put(("done", {**pub.stats(), "send_seconds": sending}))


def _roq_subscriber(monitor: str, mode: str, publishers: int, results: Any, ready: Any, many: bool = False,
                    curve: Any = None) -> None:
    import client

    with client.connect(monitor, subscriber_config=client.SubscriberConfig(curve=curve)) as conn:
        sub = conn.subscriber(curve=curve)
        ready.put(sub.name)
        count, first, last, ends, latency = 0, 0.0, 0.0, 0, []
        unpack = STAMP.unpack_from
        while ends < publishers:
            if many:
                batches = sub.recv_many(timeout=10)
                if not batches:
                    break
            else:
                msg = sub.recv(timeout=10)
                if msg is None:
                    break
                batches = ((msg[0], (msg[1],)),)
            for b in batches:
                key, payloads = (b.key, b.payloads) if many else b
                if key == END:
                    ends += 1
                    continue
                last = time.perf_counter()
                if not count:
                    first = last
                count += len(payloads)
                if mode == "latency":
                    now = time.time_ns()
                    latency += [(now - unpack(p)[0]) / 1e6 for p in payloads]
        results.put({"count": count, "elapsed": last - first, "latency": latency, "stats": sub.stats().as_dict(),
                     "monitor": monitor})


def bench_roq(cluster: Any, mode: str, publishers: int, subscribers: int, n: int, rate: float, duration: float,
              size: int, many: bool = False, curve: Any = None, subscribe_at: list[str] | None = None) -> dict[str, Any]:
    """Publishers into ``cluster``'s queue and subscribers of it (``subscribe_at``: one subscriber at each of
    these monitors instead, e.g. of a queue a link feeds); ``per_monitor``: each one's figures."""
    ctx = mp.get_context("spawn")
    results, ready, go, done = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Queue()
    monitors = subscribe_at or [cluster.monitor_endpoint] * subscribers
    subs = [ctx.Process(target=_roq_subscriber, args=(monitor, mode, publishers, results, ready, many, curve))
            for monitor in monitors]
    for p in subs:
        p.start()
    for _ in subs:
        ready.get(timeout=60)
    pubs = [
        ctx.Process(
            target=_roq_publisher,
            args=(cluster.monitor_endpoint, mode, n // publishers, rate / publishers, duration, size,
                  f"bench.{i}".encode(), go, done, many, curve),
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
        "per_monitor": {o["monitor"]: o for o in outs},
    }


def _curve(directory: str) -> tuple[list[str], Any]:
    """Keys for (j): the cluster's pair and a client's in ``directory``, the client's public key in a keyring;
    the monitor's and the exchange's flags and the client's :class:`~roq.config.CurveClient`."""
    from roq.security import keys
    from roq.config import CurveClient

    server = keys.new_keypair(os.path.join(directory, "keys"), "cluster")
    me = keys.new_keypair(os.path.join(directory, "keys"), "bench")
    ring = os.path.join(directory, "keyring")
    os.makedirs(ring)
    shutil.copy(me.public_path, os.path.join(ring, "bench.key"))
    assert me.secret is not None  # a new pair has its secret
    return (["--secret-key", server.secret_path, "--keyring", ring],
            CurveClient(server.public.decode(), me.public.decode(), me.secret.decode()))


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    """(a), (b), (c) as ``args.only`` asks."""
    from simulation.cluster import LocalCluster

    results = []
    n, size = args.records, args.size

    def throughput(name: str, raw: dict[str, Any], expected: int) -> Result:
        rate = raw["count"] / raw["elapsed"] if raw["elapsed"] else 0.0
        return Result(name, rate, rate * size / 1e6, expected - raw["count"])

    if "a" in args.only:
        progress("(a) raw pyzmq throughput")
        r = throughput("(a) raw pyzmq PUB->SUB, [key, payload] per record", bench_raw("throughput", n, 0, 0, size), n)
        progress("(a) raw pyzmq latency")
        r.latency_ms = percentiles(bench_raw("latency", 0, args.rate, args.latency_seconds, size)["latency"])
        results.append(r)
    for label, pubs, subs, exchanges in (("b", 1, 1, 1), ("j", 1, 1, 1), ("g", 1, 1, 1), ("c", 4, 2, 2)):
        if label not in args.only:
            continue
        many = label == "g"
        name = (f"({label}) RoQ {pubs} publisher{'s' * (pubs > 1)} -> {exchanges} exchange{'s' * (exchanges > 1)} "
                f"-> {subs} subscriber{'s' * (subs > 1)}{', batch API' * many}{', CURVE' * (label == 'j')}")
        log_dir = tempfile.mkdtemp(prefix="roq-bench-")
        exchange_args, curve = _curve(log_dir) if label == "j" else ([], None)
        with LocalCluster(address="127.0.0.11", exchanges=exchanges, log_dir=log_dir, exchange_args=exchange_args,
                          monitor_args=["--no-relocation-rule", *exchange_args], curve=curve) as cluster:
            progress(f"({label}) RoQ throughput")
            raw = bench_roq(cluster, "throughput", pubs, subs, n, 0, 0, size, many, curve)
            r = throughput(name, raw, n * subs)
            r.notes["subscriber_stats"] = raw["subscriber_stats"]
            r.notes["publisher_records_per_s"] = round(
                sum(n // pubs / p["send_seconds"] for p in raw["publisher_stats"] if p["send_seconds"]))
            progress(f"({label}) RoQ latency")
            lat = bench_roq(cluster, "latency", pubs, subs, 0, args.rate, args.latency_seconds, size, many, curve)
            r.latency_ms = percentiles(lat["latency"])
            status = cluster.status()
            r.notes["exchange_rss_mb"] = [round(x.rss_bytes / 2**20, 1) for x in status.exchanges]
        results.append(r)
    return results


def checks(results: list[Result], rate: float) -> list[Check]:
    """The data plane's targets: (b) at least twice the raw-pyzmq baseline (a) with p99 at most 5 ms at ``rate``
    records/s; (j) with CURVE at least 70% of (b) and its p99 at most 1 ms above; (g)'s subscriber at least
    2,000,000 records/s."""
    by = {r.name[:3]: r for r in results}
    out = []
    nan = float("nan")
    if "(a)" in by and "(b)" in by:
        out.append(Check("(b) beside (a), records/s", by["(b)"].records_per_s / (by["(a)"].records_per_s or nan), 2.0,
                         False, "x"))
    if "(b)" in by:
        out.append(Check(f"(b) p99 at {rate:,.0f} records/s", by["(b)"].latency_ms.get("p99", nan), 5.0, True, " ms"))
    if "(b)" in by and "(j)" in by:
        plain, curve = by["(b)"], by["(j)"]
        out.append(Check("(j) beside (b), records/s", curve.records_per_s / (plain.records_per_s or nan), 0.70, False,
                         "x"))
        out.append(Check("(j) p99 above (b)'s", curve.latency_ms.get("p99", nan) - plain.latency_ms.get("p99", nan),
                         1.0, True, " ms"))
    if "(g)" in by:
        out.append(Check("(g) one subscriber through recv_many, records/s", by["(g)"].records_per_s, 2_000_000, False))
    return out

