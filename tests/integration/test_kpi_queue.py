"""The KPI records of every host through the broker: each host manager's shipper (``client.shipper``) publishes its
host's archive files to the cluster's KPI queue as they are put in place, and ``roq kpi report`` and ``roq kpi
tune`` read that queue through the ``roq`` data source. On three emulated hosts (each its own CPU budget, a
cgroup), the report and the thresholds made from the queue are those made from the archive files of the same run."""

from __future__ import annotations

import datetime
import json
import os
import signal
import threading
import time

import pytest

import client
from roq.kpi.archive import ArchiveWriter, host_of, placed_files, writer_name
from roq.kpi.records import EventRecord
from roq.process import spawn
from roqcli.emulation import HostBudget
from roqcli.kpi import job, report
from roqcli.main import main as roq
from tests.integration.sparkjvm import local_session
from tests.integration.zkhelp import wait_until

KPI_QUEUE = "roq.kpi"


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """A local Spark of two cores for the module's tests (one JVM and its start for them all)."""
    yield from local_session(tmp_path_factory.mktemp("spark"))


def _lines(path: str) -> list[dict]:
    with open(path, "rb") as f:
        data = f.read()
    return [json.loads(line) for line in data[:data.rfind(b"\n") + 1].split(b"\n") if line.strip()]


def _all_placed_before(archive: str, cut: float) -> bool:
    """No record from before ``cut`` waits in a file its writer has not put in place yet."""
    for root, _, files in os.walk(archive):
        for name in files:
            if not name.endswith(".jsonl.part"):
                continue
            try:
                lines = _lines(os.path.join(root, name))
            except FileNotFoundError:  # put in place since the directory was listed: it waits no more
                continue
            if any(r["time"] < cut for r in lines):
                return False
    return True


def _shipped_before(archive: str, cut: float) -> bool:
    """Every file put in place with a record from before ``cut`` is written down as shipped by its host's shipper."""
    shipped: set[str] = set()
    for name in os.listdir(archive):
        if name.startswith(".shipped-") and not name.endswith(".part"):
            with open(os.path.join(archive, name)) as f:
                shipped |= set(f.read().split())
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


@pytest.mark.timeout(420)  # (four Spark jobs, one after another, on a busy machine)
def test_report_and_tune_from_the_kpi_queue_agree_with_the_archive_of_three_emulated_hosts(spark, make_embedded,
                                                                                           tmp_path, capsys):
    archive = str(tmp_path / "archive")
    cluster = make_embedded(hosts=3, budgets=[HostBudget(0.6)], kpi_archive=archive, kpi_queue=KPI_QUEUE,
                            hostmanager_args=["--kpi-rotate-s", "2"])
    qm = cluster.manager
    wait_until(lambda: qm.exists(KPI_QUEUE) and (j := qm.journal(KPI_QUEUE)) is not None and bool(j.alive), 60,
               "the shippers made the KPI queue")
    qm.create("work", exchanges=3)
    _traffic(cluster, 6.0)
    cut = time.time()
    wait_until(lambda: _all_placed_before(archive, cut), 30, "every record from before the cut put in place")
    wait_until(lambda: _shipped_before(archive, cut), 60, "every file with records from before the cut shipped")
    hosts = {host_of(name) for _, _, name in placed_files(archive)}
    assert hosts == set(cluster.addresses)  # three hosts' writers, each file shipped by its own host's shipper

    until = datetime.datetime.fromtimestamp(cut, datetime.timezone.utc).isoformat()
    cut = job.parse_since(until, flag="--until")  # (as the command reads it)
    # from the archive: the jobs themselves, in the module's Spark session; from the KPI queue: the commands, in the
    # same session (one JVM for the four jobs: the commands use a session running in their process)
    a = json.loads(json.dumps(report.report(spark, archive, str(tmp_path / "report-archive"), until=cut,
                                            progress=lambda _: None)))
    decided, counts = job.tune(spark, archive, until=cut)
    capsys.readouterr()
    where = ["--zk", cluster.zk, "--root", cluster.root]
    out = str(tmp_path / "report-queue")
    assert roq(["kpi", "report", "--kpi-queue", KPI_QUEUE, *where, "--until", until, "--out", out]) == 0
    assert "using the Spark session running in this process" in capsys.readouterr().out
    roq(["kpi", "tune", "--kpi-queue", KPI_QUEUE, "--until", until, "--dry-run", "--json", *where])
    tuned_out = capsys.readouterr().out
    assert job.session_running()  # (the commands left it running)
    with open(os.path.join(out, "report.json")) as f:
        q = json.load(f)
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

    tuned = json.loads(tuned_out[tuned_out.rindex("\n{\n") + 1:])
    # (6 s of samples are too few for a capacity: the evidence says why, for both alike)
    evidence = tuned["decisions"]["work"]["evidence"]["hosts"]
    assert set(evidence) == set(cluster.addresses) and all(e["samples"] > 0 for e in evidence.values()), evidence
    assert tuned["decisions"] == json.loads(json.dumps(decided, default=str))
    assert tuned["skipped"]["records"] == counts["records"]


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
        with open(os.path.join(archive, f".shipped-{host}")) as f:
            return set(f.read().split())
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
        os.remove(os.path.join(archive, f".shipped-{host}"))
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


def _publish_archive(conn, archive: str) -> int:
    """Every line of the files of ``archive`` to the connection's queue, as a shipper sends them (key: partition)."""
    sent = 0
    pub = conn.publisher()
    for partition, date, name in placed_files(archive):
        with open(os.path.join(archive, f"queue={partition}", f"date={date}", name), "rb") as f:
            lines = [line for line in f.read().split(b"\n") if line]
        pub.send_many(partition.encode(), lines)
        sent += len(lines)
    pub.flush(60)
    pub.close()
    return sent


def test_following_the_kpi_queue_updates_the_thresholds_as_evidence_arrives(spark, make_embedded, tmp_path):
    """``roq kpi tune --follow --kpi-queue``'s job: a streaming read of the KPI queue, folded into the evidence as
    records arrive (a synthetic history of a known capacity, published as a shipper would)."""
    from simulation.kpi_history import generate

    cluster = make_embedded(hosts=1)
    qm = cluster.manager
    qm.create(KPI_QUEUE, cluster.addresses[0])
    qm.set_rules(KPI_QUEUE, {"durability": "interval"})
    wait_until(lambda: (j := qm.journal(KPI_QUEUE)) is not None and bool(j.alive) and bool(j.reads), 30,
               "the KPI queue's journal running")
    few, more = str(tmp_path / "few"), str(tmp_path / "more")
    generate(few, records=100, capacity=10_000, exchanges=1, hosts=1, seed=3, start=time.time() - 7200)
    generate(more, records=6_000, capacity=10_000, exchanges=1, hosts=1, seed=4, start=time.time() - 3600)
    decisions: list[dict] = []
    stop = threading.Event()
    runner = threading.Thread(target=job.follow, args=(spark, job.KpiQueue(cluster.zk, KPI_QUEUE, cluster.root),
                                                       decisions.append),
                              kwargs={"every_s": 1.0, "stop": stop.is_set}, daemon=True)
    try:
        with client.connect(zk=cluster.zk, queue=KPI_QUEUE, root=cluster.root) as conn:
            _publish_archive(conn, few)  # 16 samples: too few for a capacity
            runner.start()
            wait_until(lambda: bool(decisions), 90, "a first decision")
            assert decisions[0]["synthetic"]["thresholds"] == {}, decisions[:1]
            _publish_archive(conn, more)
            wait_until(lambda: bool(decisions[-1]["synthetic"]["thresholds"]), 90, "thresholds from the new evidence")
        mark = decisions[-1]["synthetic"]["thresholds"]["exchange_records_per_s"]
        assert abs(mark / (0.8 * 10_000) - 1) < 0.10, decisions[-1]
    finally:
        stop.set()
        if runner.is_alive():
            runner.join(30)
    assert not runner.is_alive()
