"""The PySpark jobs over the KPI archive: ``roq kpi report`` and ``roq kpi tune``.

Spark runs on ``local[*]`` by default (any master URL by flag), bound to loopback, with its web UI off and
its console noise kept to errors. The archive is read as JSON lines with a fixed schema (:data:`FIELDS`,
derived from the record shapes of :mod:`roq.kpi.records` that the writers use); partition directories give ``queue`` and ``date`` (as strings: a queue named ``2026``
stays a name). What cannot be used is skipped and counted, never fatal:

* ``corrupt``: a line that is not a JSON object of the schema's types (a cut line, garbage, a file that
  is not JSON lines);
* ``unknown_kind``: a well-formed record whose ``kind`` is not one of :data:`~roq.kpi.records.KINDS`, or
  that has no ``time``;
* ``files_being_written``: hidden files (``.name.part``) a writer has not put in place yet (or a crashed
  one left, until the next writer recovers their complete lines): not read.

:func:`tune` estimates capacities with the rule of :mod:`roqcli.kpi.capacity`, each exchange's samples judged
on its host's budget (from the host records), and returns the thresholds with their evidence; :func:`follow`
keeps doing so with Structured Streaming as the archive grows. ``roq kpi report`` is
:mod:`roqcli.kpi.report`.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import os
import sys
import time
from typing import Any, Callable, Mapping, Union

from roq import defaults
from roq.errors import ConfigError, RoQError
from roq.kpi.archive import HOSTS_PARTITION
from roq.kpi.records import KINDS, columns
from roq.settings import parse_duration
from roqcli.kpi.capacity import Budget, Evidence, HostMoments, Moments, TuneRule, estimate, fanout, thresholds_for

log = logging.getLogger(__name__)

__all__ = ["spark_session", "session_running", "stop_session", "spark_failure", "load", "tune", "tune_frame", "follow", "parse_since", "FIELDS",
           "Loaded", "KpiQueue", "Source"]

#: every column a record may have (a record has the ones of its kind); partition columns come on top
FIELDS: tuple[tuple[str, str], ...] = columns()
CORRUPT = "_corrupt"


@dataclasses.dataclass(frozen=True)
class KpiQueue:
    """The cluster's KPI queue (:mod:`client.shipper` fills it from every host's archive), read through the ``roq``
    data source: each record's key is its archive partition (a queue's name or ``@hosts``), its payload the line."""

    zk: str
    queue: str
    root: str = defaults.ROOT
    credentials: str = ""

    def __str__(self) -> str:
        return f"queue {self.queue} of the cluster at {self.zk}{self.root}"


#: where the records are read: an archive directory, or the KPI queue
Source = Union[str, KpiQueue]


class Loaded:
    """The archive's usable records (a cached DataFrame) and what was skipped."""

    def __init__(self, frame: Any, counts: dict[str, int]) -> None:
        self.frame = frame
        self.counts = counts


def spark_session(master: str = "local[*]", app: str = "roq-kpi", *, jvm_log: str | None = None,
                  settings: dict[str, str] | None = None) -> Any:
    """A SparkSession on ``master``, on loopback, quiet (errors only), without its web UI.

    Args:
        jvm_log: a file for everything the Java side prints (its start-up banner, warnings, errors);
            None = this process's standard error. Spark's failures reach Python as exceptions either way.
        settings: Spark settings beside (or instead of) this function's own, as spark-submit's ``--conf``:
            ``spark.driver.extraJavaOptions`` reaches the driver's JVM, which starts here.

    Raises:
        ConfigError: PySpark (or a Java runtime) is missing.
    """
    try:
        from pyspark import SparkConf, SparkContext
        from pyspark.java_gateway import launch_gateway
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ConfigError("PySpark is not installed: pip install 'roq-py[kpi]'") from exc
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers (a data source's reads) run this one
    conf = (SparkConf().setMaster(master).setAppName(app)
            .set("spark.driver.host", "127.0.0.1")
            .set("spark.driver.bindAddress", "127.0.0.1")
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.sql.shuffle.partitions", "4")
            .set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
            .set("spark.sql.session.timeZone", "UTC"))
    for key, value in (settings or {}).items():
        conf.set(key, value)
    if session_running():
        return SparkSession.builder.getOrCreate()
    try:
        if jvm_log:
            with open(jvm_log, "ab") as sink:
                gateway = launch_gateway(conf, popen_kwargs={"stderr": sink, "stdout": sink})
            context = SparkContext(conf=conf, gateway=gateway)
        else:
            context = SparkContext(conf=conf)
    except Exception as exc:  # Java missing or too old, a master that cannot be reached...
        where = f" (see {jvm_log})" if jvm_log else ""
        raise ConfigError(f"Spark did not start on {master}{where}: {str(exc).splitlines()[0][:300]}") from None
    context.setLogLevel("ERROR")
    return SparkSession(context)


def spark_failure(exc: BaseException, jvm_log: str | None = None) -> RoQError | None:
    """A failure of Spark's (a Java exception through Py4J, a PySpark error) as one of ours, its first line and, for
    a Python traceback, its last, naming where Spark's own output went; None: ``exc`` is not Spark's."""
    if not type(exc).__module__.startswith(("py4j", "pyspark")):
        return None
    text = ""
    for say in (lambda: exc.java_exception.toString(), lambda: str(exc)):  # type: ignore[attr-defined]
        try:
            text = str(say()).strip()
        except Exception:  # (no Java exception; a gateway gone)
            continue
        if text:
            break
    lines = [line.strip() for line in text.splitlines() if line.strip()] or [type(exc).__name__]
    said = lines[0] if len(lines) == 1 or "Traceback" not in text else f"{lines[0]} ... {lines[-1]}"
    if "Cannot run program" in said:
        said += (f" (PYSPARK_PYTHON, {os.environ.get('PYSPARK_PYTHON', 'python3')!r}, must name a Python with the "
                 f"project both here and on every worker: a name found on the PATH, such as python3)")
    return RoQError(f"Spark failed: {said[:800]}{f' (its output: {jvm_log})' if jvm_log else ''}")


def session_running() -> bool:
    """Whether this process has a Spark session running (then :func:`spark_session` returns that one)."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return False
    return SparkContext._active_spark_context is not None


def stop_session(spark: Any, timeout: float = 20.0) -> None:
    """Stop ``spark`` and the Java process behind it (PySpark keeps that one alive until Python exits)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # already gone
        pass
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is not None:
        try:
            proc.stdin.close()  # the JVM watches its stdin and exits when it closes
            proc.wait(timeout)
        except Exception:
            proc.kill()
            proc.wait(5)


def _schema() -> Any:
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    types = {"string": StringType(), "double": DoubleType(), "long": LongType()}
    return StructType([StructField(name, types[kind]) for name, kind in FIELDS] + [StructField(CORRUPT, StringType())])


def parse_since(text: str | None, now: float | None = None, flag: str = "--since") -> float | None:
    """``--since`` (or ``flag``): ``30m``, ``6h``, ``7d`` ago, or an ISO date / date-time (UTC); None = none given.

    Raises:
        ConfigError: none of those.
    """
    if not text:
        return None
    now = time.time() if now is None else now
    try:
        return now - parse_duration(text)
    except ConfigError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected e.g. 30m, 6h, 7d or 2026-11-23 or 2026-11-23T08:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def _paths(archive: str, queue: str | None) -> list[str]:
    if not os.path.isdir(archive):
        raise ConfigError(f"{archive}: no such KPI archive directory")
    if queue is None:
        return [archive]
    path = os.path.join(archive, f"queue={queue}")
    if not os.path.isdir(path):
        known = sorted(d[6:] for d in os.listdir(archive) if d.startswith("queue=") and d != f"queue={HOSTS_PARTITION}")
        raise ConfigError(f"no KPI records of queue {queue!r} in {archive} (queues there: {', '.join(known) or 'none'})")
    hosts = os.path.join(archive, f"queue={HOSTS_PARTITION}")
    return [path] + ([hosts] if os.path.isdir(hosts) else [])


def load(spark: Any, source: Source, *, queue: str | None = None, since: float | None = None,
         until: float | None = None) -> Loaded:
    """Read the records of ``source``, an archive directory or the KPI queue (one queue's records and the hosts'
    if ``queue``; records from ``since`` on, before ``until``).

    Raises:
        ConfigError: the archive (or the queue in it) does not exist, or holds no readable file; the KPI queue is
            not durable.
        NotFoundError: the KPI queue does not exist.
    """
    from pyspark.sql import functions as F

    paths: list[str] = []
    if isinstance(source, KpiQueue):
        raw = _from_queue(spark, source, F, queue, since)
    else:
        paths = _paths(source, queue)
        try:
            raw = (spark.read.schema(_schema()).option("mode", "PERMISSIVE")
                   .option("columnNameOfCorruptRecord", CORRUPT).option("basePath", source)
                   .json(paths))
        except Exception as exc:  # Spark's AnalysisException and kin: an archive without files
            raise ConfigError(f"{source}: no KPI records to read ({str(exc).splitlines()[0][:200]})") from None
        if since is not None:
            day = datetime.datetime.fromtimestamp(since, datetime.timezone.utc).strftime("%Y-%m-%d")
            raw = raw.where(F.col("date") >= F.lit(day))  # prunes whole date directories
    raw = raw.cache()
    corrupt = F.col(CORRUPT).isNotNull()
    usable = F.col("kind").isin(*KINDS) & F.col("time").isNotNull()
    window = F.lit(True)
    if since is not None:
        window = window & (F.col("time") >= F.lit(since))
    if until is not None:
        window = window & (F.col("time") < F.lit(until))
    row = raw.agg(F.count(F.lit(1)).alias("lines"), F.sum(F.when(corrupt, 1).otherwise(0)).alias("corrupt"),
                  F.sum(F.when(~corrupt & ~usable, 1).otherwise(0)).alias("unknown"),
                  F.sum(F.when(~corrupt & usable & window, 1).otherwise(0)).alias("records")).collect()[0]
    frame = raw.where(~corrupt & usable & window)
    # lines read, of them corrupt and of unknown kind; records: the usable ones from since, before until
    counts = {"lines": int(row["lines"] or 0), "corrupt": int(row["corrupt"] or 0),
              "unknown_kind": int(row["unknown"] or 0), "records": int(row["records"] or 0)}
    counts["files_being_written"] = sum(1 for p in paths for _, _, files in os.walk(p)
                                        for name in files if name.startswith(".") and name.endswith(".part"))
    return Loaded(frame.drop(CORRUPT), counts)


def _from_queue(spark: Any, source: KpiQueue, F: Any, queue: str | None, since: float | None,
                stream: bool = False) -> Any:
    """The KPI queue's records as the archive's rows: each payload parsed as a line of the archive (a line that is
    not is corrupt, as in a file), ``queue`` from its key, ``date`` from its time. From ``since`` on, the journal is
    read from the records published then (a record is shipped after its time, never before)."""
    from client import spark as roq_spark

    options: dict[str, Any] = {"zk": source.zk, "root": source.root, "queue": source.queue}
    if source.credentials:
        options["credentials"] = source.credentials
    if since is not None:
        options["startingOffsets"] = datetime.datetime.fromtimestamp(since, datetime.timezone.utc).isoformat()
    # a queue that does not exist or is not durable, a bad option: raised here, not in a worker
    records = (roq_spark.read_stream if stream else roq_spark.read)(spark, **options)
    key = F.col("key").cast("string")
    if queue is not None:
        records = records.where(key.isin(queue, HOSTS_PARTITION))
    parsed = F.from_json(F.col("payload").cast("string"), _schema(),
                         {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    rows = records.select(parsed.alias("r"), key.alias("queue")).select("r.*", "queue")
    return rows.withColumn("date", F.date_format(F.timestamp_seconds(F.col("time")), "yyyy-MM-dd"))


# ---------------------------------------------------------------------- tune


def _moments_columns(F: Any, rule: TuneRule, limit: Any) -> list[Any]:
    """The sums of :class:`~roqcli.kpi.capacity.Moments`; ``limit`` is the column of each sample's linear
    region's bound (its host's, see :func:`_limit`): below it a sample is fitted, at or above it and busy it
    is saturated."""
    x = F.col("records_in") / F.col("period")
    y = F.col("cpu_percent")
    lin = (y < limit).cast("double")
    sat = ((F.coalesce(F.col("busy"), F.lit(0.0)) >= F.lit(rule.saturated_busy)) & (y >= limit)).cast("double")
    return [F.sum(lin).alias("n"), F.sum(x * lin).alias("sx"), F.sum(y * lin).alias("sy"),
            F.sum(x * x * lin).alias("sxx"), F.sum(x * y * lin).alias("sxy"), F.sum(y * y * lin).alias("syy"),
            F.count(F.lit(1)).alias("samples"), F.max(x).alias("max_x"), F.max(y).alias("max_y"),
            F.min("time").alias("first"), F.max("time").alias("last"),
            F.sum(sat).alias("saturated"), F.sum(x * sat).alias("saturated_sx"),
            F.sum("records_in").alias("records"), F.sum(F.coalesce(F.col("bytes_in"), F.lit(0))).alias("bytes_in"),
            F.sum(F.coalesce(F.col("bytes_out"), F.lit(0))).alias("bytes_out")]


def _limit(F: Any, rule: TuneRule, budgets: dict[str, Budget]) -> Any:
    """Each sample's linear-region limit: its host's (a literal map: hosts are few), else the rule's."""
    default = F.lit(Budget().linear_limit(rule))
    known = [(host, b.linear_limit(rule)) for host, b in sorted(budgets.items()) if b.cpus > 0]
    if not known:
        return default
    table = F.create_map(*[F.lit(v) for pair in known for v in pair])
    return F.coalesce(table[F.coalesce(F.col("host"), F.lit(""))], default)


def _exchange_samples(F: Any, frame: Any) -> Any:
    return frame.where((F.col("kind") == "exchange") & (F.col("period") > 0) & (F.col("records_in") > 0)
                       & F.col("cpu_percent").isNotNull())


def _host_moments(F: Any, frame: Any) -> dict[str, tuple[float, HostMoments]]:
    """host -> (its latest record's time, its budget and the CPU it spent beyond its exchanges).

    The latter is the host's mean use (its records are % of its budget) while its exchanges reported, less
    their CPU over that span; exchanges not in ``frame`` (other queues', with ``--queue``) count as the
    host's other use.
    """
    hosts = frame.where((F.col("kind") == "host") & F.col("host").isNotNull())
    out = {r["host"]: (r["last"], HostMoments(r["cpus"] or 0.0, r["link"] or 0.0)) for r in hosts.groupBy("host").agg(
        F.max("time").alias("last"), F.min(F.when(F.col("cpus") > 0, F.col("cpus"))).alias("cpus"),
        F.min(F.when(F.col("link_bytes_per_s") > 0, F.col("link_bytes_per_s"))).alias("link")).collect()}
    exchanges = frame.where((F.col("kind") == "exchange") & (F.col("period") > 0) & F.col("cpu_percent").isNotNull())
    spans = exchanges.groupBy("host").agg(F.min(F.col("time") - F.col("period")).alias("a"), F.max("time").alias("b"),
                                          F.sum(F.col("cpu_percent") * F.col("period")).alias("cpu_s"))
    use = (hosts.where((F.col("cpus") > 0) & F.col("cpu_percent_now").isNotNull()).join(spans, "host")
           .where((F.col("time") > F.col("a")) & (F.col("time") <= F.col("b")))
           .groupBy("host", "a", "b", "cpu_s").agg(F.avg(F.col("cpu_percent_now") * F.col("cpus")).alias("use")))
    for r in use.collect():
        seconds = r["b"] - r["a"]
        if seconds > 0 and r["host"] in out:
            last, h = out[r["host"]]
            other = r["use"] - r["cpu_s"] / seconds
            out[r["host"]] = (last, h.merge(HostMoments(other_cpu_s=other * seconds, seconds=seconds)))
    return out


def _moments(row: Any) -> Moments:
    return Moments(n=int(row["n"] or 0), sx=row["sx"] or 0.0, sy=row["sy"] or 0.0, sxx=row["sxx"] or 0.0,
                   sxy=row["sxy"] or 0.0, syy=row["syy"] or 0.0, samples=int(row["samples"] or 0),
                   max_x=row["max_x"] or 0.0, max_y=row["max_y"] or 0.0,
                   first=row["first"] if row["first"] is not None else math.inf,
                   last=row["last"] if row["last"] is not None else -math.inf,
                   saturated=int(row["saturated"] or 0), saturated_sx=row["saturated_sx"] or 0.0,
                   records=float(row["records"] or 0), bytes_in=float(row["bytes_in"] or 0),
                   bytes_out=float(row["bytes_out"] or 0))


def _decide(groups: dict[str, dict[str, Moments]], rule: TuneRule, budgets: dict[str, Budget],
            delivered: Mapping[str, float | None]) -> dict[str, dict[str, Any]]:
    """queue -> {thresholds, host, capacity, what binds, evidence per host}."""
    out = {}
    for queue, hosts in sorted(groups.items()):
        spread = fanout(delivered.get(queue), sum(m.records for m in hosts.values()))
        estimates = {host: estimate(m, rule, dataclasses.replace(budgets.get(host, Budget()), fanout=spread))
                     for host, m in sorted(hosts.items())}
        thresholds, host = thresholds_for(estimates, rule)
        chosen = estimates[host] if host else {}
        out[queue] = {"thresholds": thresholds, "from_host": host,
                      "capacity_records_per_s": chosen.get("capacity"), "binds": chosen.get("binds"),
                      "evidence": {"rule": _rule_doc(rule), "hosts": estimates}}
    return out


def _rule_doc(rule: TuneRule) -> dict[str, Any]:
    return {**vars(rule), "documented_in": "roqcli.kpi.capacity"}


def tune_frame(frame: Any, rule: TuneRule = TuneRule()) -> dict[str, dict[str, Any]]:
    """The decisions of every queue with exchange samples in ``frame`` (a :class:`Loaded` archive's)."""
    from pyspark.sql import functions as F

    budgets = {host: h.budget() for host, (_, h) in _host_moments(F, frame).items()}
    rows = (_exchange_samples(F, frame).groupBy("queue", "host")
            .agg(*_moments_columns(F, rule, _limit(F, rule, budgets))).collect())
    groups: dict[str, dict[str, Moments]] = {}
    for row in rows:
        groups.setdefault(row["queue"], {})[row["host"] or "?"] = _moments(row)
    delivered = {r["queue"]: float(r["records"] or 0) for r in frame.where(F.col("kind") == "subscriber")
                 .groupBy("queue").agg(F.sum("records").alias("records")).collect()}
    return _decide(groups, rule, budgets, delivered)


def tune(spark: Any, archive: Source, *, queue: str | None = None, since: float | None = None,
         until: float | None = None, rule: TuneRule = TuneRule()) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """Estimate every queue's capacity and thresholds from the archive or the KPI queue: (queue -> decision, skipped
    counts).

    Each host's budget comes from its host records (read with ``queue`` too).

    Raises:
        ConfigError: as :func:`load`.
    """
    loaded = load(spark, archive, queue=queue, since=since, until=until)
    return tune_frame(loaded.frame, rule), loaded.counts


def follow(spark: Any, archive: Source, on_decision: Callable[[dict[str, dict[str, Any]]], object], *,
           queue: str | None = None, rule: TuneRule = TuneRule(), every_s: float = 5.0,
           window_s: float = 7 * 86400.0, stop: Callable[[], bool] = lambda: False) -> None:
    """Tune continuously: Structured Streaming over the archive directory (or the KPI queue, from the records
    published in the last ``window_s``); every ``every_s`` the new files (records) are folded into the evidence (hourly buckets; only the last ``window_s`` seconds of samples count, see
    :class:`~roqcli.kpi.capacity.Evidence`) and ``on_decision`` gets the decisions of every queue with new
    samples.

    The hosts' budgets come from the host records as they arrive (with ``queue`` too): each micro-batch's
    host records are folded in before its exchange samples, which are then judged by the budgets known so
    far (a sample that arrived before its host's first record is judged as on a host of unknown budget).

    Runs until ``stop()`` returns True (checked about once a second).
    """
    from pyspark.sql import functions as F

    if isinstance(archive, KpiQueue):
        source = _from_queue(spark, archive, F, queue, time.time() - window_s, stream=True)
    else:
        _paths(archive, queue)
        # one queue: its partition and the hosts' (a glob; a queue's name has no glob characters)
        where = os.path.join(archive, f"queue={{{queue},{HOSTS_PARTITION}}}") if queue else archive
        source = (spark.readStream.schema(_schema()).option("mode", "PERMISSIVE")
                  .option("columnNameOfCorruptRecord", CORRUPT).option("basePath", archive).json(where))
        if "queue" not in source.columns:  # partition columns of a stream: from the path when not discovered
            source = source.withColumn("queue", F.regexp_extract(F.input_file_name(), r"queue=([^/]+)/", 1))
    records = source.where(F.col(CORRUPT).isNull() & F.col("kind").isin("exchange", "host", "subscriber")
                           & F.col("time").isNotNull())
    evidence = Evidence(window_s)

    def batch(frame: Any, batch_id: int) -> None:
        frame = frame.persist()
        try:
            hour = (F.floor(F.col("time") / evidence.bucket_s) * evidence.bucket_s).alias("bucket")
            for host, (last, h) in _host_moments(F, frame).items():
                evidence.add_host(host, last, h)
            for row in (frame.where(F.col("kind") == "subscriber").groupBy("queue", hour)
                        .agg(F.sum("records").alias("records")).collect()):
                evidence.add_delivered(row["queue"], row["bucket"], float(row["records"] or 0))
            now = time.time()
            budgets = evidence.budgets(now)
            rows = (_exchange_samples(F, frame).groupBy("queue", "host", hour)
                    .agg(*_moments_columns(F, rule, _limit(F, rule, budgets))).collect())
            for row in rows:
                evidence.add(row["queue"], row["host"] or "?", row["bucket"], _moments(row))
            touched = {row["queue"] for row in rows}
            if touched:
                on_decision(_decide({q: evidence.moments(q, now) for q in touched}, rule, budgets,
                                    {q: evidence.delivered_to(q, now) for q in touched}))
        finally:
            frame.unpersist()

    query = records.writeStream.foreachBatch(batch).trigger(processingTime=f"{every_s:g} seconds").start()
    try:
        while query.isActive and not stop():
            query.awaitTermination(1.0)
        if query.exception() is not None:
            raise RoQError(f"the tuning stream failed: {query.exception()}")
    finally:
        query.stop()
