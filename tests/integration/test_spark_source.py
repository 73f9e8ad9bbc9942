"""Spark reads a durable queue through the ``roq`` data source (``client.spark``): a real cluster (ZooKeeper, a GCM,
a host manager, the queue's monitor, exchange and journal) and a real local Spark of two cores, whose Python
workers read ranges of the journal's offsets in parallel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

import client
from client import spark as roq_spark
from roq.errors import ConfigError, NotFoundError
from tests.integration.sparkjvm import local_session
from tests.integration.zkhelp import wait_until

PUBLISHERS = {"a.1": 0, "b.1": 1, "a.2": 2}  # key -> publisher
PER_PUBLISHER = 10_000


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """A local Spark of two cores that tries a failed task up to 4 times, for the module's tests that run in this
    process (one JVM and its start for them all), stopped with its Java process and Python workers at the end."""
    yield from local_session(tmp_path_factory.mktemp("spark"), "local[2,4]")


def _durable_queue(cluster, name: str):
    qm = cluster.manager
    qm.create(name, cluster.addresses[0])
    qm.set_rules(name, {"durability": "interval"})
    wait_until(lambda: (j := qm.journal(name)) is not None and bool(j.alive) and bool(j.reads), 30,
               "the queue's journal running")
    return qm


def test_a_batch_read_returns_each_record_once_from_ranges_read_in_parallel(make_embedded, spark):
    cluster = make_embedded(hosts=1)
    _durable_queue(cluster, "s")
    started = time.time()
    with client.connect(zk=cluster.zk, queue="s", root=cluster.root) as conn:
        pubs = [conn.publisher() for _ in range(3)]
        for i in range(PER_PUBLISHER):
            for key, p in PUBLISHERS.items():
                pubs[p].send(key.encode(), b"%d" % i)
        for pub in pubs:
            pub.flush(60)
    ended = time.time()
    where = {"zk": cluster.zk, "root": cluster.root, "queue": "s"}

    df = roq_spark.read(spark, partitions=4, **where)
    assert df.rdd.getNumPartitions() == 4
    per_task = df.rdd.mapPartitionsWithIndex(lambda i, rows: [(i, sum(1 for _ in rows))]).collect()
    assert sum(1 for _, n in per_task if n) >= 2, per_task  # the records come from more than one task
    rows = df.collect()
    assert len(rows) == len(PUBLISHERS) * PER_PUBLISHER
    assert len({r.offset for r in rows}) == len(rows)  # each record once
    by_publisher: dict[str, list] = {}
    for r in rows:
        by_publisher.setdefault(r.publisher, []).append(r)
    assert len(by_publisher) == len(PUBLISHERS)
    for records in by_publisher.values():
        records.sort(key=lambda r: r.seq)
        seqs = [r.seq for r in records]
        assert seqs == list(range(seqs[0], seqs[0] + PER_PUBLISHER))  # every seq, once
        assert [int(r.payload) for r in records] == list(range(PER_PUBLISHER))  # in the publisher's order
        assert len({r.key for r in records}) == 1
        assert all(started - 1 <= r.timestamp.timestamp() <= ended + 1 for r in records[::997])

    a = roq_spark.read(spark, prefix="a.", **where).collect()
    assert len(a) == 2 * PER_PUBLISHER and all(r.key.startswith(b"a.") for r in a)

    offsets = sorted(r.offset for r in rows)
    low, high = offsets[12_500], offsets[20_000]
    middle = roq_spark.read(spark, startingOffsets=low, endingOffsets=high, partitions=3, **where)
    assert sorted(r.offset for r in middle.select("offset").collect()) == offsets[12_500:20_000]
    by_name = spark.read.format("roq").options(**{k: str(v) for k, v in where.items()}).load()  # registered now
    assert by_name.count() == len(rows)
    # a bad option through Spark's own reader: the same words reach the caller, in Spark's error
    with pytest.raises(Exception, match="unknown option 'bogus'"):
        spark.read.format("roq").options(bogus="1", **{k: str(v) for k, v in where.items()}).load().count()


def test_bad_options_and_queues_that_cannot_be_read_are_clear_errors_at_query_start(make_embedded):
    """Checked in the calling process before Spark is asked anything (so no Spark here: ``spark`` is None)."""
    cluster = make_embedded(hosts=1)
    qm = _durable_queue(cluster, "s")
    qm.create("plain", cluster.addresses[0])
    where = {"zk": cluster.zk, "root": cluster.root}
    with pytest.raises(ConfigError, match="unknown option 'bogus'"):
        roq_spark.read(None, queue="s", bogus=1, **where)
    with pytest.raises(ConfigError, match="option 'partitions' is 'many'"):
        roq_spark.read(None, queue="s", partitions="many", **where)
    with pytest.raises(NotFoundError, match="no queue named 'nowhere'"):
        roq_spark.read(None, queue="nowhere", **where)
    with pytest.raises(ConfigError, match="'plain' is not durable"):
        roq_spark.read(None, queue="plain", **where)



def test_on_a_cluster_with_curve_a_reader_needs_subscribe_and_a_writer_publish_and_each_is_told_at_query_start(
        make_embedded, spark):
    """Every socket CURVE: a key without permissions is refused by name at query start (the reader and the sink
    alike); granted ``subscribe`` (not ``manage``) it reads, its tasks speaking CURVE to the journal, and granted
    ``publish`` on another queue it writes there."""
    from roq.errors import ForbiddenError

    cluster = make_embedded(hosts=1, secure=True)
    qm = _durable_queue(cluster, "s")
    _durable_queue(cluster, "t")
    with cluster.connect("s") as conn:
        pub = conn.publisher()
        pub.send_many(b"k", [b"%d" % i for i in range(1000)])
        pub.flush(30)
    carol = cluster.keys.client("carol")
    where = {"zk": cluster.zk, "root": cluster.root, "credentials": carol}

    def refused(what):
        try:
            what()
        except ForbiddenError as exc:
            return str(exc)
        except client.BrokerConnectionError:  # her key not read into the keyrings yet
            return None
        return "allowed"

    wait_until(lambda: refused(lambda: roq_spark.read(None, queue="s", **where)) not in (None, "allowed"), 15,
               "carol's key known and refused")
    assert "carol may not" in refused(lambda: roq_spark.read(None, queue="s", **where))
    rows = spark.createDataFrame([(b"a", b"1")], "key binary, payload binary")
    with pytest.raises(Exception, match="carol may not publish"):
        roq_spark.register(spark)
        rows.write.format("roq").mode("append").options(queue="t", **where).save()

    qm.grant("carol", "subscribe", "s")
    qm.grant("carol", "publish", "t")

    def reads() -> bool:
        try:
            return roq_spark.read(spark, queue="s", partitions=2, **where).count() == 1000
        except Exception:  # the grant not in force everywhere yet (the journal hears of it from the monitor)
            return False

    wait_until(reads, 30, "carol reading the 1,000 records (her grant in force at the monitor and the journal)")
    rows.write.format("roq").mode("append").options(queue="t", **where).save()
    written = roq_spark.read(spark, zk=cluster.zk, root=cluster.root, credentials=cluster.credentials,
                             queue="t").collect()
    assert [(r.key, r.payload) for r in written] == [(b"a", b"1")]
    with pytest.raises(Exception, match="carol may not publish"):  # granted on t, not on s
        rows.write.format("roq").mode("append").options(queue="s", **where).save()

def _committed(out: str) -> list[str]:
    """The Parquet files a file sink committed (its ``_spark_metadata`` log: a file per batch, ``N.compact`` every
    tenth holding those before; files of a batch that was not committed are not in it)."""
    log = os.path.join(out, "_spark_metadata")
    if not os.path.isdir(log):
        return []
    names = sorted((n for n in os.listdir(log) if n.split(".")[0].isdigit()), key=lambda n: int(n.split(".")[0]))
    compact = [i for i, n in enumerate(names) if n.endswith(".compact")]
    files: dict[str, bool] = {}
    for name in names[compact[-1] if compact else 0:]:
        with open(os.path.join(log, name)) as f:
            lines = f.read().splitlines()[1:]  # after its version line
        for entry in map(json.loads, filter(None, lines)):
            files[entry["path"]] = entry["action"] == "add"
    return [path.removeprefix("file://") for path, added in files.items() if added]


def _sunk(out: str) -> list[tuple[str, int, int]]:
    """(publisher, seq, payload as a number) of every record the sink committed."""
    import pyarrow.parquet as pq

    rows: list[tuple[str, int, int]] = []
    for path in _committed(out):
        table = pq.read_table(path, columns=["publisher", "seq", "payload"])
        rows += zip(table.column("publisher").to_pylist(), table.column("seq").to_pylist(),
                    (int(p) for p in table.column("payload").to_pylist()))
    return rows


def test_a_streaming_query_killed_and_started_again_from_its_checkpoint_sinks_each_record_once(make_embedded,
                                                                                                tmp_path):
    """A streaming query reads a queue while a publisher sends into it, its driver is killed with ``kill -9``
    (with its JVM and Python workers: the whole process group) after it committed a few micro-batches, and started
    again from its checkpoint: the Parquet sink holds every record exactly once."""
    cluster = make_embedded(hosts=1)
    _durable_queue(cluster, "st")
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    command = [sys.executable, "-m", "tests.integration.spark_stream", "--zk", cluster.zk, "--root", cluster.root,
               "--queue", "st", "--out", out, "--checkpoint", checkpoint]
    jobs: list[subprocess.Popen] = []

    def start(n: int) -> subprocess.Popen:
        log = open(tmp_path / f"driver{n}.log", "w")
        scratch = tmp_path / f"jvm{n}-tmp"
        scratch.mkdir()
        job_ = subprocess.Popen([*command, "--log", str(tmp_path / f"jvm{n}.log"), "--tmp", str(scratch)], stdout=log,
                                stderr=log, start_new_session=True, cwd=os.getcwd(),
                                env={**os.environ, "TMPDIR": str(scratch)})
        jobs.append(job_)
        return job_

    spark_restarts: list[int] = []  # the drivers started again for Spark's sake

    def driver() -> subprocess.Popen:
        """The running driver (the last one started): one that Spark ended because a Python worker it started did
        not connect back within its 10 s (hard-coded in Spark's PythonWorkerFactory; a machine loaded far beyond its
        cores) is started again from the checkpoint, as a supervisor would, at most twice: each record once all the
        same."""
        if jobs[-1].poll() is not None and len(spark_restarts) < 2:
            if "Python worker failed to connect back" in (tmp_path / f"driver{len(jobs)}.log").read_text():
                spark_restarts.append(len(jobs))
                print(f"driver {len(jobs)}: Spark gave up on a Python worker starting; started again")
                start(len(jobs) + 1)
        return jobs[-1]

    def kill(job_: subprocess.Popen) -> None:
        try:
            os.killpg(job_.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        job_.wait(30)
        wait_until(lambda: not _group(job_.pid), 30, "every process of the driver's group gone")

    sent, go, killed = threading.Event(), threading.Event(), threading.Event()
    failure: list[BaseException] = []
    published = [0]

    def publish() -> None:
        # 10,000 records before the query starts, then about 2,500 a second until its driver was killed and 5,000
        # more (however long its micro-batches take on a busy machine, it is killed while records come)
        try:
            with client.connect(zk=cluster.zk, queue="st", root=cluster.root) as conn:
                pub = conn.publisher()
                i, last = 0, 10_000
                while i < last:
                    pub.send(b"k", b"%d" % i)
                    i += 1
                    if i == 10_000:
                        pub.flush(60)
                        go.wait(180)
                        last = 1 << 62
                    elif i > 10_000 and i % 250 == 0:
                        time.sleep(0.1)
                    if killed.is_set() and last > i + 5_000:
                        last = i + 5_000
                    published[0] = i
                pub.flush(60)
        except BaseException as exc:  # (seen by the test)
            failure.append(exc)
        finally:
            sent.set()

    try:
        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        start(1)
        wait_until(lambda: _committed(out) or driver().poll() is not None, 180, "the first query's first micro-batch")
        go.set()
        wait_until(lambda: len(_committed(out)) >= 3 or driver().poll() is not None, 60,
                   "the first query committed micro-batches while the publisher sends")
        assert driver().poll() is None, (tmp_path / f"driver{len(jobs)}.log").read_text()[-3000:]
        before = len(_sunk(out))
        kill(driver())  # kill -9, in the middle of whatever batch it was on
        assert not sent.is_set() and not failure, failure
        killed.set()
        start(len(jobs) + 1)
        assert sent.wait(120), f"{published[0]} records published in 120 s"
        assert not failure, failure
        total = published[0]
        assert before < total
        wait_until(lambda: len(_sunk(out)) >= total or driver().poll() is not None, 180,
                   "the query started again sank every record")
        assert driver().poll() is None, (tmp_path / f"driver{len(jobs)}.log").read_text()[-3000:]
        rows = _sunk(out)
    finally:
        killed.set()  # (a failure before the kill: the publisher stops too)
        for job_ in jobs:
            kill(job_)
    assert len(rows) == total, f"{len(rows)} records in the sink for {total} sent"
    assert sorted(n for _, _, n in rows) == list(range(total)), "each record once"
    assert len({(p, s) for p, s, _ in rows}) == total


def _group(pgid: int) -> list[int]:
    """The live processes of the process group ``pgid``."""
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return out


def _fail_once(marker: str, per: int):
    """An RDD's partition function: partition ``index`` gives ``per`` rows (key, payload: its ids); the first attempt
    of partition 1 fails after 100,000 rows, once the sink published some of them (the marker file says it ran)."""

    def rows(index, _):
        from pyspark import TaskContext

        context = TaskContext.get()
        doomed = index == 1 and context is not None and context.attemptNumber() == 0
        for n, i in enumerate(range(index * per, (index + 1) * per)):
            if doomed and n == 100_000:
                with open(marker, "w") as f:
                    f.write(f"failed after {n} rows")
                raise RuntimeError("this task fails once, on purpose")
            yield b"k%d" % (i % 4), b"%d" % i

    return rows


def test_the_sink_writes_each_row_once_though_a_task_failed_and_spark_ran_it_again(make_embedded, spark, tmp_path):
    """1,000,000 rows written to a durable queue by four tasks, one of which fails half-way through its rows (after
    publishing some) and is run again by Spark: the queue's journal holds each row exactly once."""
    cluster = make_embedded(hosts=1)
    _durable_queue(cluster, "sink")
    session = spark  # (a task is tried 4 times)
    roq_spark.register(session)
    total, marker = 1_000_000, str(tmp_path / "failed-once")
    made = session.sparkContext.parallelize(range(4), 4).mapPartitionsWithIndex(_fail_once(marker, total // 4))
    rows = session.createDataFrame(made, "key binary, payload binary")
    rows.write.format("roq").mode("append").options(zk=cluster.zk, root=cluster.root, queue="sink",
                                                    flushTimeout="30").save()
    assert os.path.exists(marker), "no task failed: the test proves nothing"
    journal = cluster.manager.journal("sink")
    assert journal is not None and (journal.duplicates or 0) > 0, \
        "the task run again sent nothing its first attempt had published: the test proves little"
    where = {"zk": cluster.zk, "root": cluster.root, "queue": "sink"}
    written = roq_spark.read(session, partitions=4, **where).select("publisher", "seq", "payload").cache()  # (read once)
    counts = written.groupBy("publisher").agg({"seq": "max", "*": "count"}).collect()
    assert sorted(r["count(1)"] for r in counts) == sorted(r["max(seq)"] for r in counts), \
        "each task's publisher: every seq from 1, once"
    assert sum(r["count(1)"] for r in counts) == total and len(counts) == 4
    assert written.select("payload").distinct().count() == total, "each row once"
    written.unpersist()

    for options, error in (({"zk": cluster.zk, "queue": "sink", "colour": "red"}, "unknown option 'colour'"),
                           ({"zk": cluster.zk, "root": cluster.root, "queue": "none-such"}, "no queue 'none-such'"),
                           ({"zk": cluster.zk, "root": cluster.root, "queue": "sink", "flushTimeout": "soon"},
                            "option 'flushTimeout'")):
        with pytest.raises(Exception, match=error):
            rows.limit(10).write.format("roq").mode("append").options(**options).save()
    with pytest.raises(Exception, match="a column 'payload' of binary or string"):
        session.range(3).selectExpr("cast(cast(id as string) as binary) as key").write.format("roq").mode("append") \
            .options(**where).save()
