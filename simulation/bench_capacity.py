"""Configuration (h) of :mod:`simulation.bench`: capacity that grows with exchanges, on emulated hosts.

An embedded cluster of :data:`HOSTS` emulated hosts, each with a CPU budget of its own (``--cpus``, a
cgroup quota on its host manager and everything it starts: a fraction of a core, like the small instances
of the EQS paper), so that each exchange is limited by its host, not by the machine the benchmark shares
with its load. One queue is held at k = 1, 2, 3, 4 exchanges in turn (``min_exchanges = max_exchanges = k``;
the GCM spreads them over the hosts). :data:`PUBLISHERS` load processes outside the cluster send as fast as
the queue takes them, one record per batch (every record a key of its own), so that an exchange's
per-batch work is what its budget limits; one subscriber receives everything.

For each k, once k exchanges carry publishers and all are busy: the records/s the queue's exchanges
forward, sampled from the monitor's status for :data:`SAMPLE_S` seconds. The baseline is k = 1 in the same
run; the target is 3.2x at k = 4. At the end, the subscriber's audit (lost, duplicated, reordered) and the
publishers' fail-overs and retransmissions over the whole run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any, Callable

from roq.wire.status import QueueStatus
from roqcli.embedded import wait_for
from simulation.audit import compare
from simulation.bench_common import Check, Result
from simulation.load import Loads

__all__ = ["run", "render", "checks", "bench_capacity"]

HOSTS = 4
#: Each host's CPU budget, cores.
CPUS = 0.1
PUBLISHERS = 8
EXCHANGES = (1, 2, 3, 4)
SAMPLE_S = 8.0
#: Longest wait for k exchanges to carry publishers and be busy, seconds.
SETTLE_S = 90.0
TARGET = 3.2
#: what a queue at 2 exchanges carries beside 1, at least (a saturated exchange sheds its load to a second)
TWO = 1.8
RULES = {"kpi_period_s": 1.0, "sustain_s": 1.0, "smoothing": 0.5, "cooldown_s": 4.0}


def _forwarded(status: Callable[[], QueueStatus], seconds: float) -> tuple[float, list[float]]:
    """The queue's forwarded records/s averaged over ``seconds``, and each exchange's average."""
    totals: list[float] = []
    each: dict[str, list[float]] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for x in status().exchanges:
            each.setdefault(x.id, []).append(x.records_per_s)
        totals.append(sum(x[-1] for x in each.values()))
        time.sleep(0.5)  # a sampling period
    return sum(totals) / len(totals), [sum(v) / len(v) for v in each.values()]


def bench_capacity(progress: Callable[[str], None], *, cpus: float = CPUS, sample_s: float = SAMPLE_S) -> list[Result]:
    import client
    from roqcli.embedded import EmbeddedCluster
    from roqcli.emulation import HostBudget

    log_dir = tempfile.mkdtemp(prefix="roq-bench-")
    rows: list[dict[str, Any]] = []
    with EmbeddedCluster(hosts=HOSTS, budgets=[HostBudget(cpus)], log_dir=log_dir) as cluster, Loads(log_dir) as loads:
        qm = cluster.manager
        qm.create("capacity", cluster.addresses[0], exchanges=1)
        qm.set_rules("capacity", {**RULES, "min_exchanges": 1, "max_exchanges": 1})
        monitor = qm.lookup("capacity")
        with client.connect(monitor=monitor) as conn:
            def status() -> QueueStatus:
                return conn.status(timeout=10)

            sub = loads.start("subscribe", monitor, "--idle-exit", "5")
            pubs = [loads.start("publish", monitor, "--rate", "0", "--duration", "900", "--keys", f"a{i},b{i}",
                                "--key-run", "1", "--buffer-bytes", str(256 << 10)) for i in range(PUBLISHERS)]
            for k in EXCHANGES:
                progress(f"(h) {HOSTS} hosts of {cpus:g} core, the queue at {k} exchange{'s' * (k > 1)}")
                qm.set_rules("capacity", {"min_exchanges": k, "max_exchanges": k})
                started = time.monotonic()
                wait_for(lambda: (lambda s: len(s.exchanges) == k and not s.relocations
                                  and len(s.publishers) == PUBLISHERS
                                  and all(x.publishers and x.busy > 0.8 for x in s.exchanges))(status()),
                         SETTLE_S, f"{k} exchanges carrying publishers, all busy")
                settled = time.monotonic() - started
                rate, each = _forwarded(status, sample_s)
                s = status()
                hosts = sorted(x["Host"] for x in qm.stats("capacity")["Queue"]["Exchanges"])
                rows.append({"exchanges": k, "records_per_s": rate, "each": [round(x) for x in each],
                             "hosts": hosts, "publishers": [x.publishers for x in s.exchanges],
                             "busy": [round(x.busy, 2) for x in s.exchanges], "settle_s": round(settled, 1)})
            reports = [loads.report(p, stop=True) for p in pubs]
            sent = {r["publisher"]: r["keys"] for r in reports}
            got = loads.report(sub)
            audit = compare(got["audit"], sent, b"")
        qm.remove("capacity")
    progress(f"(h) logs in {log_dir}")
    moves = {k: sum(r["stats"][k] for r in reports) for k in ("relocations", "failovers", "retransmitted", "panics")}
    base = rows[0]["records_per_s"]
    return [Result(f"(h) {HOSTS} hosts of {cpus:g} core, queue at {r['exchanges']} exchange{'s' * (r['exchanges'] > 1)}",
                   r["records_per_s"], notes={**r, "x_one": r["records_per_s"] / base if base else 0.0,
                                              "audit": audit, "moves": moves, "cpus": cpus})
            for r in rows]


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    return bench_capacity(progress)


def render(results: list[Result]) -> list[str]:
    """The capacity section of the report (empty without (h) results)."""
    rows = [r for r in results if r.name.startswith("(h)")]
    if not rows:
        return []
    lines = ["", f"{'(h) capacity on emulated hosts, one record per batch':62} {'records/s':>11} {'x k=1':>6}  "
                 "per exchange; publishers per exchange; hosts"]
    for r in rows:
        n = r.notes
        lines.append(f"{r.name:62} {r.records_per_s:11,.0f} {n['x_one']:6.2f}  {n['each']}; {n['publishers']}; "
                     f"{', '.join(n['hosts'])}")
    n = rows[-1].notes
    audit, moves = n["audit"], n["moves"]
    lines.append(f"target: >= {TARGET:g}x at 4 exchanges; over the run: {audit['expected']:,} records, lost "
                 f"{audit['lost']}, duplicated {audit['duplicated']}, reordered {audit['reordered']}; "
                 f"{moves['relocations']} relocations, {moves['failovers']} fail-overs, "
                 f"{moves['retransmitted']} records retransmitted")
    return lines


def checks(results: list[Result]) -> list[Check]:
    """(h)'s targets: a queue held at 2 exchanges carries at least :data:`TWO` times what 1 does, at 4 at least
    :data:`TARGET` times, and nothing is lost or duplicated."""
    rows = {r.notes["exchanges"]: r for r in results if r.name.startswith("(h)")}
    out = []
    for k, target in ((2, TWO), (4, TARGET)):
        if k in rows:
            out.append(Check(f"(h) {k} exchanges beside 1, records/s", rows[k].notes["x_one"], target, False, "x"))
    if rows:
        audit = rows[max(rows)].notes["audit"]
        out.append(Check("(h) records lost or duplicated over the run", audit["lost"] + audit["duplicated"], 0, True))
    return out
