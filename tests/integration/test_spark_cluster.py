"""Spark on a standalone cluster of its own (``roqcli.sparkcluster``: a master and workers, each its own JVM, from the
installed PySpark): a read of a durable queue by tasks on two workers, and ``roq spark up`` started and stopped.
(Apart from ``test_spark_source.py``, whose tests share one local Spark in the test's process: a driver of a
standalone cluster needs a process without one.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from pyspark.sql import functions as F

import client
from client import spark as roq_spark
from roqcli.kpi import job
from roqcli.sparkcluster import SparkCluster
from roqcli.zkserver import free_port
from tests.integration.sparkjvm import QUICK_JVM
from tests.integration.test_spark_source import _durable_queue
from tests.integration.zkhelp import wait_until


@pytest.mark.timeout(420)  # (a million records published, then four JVMs on a machine that runs other Spark tests)
def test_a_standalone_cluster_of_two_workers_reads_a_million_records_each_once_on_both(make_embedded, tmp_path):
    """A master and two workers (three JVMs, ``roqcli.sparkcluster``), a durable queue of 1,000,000 records from four
    publishers: the batch read returns each record once, every publisher's seqs whole, and tasks ran on both
    workers' executors (each row tagged, as it is read, with the pid of the JVM that read it: an executor, whose
    parent is the worker that started it)."""
    cluster = make_embedded(hosts=1)
    _durable_queue(cluster, "big")
    per, publishers = 250_000, 4
    with client.connect(zk=cluster.zk, queue="big", root=cluster.root) as conn:
        pubs = [conn.publisher() for _ in range(publishers)]
        payload = b"x" * 90
        for i in range(per):
            for p, pub in enumerate(pubs):
                pub.send(b"k%d" % p, payload)
        for pub in pubs:
            pub.flush(120)
    address = "127.0.0.48"
    spark_cluster = SparkCluster(workdir=str(tmp_path / "spark"), address=address, port=free_port(address),
                                 ui_port=free_port(address), workers=2, cores=1, memory="1g",
                                 java_options=QUICK_JVM)
    with spark_cluster:
        workers = {proc.pid for proc in spark_cluster.procs[1:]}  # (spark-class execs the worker's JVM)
        session = job.spark_session(spark_cluster.url, app="roq-two-workers", jvm_log=str(tmp_path / "driver.log"),
                                    settings={"spark.driver.extraJavaOptions": QUICK_JVM,
                                              "spark.executor.extraJavaOptions": QUICK_JVM,
                                              "spark.driver.host": address, "spark.driver.bindAddress": address,
                                              "spark.executor.memory": "700m", "spark.cores.max": "2"})
        try:
            df = roq_spark.read(session, zk=cluster.zk, root=cluster.root, queue="big", partitions=8)
            reader = F.expr("reflect('java.lang.ProcessHandle', 'current')").cast("int").alias("jvm")
            columns = df.select("publisher", "seq", "offset", reader).cache()  # (the queue read once)
            total, distinct = columns.agg(F.count("*"), F.countDistinct("offset")).first()
            per_publisher = columns.groupBy("publisher").agg(F.count("*").alias("n"), F.min("seq").alias("low"),
                                                             F.max("seq").alias("high"),
                                                             F.countDistinct("seq").alias("distinct")).collect()
            read_by = {r.jvm: r.n for r in columns.groupBy("jvm").agg(F.count("*").alias("n")).collect()}
            started_by = {jvm: psutil.Process(jvm).ppid() for jvm in read_by}
            executors = session.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # (the driver's too)
        finally:
            job.stop_session(session)
    assert total == distinct == per * publishers
    assert len(per_publisher) == publishers
    assert all(r.n == r.distinct == per and r.high - r.low + 1 == per for r in per_publisher), per_publisher
    assert executors == 2, f"{executors} executors registered"
    assert len(read_by) == 2 and set(started_by.values()) == workers, (read_by, started_by, workers)


def test_roq_spark_up_starts_a_master_and_its_workers_and_ctrl_c_stops_every_one(tmp_path):
    address = "127.0.0.49"
    port, ui = free_port(address), free_port(address)
    proc = subprocess.Popen([sys.executable, "-m", "roqcli.main", "spark", "up", "--workers", "1", "--address",
                             address, "--port", str(port), "--ui-port", str(ui), "--dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM})  # (as Spark's scripts read it)
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 120
        while not any("web UI" in line for line in lines) and time.monotonic() < deadline and proc.poll() is None:
            lines.append(proc.stdout.readline())
        assert any(f"Spark master spark://{address}:{port} with 1 workers" in line for line in lines), lines
        status = SparkCluster(workdir=str(tmp_path), address=address, ui_port=ui).status()
        assert status is not None and SparkCluster.alive(status) == 1, status
        children = [p for p in psutil.Process(proc.pid).children(recursive=True)]
        spawned = [p.pid for p in psutil.process_iter(["cmdline"])
                   if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
        jvms = [p for p in psutil.process_iter(["cmdline"]) if "org.apache.spark.deploy." in " ".join(
            p.info["cmdline"] or []) and address in p.info["cmdline"]]
        assert len(jvms) == 2 and all(QUICK_JVM.split()[0] in p.info["cmdline"] for p in jvms), jvms
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        assert "stopping the Spark cluster" in proc.stdout.read()
        wait_until(lambda: not [pid for pid in spawned if psutil.pid_exists(pid) and
                                psutil.Process(pid).status() != psutil.STATUS_ZOMBIE], 30, "every JVM gone")
        assert spawned and not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
