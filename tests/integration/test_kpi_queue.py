"""The KPI records of every host through the broker: each host manager's shipper (``client.shipper``) publishes its
host's archive files to the cluster's KPI queue as they are put in place, and ``roq kpi report`` and ``roq kpi
tune`` read that queue through the ``roq`` data source. On three emulated hosts (each its own CPU budget, a
cgroup), the report and the thresholds made from the queue (the report on a standalone Spark cluster) are those
made from the archive files of the same run."""

from __future__ import annotations

import datetime
import json
import os
import signal
import threading
import time

import client
from roq.kpi.archive import ArchiveWriter, host_of, placed_files, writer_name
from roq.kpi.records import EventRecord
from roq.process import spawn
from roqcli.emulation import HostBudget
from roqcli.main import main as roq
from roqcli.sparkcluster import SparkCluster
from roqcli.zkserver import free_port
from tests.integration.test_kpi import QUICK_JVM
from tests.integration.zkhelp import wait_until

KPI_QUEUE = "roq.kpi"


def _lines(path: str) -> list[dict]:
    with open(path, "rb") as f:
        data = f.read()
    return [json.loads(line) for line in data[:data.rfind(b"\n") + 1].split(b"\n") if line.strip()]


def _all_placed_before(archive: str, cut: float) -> bool:
    """No record from before ``cut`` waits in a file its writer has not put in place yet."""
    for root, _, files in os.walk(archive):
        for name in files:
            if name.endswith(".jsonl.part") and any(r["time"] < cut for r in _lines(os.path.join(root, name))):
                return False
    return True


def _shipped_before(archive: str, cut: float) -> bool:
    """Every file put in place with a record from before ``cut`` is written down as shipped by its host's shipper."""
    shipped: set[str] = set()
    for name in os.listdir(archive):
        if name.startswith(".shipped-") and name.endswith(".json"):
            with open(os.path.join(archive, name)) as f:
                shipped |= set(json.load(f)["files"])
    for partition, date, name in placed_files(archive):
        rel = f"queue={partition}/date={date}/{name}"
        if rel not in shipped and any(r["time"] < cut for r in _lines(os.path.join(archive, rel))):
            return False
    return True


def _traffic(cluster, seconds: float) -> None:
    """Publishers and a subscriber on queue ``work``, spread over the hosts, for ``seconds``."""
    stop = threading.Event()
    with client.connect(zk=cluster.zk, queue="work", root=cluster.root) as conn:
        sub = conn.subscriber()
        received = [0]

        def drain() -> None:
            while not stop.is_set():
                received[0] += sum(len(b) for b in sub.recv_many(timeout=0.2))

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        pubs = [conn.publisher() for _ in range(6)]
        ends = time.monotonic() + seconds
        n = 0
        while time.monotonic() < ends:
            for i, pub in enumerate(pubs):
                pub.send_many(b"k%d" % i, [b"x" * 100] * 200)
            n += 200 * len(pubs)
            time.sleep(0.01)
        for pub in pubs:
            pub.flush(30)
        wait_until(lambda: received[0] >= n, 30, "the subscriber got the records")
        stop.set()
        reader.join(5)


def test_report_and_tune_from_the_kpi_queue_agree_with_the_archive_of_three_emulated_hosts(make_embedded, tmp_path,
                                                                                           capsys):
    archive = str(tmp_path / "archive")
    cluster = make_embedded(hosts=3, budgets=[HostBudget(0.6)], kpi_archive=archive, kpi_queue=KPI_QUEUE,
                            hostmanager_args=["--kpi-rotate-s", "2"])
    qm = cluster.manager
    wait_until(lambda: qm.exists(KPI_QUEUE) and (j := qm.journal(KPI_QUEUE)) is not None and bool(j.alive), 60,
               "the shippers made the KPI queue")
    qm.create("work", exchanges=3)
    _traffic(cluster, 8.0)
    cut = time.time()
    wait_until(lambda: _all_placed_before(archive, cut), 30, "every record from before the cut put in place")
    wait_until(lambda: _shipped_before(archive, cut), 60, "every file with records from before the cut shipped")
    hosts = {host_of(name) for _, _, name in placed_files(archive)}
    assert hosts == set(cluster.addresses)  # three hosts' writers, each file shipped by its own host's shipper

    until = datetime.datetime.fromtimestamp(cut, datetime.timezone.utc).isoformat()
    where = ["--zk", cluster.zk, "--root", cluster.root]
    spark = ["--master", "local[2]", "--conf", f"spark.driver.extraJavaOptions={QUICK_JVM}"]
    reports = {}
    out = str(tmp_path / "report-archive")
    assert roq(["kpi", "report", "--archive", archive, "--until", until, "--out", out, *spark]) == 0
    with open(os.path.join(out, "report.json")) as f:
        reports["archive"] = json.load(f)
    # the queue's report on a standalone Spark cluster: a master and a worker of their own (JVMs), no shared files
    address = "127.0.0.50"
    with SparkCluster(workdir=str(tmp_path / "spark"), address=address, port=free_port(address),
                      ui_port=free_port(address), workers=1, cores=2, memory="1g", java_options=QUICK_JVM) as standalone:
        out = str(tmp_path / "report-queue")
        settings = {"spark.driver.extraJavaOptions": QUICK_JVM, "spark.executor.extraJavaOptions": QUICK_JVM,
                    "spark.driver.host": address, "spark.driver.bindAddress": address,
                    "spark.executor.memory": "700m"}
        assert roq(["kpi", "report", "--kpi-queue", KPI_QUEUE, *where, "--until", until, "--out", out,
                    "--master", standalone.url, *[a for k, v in settings.items() for a in ("--conf", f"{k}={v}")]]) == 0
        with open(os.path.join(out, "report.json")) as f:
            reports["queue"] = json.load(f)
    a, q = reports["archive"], reports["queue"]
    assert q["archive"] == f"queue {KPI_QUEUE} of the cluster at {cluster.zk}{cluster.root}"
    assert a["skipped"]["records"] == q["skipped"]["records"] > 0
    assert {h["host"] for h in q["hosts"]} == set(cluster.addresses)
    work = q["queues"]["work"]
    assert sum(e["records_in"] for e in work["exchanges"]) > 0 and len(work["exchanges"]) == 3
    for doc in (a, q):
        doc.pop("archive")
        doc.pop("seconds")  # the report's own time
        for what in ("files_being_written", "lines"):  # (read later, the queue holds records from after the cut)
            doc["skipped"].pop(what)
    assert q == a

    decisions, codes = {}, {}
    for name, source in (("archive", ["--archive", archive]), ("queue", ["--kpi-queue", KPI_QUEUE])):
        capsys.readouterr()
        # (8 s of samples are too few for a capacity: the code is 1 and the evidence says why, for both alike)
        codes[name] = roq(["kpi", "tune", *source, "--until", until, "--dry-run", "--json", *where, *spark])
        out = capsys.readouterr().out
        decisions[name] = json.loads(out[out.rindex("\n{\n") + 1:])
    assert codes["queue"] == codes["archive"]
    evidence = decisions["queue"]["decisions"]["work"]["evidence"]["hosts"]
    assert set(evidence) == set(cluster.addresses) and all(e["samples"] > 0 for e in evidence.values()), evidence
    for doc in decisions.values():
        for what in ("files_being_written", "lines"):
            doc["skipped"].pop(what)
    assert decisions["queue"] == decisions["archive"]


def _write_files(archive: str, host: str, files: int, lines: int, first: int = 0) -> list[bytes]:
    """``files`` files of ``lines`` records each, put in place by a writer of ``host``; the records' lines."""
    out = []
    for f in range(files):
        writer = ArchiveWriter(archive, "q", writer_name("monitor", host, 1000 + first + f), rotate_bytes=1 << 30)
        for i in range(lines):
            writer.append(EventRecord(event="e", text=f"{first + f}/{i}"))
        writer.close()
    for partition, date, name in placed_files(archive):
        if host_of(name) == host:
            with open(os.path.join(archive, f"queue={partition}", f"date={date}", name), "rb") as f:
                out += [line for line in f.read().split(b"\n") if line]
    return out


def _shipped(archive: str, host: str) -> set[str]:
    try:
        with open(os.path.join(archive, f".shipped-{host}.json")) as f:
            return set(json.load(f)["files"])
    except FileNotFoundError:
        return set()


def test_a_shipper_killed_and_started_again_without_its_record_ships_each_line_once(make_embedded, tmp_path):
    """kill -9 in the middle of the files, and the shipper's record of what it shipped lost: everything is shipped
    again, and the queue's journal drops what it holds (each file's publisher is the same, numbering its lines
    the same way)."""
    cluster = make_embedded(hosts=1)
    archive, host = str(tmp_path / "archive"), "10.9.9.9"  # (a name in the files: no traffic goes there)
    _write_files(archive, host, files=6, lines=2000)
    args = ["--archive", archive, "--host", host, "--queue", "kq", "--zk", cluster.zk, "--root", cluster.root,
            "--scan-s", "0.2"]
    logs = open(tmp_path / "shipper.log", "ab")
    shipper = spawn("shipper", "client.shipper", args, stderr=logs)
    try:
        shipper.wait_ready(30)
        wait_until(lambda: len(_shipped(archive, host)) >= 2, 60, "two files shipped")
        shipper.kill()  # SIGKILL, in the middle of the files
        os.remove(os.path.join(archive, f".shipped-{host}.json"))
        lines = _write_files(archive, host, files=1, lines=500, first=6)  # one more, put in place meanwhile
        shipper = spawn("shipper", "client.shipper", args, stderr=logs)
        shipper.wait_ready(30)
        wait_until(lambda: len(_shipped(archive, host)) == 7, 60, "every file shipped")
    finally:
        shipper.signal(signal.SIGTERM)
        shipper.wait(10)
        logs.close()
    journal = cluster.manager.journal("kq")
    assert journal is not None and journal.durability != "none"
    with client.connect(zk=cluster.zk, queue="kq", root=cluster.root) as conn:
        sub = conn.subscriber(start="earliest")
        got: list[bytes] = []
        wait_until(lambda: got.extend(p for b in sub.recv_many(timeout=0.2) for p in b.payloads) or
                   len(got) >= len(lines), 60, "the queue's records read")
        assert sorted(got) == sorted(lines)  # each line once
    wait_until(lambda: (j := cluster.manager.journal("kq")) is not None and j.next_offset == len(lines), 10,
               "the journal's end at the number of lines")
    journal = cluster.manager.journal("kq")
    assert journal is not None and (journal.duplicates or 0) >= 2  # the files shipped before the kill came again
