"""The tuner knows the budget: its capacity estimate, on real KPI history from an emulated host with a known
CPU budget, lands within 15% of the saturation throughput measured in the same run.

One host of a fifth of a core (its cgroup's quota: the budget, not the busy machine, limits the exchange),
one queue of exactly one exchange, the KPI archive on with a KPI period of half a second. Publishers outside
the cluster, one record per batch (so the exchange's CPU is the bottleneck), are added one by one, each
offering the same rate, from well below what the exchange can take to well above it; at the top, the
records/s the exchange forwards (its monitor's status) is the measured saturation throughput. Then the
cluster stops (its archive files are put in place) and ``roqcli.kpi.job.tune`` reads the archive.

The estimate comes from the samples in which the exchange was saturated on its budget. What the line
through the lightly loaded samples alone says is printed beside it: far less, since the exchange's CPU per
record falls as its load grows (see :mod:`roqcli.kpi.capacity`).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Callable

import psutil
import pytest

from roqcli.emulation import HostBudget
from roqcli.kpi import job
from roqcli.kpi.capacity import TuneRule
from tests.integration.queues import Queue

CPUS = 0.2
RULES = {"kpi_period_s": 0.5, "min_exchanges": 1, "max_exchanges": 1}
STEP = 10_000 * CPUS  # records/s each publisher offers: about a seventh of what the exchange carries here
MAX_STEPS = 16
STEP_S = 2.0
SMALL_BUFFER = ("--buffer-bytes", str(256 << 10))  # what the exchange cannot take waits in the publisher


@pytest.fixture
def spark(tmp_path) -> Any:
    """A function returning a Spark session whose JVM started in the background, while the cluster runs
    (it takes longer to start than the load needs to ramp up); stopped after the test."""
    started: dict[str, Any] = {}

    def start() -> None:
        try:
            started["session"] = job.spark_session("local[2]", jvm_log=str(tmp_path / "spark.log"))
        except BaseException as exc:  # handed to the test
            started["error"] = exc

    starter = threading.Thread(target=start, name="spark-start", daemon=True)
    starter.start()

    def session() -> Any:
        starter.join(120)
        if "error" in started:
            raise started["error"]
        return started["session"]

    yield session
    starter.join(120)
    if "session" in started:
        job.stop_session(started["session"])


def busy(q: Queue) -> float:
    return q.status()["exchanges"][0]["busy"]


def forwarded(q: Queue, seconds: float) -> float:
    """Records/s the exchange forwarded, on average over ``seconds`` (its monitor's status, sampled)."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(q.status()["exchanges"][0]["records_per_s"])
        time.sleep(0.5)  # a sampling period, not a wait for a condition
    return sum(samples) / len(samples)


def ramp(q: Queue) -> int:
    """Add a publisher of ``STEP`` records/s every ``STEP_S`` until the exchange is saturated, then two more;
    return how many."""
    saturated_at = None
    for i in range(MAX_STEPS):
        q.publish(STEP, f"a{i},b{i}", "--key-run", "1", *SMALL_BUFFER)
        end = time.monotonic() + STEP_S
        while time.monotonic() < end:
            if saturated_at is None and busy(q) >= 0.9:
                saturated_at = i
            time.sleep(0.25)  # a sampling period
        if saturated_at is not None and i >= saturated_at + 2:
            return i + 1
    pytest.fail(f"{MAX_STEPS} publishers offering {MAX_STEPS * STEP:,.0f} records/s did not saturate the exchange")


def received_per_s(report: dict[str, Any], since: float, until: float) -> float:
    """Records/s a subscriber received between two wall-clock times (from its timeline of one point a second)."""
    points = [p for p in report["timeline"] if since <= p["time"] <= until]
    if len(points) < 2 or points[-1]["time"] <= points[0]["time"]:
        return 0.0
    return (points[-1]["received"] - points[0]["received"]) / (points[-1]["time"] - points[0]["time"])


def test_the_tuned_capacity_is_the_saturation_throughput_of_an_exchange_on_a_known_budget(
        make_embedded, loads, spark: Callable[[], Any], tmp_path):
    started = time.monotonic()
    psutil.cpu_percent(None)
    archive = str(tmp_path / "archive")
    cluster = make_embedded(hosts=1, budgets=[HostBudget(CPUS)], kpi_archive=archive)
    host = cluster.addresses[0]
    q = Queue(cluster, loads, "budgeted", host, **RULES)
    q.subscribe("", "--timeline-every", "1")
    publishers = ramp(q)
    q.wait(lambda s: s["exchanges"][0]["busy"] >= 0.9, 15, "the exchange saturated")
    window = time.time()
    measured = forwarded(q, 5.0)
    window = (window, time.time())
    machine = psutil.cpu_percent(None)
    for pub in q.pubs:
        pub.signal(signal.SIGTERM)
    for pub in q.pubs:
        pub.wait(30)
    cluster.stop()  # the monitor and the host manager put their archive files in place
    ran = time.monotonic() - started

    session = spark()
    ready = time.monotonic()
    decisions, counts = job.tune(session, archive, queue="budgeted")  # the hosts' partition is read too
    tuned = time.monotonic()
    d = decisions["budgeted"]
    e = d["evidence"]["hosts"][host]
    estimated = d["capacity_records_per_s"]
    # for the record: what the line through the lightly loaded samples says (saturation ignored; a fit from
    # few samples, however loose), and what the subscriber received while the exchange was measured
    loose = TuneRule(min_samples=3, min_r2=0.0, min_saturated=1 << 30)
    line = job.tune(session, archive, queue="budgeted", rule=loose)[0]["budgeted"]["evidence"]["hosts"][host]
    received = received_per_s(loads.report(q.subs[0], timeout=30), *window)
    print(f"{publishers} publishers of {STEP:,.0f} records/s; machine CPU {machine:.0f}% meanwhile")
    print(f"measured saturation throughput {measured:,.0f} records/s (the subscriber received {received:,.0f}/s); "
          f"tuned capacity {estimated:,.0f} records/s ({estimated / measured - 1:+.1%}); {d['binds']} binds, CPU "
          f"{e['cpu_method']} from {e['saturated_samples']} saturated of {e['samples']} samples; budget {e['budget']}")
    print(f"the line to the budget alone: {line.get('capacity') or line.get('why')} records/s "
          f"({line['linear_samples']} samples below {0.8 * line['budget']['saturation_cpu']:.1f}% CPU, "
          f"r^2 {line.get('r2')})")
    print(f"run {ran:.0f} s, then Spark ready in {ready - started - ran:.0f} s and tuning {tuned - ready:.0f} s; "
          f"skipped {counts}")
    assert counts["corrupt"] == counts["unknown_kind"] == 0 and counts["files_being_written"] == 0
    assert e["budget"]["cpus"] == CPUS and e["budget"]["saturation_cpu"] <= 100 * CPUS
    assert d["from_host"] == host and d["binds"] == "cpu" and e["cpu_method"] == "saturated"
    assert abs(estimated / measured - 1) < 0.15
