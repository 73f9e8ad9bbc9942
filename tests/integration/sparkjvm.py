"""The Java options of the tests' Spark JVMs, and the class-data archive they start from.

A Spark JVM of the tests lives for seconds to a minute and spends most of its CPU starting: loading, verifying and
compiling some ten thousand classes. Two options cut that:

- its first compiler only, and the serial collector (about 40% less CPU for a session, its jobs no slower);
- a class-data archive (the JDK's application class-data sharing): the classes a Spark session loads, parsed and
  verified once, mapped by every later JVM instead of loaded again (a session's start and first job: about 14 CPU
  seconds without it, 8 with it). ``make test`` makes the archive once per environment (``python -m
  tests.integration.sparkjvm``, a session that runs a few typical jobs and writes the classes it loaded at its
  exit). Without it the options work the same, only slower; a JVM that finds the archive made by another Java or
  for other jars says so in its log and loads its classes as usual.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

#: Where ``make test`` puts the archive: beside the environment's Python (one per Java and PySpark installed).
CLASS_ARCHIVE = Path(sys.prefix) / "spark-classes.jsa"

_QUICK = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


#: The options of every Spark JVM of the tests (driver, executors, master and workers), as the tests pass them
#: (``spark.driver.extraJavaOptions``, ``spark.executor.extraJavaOptions``, ``SparkCluster(java_options=...)``).
QUICK_JVM = f"{_QUICK} -XX:SharedArchiveFile={CLASS_ARCHIVE}" if CLASS_ARCHIVE.is_file() else _QUICK


def local_session(log_dir: Path, master: str = "local[2]") -> Iterator[Any]:
    """For a module's fixture: a local Spark session with these options (its JVM's output in ``log_dir``), stopped
    with its Java process at the end."""
    from roqcli.kpi import job

    session = job.spark_session(master, jvm_log=str(log_dir / "spark.log"),
                                settings={"spark.driver.extraJavaOptions": QUICK_JVM})
    yield session
    job.stop_session(session)


def make_archive(path: Path) -> None:
    """Run a local Spark session through the kinds of work the tests do (JSON files read with a schema, grouped
    aggregates and percentiles, a cache, a Python data source) and write the classes it loaded to ``path``."""
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceReader

    from roqcli.kpi import job

    class Numbers(DataSource):
        @classmethod
        def name(cls) -> str:
            return "numbers"

        def schema(self) -> str:
            return "n long, key binary"

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return NumbersReader()

    class NumbersReader(DataSourceReader):
        def read(self, partition):  # type: ignore[no-untyped-def]
            for n in range(1000):
                yield n, b"k%d" % (n % 7)

    partial = path.with_name(f"{path.name}.{os.getpid()}.part")
    log = path.with_name(f"{path.name}.log")
    with tempfile.TemporaryDirectory() as scratch:
        session = job.spark_session("local[2]", app="roq-class-archive", jvm_log=str(log),
                                    settings={"spark.driver.extraJavaOptions":
                                              f"{_QUICK} -XX:ArchiveClassesAtExit={partial}"})
        try:
            lines = os.path.join(scratch, "lines")
            session.range(2000).select((F.col("id") % 5).alias("kind"), F.col("id").cast("double").alias("x"),
                                       F.col("id").alias("time")).write.json(lines)
            frame = session.read.schema("kind long, x double, time long, bad string") \
                .option("columnNameOfCorruptRecord", "bad").json(lines).cache()
            frame.groupBy("kind").agg(F.count(F.lit(1)), F.avg("x"), F.percentile_approx("x", 0.95),
                                      F.countDistinct("time"), F.max("x")).orderBy("kind").collect()
            frame.groupBy((F.floor(F.col("time") / 10) * 10).alias("t")).agg(F.sum("x")).collect()
            session.dataSource.register(Numbers)
            numbers = session.read.format("numbers").load()
            numbers.select(F.col("key").cast("string"), "n").groupBy("key").agg(F.count("*")).collect()
        finally:
            job.stop_session(session)  # the JVM writes the archive as it exits
    if not partial.is_file():
        raise SystemExit(f"the JVM wrote no class-data archive at {partial} (its log: {log})")
    partial.replace(path)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else CLASS_ARCHIVE
    print(f"making Spark's class-data archive {path} (once per environment)...", flush=True)
    make_archive(path)


if __name__ == "__main__":
    main()
