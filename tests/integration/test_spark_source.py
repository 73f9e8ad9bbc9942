"""Spark reads a durable queue through the ``roq`` data source (``client.spark``): a real cluster (ZooKeeper, a GCM,
a host manager, the queue's monitor, exchange and journal) and a real local Spark of two cores, whose Python
workers read ranges of the journal's offsets in parallel."""

from __future__ import annotations

import time

import pytest

import client
from client import spark as roq_spark
from roq.errors import ConfigError, NotFoundError
from roqcli.kpi import job
from tests.integration.test_kpi import QUICK_JVM
from tests.integration.zkhelp import wait_until

PUBLISHERS = {"a.1": 0, "b.1": 1, "a.2": 2}  # key -> publisher
PER_PUBLISHER = 10_000


@pytest.fixture
def spark(tmp_path):
    """A local Spark of two cores, stopped with its Java process and Python workers after the test."""
    session = job.spark_session("local[2]", jvm_log=str(tmp_path / "spark.log"),
                                settings={"spark.driver.extraJavaOptions": QUICK_JVM})
    yield session
    job.stop_session(session)


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
