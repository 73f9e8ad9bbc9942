"""(r) Starting a process: an exchange from :func:`roq.process.spawn` to its ready line, forked from this process's
prefork server (:mod:`roq.prefork`) beside a new interpreter (``ROQ_PREFORK=0``), the two kinds of start taken in
turn, :data:`TRIALS` of each; the wall time to ready and the CPU the exchange spent by then.

This is how fast a host manager answers an assignment (a scale-out's new exchange, a crashed one restarted); the
exchanges join one monitor on 127.0.0.45 and are stopped at once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable

import psutil

from roq.process import Child, spawn, stop_all
from roq.wire.ready import MonitorReady
from simulation.bench_common import Check, Result

__all__ = ["run", "render", "checks"]

ADDRESS = "127.0.0.45"
TRIALS = 10
KINDS = {"forked": "1", "new interpreter": "0"}  # what ROQ_PREFORK says


def _start(monitor: str) -> tuple[float, float]:
    """Start one exchange; seconds to its ready line, and the CPU seconds it spent by then."""
    started = time.perf_counter()
    child = spawn("exchange", "exchange", ["--monitor", monitor, "--address", ADDRESS])
    try:
        child.wait_ready(60)
        took = time.perf_counter() - started
        times = psutil.Process(child.pid).cpu_times()
        return took, times.user + times.system
    finally:
        child.stop()


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    progress(f"(r) starting an exchange: forked beside a new interpreter, {TRIALS} of each")
    monitor: Child = spawn("monitor", "monitor", ["--address", ADDRESS, "--port", "0", "--queue", "bench-spawn"])
    figures: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    before = os.environ.get("ROQ_PREFORK")
    try:
        monitor.wait_ready(60)
        endpoint = monitor.ready_as(MonitorReady).endpoint
        _start(endpoint)  # the server imports an exchange's code once, before the first figure
        for _ in range(TRIALS):
            for kind, flag in KINDS.items():
                os.environ["ROQ_PREFORK"] = flag
                figures[kind].append(_start(endpoint))
    finally:
        if before is None:
            os.environ.pop("ROQ_PREFORK", None)
        else:
            os.environ["ROQ_PREFORK"] = before
        stop_all([monitor])
    out = []
    for kind, rows in figures.items():
        walls = sorted(1000 * w for w, _ in rows)
        out.append(Result(name=f"(r) {kind}", latency_ms={"p50": statistics.median(walls), "max": walls[-1]},
                          notes={"cpu_ms": statistics.median(1000 * c for _, c in rows), "trials": len(rows)}))
    return out


def _rows(results: list[Result]) -> dict[str, Result]:
    return {r.name[4:]: r for r in results if r.name.startswith("(r)")}


def render(results: list[Result]) -> list[str]:
    rows = _rows(results)
    if not rows:
        return []
    lines = ["", f"{'(r) an exchange started, to its ready line':46} {'p50 ms':>9} {'max ms':>9} {'CPU ms':>9}  trials"]
    for kind, r in rows.items():
        lines.append(f"{kind:46} {r.latency_ms['p50']:9.1f} {r.latency_ms['max']:9.1f} {r.notes['cpu_ms']:9.1f}  "
                     f"{r.notes['trials']}")
    forked, new = rows.get("forked"), rows.get("new interpreter")
    if forked and new and forked.latency_ms["p50"]:
        lines.append(f"forked / new interpreter: {forked.latency_ms['p50'] / new.latency_ms['p50']:.2f}x the time "
                     f"(target <= 0.25x), {forked.notes['cpu_ms'] / max(new.notes['cpu_ms'], 1e-9):.2f}x the CPU")
    return lines


def checks(results: list[Result]) -> list[Check]:
    rows = _rows(results)
    forked, new = rows.get("forked"), rows.get("new interpreter")
    if not (forked and new and new.latency_ms["p50"]):
        return []
    return [Check("(r) an exchange's start, forked / new interpreter", forked.latency_ms["p50"] / new.latency_ms["p50"],
                  0.25, True, "x")]
