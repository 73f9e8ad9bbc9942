"""(m) the tuner on a known budget: ``roq kpi tune``'s capacity estimate, from real KPI history of an emulated
host with a known CPU budget, beside the saturation throughput measured in the same run.

One host of a fifth of a core (its cgroup's quota: the budget, not the busy machine, limits the exchange; root
is needed for it), one queue of exactly one exchange, the KPI archive on with a KPI period of half a second.
Publishers outside the cluster, one record per batch (so the exchange's CPU is the bottleneck), are added one by
one, each offering the same rate, from well below what the exchange can take to well above it; at the top, the
records/s the exchange forwards (its monitor's status, 5 s) is the measured saturation throughput. Then the
cluster stops (its archive files are put in place) and ``roqcli.kpi.job.tune`` reads the archive. Target: the
estimate within 15% of the measurement.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
import time
from typing import Any, Callable

from simulation.bench_common import Check, Result

__all__ = ["run", "render", "checks"]

CPUS = 0.2
RULES = {"kpi_period_s": 0.5, "min_exchanges": 1, "max_exchanges": 1}
STEP = 10_000 * CPUS  # records/s each publisher offers: about a seventh of what the exchange carries here
MAX_STEPS = 16
STEP_S = 2.0
SMALL_BUFFER = ("--buffer-bytes", str(256 << 10))  # what the exchange cannot take waits in the publisher
NAME = "(m) tuned capacity beside the measured saturation throughput"
#: How far the estimate may be from the measurement, as a fraction of it.
TOLERANCE = 0.15


def _spark(jvm_log: str) -> Callable[[], Any]:
    """A function returning a Spark session whose JVM starts in the background meanwhile."""
    from roqcli.kpi import job

    started: dict[str, Any] = {}

    def start() -> None:
        try:
            started["session"] = job.spark_session("local[2]", jvm_log=jvm_log)
        except BaseException as exc:  # handed to the caller
            started["error"] = exc

    starter = threading.Thread(target=start, name="spark-start", daemon=True)
    starter.start()

    def session() -> Any:
        starter.join(120)
        if "error" in started:
            raise started["error"]
        return started["session"]

    return session


def _saturate(cluster: Any, loads: Any, progress: Callable[[str], None]) -> tuple[int, float]:
    """Ramp publishers up on the queue until its exchange is saturated; (publishers, records/s it forwards)."""
    import client
    from roq.errors import UnavailableError
    from roqcli.embedded import wait_for

    host = cluster.addresses[0]
    try:
        cluster.manager.create("budgeted", host, exchanges=1)
    except UnavailableError:  # on a small budget the queue's processes start slowly: the creation goes on
        pass
    monitor = wait_for(lambda: cluster.manager.lookup("budgeted"), 60, "the queue's monitor")
    cluster.manager.set_rules("budgeted", RULES)
    with client.connect(monitor=monitor) as conn:
        def busy() -> float:
            return conn.status(timeout=10).exchanges[0].busy

        loads.start("subscribe", monitor, "--prefix", "", "--idle-exit", "5")
        pubs = []
        saturated_at = None
        for i in range(MAX_STEPS):
            pubs.append(loads.start("publish", monitor, "--rate", str(STEP), "--duration", "600", "--keys",
                                    f"a{i},b{i}", "--key-run", "1", *SMALL_BUFFER))
            end = time.monotonic() + STEP_S
            while time.monotonic() < end:
                if saturated_at is None and busy() >= 0.9:
                    saturated_at = i
                time.sleep(0.25)  # a sampling period
            if saturated_at is not None and i >= saturated_at + 2:
                break
        else:
            raise RuntimeError(f"{MAX_STEPS} publishers of {STEP:,.0f} records/s did not saturate the exchange")
        progress(f"(m) saturated with {len(pubs)} publishers; measuring for 5 s")
        samples = []
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            samples.append(conn.status(timeout=10).exchanges[0].records_per_s)
            time.sleep(0.5)  # a sampling period
    for pub in pubs:
        pub.signal(signal.SIGTERM)
    for pub in pubs:
        pub.wait(30)
    return len(pubs), sum(samples) / len(samples)


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    """(m): the tuned capacity beside the saturation throughput of the same run."""
    from roqcli.embedded import EmbeddedCluster
    from roqcli.emulation import HostBudget
    from roqcli.kpi import job
    from simulation.load import Loads

    work = tempfile.mkdtemp(prefix="roq-bench-tuner-")
    session = _spark(f"{work}/spark.log")
    archive = f"{work}/archive"
    progress(f"(m) the tuner: one exchange on a host of {CPUS:g} core, publishers of {STEP:,.0f} records/s added "
             f"every {STEP_S:g} s until it saturates")
    with EmbeddedCluster(hosts=1, budgets=[HostBudget(CPUS)], kpi_archive=archive, log_dir=work) as cluster, \
            Loads(work) as loads:
        host = cluster.addresses[0]
        publishers, measured = _saturate(cluster, loads, progress)
    spark = session()
    try:
        decisions, counts = job.tune(spark, archive, queue="budgeted")
    finally:
        job.stop_session(spark)
    d = decisions["budgeted"]
    e = d["evidence"]["hosts"][host]
    estimated = d["capacity_records_per_s"]
    return [Result(NAME, estimated, notes={
        "measured_records_per_s": measured, "error": estimated / measured - 1 if measured else float("nan"),
        "publishers": publishers, "binds": d["binds"], "cpu_method": e["cpu_method"],
        "saturated_samples": e["saturated_samples"], "samples": e["samples"], "skipped": counts})]


def render(results: list[Result]) -> list[str]:
    rows = [r for r in results if r.name == NAME]
    if not rows:
        return []
    n = rows[0].notes
    return ["", f"{NAME}: tuned {rows[0].records_per_s:,.0f} records/s, measured {n['measured_records_per_s']:,.0f} "
                f"({n['error']:+.1%}; target within {TOLERANCE:.0%}); {n['binds']} binds, CPU {n['cpu_method']} from "
                f"{n['saturated_samples']} saturated of {n['samples']} samples; {n['publishers']} publishers"]


def checks(results: list[Result]) -> list[Check]:
    return [Check("(m) tuned capacity beside measured saturation, error", abs(r.notes["error"]), TOLERANCE, True)
            for r in results if r.name == NAME]
