"""(n) the GCM's HTTP server under abuse: its health checks and its CPU, quiet and abused, in one run.

A real embedded cluster (ZooKeeper, a GCM, a host manager, all on loopback) with one queue. Health checks
(``/healthz`` and ``/readyz`` in turn, each on a connection of its own, every 0.25 s, from 127.0.0.1, made by a
process of their own: :class:`simulation.http_abuse.Prober`) are timed over two windows of :data:`WINDOW_S`:

* **quiet**, the baseline: the health checks alone;
* **abused**: as the window opens, 64 readers of the live stream that never read (127.0.0.2), a ``HEAD`` of the
  stream held open and a slowloris of 200 connections from the health checks' own address (127.0.0.1); once it
  is at full strength (a second or two), a dashboard's feed, 2,000 health checks pipelined on one connection
  and a client that asks for the queue's statistics and half-closes. All of it goes on until the window's end.

For each window: the health checks' p50 / p99 / max, and the GCM process's CPU over it (user and system, as a
share of one core). Targets, abused: every health check answered 200, the slowest within :data:`HEALTH_S`, the
GCM under :data:`CPU_RATIO` of a core.
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import threading
import time
from typing import Any, Callable

from simulation.bench_common import Check, Result, percentiles
from simulation.http_abuse import (Answer, Feed, Prober, Readers, Slowloris, half_closed_request, hold_head,
                                   pipelined_health_checks)

__all__ = ["run", "render", "checks"]

WINDOW_S = 10.0
#: The slowest health check under abuse, seconds at most.
HEALTH_S = 1.0
#: The GCM's CPU under abuse, share of a core at most.
CPU_RATIO = 0.20
SLOWLORIS = 200
READERS = 64
PIPELINED = 2000
QUEUE = "abused"
QUIET = "(n) health checks, quiet (the baseline)"
ABUSED = "(n) health checks, abused"
# each client its own address: the health checks share theirs with the slowloris, the readers have one of their
# own (its share of the connections gets a stream, the others are refused)
PROBER, SLOW, READER, FEED, PIPELINER, HEAD, HALF = ("127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.5",
                                                     "127.0.0.6", "127.0.0.7")


def _window(port: int, gcm: Any, name: str, begin: Callable[[], None] = lambda: None) -> Result:
    """Health checks for :data:`WINDOW_S` from the moment they start, ``begin()`` called then, and the GCM's CPU
    over the window."""
    with Prober(port, PROBER) as prober:
        cpu_before, started = gcm.cpu_times(), time.monotonic()
        begin()
        time.sleep(max(0.0, started + WINDOW_S - time.monotonic()))
        cpu_after, elapsed = gcm.cpu_times(), time.monotonic() - started
        answers: list[Answer] = prober.stop()
    cpu = (cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system) / elapsed
    return Result(name, latency_ms=percentiles([a.seconds * 1000 for a in answers]),
                  notes={"cpu": round(cpu, 4), "checks": len(answers), "elapsed_s": round(elapsed, 2),
                         "not_200": sum(a.status != 200 for a in answers)})


class _Abuse:
    """The abused window's clients: begun as the window opens, closed after it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.slowloris = Slowloris(port, SLOWLORIS, SLOW)
        self.readers: Readers | None = None
        self.head: socket.socket | None = None
        self.feed: Feed | None = None
        self.pipelined: list[int] = []
        self.half_closed = 0

    def begin(self) -> None:
        """The readers, the HEAD and the slowloris; once it is at full strength, the feed, the pipelined health
        checks and the half-closed request (this returns once those two are answered).

        Raises:
            RuntimeError: the slowloris was not at full strength within 30 s.
            OSError: a client could not connect.
        """
        self.readers = Readers(self.port, READERS, READER)
        self.head, _ = hold_head(self.port, HEAD)
        self.slowloris.start()
        deadline = time.monotonic() + 30
        while not (self.slowloris.connects >= SLOWLORIS and self.slowloris.closed > 0):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the slowloris made {self.slowloris.connects} connections in 30 s, "
                                   f"{self.slowloris.closed} closed by the GCM")
            time.sleep(0.1)  # a sampling period
        self.feed = Feed(self.port, FEED)
        self.feed.start()
        pipeliner = threading.Thread(target=lambda: self.pipelined.append(
            pipelined_health_checks(self.port, PIPELINER, PIPELINED)), daemon=True)
        pipeliner.start()
        got = half_closed_request(self.port, HALF, f"/api/v1/queues/{QUEUE}")
        self.half_closed = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.1 ") else 0
        pipeliner.join(WINDOW_S)

    def seen(self) -> dict[str, int]:
        """What the clients saw of the server."""
        return {"slowloris": self.slowloris.connects, "slowloris_closed": self.slowloris.closed,
                "readers_streaming": self.readers.streaming() if self.readers is not None else 0,
                "feed_states": len(self.feed.states) if self.feed is not None else 0,
                "pipelined": self.pipelined[0] if self.pipelined else 0, "half_closed": self.half_closed}

    def close(self) -> None:
        if self.feed is not None:
            self.feed.stop()
        self.slowloris.stop()
        if self.readers is not None:
            self.readers.close()
        if self.head is not None:
            self.head.close()


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    """(n): the quiet window, then the abused one, on one cluster."""
    import psutil

    from roqcli.embedded import EmbeddedCluster

    work = tempfile.mkdtemp(prefix="roq-bench-abuse-")
    progress("(n) the GCM's HTTP server: a cluster of one host, one queue")
    with EmbeddedCluster(hosts=1, log_dir=work) as cluster:
        port = int(cluster.http_url().rsplit(":", 1)[1])
        gcm = psutil.Process(cluster.gcms["gcm1"].pid)
        cluster.manager.create(QUEUE)  # before both windows: its census round is the GCM's in both
        progress(f"(n) quiet: {WINDOW_S:g} s of health checks alone")
        quiet = _window(port, gcm, QUIET)
        progress(f"(n) abused: {WINDOW_S:g} s of health checks beside a slowloris of {SLOWLORIS} connections, "
                 f"{READERS} readers that never read, a HEAD held open, {PIPELINED:,} pipelined health checks, a "
                 "half-closing client")
        abuse = _Abuse(port)
        try:
            abused = _window(port, gcm, ABUSED, abuse.begin)
            abused.notes.update(abuse.seen())
        finally:
            abuse.close()
    return [quiet, abused]


def render(results: list[Result]) -> list[str]:
    mine = {r.name: r for r in results if r.name in (QUIET, ABUSED)}
    if not mine:
        return []
    title = "the GCM's HTTP server under abuse (n)"
    lines = ["", f"{title:62} {'checks':>7} {'not 200':>7} {'p50 ms':>7} "
                 f"{'p99 ms':>7} {'max ms':>7} {'GCM CPU':>8}"]
    for r in mine.values():
        lat, n = r.latency_ms, r.notes
        lines.append(f"{r.name:62} {n['checks']:7d} {n['not_200']:7d} {lat.get('p50', float('nan')):7.2f} "
                     f"{lat.get('p99', float('nan')):7.2f} {lat.get('max', float('nan')):7.1f} {n['cpu']:8.1%}")
    if ABUSED in mine:
        n = mine[ABUSED].notes
        lines.append(f"abused: slowloris {n['slowloris']} connections ({n['slowloris_closed']} closed by the GCM), "
                     f"{n['readers_streaming']} of {READERS} readers streaming, {n['feed_states']} feed states, "
                     f"{n['pipelined']:,} of {PIPELINED:,} pipelined answered, the half-closed request "
                     f"{n['half_closed']}")
    lines.append(f"targets (abused): every health check 200, the slowest <= {HEALTH_S:g} s; the GCM <= "
                 f"{CPU_RATIO:.0%} of a core")
    return lines


def checks(results: list[Result]) -> list[Check]:
    """(n)'s targets, under abuse: every health check answered 200, the slowest within :data:`HEALTH_S`, the
    GCM's process under :data:`CPU_RATIO` of a core."""
    out = []
    for r in results:
        if r.name == ABUSED:
            out += [Check("(n) abused: health checks not answered 200", r.notes["not_200"], 0, True),
                    Check("(n) abused: slowest health check", r.latency_ms.get("max", float("nan")) / 1000,
                          HEALTH_S, True, " s"),
                    Check("(n) abused: the GCM's CPU, share of a core", r.notes["cpu"], CPU_RATIO, True)]
    return out
