"""Configuration (e) of :mod:`simulation.bench`: elasticity.

On an embedded cluster (ZooKeeper, one GCM, 3 host managers on 127.0.0.11-13) with load processes
(``python -m simulation.load``):

1. reaction time: a queue whose exchange carries two publishers at 0.4 H records/s (H the queue's
   ``exchange_records_per_s``) gets a third; from that publisher's READY to the monitor's first
   ``relocated`` event onto a new exchange, split into detection (-> the ``scale_out`` decision), the GCM
   and host manager (-> ``scale_out_done``, the new exchange joined) and the move. Baseline: the floor of
   the pipeline, a management ``add_exchange`` request until its reply (the exchange registered);
2. the longest ``send()`` of the moved publisher beside that of the publishers not moved, same trials;
3. on the data-plane :class:`~simulation.cluster.LocalCluster` (relocation rule off): records/s delivered
   from 4 publishers through k = 1, 2, 3 exchanges to one subscriber, publishers spread over the
   exchanges as the monitor assigns them.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from typing import Any, Callable

from roq.errors import BrokerTimeoutError
from roq.wire.status import QueueStatus
from roqcli.embedded import wait_for
from simulation.bench_common import Check, Result, percentiles
from simulation.bench_dataplane import bench_roq
from simulation.load import Loads

__all__ = ["run", "render", "checks"]

#: The queue's high-water mark in the reaction trials, records/s per exchange.
HIGH = 1500.0
RULES = {"exchange_records_per_s": HIGH, "kpi_period_s": 1.0, "sustain_s": 1.0, "smoothing": 0.5,
         "cooldown_s": 5.0, "min_exchanges": 1, "max_exchanges": 4}
#: Every "host" is a loopback alias of this one machine, whose CPU the benchmark itself (and whoever else
#: shares the machine) fills: a host's CPU must not stop the GCM from placing an exchange.
PLACEMENT = {"host_cpu_percent": 100.0}
#: Each publisher's rate as a fraction of HIGH: two fit in one exchange, three do not.
SHARE = 0.4
TARGET_MS = 3000.0
FLOOR_SAMPLES = 3
#: How long a trial may wait for the scale-out and the move.
REACTION_LIMIT = 30.0
#: Exchanges in the data-plane runs, and how many times each is run (the best run counts).
EXCHANGES = (1, 2, 3)
ROUNDS = 2


def _create(qm: Any, name: str, timeout: float = 60.0) -> None:
    """Create queue ``name`` with 1 exchange, waiting while every host is too busy for a new queue."""
    from roq.errors import UnavailableError

    deadline = time.monotonic() + timeout
    while True:
        try:
            qm.create(name, exchanges=1)
            return
        except UnavailableError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def _first(events: list[dict[str, Any]], kind: str, since: float, **fields: Any) -> dict[str, Any] | None:
    return next((e for e in events if e["kind"] == kind and e["time"] >= since
                 and all(k in e and e[k] == v for k, v in fields.items())), None)


# ---------------------------------------------------------------------------------------- embedded


def _trial(cluster: Any, loads: Loads, name: str) -> dict[str, Any]:
    """One reaction trial on a fresh queue ``name``; removes it afterwards."""
    import client

    qm = cluster.manager
    rate = SHARE * HIGH
    _create(qm, name)
    try:
        qm.set_rules(name, {**RULES, **PLACEMENT})
        monitor = qm.lookup(name)
        with client.connect(monitor=monitor) as conn:
            def status() -> QueueStatus:
                return conn.status(timeout=10)

            def steady() -> QueueStatus | None:
                s = status()
                ok = (len(s.publishers) == 2 and len(s.exchanges) == 1
                      and s.exchanges[0].records_per_s >= 0.9 * 2 * rate)
                return s if ok else None

            def moved() -> dict[str, Any] | None:
                events = status().events
                refused = _first(events, "scale_out_refused", overload_at)
                if refused is not None:
                    raise RuntimeError(f"queue {name}: {refused['text']}")
                return next((e for e in events if e["kind"] == "relocated" and e["target"] != first
                             and e["time"] >= overload_at), None)

            wait_for(lambda: status().rules["exchange_records_per_s"] == HIGH, 15, f"{name}'s monitor to adopt its rules")
            sub = loads.start("subscribe", monitor, "--duration", "600", "--idle-exit", "0")
            pubs = [loads.start("publish", monitor, "--rate", str(rate), "--duration", "600", "--keys", f"k{i}")
                    for i in range(2)]
            first = wait_for(steady, 30, f"2 publishers at {2 * rate:,.0f} rec/s on one exchange").exchanges[0].id
            pubs.append(loads.start("publish", monitor, "--rate", str(rate), "--duration", "600", "--keys", "k2"))
            overload_at = time.time()
            try:
                event = wait_for(moved, REACTION_LIMIT, "a publisher moved to a new exchange")
            except BrokerTimeoutError as exc:
                s = status()
                seen = "; ".join(e["text"] for e in s.events if e["time"] >= overload_at) or "none"
                loads_now = ", ".join(f"{x.id} {x.records_per_s:,.0f} rec/s" for x in s.exchanges)
                raise BrokerTimeoutError(f"queue {name}: {exc} (exchanges: {loads_now}; events since the overload: {seen})") from None
            # the moved publisher must send through its new exchange for a while before its report means much
            wait_for(lambda: any(p.id == event["publisher"] and p.exchange == event["target"]
                              and p.records_per_s > rate / 2 for p in status().publishers),
                  15, "the moved publisher carried by the new exchange")
            events = status().events
            reports = [loads.report(p, stop=True) for p in pubs]
            loads.report(sub, stop=True)
    finally:
        qm.remove(name)
    decided = _first(events, "scale_out", overload_at)
    joined = _first(events, "scale_out_done", overload_at)
    movers = {e["publisher"] for e in events if e["kind"] == "relocated" and e["time"] >= overload_at}
    return {
        "reaction_ms": (event["time"] - overload_at) * 1000,
        "detect_ms": (decided["time"] - overload_at) * 1000 if decided else None,
        "spawn_ms": (joined["time"] - decided["time"]) * 1000 if decided and joined else None,
        "move_ms": (event["time"] - joined["time"]) * 1000 if joined else None,
        "relocation_ms": event["duration_ms"],
        "moved_send_ms": next(r["longest_send_ms"] for r in reports if r["publisher"] == event["publisher"]),
        "still_send_ms": max((r["longest_send_ms"] for r in reports if r["publisher"] not in movers), default=None),
        "moves": len(movers),
    }


def _floor(cluster: Any, samples: int) -> list[float]:
    """Milliseconds from an ``add_exchange`` request to its reply (the new exchange registered)."""
    qm = cluster.manager
    out = []
    for i in range(samples):
        name = f"floor{i}"
        _create(qm, name)
        try:
            qm.set_rules(name, PLACEMENT)
            started = time.monotonic()
            qm.add_exchange(name)
            out.append((time.monotonic() - started) * 1000)
        finally:
            qm.remove(name)
    return out


def bench_reaction(trials: int, progress: Callable[[str], None]) -> list[Result]:
    """Parts 1 and 2: reaction time and the pause of a moved publisher, with their baselines."""
    from roqcli.embedded import EmbeddedCluster

    log_dir = tempfile.mkdtemp(prefix="roq-bench-")
    runs = []
    with EmbeddedCluster(hosts=3, log_dir=log_dir) as cluster, Loads(log_dir) as loads:
        progress(f"(e) floor: add_exchange -> exchange registered, {FLOOR_SAMPLES} samples")
        floor = _floor(cluster, FLOOR_SAMPLES)
        for i in range(trials):
            progress(f"(e) overload -> new exchange carrying traffic, trial {i + 1}/{trials}")
            runs.append(_trial(cluster, loads, f"elastic{i}"))
    progress(f"(e) logs in {log_dir}")

    def column(key: str) -> list[float]:
        return [r[key] for r in runs if r[key] is not None]

    return [
        Result("(e) overload -> new exchange carrying traffic", latency_ms=percentiles(column("reaction_ms")),
               notes={"trials": trials, "target_ms": TARGET_MS, "rules": RULES, "share": SHARE,
                      "parts": {k: percentiles(column(k)) for k in ("detect_ms", "spawn_ms", "move_ms", "relocation_ms")},
                      "runs": runs}),
        Result("(e) floor: add_exchange -> exchange registered", latency_ms=percentiles(floor),
               notes={"trials": FLOOR_SAMPLES}),
        Result("(e) longest send(), the moved publisher", latency_ms=percentiles(column("moved_send_ms")),
               notes={"trials": trials, "baseline": percentiles(column("still_send_ms"))}),
    ]


# ---------------------------------------------------------------------------------------- data plane


def bench_exchanges(records: int, size: int, progress: Callable[[str], None]) -> list[Result]:
    """Part 3: 4 publishers -> k exchanges -> 1 subscriber, as fast as they can, for k = 1, 2, 3.

    The ks are run in turn, :data:`ROUNDS` times over, and the best run of each k is kept: a shared
    machine slows some runs down, never speeds one up.
    """
    from simulation.cluster import LocalCluster

    runs: dict[int, list[dict[str, Any]]] = {k: [] for k in EXCHANGES}
    for round_ in range(ROUNDS):
        for k in EXCHANGES:
            progress(f"(e) 4 publishers -> {k} exchange{'s' * (k > 1)} -> 1 subscriber, {records:,} records, "
                     f"round {round_ + 1}/{ROUNDS}")
            with LocalCluster(address="127.0.0.11", exchanges=k, log_dir=tempfile.mkdtemp(prefix="roq-bench-"),
                              monitor_args=["--no-relocation-rule"]) as cluster:
                raw = bench_roq(cluster, "throughput", 4, 1, records, 0, 0, size)
            raw["rate"] = raw["count"] / raw["elapsed"] if raw["elapsed"] else 0.0
            runs[k].append(raw)
    out = []
    expected = records // 4 * 4  # as bench_roq splits them
    for k in EXCHANGES:
        best = max(runs[k], key=lambda raw: raw["rate"])
        spread = sorted(Counter(s["exchange"] for s in best["publisher_stats"]).values(), reverse=True)
        out.append(Result(f"(e) 4 publishers -> {k} exchange{'s' * (k > 1)} -> 1 subscriber", best["rate"],
                          best["rate"] * size / 1e6, expected - min(raw["count"] for raw in runs[k]),
                          notes={"exchanges": k, "spread": spread, "records": records,
                                 "rounds": [round(raw["rate"]) for raw in runs[k]]}))
    return out


# ---------------------------------------------------------------------------------------- run, render


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    return bench_reaction(min(args.trials, 3), progress) + bench_exchanges(args.records // 2, args.size, progress)


def render(results: list[Result]) -> list[str]:
    """The elasticity section of the report (empty without (e) results)."""
    by = {r.name: r for r in results if r.name.startswith("(e)")}
    if not by:
        return []
    lines = [""]
    reaction = by.get("(e) overload -> new exchange carrying traffic")
    if reaction is not None:
        n = reaction.notes
        lines += [
            f"elasticity: H = {HIGH:,.0f} rec/s per exchange, publishers at {SHARE * HIGH:,.0f} rec/s, "
            f"KPI period {RULES['kpi_period_s']:g} s, sustain {RULES['sustain_s']:g} s, smoothing {RULES['smoothing']:g}",
            f"{'':58} {'p50 ms':>9} {'max ms':>9}  trials",
        ]

        def row(name: str, lat: dict[str, Any], trials: Any) -> None:
            lines.append(f"{name:58} {lat.get('p50', float('nan')):9.1f} {lat.get('max', float('nan')):9.1f}  {trials}")

        row(reaction.name, reaction.latency_ms, n["trials"])
        for key, label in (("detect_ms", "detection: overload -> scale-out decision"),
                           ("spawn_ms", "GCM + host manager: decision -> exchange joined"),
                           ("move_ms", "move: joined -> publisher relocated"),
                           ("relocation_ms", "  of which the relocation itself")):
            row("    " + label, n["parts"][key], n["trials"])
        floor = by["(e) floor: add_exchange -> exchange registered"]
        row("    baseline " + floor.name[4:], floor.latency_ms, floor.notes["trials"])
        send = by["(e) longest send(), the moved publisher"]
        row(send.name, send.latency_ms, send.notes["trials"])
        row("    baseline: longest send(), publishers not moved", send.notes["baseline"], send.notes["trials"])
        lines.append(f"target: overload -> new exchange carrying traffic <= {TARGET_MS:,.0f} ms with a 1 s KPI period")
    scaling = [r for r in results if r.name.startswith("(e) 4 publishers")]
    if scaling:
        base = scaling[0].records_per_s
        lines += ["", f"{'(e) exchanges added, relocation rule off':58} {'records/s':>11} {'x k=1':>6} {'lost':>6}  "
                      "publishers per exchange; each round's records/s"]
        for r in scaling:
            ratio = r.records_per_s / base if base else float("nan")
            lines.append(f"{r.name:58} {r.records_per_s:11,.0f} {ratio:6.2f} {r.lost:6d}  {r.notes['spread']}; "
                         f"{', '.join(f'{x:,}' for x in r.notes['rounds'])}")
        lines.append(f"{scaling[0].notes['records']:,} records a run, best of {ROUNDS} rounds; every process shares "
                     f"the machine's {os.cpu_count()} cores and one subscriber receives everything: an exchange "
                     "more adds a process, not a core")
    return lines


def checks(results: list[Result]) -> list[Check]:
    """(e)'s target: from an exchange's overload to a new exchange carrying traffic within :data:`TARGET_MS`,
    every trial."""
    by = {r.name: r for r in results}
    reaction = by.get("(e) overload -> new exchange carrying traffic")
    if reaction is None:
        return []
    return [Check("(e) overload -> new exchange carrying traffic, slowest trial",
                  reaction.latency_ms.get("max", float("nan")), TARGET_MS, True, " ms")]
