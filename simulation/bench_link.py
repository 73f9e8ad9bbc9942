"""(o) Across links (:mod:`client.link`): one publisher into a durable queue at a leaf site, carried by a link
into a branch site's durable queue and by a second link into the root site's queue; a subscriber at each site, all
at once, so that the figures within the leaf, across one link and across two come from the same records in the
same run. Throughput as fast as the publisher sends (the batch API, as (g)); latency paced at ``--rate``. The
links are on demand (they carry what the subscribers beyond them want): then the time from a subscriber's
joining at the root to its first record from the leaf, while the leaf publishes, over :data:`JOINS` joins.

The sites are loopback addresses (127.0.0.18, .19, .20), each a monitor, an exchange and, at the leaf and the
branch, the journal a link reads (``interval``: written at once, synced every 100 ms).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import types
from typing import Callable

import client
from roq.process import Child, spawn
from roq.wire.ready import MonitorReady
from simulation.bench_common import Check, Result, percentiles
from simulation.bench_dataplane import bench_roq

__all__ = ["run", "checks", "render", "site"]

SITES = ("127.0.0.18", "127.0.0.19", "127.0.0.20")
#: subscribers joined at the root, one after the other, for the join-to-first-record figure
JOINS = 20
#: records a second the leaf's publisher sends while subscribers join at the root
JOIN_RATE = 2000


def site(address: str, directory: str, durable: bool, children: list[Child]) -> str:
    """A queue at ``address`` (with a journal in ``directory`` if ``durable``): its monitor's endpoint."""
    monitor = spawn("monitor", "monitor", ["--address", address, "--port", "0", "--queue", "bench", "--durability",
                                           "interval" if durable else "none", "--no-relocation-rule",
                                           "--log-level", "WARNING"])
    children.append(monitor)
    monitor.wait_ready()
    endpoint = monitor.ready_as(MonitorReady).endpoint
    if durable:
        journal = spawn("journal", "exchange.journal", ["--queue", "bench", "--directory", directory, "--address",
                                                        address, "--monitor", endpoint, "--durability", "interval",
                                                        "--log-level", "WARNING"])
        children.append(journal)
        journal.wait_ready(30)
    exchange = spawn("exchange", "exchange", ["--monitor", endpoint, "--address", address, "--log-level", "WARNING"])
    children.append(exchange)
    exchange.wait_ready()
    return endpoint


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    n, size = args.records, args.size
    children: list[Child] = []
    try:
        leaf = site(SITES[0], tempfile.mkdtemp(prefix="roq-bench-link-"), True, children)
        branch = site(SITES[1], tempfile.mkdtemp(prefix="roq-bench-link-"), True, children)
        root = site(SITES[2], "", False, children)
        for name, here, there in (("leaf", leaf, branch), ("branch", branch, root)):
            link = spawn("link", "client.link", ["--name", name, "--source", here, "--target", there,
                                                 "--on-demand", "--log-level", "WARNING"])
            children.append(link)
            link.wait_ready(60)
        source = types.SimpleNamespace(monitor_endpoint=leaf)
        progress("(o) throughput within a site, across one link and across two")
        raw = bench_roq(source, "throughput", 1, 3, n, 0, 0, size, True, subscribe_at=[leaf, branch, root])
        progress("(o) latency within a site, across one link and across two")
        lat = bench_roq(source, "latency", 1, 3, 0, args.rate, args.latency_seconds, size, True,
                        subscribe_at=[leaf, branch, root])
        progress(f"(o) {JOINS} subscribers joining at the root: time to their first record from the leaf")
        joins = _joins(leaf, root, size)
    finally:
        for child in reversed(children):
            child.stop()
    results = []
    for name, monitor in (("(o) within a site: a subscriber of the durable queue", leaf),
                          ("(o) across one link: a subscriber at a second site", branch),
                          ("(o) across two links: a subscriber at a third site", root)):
        out = raw["per_monitor"][monitor]
        rate = out["count"] / out["elapsed"] if out["elapsed"] else 0.0
        r = Result(name, rate, rate * size / 1e6, n - out["count"])
        r.latency_ms = percentiles(lat["per_monitor"][monitor]["latency"])
        results.append(r)
    r = Result("(o) a subscriber joining at the root, to its first record across two links")
    r.latency_ms = percentiles(joins)
    results.append(r)
    return results


def _joins(leaf: str, root: str, size: int) -> list[float]:
    """Milliseconds from each of :data:`JOINS` subscribers' joining at the root to its first record, while the leaf
    publishes :data:`JOIN_RATE` records a second; each leaves before the next joins."""
    stop = threading.Event()

    def publish() -> None:
        with client.connect(leaf) as conn:
            pub = conn.publisher()
            payload = b"j" * size
            while not stop.is_set():
                pub.send(b"join", payload)
                time.sleep(1 / JOIN_RATE)
            pub.flush(10)

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    out: list[float] = []
    try:
        with client.connect(root) as conn:
            for _ in range(JOINS):
                started = time.monotonic()
                sub = conn.subscriber(b"join")
                first = sub.recv(timeout=10)  # none within 10 s counts as 10 s
                out.append((time.monotonic() - started if first is not None else 10.0) * 1000)
                sub.close()
                time.sleep(0.3)  # its interest is taken back along the links before the next one joins
    finally:
        stop.set()
        publisher.join(30)
    return out


def checks(results: list[Result]) -> list[Check]:
    """Across two links (a leaf to the root) at least half the records/s of a subscriber at the source's site, p99
    at most its p99 plus 2 ms a link, and a subscriber joining at the root has its first record within 100 ms
    (p99)."""
    rows = {r.name.split(":")[0].split(",")[0]: r for r in results if r.name.startswith("(o)")}
    within, two, join = (rows.get("(o) within a site"), rows.get("(o) across two links"),
                         rows.get("(o) a subscriber joining at the root"))
    if within is None or two is None or join is None:
        return []
    nan = float("nan")
    return [Check("(o) across two links / within a site, records/s",
                  two.records_per_s / max(within.records_per_s, 1e-9), 0.5, False),
            Check("(o) across two links, p99 ms beyond within a site's",
                  two.latency_ms.get("p99", nan) - within.latency_ms.get("p99", nan), 4.0, True, " ms"),
            Check("(o) joining at the root to the first record across two links, p99",
                  join.latency_ms.get("p99", nan), 100.0, True, " ms")]


def render(results: list[Result]) -> list[str]:
    """(o)'s ratios beside its targets."""
    held = checks(results)
    if not held:
        return []
    ratio, extra, join = held
    return ["", f"(o) across two links beside within a site: throughput {ratio.value:.2f}x (target >= 0.5); "
                f"p99 {extra.value:+.2f} ms (target <= +4 ms, 2 a link); a subscriber joining at the root has its "
                f"first record after {join.value:.1f} ms (p99, target <= 100 ms)"]
