"""(i) Observability's cost and speed: the data plane with and without Prometheus and a dashboard watching,
``/metrics`` of a cluster of 1,000 queues, and ``GET /api/v1/queues/{queue}``.

* **(b) and (c) observed**: the data-plane runs of :mod:`simulation.bench_dataplane` on a queue of a real
  embedded cluster (ZooKeeper, a GCM, a host manager), alternately with nobody watching and with a real
  Prometheus (Debian's package) scraping the GCM's ``/metrics`` every second while a client reads the
  dashboard's live feed (``/api/v1/stream``, as the page's ``EventSource`` does), ``--observed-rounds``
  times each; the records/s of each, and the ratio of their means.
* **/metrics of 1,000 queues**: the GCM's HTTP server and metrics code (:class:`gcm.HttpApi` on
  :class:`roq.http.HttpServer`, in a loop of their own) over a view of 1,000 running queues, each with the
  status its monitor would give (3 exchanges, 10 publishers, 4 subscribers with their KPIs and latency
  histogram): no cluster of that size fits on this machine, so the state is made up, the code path is the
  one a scrape takes. p50 / p99 of 200 scrapes over one kept-alive connection, and the time the census
  spends each round making every queue's lines (the GCM's loop pays it once a second, scraped or not).
* **GET /api/v1/queues/{queue}** on the real cluster, its queue carrying traffic: p50 / p99 of 300 requests
  (each asks the queue's monitor for its status on the spot).
"""

from __future__ import annotations

import argparse
import http.client
import logging
import random
import socket
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable

from roq.wire.status import QueueStatus, decode
from simulation.bench_common import Check, Result, percentiles

__all__ = ["run", "render", "checks", "metrics_of_many_queues"]

OBSERVED_RECORDS = 10  # the observed runs send this many times --records: several seconds, several scrapes each


class _Endpoint:
    """What :func:`simulation.bench_dataplane.bench_roq` needs of a cluster: its queue's monitor."""

    def __init__(self, monitor: str) -> None:
        self.monitor_endpoint = monitor


class _Feed:
    """A client of the dashboard's live feed, reading every event until stopped (as a page would)."""

    def __init__(self, base: str) -> None:
        host, port = urllib.parse.urlsplit(base).netloc.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.sendall(b"GET /api/v1/stream HTTP/1.1\r\nhost: bench\r\naccept: text/event-stream\r\n\r\n")
        self.bytes = 0
        self.states = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        self.sock.settimeout(0.5)
        while not self._stop.is_set():
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                return
            self.bytes += len(data)
            self.states += data.count(b"event: state")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def observed_dataplane(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    """(b) and (c) on an embedded cluster, alternately unwatched and watched."""
    from roqcli.embedded import EmbeddedCluster
    from simulation.bench_dataplane import bench_roq
    from simulation.prometheus import PrometheusServer

    results = []
    work = Path(tempfile.mkdtemp(prefix="roq-bench-http-"))
    for label, pubs, subs, exchanges in (("b", 1, 1, 1), ("c", 4, 2, 2)):
        with EmbeddedCluster(hosts=1, log_dir=str(work / f"cluster-{label}"), max_exchanges=exchanges + 1) as cluster:
            cluster.manager.create("bench", exchanges=exchanges)
            cluster.manager.set_rules("bench", {"min_exchanges": exchanges, "max_exchanges": exchanges,
                                                "exchange_records_per_s": 10_000_000, "host_cpu_percent": 100})
            where = _Endpoint(cluster.manager.lookup("bench"))
            target = urllib.parse.urlsplit(cluster.http_url()).netloc
            rates: dict[str, list[float]] = {"unwatched": [], "watched": []}
            scrapes = feed_states = 0
            for i in range(args.observed_rounds):
                for watched in (False, True) if i % 2 == 0 else (True, False):
                    kind = "watched" if watched else "unwatched"
                    progress(f"({label}) observed: round {i + 1}, {kind}")
                    prom = feed = None
                    if watched:
                        prom = PrometheusServer([target], scrape_interval=1.0, workdir=work / f"prom-{label}-{i}")
                        prom.start()
                        feed = _Feed(cluster.http_url())
                        deadline = time.monotonic() + 30  # its first scrape comes about 5 s after it starts
                        while not prom.query('up{job="roq"}') and time.monotonic() < deadline:
                            time.sleep(0.2)
                    try:
                        raw = bench_roq(where, "throughput", pubs, subs, args.records * OBSERVED_RECORDS, 0, 0,
                                        args.size)
                    finally:
                        if prom is not None:
                            counted = prom.query('count_over_time(up{job="roq"}[10m])')
                            scrapes += int(float(counted[0]["value"][1])) if counted else 0
                            prom.stop()
                        if feed is not None:
                            feed_states += feed.states
                            feed.close()
                    rates[kind].append(raw["count"] / raw["elapsed"] if raw["elapsed"] else 0.0)
            mean = {k: sum(v) / len(v) for k, v in rates.items()}
            r = Result(f"(i) ({label}) {pubs}p -> {exchanges}x -> {subs}s, Prometheus 1 s + live feed",
                       mean["watched"], mean["watched"] * args.size / 1e6)
            r.notes.update(unwatched=[round(x) for x in rates["unwatched"]], watched=[round(x) for x in rates["watched"]],
                           ratio=round(mean["watched"] / mean["unwatched"], 3) if mean["unwatched"] else 0.0,
                           scrapes=scrapes, feed_states=feed_states)
            results.append(r)
            if label == "b":
                results.append(_queue_requests(cluster, where, args))
    return results


def _queue_requests(cluster: Any, where: _Endpoint, args: argparse.Namespace) -> Result:
    """GET /api/v1/queues/bench, 300 times, while a publisher sends to the queue."""
    import client

    conn = client.connect(monitor=where.monitor_endpoint)
    stop = threading.Event()

    def traffic() -> None:
        pub = conn.publisher()
        while not stop.wait(0.001):
            pub.send_many(b"k", [b"x" * args.size] * 20)
        pub.close()

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    try:
        times = _timed_gets(cluster.http_url(), "/api/v1/queues/bench", 300)
    finally:
        stop.set()
        sender.join(10)
        conn.close()
    return Result("(i) GET /api/v1/queues/{queue} (asks its monitor)", latency_ms=percentiles(times),
                  notes={"requests": len(times)})


def _timed_gets(base: str, path: str, n: int) -> list[float]:
    """Milliseconds of each of ``n`` GETs of ``path`` over one kept-alive connection (every answer a 200)."""
    host, port = urllib.parse.urlsplit(base).netloc.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    times = []
    for _ in range(n):
        started = time.perf_counter()
        conn.request("GET", path)
        answer = conn.getresponse()
        answer.read()
        times.append((time.perf_counter() - started) * 1000)
        assert answer.status == 200, answer.status
    conn.close()
    return times


def _status(rng: random.Random, q: int) -> QueueStatus:
    """A monitor's status as a queue of 3 exchanges, 10 publishers and 4 subscribers gives it."""
    from roq.wire.control import LATENCY_BOUNDS_MS

    exchanges = [{"id": f"x{k}-{q:04x}", "frontend": f"tcp://127.0.0.{11 + k}:{20000 + q}",
                  "backend": f"tcp://127.0.0.{11 + k}:{30000 + q}", "pid": 1000 + q, "draining": False,
                  "records_per_s": rng.uniform(0, 5e4), "bytes_per_s": rng.uniform(0, 5e6),
                  "records_out_per_s": rng.uniform(0, 2e5), "bytes_out_per_s": rng.uniform(0, 2e7),
                  "totals": {"records_in": rng.randrange(10**9), "bytes_in": rng.randrange(10**11),
                             "records_out": rng.randrange(10**9), "bytes_out": rng.randrange(10**11)},
                  "cpu_percent": rng.uniform(0, 100), "rss_bytes": 30 << 20, "busy": rng.random(),
                  "mark_records_per_s": 2e5, "publisher_pressure": rng.random(), "dropped": 0, "publishers": 3,
                  "silent_s": 0.1} for k in range(1, 4)]
    return decode({
        "queue": f"q{q:04d}", "pid": 900 + q, "exchanges": exchanges,
        "publishers": [{"id": f"{q:08x}{p:024x}", "exchange": exchanges[p % 3]["id"], "relocating": False,
                        "records_per_s": rng.uniform(0, 2e4)} for p in range(10)],
        "subscribers": [{"id": f"s{q}-{s}", "prefix": b"", "confirmed": [x["id"] for x in exchanges], "live": True,
                         "records_per_s": rng.uniform(0, 5e4), "latency_p50_ms": rng.uniform(0.5, 3),
                         "latency_p99_ms": rng.uniform(3, 30), "gaps": 0, "lost": 0, "duplicates": 0}
                        for s in range(4)],
        "relocations_in_flight": 0, "rules": {"exchange_records_per_s": 2e5},
        "scaling": {"placement": {f"x{k}": f"127.0.0.{11 + k}" for k in range(1, 4)}, "starting": [], "retiring": "",
                    "asking_gcm": False},
        "journal": {"durability": "none", "journal": ""}, "relocations": [],
        "counters": {"relocations": 7, "failovers": 0, "scale_outs": 2, "scale_ins": 1, "relocations_by_rule": 6,
                     "relocations_by_forced": 1, "exchanges_lost": 0, "flaps": 0, "relocations_failed": 0},
        "totals": {"records_in": rng.randrange(10**9), "bytes_in": rng.randrange(10**11),
                   "records_out": rng.randrange(10**9), "bytes_out": rng.randrange(10**11)},
        "latency_histogram": {"bounds_ms": list(LATENCY_BOUNDS_MS),
                              "counts": [rng.randrange(10**6) for _ in range(len(LATENCY_BOUNDS_MS) + 1)],
                              "sum_ms": rng.uniform(0, 1e9)},
        "dropped": {}, "refused": {"exchanges": 0, "publishers": 0, "subscribers": 0},
        "events": [{"seq": e, "time": time.time(), "kind": "relocated", "text": "publisher moved"} for e in range(50)],
    })


def metrics_of_many_queues(queues: int = 1000, scrapes: int = 200) -> Result:
    """``GET /metrics`` of a made-up cluster of ``queues`` running queues, through the GCM's own code."""
    from gcm._census import Snapshot
    from gcm._federation import Federation
    from gcm._http import HttpApi
    from gcm._view import HostView, QueueView, View
    from roq.wire.documents import RUNNING, ExchangeDoc, GcmDoc, HostDoc, MonitorDoc, QueueDoc
    from roq.http import HttpServer
    from roq.loop import Loop
    from roq.runtime import DropCounter
    from roq.server import Dispatcher

    rng = random.Random(7)
    hosts = {f"127.0.0.{11 + h}": HostView(f"127.0.0.{11 + h}", HostDoc(max_exchanges=4000, cpus=2.0))
             for h in range(3)}
    view = View(queues={f"q{q:04d}": QueueView(
        f"q{q:04d}", QueueDoc(state=RUNNING, host="127.0.0.11",
                              placement={f"x{k}": f"127.0.0.{10 + k}" for k in range(1, 4)}),
        monitor=MonitorDoc(endpoint=f"tcp://127.0.0.11:{10000 + q}", host="127.0.0.11"),
        exchanges={f"x{k}": ExchangeDoc(name=f"x{k}-{q:04x}", host=f"127.0.0.{10 + k}") for k in range(1, 4)})
        for q in range(queues)}, hosts=hosts)
    census = type("Census", (), {"snapshots": {f"q{q:04d}": Snapshot(f"q{q:04d}", _status(rng, q), time.time())
                                               for q in range(queues)}})()

    class Shell:
        id = "gcm1"
        leading = True
        connected = True
        leader = me = GcmDoc(id="gcm1")
        federation = Federation("", "root")  # no tree: no link in the metrics

    shell = Shell()
    shell.view, shell.census = view, census  # type: ignore[attr-defined]
    drops = DropCounter(logging.getLogger("bench"), "bench http")
    api = HttpApi(shell, Dispatcher("bench", {}, drops), token="", top=10)
    started = time.perf_counter()  # what the census costs the GCM's loop each round: every queue's lines made
    for snap in census.snapshots.values():
        api.exposition.update(snap)
    round_ms = (time.perf_counter() - started) * 1000
    server = HttpServer(api.handle, where="bench http", drops=drops)
    base = server.bind("127.0.0.1", 0)
    stop = threading.Event()

    loop_of = Loop("bench http", drops, idle=0.02)  # the GCM's own kind of loop, in a thread of its own
    server.attach(loop_of)

    def serve() -> None:
        while not stop.is_set():
            loop_of.turn()

    loop = threading.Thread(target=serve, daemon=True)
    loop.start()
    try:
        times = _timed_gets(base, "/metrics", scrapes)
        host, port = urllib.parse.urlsplit(base).netloc.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("GET", "/metrics")
        body = conn.getresponse().read()
        conn.close()
    finally:
        stop.set()
        loop.join(5)
        server.close()
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return Result(f"(i) GET /metrics, {queues:,} queues (made-up state, the GCM's code)",
                  latency_ms=percentiles(times), notes={"bytes": len(body), "series": series, "scrapes": scrapes,
                                                        "census_round_ms": round(round_ms, 1)})


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    progress("(i) /metrics of 1,000 queues")
    results = [metrics_of_many_queues()]
    results += observed_dataplane(args, progress)
    return results


def render(results: list[Result]) -> list[str]:
    mine = [r for r in results if r.name.startswith("(i)")]
    if not mine:
        return []
    lines = ["", f"{'observability (i)':62} {'records/s':>11} {'x unwatched':>11}  runs unwatched / watched"]
    for r in mine:
        if "ratio" in r.notes:
            lines.append(f"{r.name:62} {r.records_per_s:11,.0f} {r.notes['ratio']:11.3f}  "
                         f"{r.notes['unwatched']} / {r.notes['watched']} ({r.notes['scrapes']} scrapes, "
                         f"{r.notes['feed_states']} feed states)")
    lines.append("target: watched at most 3% below unwatched (x >= 0.97)")
    lines += ["", f"{'':62} {'p50 ms':>11} {'p99 ms':>11}"]
    for r in mine:
        if "ratio" not in r.notes:
            extra = (f"  {r.notes['bytes']:,} bytes, {r.notes['series']:,} series; their lines made in "
                     f"{r.notes['census_round_ms']:,.0f} ms a census round" if "bytes" in r.notes else "")
            lines.append(f"{r.name:62} {r.latency_ms.get('p50', 0):11.2f} {r.latency_ms.get('p99', 0):11.2f}{extra}")
    lines.append("targets: /metrics of 1,000 queues p99 < 100 ms; GET /api/v1/queues/{queue} p99 < 20 ms")
    return lines


def checks(results: list[Result]) -> list[Check]:
    """(i)'s targets: watched at most 3% below unwatched, /metrics of 1,000 queues p99 < 100 ms, a queue's
    statistics p99 < 20 ms."""
    out = []
    for r in results:
        if not r.name.startswith("(i)"):
            continue
        if "ratio" in r.notes:
            out.append(Check(f"{r.name}: watched beside unwatched", r.notes["ratio"], 0.97, False, "x"))
        elif "bytes" in r.notes:
            out.append(Check(f"{r.name}, p99", r.latency_ms.get("p99", float("nan")), 100.0, True, " ms"))
        else:
            out.append(Check(f"{r.name}, p99", r.latency_ms.get("p99", float("nan")), 20.0, True, " ms"))
    return out
