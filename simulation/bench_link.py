"""(o) Across a link (:mod:`client.link`): one publisher into a durable queue at one site, a subscriber of it there
and one at a second site, where ``python -m client.link`` carries the queue into a queue of its own; both
subscribers at once, so that the figure across the link and the one within a site come from the same records
in the same run. Throughput as fast as the publisher sends (the batch API, as (g)); latency paced at ``--rate``.

The sites are loopback addresses (127.0.0.18, 127.0.0.19), each a monitor, an exchange and, at the first, the
journal the link reads (``interval``: written at once, synced every 100 ms).
"""

from __future__ import annotations

import argparse
import tempfile
import types
from typing import Callable

from roq.process import Child, spawn
from roq.wire.ready import MonitorReady
from simulation.bench_common import Check, Result, percentiles
from simulation.bench_dataplane import bench_roq

__all__ = ["run", "checks"]

SITES = ("127.0.0.18", "127.0.0.19")


def _site(address: str, directory: str, durable: bool, children: list[Child]) -> str:
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
        here = _site(SITES[0], tempfile.mkdtemp(prefix="roq-bench-link-"), True, children)
        there = _site(SITES[1], "", False, children)
        link = spawn("link", "client.link", ["--name", "bench", "--source", here, "--target", there,
                                             "--log-level", "WARNING"])
        children.append(link)
        link.wait_ready(60)
        source = types.SimpleNamespace(monitor_endpoint=here)
        progress("(o) throughput within a site and across a link")
        raw = bench_roq(source, "throughput", 1, 2, n, 0, 0, size, True, subscribe_at=[here, there])
        progress("(o) latency within a site and across a link")
        lat = bench_roq(source, "latency", 1, 2, 0, args.rate, args.latency_seconds, size, True,
                        subscribe_at=[here, there])
    finally:
        for child in reversed(children):
            child.stop()
    results = []
    for name, monitor in (("(o) within a site: a subscriber of the durable queue", here),
                          ("(o) across one link: a subscriber at a second site", there)):
        out = raw["per_monitor"][monitor]
        rate = out["count"] / out["elapsed"] if out["elapsed"] else 0.0
        r = Result(name, rate, rate * size / 1e6, n - out["count"])
        r.latency_ms = percentiles(lat["per_monitor"][monitor]["latency"])
        results.append(r)
    return results


def checks(results: list[Result]) -> list[Check]:
    """Across one link at least half the records/s of a subscriber at the source's site, and p99 at most
    its p99 plus 2 ms."""
    rows = [r for r in results if r.name.startswith("(o)")]
    if len(rows) != 2:
        return []
    within, across = rows
    return [Check("(o) across a link / within a site, records/s", across.records_per_s / max(within.records_per_s, 1e-9),
                  0.5, False),
            Check("(o) across a link, p99 ms beyond within a site's", across.latency_ms.get("p99", float("nan"))
                  - within.latency_ms.get("p99", float("nan")), 2.0, True, " ms")]


def render(results: list[Result]) -> list[str]:
    """The ratio of (o)'s two rows, beside its targets."""
    held = checks(results)
    if not held:
        return []
    ratio, extra = held
    return ["", f"(o) across one link beside within a site: throughput {ratio.value:.2f}x (target >= 0.5); "
                f"p99 {extra.value:+.2f} ms (target <= +2 ms)"]
