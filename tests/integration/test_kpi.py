"""The Spark jobs on real local Spark (one session for the module): tuning from a synthetic history with a
known capacity, bad archive content skipped and counted, the report, streaming, the hosts' budgets (CPU
and link) brought to their exchanges' samples, and ``roq kpi tune`` writing to a real cluster."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import matplotlib.image
import pytest

from roq.kpi.archive import HOSTS_PARTITION, ArchiveWriter
from roq.kpi.records import ExchangeRecord, HostRecord, SubscriberRecord
from roqcli.kpi import job, report
from roqcli.kpi.capacity import TuneRule
from simulation.kpi_history import generate
from tests.integration.sparkjvm import QUICK_JVM, local_session

CAPACITY = 40_000.0
DOCUMENTED_MARK = TuneRule().margin * CAPACITY  # what the documented rule gives for the true capacity


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    yield from local_session(tmp_path_factory.mktemp("spark"))


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    archive = str(tmp_path_factory.mktemp("archive"))
    n = generate(archive, records=30_000, capacity=CAPACITY, exchanges=3, hosts=2)
    return archive, n


def budgeted(archive: str, samples: int = 240) -> None:
    """Queue ``budgeted``: exchange x1 on 127.0.0.21 (a quarter core; its CPU would reach what is left of it,
    24% of a core, at 8,000 records/s) and x2 on 127.0.0.22 (a quarter core, 4,000 records/s by CPU, behind
    a link of 2 MB/s each way: 2,000 records/s of 1,000 bytes); each host spends 1% of a core beyond its
    exchange; one subscriber reads everything. Nothing saturates: the capacities are extrapolated."""
    import random

    rng = random.Random(11)
    t = time.time() - 3600
    queue = ArchiveWriter(archive, "budgeted", "test", rotate_s=3600, retention_days=0, clock=lambda: t)
    hosts = ArchiveWriter(archive, HOSTS_PARTITION, "test", rotate_s=3600, retention_days=0, clock=lambda: t)
    for _ in range(samples):
        delivered = 0
        for xid, host, capacity, top, link in (("x1", "127.0.0.21", 8_000, 7_000, 0.0),
                                               ("x2", "127.0.0.22", 4_000, 1_900, 2e6)):
            x = int(rng.uniform(100, top))
            cpu = round(1.0 + 23.0 * x / capacity + rng.gauss(0, 0.2), 2)
            queue.append(ExchangeRecord(exchange=xid, host=host, period=1.0, records_in=x, bytes_in=1_000 * x,
                                        records_out=x, bytes_out=1_000 * x, publishers=1, cpu_percent=cpu,
                                        rss_bytes=50 << 20, busy=round(x / capacity / 3, 3), dropped=0), t)
            use = round((cpu + 1.0) / 0.25, 2)  # % of the host's budget
            hosts.append(HostRecord(host=host, cpu_percent_now=use, cpu_percent=use, memory_percent=30.0,
                                    net_bytes_per_s=2_000.0 * x, cpus=0.25, link_bytes_per_s=link), t)
            delivered += x
        queue.append(SubscriberRecord(subscriber="s1", prefix="", period=1.0, records=delivered, latency_p50_ms=1.0,
                                      latency_p99_ms=2.0, gaps=0, lost=0, duplicates=0), t)
        t += 1.0
    queue.close()
    hosts.close()


def events_in(archive: str) -> int:
    count = 0
    for d, _, files in os.walk(archive):
        for f in files:
            if not f.startswith("."):
                count += sum(1 for line in open(os.path.join(d, f)) if '"kind":"event"' in line)
    return count


def test_the_tuned_mark_lands_within_ten_percent_of_the_documented_rule(spark, history):
    archive, n = history
    decisions, counts = job.tune(spark, archive)
    assert counts == {"lines": n, "corrupt": 0, "unknown_kind": 0, "records": n, "files_being_written": 0}
    d = decisions["synthetic"]
    mark = d["thresholds"]["exchange_records_per_s"]
    print(f"capacity {d['capacity_records_per_s']:,.0f} (true {CAPACITY:,.0f}); mark {mark:,.0f} "
          f"(documented rule: {DOCUMENTED_MARK:,.0f})")
    assert abs(mark / DOCUMENTED_MARK - 1) < 0.10
    assert d["thresholds"]["scale_out_records_per_s"] == pytest.approx(0.7 / 0.8 * mark, rel=1e-3)
    hosts = d["evidence"]["hosts"]
    assert set(hosts) == {"127.0.0.11", "127.0.0.12"}
    assert all(e["samples"] > e["linear_samples"] >= 30 and e["r2"] > 0.9 for e in hosts.values())


def test_corrupt_lines_unknown_kinds_and_half_written_files_are_skipped_and_counted(spark, history, tmp_path):
    archive = str(tmp_path / "archive")
    shutil.copytree(history[0], archive)
    day = sorted(os.listdir(os.path.join(archive, "queue=synthetic")))[0]
    directory = os.path.join(archive, "queue=synthetic", day)
    with open(os.path.join(directory, "bad.jsonl"), "wb") as f:
        f.write(b"not json at all\n")  # corrupt 1
        f.write(b'{"kind": "exchange", "time": 1, "records_in": "many"}\n')  # corrupt 2: a wrong type
        f.write(b"\xff\xfe\x00garbage\n")  # corrupt 3
        f.write(b'{"kind": "mystery", "time": 5}\n')  # unknown kind 1
        f.write(b'{"kind": "exchange", "exchange": "x9"}\n')  # unknown 2: no time
        f.write(b'{"kind": "exchange", "time": 7, "exchange": "x1", "period": 1, "records_in": 10, "cpu_per')  # cut: 4
    # a file being written: hidden, not read at all (a half record inside)
    with open(os.path.join(directory, ".monitor-1-2.jsonl.part"), "wb") as f:
        f.write(b'{"kind": "exchange", "time": 8}\n{"kind": "exch')
    decisions, counts = job.tune(spark, archive)
    n = history[1]
    assert counts == {"lines": n + 6, "corrupt": 4, "unknown_kind": 2, "records": n, "files_being_written": 1}
    assert abs(decisions["synthetic"]["thresholds"]["exchange_records_per_s"] / DOCUMENTED_MARK - 1) < 0.10
    doc = report.report(spark, archive, str(tmp_path / "report"), progress=lambda line: None)
    assert doc["skipped"] == counts


def test_the_report_has_its_figures_plots_and_page(spark, history, tmp_path):
    archive, n = history
    out = tmp_path / "report"
    lines: list[str] = []
    doc = report.report(spark, archive, str(out), progress=lines.append)
    assert json.loads((out / "report.json").read_text())["skipped"]["records"] == n
    q = doc["queues"]["synthetic"]
    assert {x["exchange"] for x in q["exchanges"]} == {"x1-syn", "x2-syn", "x3-syn"}
    assert all(0 < x["mean_records_per_s"] <= x["max_records_per_s"] <= CAPACITY for x in q["exchanges"])
    assert len(q["throughput"]) > 50 and all(p["records_per_s"] >= 0 for p in q["throughput"])
    assert set(q["exchange_throughput"]) == {"x1-syn", "x2-syn", "x3-syn"}
    assert all(0 <= p["records_per_s"] <= CAPACITY for c in q["exchange_throughput"].values() for p in c)
    assert set(doc["host_cpu"]) == {"127.0.0.11", "127.0.0.12"}
    assert 0 < q["latency"]["median_p50_ms"] <= q["latency"]["median_p99_ms"] <= q["latency"]["max_p99_ms"]
    assert q["relocations"] == events_in(archive) and q["gaps"]["subscribers"] == 2
    assert {h["host"] for h in doc["hosts"]} == {"127.0.0.11", "127.0.0.12"}
    for name in report.PLOTS:
        image = matplotlib.image.imread(str(out / name))
        assert image.shape[0] > 100 and image.shape[1] > 100
    page = (out / "index.html").read_text()
    assert "queue synthetic" in page and all(f'src="{name}"' in page for name in report.PLOTS)
    assert any("records; skipped 0 corrupt lines, 0 of unknown kind and 0 files being written" in line
               for line in lines)
    # one queue only, and only recent records
    assert set(report.report(spark, archive, str(tmp_path / "none"), since=time.time() + 3600,
                          progress=lambda s: None)["queues"]) == set()


def test_following_the_archive_updates_the_thresholds_as_evidence_arrives(spark, tmp_path):
    archive = str(tmp_path / "archive")
    os.makedirs(archive)
    generate(archive, records=100, capacity=10_000, exchanges=1, hosts=1, seed=3)  # 16 samples: too few
    decisions: list[dict] = []
    stop = threading.Event()
    runner = threading.Thread(target=job.follow, args=(spark, archive, decisions.append),
                              kwargs={"every_s": 1.0, "stop": stop.is_set}, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while not decisions and time.monotonic() < deadline:
            time.sleep(0.2)
        assert decisions and decisions[0]["synthetic"]["thresholds"] == {}, decisions[:1]  # no capacity yet
        generate(archive, records=6_000, capacity=10_000, exchanges=1, hosts=1, seed=4, start=time.time() - 3600)
        while time.monotonic() < deadline and not decisions[-1]["synthetic"]["thresholds"]:
            time.sleep(0.2)
        mark = decisions[-1]["synthetic"]["thresholds"].get("exchange_records_per_s")
        assert mark and abs(mark / (0.8 * 10_000) - 1) < 0.10, decisions[-1]
    finally:
        stop.set()
        runner.join(30)
    assert not runner.is_alive()


def check_budgeted(decision: dict) -> None:
    hosts = decision["evidence"]["hosts"]
    x1, x2 = hosts["127.0.0.21"], hosts["127.0.0.22"]
    assert x1["budget"]["cpus"] == x2["budget"]["cpus"] == 0.25
    assert abs(x1["budget"]["other_cpu"] - 1.0) < 0.05 and abs(x1["budget"]["saturation_cpu"] - 24.0) < 0.05
    assert x1["binds"] == "cpu" and x1["cpu_method"] == "extrapolated" and "link_capacity" not in x1
    assert abs(x1["capacity"] / 8_000 - 1) < 0.05, x1
    assert x2["binds"] == "link" and x2["budget"]["link_bytes_per_s"] == 2e6 and x2["budget"]["fanout"] == 1.0
    assert x2["capacity"] == x2["link_capacity"] == 2_000.0 and abs(x2["cpu_capacity"] / 4_000 - 1) < 0.05, x2
    # the linear region is the host's: below 80% of 24% of a core
    assert x1["linear_samples"] < x1["samples"]
    assert decision["from_host"] == "127.0.0.22" and decision["binds"] == "link"
    assert decision["thresholds"]["exchange_records_per_s"] == 1_600.0


def test_each_host_budget_comes_to_its_exchanges_in_tune_report_and_follow(spark, history, tmp_path):
    archive = str(tmp_path / "archive")
    shutil.copytree(history[0], archive)  # another queue, on hosts of unknown budget, beside
    budgeted(archive)
    decisions, _ = job.tune(spark, archive, queue="budgeted")  # one queue: the hosts' records are read too
    assert set(decisions) == {"budgeted"}
    check_budgeted(decisions["budgeted"])
    old = job.tune(spark, archive, queue="synthetic")[0]["synthetic"]  # no budget known: one core
    assert old["evidence"]["hosts"]["127.0.0.11"]["budget"]["saturation_cpu"] == 100.0

    doc = report.report(spark, archive, str(tmp_path / "report"), progress=lambda line: None)
    capacity = doc["queues"]["budgeted"]["capacity"]
    assert capacity["binds"] == "link" and capacity["host"] == "127.0.0.22" and capacity["records_per_s"] == 2_000.0
    assert capacity["cpus"] == 0.25 and abs(capacity["cpu_records_per_s_per_core"] / 16_000 - 1) < 0.05
    assert abs(capacity["link_share"] - 1.0) < 0.01
    assert doc["queues"]["synthetic"]["capacity"]["cpus"] == 0.0
    page = (tmp_path / "report" / "index.html").read_text()
    assert "2,000 records/s per exchange, link binds (host 127.0.0.22: 0.25 cores" in page

    decided: list[dict] = []
    stop = threading.Event()
    runner = threading.Thread(target=job.follow, args=(spark, archive, decided.append),
                              kwargs={"queue": "budgeted", "every_s": 1.0, "stop": stop.is_set}, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while not decided and time.monotonic() < deadline:
            time.sleep(0.2)
        assert decided and set(decided[0]) == {"budgeted"}
        check_budgeted(decided[0]["budgeted"])
    finally:
        stop.set()
        runner.join(30)
    assert not runner.is_alive()


def test_roq_kpi_tune_writes_thresholds_with_their_evidence(history, make_embedded, tmp_path):
    archive, _ = history
    cluster = make_embedded(hosts=1)
    cluster.manager.create("synthetic")
    command = [sys.executable, "-m", "roqcli", "kpi", "tune", "--archive", archive, "--master", "local[1]",
               "--conf", f"spark.driver.extraJavaOptions={QUICK_JVM}",
               "--zk", cluster.zk, "--root", cluster.root]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    print(done.stdout, done.stderr)
    assert done.returncode == 0
    assert "queue synthetic: thresholds written" in done.stdout and "WARN" not in done.stdout + done.stderr
    logs = re.search(r"its own output goes to (\S+)/spark\.log, kept if the run fails", done.stdout)
    assert logs and not os.path.exists(logs.group(1))  # a run that succeeded leaves nothing behind
    thresholds = cluster.manager.get_thresholds("synthetic")
    assert abs(thresholds["exchange_records_per_s"] / DOCUMENTED_MARK - 1) < 0.10
    tuning = cluster.manager.get_tuning("synthetic")
    assert tuning["thresholds"] == thresholds and tuning["evidence"]["from_host"] in ("127.0.0.11", "127.0.0.12")
    assert tuning["evidence"]["hosts"][tuning["evidence"]["from_host"]]["linear_samples"] >= 30
    # the queue's rules in force now use the mark (no explicit rule overrides it)
    assert cluster.manager.get_rules("synthetic")["exchange_records_per_s"] == thresholds["exchange_records_per_s"]
    missing = subprocess.run(command[:6] + [str(tmp_path / "nothing")] + command[7:], capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode != 0 and "no such KPI archive directory" in missing.stderr
