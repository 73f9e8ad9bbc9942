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

:func:`report` writes ``report.json`` (every figure, with units), PNG plots and ``index.html``;
:func:`tune` estimates capacities with the rule of :mod:`roqcli.kpi.capacity` and returns the thresholds
with their evidence; :func:`follow` keeps doing so with Structured Streaming as the archive grows.
"""

from __future__ import annotations

import datetime
import html
import json
import logging
import math
import os
import re
import time
from typing import Any, Callable

from roq.errors import ConfigError, RoQError
from roq.kpi.archive import HOSTS_PARTITION
from roq.kpi.records import KINDS, columns
from roqcli.kpi.capacity import Evidence, Moments, TuneRule, estimate, thresholds_for

log = logging.getLogger(__name__)

__all__ = ["spark_session", "stop_session", "load", "report", "tune", "follow", "parse_since", "FIELDS", "Loaded"]

#: every column a record may have (a record has the ones of its kind); partition columns come on top
FIELDS: tuple[tuple[str, str], ...] = columns()
CORRUPT = "_corrupt"
PLOTS = ("throughput.png", "latency.png", "capacity.png", "hosts.png")


class Loaded:
    """The archive's usable records (a cached DataFrame) and what was skipped."""

    def __init__(self, frame: Any, counts: dict[str, int]) -> None:
        self.frame = frame
        self.counts = counts


def spark_session(master: str = "local[*]", app: str = "roq-kpi", *, jvm_log: str | None = None) -> Any:
    """A SparkSession on ``master``, on loopback, quiet (errors only), without its web UI.

    Args:
        jvm_log: a file for everything the Java side prints (its start-up banner, warnings, errors);
            None = this process's standard error. Spark's failures reach Python as exceptions either way.

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
    conf = (SparkConf().setMaster(master).setAppName(app)
            .set("spark.driver.host", "127.0.0.1")
            .set("spark.driver.bindAddress", "127.0.0.1")
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.sql.shuffle.partitions", "4")
            .set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
            .set("spark.sql.session.timeZone", "UTC"))
    if SparkContext._active_spark_context is not None:
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


def parse_since(text: str | None, now: float | None = None) -> float | None:
    """``--since``: ``30m``, ``6h``, ``7d`` ago, or an ISO date / date-time (UTC); None = everything.

    Raises:
        ConfigError: none of those.
    """
    if not text:
        return None
    now = time.time() if now is None else now
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if match:
        return now - float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"--since {text!r}: expected e.g. 30m, 6h, 7d or 2026-11-23 or 2026-11-23T08:00") from None
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


def load(spark: Any, archive: str, *, queue: str | None = None, since: float | None = None) -> Loaded:
    """Read the archive (one queue's records and the hosts' if ``queue``; records from ``since`` on).

    Raises:
        ConfigError: the archive (or the queue in it) does not exist, or holds no readable file.
    """
    from pyspark.sql import functions as F

    paths = _paths(archive, queue)
    try:
        raw = (spark.read.schema(_schema()).option("mode", "PERMISSIVE")
               .option("columnNameOfCorruptRecord", CORRUPT).option("basePath", archive)
               .json(paths))
    except Exception as exc:  # Spark's AnalysisException and kin: an archive without files
        raise ConfigError(f"{archive}: no KPI records to read ({str(exc).splitlines()[0][:200]})") from None
    if since is not None:
        day = datetime.datetime.fromtimestamp(since, datetime.timezone.utc).strftime("%Y-%m-%d")
        raw = raw.where(F.col("date") >= F.lit(day))  # prunes whole date directories
    raw = raw.cache()
    corrupt = F.col(CORRUPT).isNotNull()
    usable = F.col("kind").isin(*KINDS) & F.col("time").isNotNull()
    row = raw.agg(F.count(F.lit(1)).alias("lines"), F.sum(F.when(corrupt, 1).otherwise(0)).alias("corrupt"),
                  F.sum(F.when(~corrupt & ~usable, 1).otherwise(0)).alias("unknown")).collect()[0]
    frame = raw.where(~corrupt & usable)
    if since is not None:
        frame = frame.where(F.col("time") >= F.lit(since))
    counts = {"lines": int(row["lines"] or 0), "corrupt": int(row["corrupt"] or 0),
              "unknown_kind": int(row["unknown"] or 0)}
    counts["records"] = counts["lines"] - counts["corrupt"] - counts["unknown_kind"]
    counts["files_being_written"] = sum(1 for p in paths for _, _, files in os.walk(p)
                                        for name in files if name.startswith(".") and name.endswith(".part"))
    return Loaded(frame.drop(CORRUPT), counts)


# ---------------------------------------------------------------------- tune


def _moments_columns(F: Any, rule: TuneRule) -> list[Any]:
    x = F.col("records_in") / F.col("period")
    y = F.col("cpu_percent")
    lin = (y < F.lit(rule.linear_limit * rule.saturation_cpu)).cast("double")
    return [F.sum(lin).alias("n"), F.sum(x * lin).alias("sx"), F.sum(y * lin).alias("sy"),
            F.sum(x * x * lin).alias("sxx"), F.sum(x * y * lin).alias("sxy"), F.sum(y * y * lin).alias("syy"),
            F.count(F.lit(1)).alias("samples"), F.max(x).alias("max_x"), F.max(y).alias("max_y"),
            F.min("time").alias("first"), F.max("time").alias("last")]


def _exchange_samples(F: Any, frame: Any) -> Any:
    return frame.where((F.col("kind") == "exchange") & (F.col("period") > 0) & (F.col("records_in") > 0)
                       & F.col("cpu_percent").isNotNull())


def _moments(row: Any) -> Moments:
    return Moments(int(row["n"] or 0), row["sx"] or 0.0, row["sy"] or 0.0, row["sxx"] or 0.0, row["sxy"] or 0.0,
                   row["syy"] or 0.0, int(row["samples"] or 0), row["max_x"] or 0.0, row["max_y"] or 0.0,
                   row["first"] if row["first"] is not None else math.inf,
                   row["last"] if row["last"] is not None else -math.inf)


def _decide(groups: dict[str, dict[str, Moments]], rule: TuneRule) -> dict[str, dict[str, Any]]:
    """queue -> {thresholds, host, capacity, evidence per host}."""
    out = {}
    for queue, hosts in sorted(groups.items()):
        estimates = {host: estimate(m, rule) for host, m in sorted(hosts.items())}
        thresholds, host = thresholds_for(estimates, rule)
        out[queue] = {"thresholds": thresholds, "from_host": host,
                      "capacity_records_per_s": estimates[host]["capacity"] if host else None,
                      "evidence": {"rule": _rule_doc(rule), "hosts": estimates}}
    return out


def _rule_doc(rule: TuneRule) -> dict[str, Any]:
    return {**vars(rule), "documented_in": "roqcli.kpi.capacity"}


def tune(spark: Any, archive: str, *, queue: str | None = None, since: float | None = None,
         rule: TuneRule = TuneRule()) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """Estimate every queue's capacity and thresholds from the archive: (queue -> decision, skipped counts).

    Raises:
        ConfigError: as :func:`load`.
    """
    from pyspark.sql import functions as F

    loaded = load(spark, archive, queue=queue, since=since)
    rows = _exchange_samples(F, loaded.frame).groupBy("queue", "host").agg(*_moments_columns(F, rule)).collect()
    groups: dict[str, dict[str, Moments]] = {}
    for row in rows:
        groups.setdefault(row["queue"], {})[row["host"] or "?"] = _moments(row)
    return _decide(groups, rule), loaded.counts


def follow(spark: Any, archive: str, on_decision: Callable[[dict[str, dict[str, Any]]], None], *,
           queue: str | None = None, rule: TuneRule = TuneRule(), every_s: float = 5.0,
           window_s: float = 7 * 86400.0, stop: Callable[[], bool] = lambda: False) -> None:
    """Tune continuously: Structured Streaming over the archive directory; every ``every_s`` the new files
    are folded into the evidence (hourly buckets; only the last ``window_s`` seconds of samples count, see
    :class:`~roqcli.kpi.capacity.Evidence`) and ``on_decision`` gets the decisions of every queue with new
    samples.

    Runs until ``stop()`` returns True (checked about once a second).
    """
    from pyspark.sql import functions as F

    _paths(archive, queue)
    source = (spark.readStream.schema(_schema()).option("mode", "PERMISSIVE")
              .option("columnNameOfCorruptRecord", CORRUPT).option("basePath", archive)
              .json(os.path.join(archive, f"queue={queue}") if queue else archive))
    if "queue" not in source.columns:  # partition columns of a stream: from the path when not discovered
        source = source.withColumn("queue", F.regexp_extract(F.input_file_name(), r"queue=([^/]+)/", 1))
    samples = _exchange_samples(F, source.where(F.col(CORRUPT).isNull()))
    evidence = Evidence(window_s)

    def batch(frame: Any, batch_id: int) -> None:
        hour = (F.floor(F.col("time") / evidence.bucket_s) * evidence.bucket_s).alias("bucket")
        rows = frame.groupBy("queue", "host", hour).agg(*_moments_columns(F, rule)).collect()
        for row in rows:
            evidence.add(row["queue"], row["host"] or "?", row["bucket"], _moments(row))
        touched = {row["queue"] for row in rows}
        if touched:
            now = time.time()
            on_decision(_decide({q: evidence.moments(q, now) for q in touched}, rule))

    query = samples.writeStream.foreachBatch(batch).trigger(processingTime=f"{every_s:g} seconds").start()
    try:
        while query.isActive and not stop():
            query.awaitTermination(1.0)
        if query.exception() is not None:
            raise RoQError(f"the tuning stream failed: {query.exception()}")
    finally:
        query.stop()


# ---------------------------------------------------------------------- report


def report(spark: Any, archive: str, out_dir: str, *, queue: str | None = None, since: float | None = None,
           progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Write ``report.json``, the plots and ``index.html`` to ``out_dir``; return the report.

    Raises:
        ConfigError: as :func:`load`.
    """
    from pyspark.sql import functions as F

    started = time.monotonic()
    progress(f"reading {archive}{f' (queue {queue})' if queue else ''}...")
    loaded = load(spark, archive, queue=queue, since=since)
    frame, counts = loaded.frame, loaded.counts
    progress(f"{counts['records']:,} records; skipped {counts['corrupt']:,} corrupt lines, "
             f"{counts['unknown_kind']:,} of unknown kind and {counts['files_being_written']} files being written")
    ex = frame.where((F.col("kind") == "exchange") & (F.col("period") > 0))
    span = ex.agg(F.min("time").alias("a"), F.max("time").alias("b")).collect()[0]
    first, last = span["a"], span["b"]
    bucket = max(1, math.ceil(((last or 0) - (first or 0)) / 200))  # at most about 200 points a curve

    progress("throughput...")
    rate = F.col("records_in") / F.col("period")
    exchanges = [r.asDict() for r in ex.groupBy("queue", "exchange", "host").agg(
        F.count(F.lit(1)).alias("periods"), F.min("time").alias("from"), F.max("time").alias("to"),
        F.sum("records_in").alias("records_in"), F.sum("bytes_in").alias("bytes_in"),
        F.avg(rate).alias("mean_records_per_s"), F.max(rate).alias("max_records_per_s"),
        F.avg("cpu_percent").alias("mean_cpu_percent"),
        F.percentile_approx("cpu_percent", 0.95).alias("p95_cpu_percent"),
        F.max("rss_bytes").alias("max_rss_bytes"), F.sum("dropped").alias("dropped"),
    ).orderBy("queue", "exchange").collect()]
    slot = (F.floor(F.col("time") / bucket) * bucket).alias("t")
    over_time = ex.groupBy("queue", slot).agg(
        (F.sum("records_in") / F.lit(bucket)).alias("records_per_s"),
        F.countDistinct("exchange").alias("exchanges")).orderBy("queue", "t").collect()
    per_exchange = ex.groupBy("queue", "exchange", slot).agg(
        (F.sum("records_in") / F.sum("period")).alias("records_per_s")).orderBy("queue", "exchange", "t").collect()

    progress("latency and gaps...")
    sub = frame.where((F.col("kind") == "subscriber") & (F.col("latency_p50_ms") >= 0))
    latency = {r["queue"]: r.asDict() for r in sub.groupBy("queue").agg(
        F.count(F.lit(1)).alias("periods"),
        F.percentile_approx("latency_p50_ms", 0.5).alias("median_p50_ms"),
        F.percentile_approx("latency_p99_ms", 0.5).alias("median_p99_ms"),
        F.percentile_approx("latency_p99_ms", 0.99).alias("p99_of_p99_ms"),
        F.max("latency_p99_ms").alias("max_p99_ms")).collect()}
    latency_time = sub.groupBy("queue", (F.floor(F.col("time") / bucket) * bucket).alias("t")).agg(
        F.percentile_approx("latency_p50_ms", 0.5).alias("p50_ms"),
        F.max("latency_p99_ms").alias("p99_ms")).orderBy("queue", "t").collect()
    gaps = {r["queue"]: r.asDict() for r in frame.where(F.col("kind") == "subscriber")
            .groupBy("queue", "subscriber").agg((F.max("gaps") - F.min("gaps")).alias("gaps"),
                                                (F.max("lost") - F.min("lost")).alias("lost"))
            .groupBy("queue").agg(F.countDistinct("subscriber").alias("subscribers"), F.sum("gaps").alias("gaps"),
                                  F.sum("lost").alias("records_lost_in_gaps")).collect()}

    progress("events and hosts...")
    events: dict[str, dict[str, int]] = {}
    for r in frame.where(F.col("kind") == "event").groupBy("queue", "event").count().collect():
        events.setdefault(r["queue"], {})[r["event"] or "?"] = r["count"]
    host_time = frame.where(F.col("kind") == "host").groupBy("host", slot).agg(
        F.avg("cpu_percent").alias("cpu_percent")).orderBy("host", "t").collect()
    hosts = [r.asDict() for r in frame.where(F.col("kind") == "host").groupBy("host").agg(
        F.count(F.lit(1)).alias("periods"), F.avg("cpu_percent").alias("mean_cpu_percent"),
        F.max("cpu_percent").alias("max_cpu_percent"), F.avg("memory_percent").alias("mean_memory_percent"),
        F.max("net_bytes_per_s").alias("max_net_bytes_per_s")).orderBy("host").collect()]
    scatter = ex.select("queue", rate.alias("x"), F.col("cpu_percent").alias("y")).where(F.col("y").isNotNull())
    total = scatter.count()
    points = scatter.sample(fraction=min(1.0, 5000 / total), seed=1).collect() if total else []

    queues = sorted({e["queue"] for e in exchanges} | set(latency) | set(gaps) | set(events))
    doc: dict[str, Any] = {
        "archive": os.path.abspath(archive), "queue": queue, "since": since, "from": first, "to": last,
        "bucket_s": bucket, "skipped": counts,
        "units": {"records_per_s": "records/s", "cpu_percent": "% of one core", "ms": "ms", "bytes": "bytes",
                  "time": "s since the epoch", "bucket_s": "s"},
        "queues": {q: {
            "exchanges": [_clean(e) for e in exchanges if e["queue"] == q],
            "throughput": [{"t": r["t"], "records_per_s": round(r["records_per_s"], 1), "exchanges": r["exchanges"]}
                           for r in over_time if r["queue"] == q],
            "exchange_throughput": _series(((r["exchange"], r["t"], r["records_per_s"]) for r in per_exchange
                                            if r["queue"] == q), "records_per_s"),
            "latency": _clean(latency.get(q, {})),
            "latency_over_time": [{"t": r["t"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}
                                  for r in latency_time if r["queue"] == q],
            "gaps": _clean(gaps.get(q, {})),
            "events": events.get(q, {}),
            "relocations": events.get(q, {}).get("relocated", 0),
            "scale_outs": events.get(q, {}).get("scale_out_done", 0),
            "scale_ins": events.get(q, {}).get("scale_in", 0),
            "exchanges_lost": events.get(q, {}).get("exchange_lost", 0),
        } for q in queues if q != HOSTS_PARTITION},
        "hosts": [_clean(h) for h in hosts],
        "host_cpu": _series(((r["host"], r["t"], r["cpu_percent"]) for r in host_time), "cpu_percent"),
        "seconds": None,
    }
    progress("plots...")
    os.makedirs(out_dir, exist_ok=True)
    _plots(doc, [(p["queue"], p["x"], p["y"]) for p in points], out_dir)
    doc["seconds"] = round(time.monotonic() - started, 1)
    _write(os.path.join(out_dir, "report.json"), json.dumps(doc, indent=1, sort_keys=True, default=str))
    _write(os.path.join(out_dir, "index.html"), _page(doc))
    progress(f"report written to {os.path.join(out_dir, 'index.html')} in {doc['seconds']:g} s")
    return doc


def _series(rows: Any, field: str) -> dict[str, list[dict[str, Any]]]:
    """(name, t, value) rows -> name: [{t, field}] in time order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, t, value in rows:
        out.setdefault(str(name), []).append({"t": t, field: round(value, 1) if value is not None else None})
    return out


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k != "queue"}


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _plots(doc: dict[str, Any], points: list[tuple[str, float, float]], out_dir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def save(fig: Any, ax: Any, name: str) -> None:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name))
        plt.close(fig)

    origin = doc["from"] or 0.0
    fig, ax = plt.subplots(figsize=(10, 3.6), dpi=100)
    ax.set_title(f"records/s per queue (thick) and per exchange ({doc['bucket_s']} s buckets)")
    ax.set_xlabel("seconds since the first record")
    for q, d in doc["queues"].items():
        line, = ax.plot([p["t"] - origin for p in d["throughput"]], [p["records_per_s"] for p in d["throughput"]],
                        linewidth=2, label=q)
        for curve in d["exchange_throughput"].values():
            ax.plot([p["t"] - origin for p in curve], [p["records_per_s"] for p in curve], linewidth=0.6,
                    alpha=0.6, color=line.get_color())
    save(fig, ax, "throughput.png")

    fig, ax = plt.subplots(figsize=(10, 3.6), dpi=100)
    ax.set_title("host CPU %")
    ax.set_xlabel("seconds since the first record")
    for host, curve in doc["host_cpu"].items():
        ax.plot([p["t"] - origin for p in curve], [p["cpu_percent"] for p in curve], label=host)
    save(fig, ax, "hosts.png")

    fig, ax = plt.subplots(figsize=(10, 3.6), dpi=100)
    ax.set_title("subscriber latency per queue (median p50, worst p99 per bucket)")
    ax.set_xlabel("seconds since the first record")
    ax.set_ylabel("ms")
    for q, d in doc["queues"].items():
        curve = [p for p in d["latency_over_time"] if p["p50_ms"] is not None]
        if curve:
            line, = ax.plot([p["t"] - origin for p in curve], [p["p50_ms"] for p in curve], label=f"{q} p50")
            ax.plot([p["t"] - origin for p in curve], [p["p99_ms"] for p in curve], linestyle="--",
                    color=line.get_color(), label=f"{q} p99")
    save(fig, ax, "latency.png")

    fig, ax = plt.subplots(figsize=(10, 3.6), dpi=100)
    ax.set_title("exchange CPU against throughput (the tuner's evidence; a sample of the KPI periods)")
    ax.set_xlabel("records/s")
    ax.set_ylabel("CPU % of one core")
    for q in sorted({p[0] for p in points}):
        mine = [p for p in points if p[0] == q]
        ax.scatter([p[1] for p in mine], [p[2] for p in mine], s=3, alpha=0.5, label=q)
    save(fig, ax, "capacity.png")


def _page(doc: dict[str, Any]) -> str:
    e = html.escape

    def when(t: Any) -> str:
        return (datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
                if isinstance(t, (int, float)) else "-")

    sections = []
    for q, d in doc["queues"].items():
        rows = "".join(
            f"<tr><td>{e(str(x['exchange']))}</td><td>{e(str(x['host']))}</td><td>{x['periods']}</td>"
            f"<td>{x['mean_records_per_s']:,.0f}</td><td>{x['max_records_per_s']:,.0f}</td>"
            f"<td>{(x['mean_cpu_percent'] or 0):.1f}</td><td>{(x['p95_cpu_percent'] or 0):.1f}</td></tr>"
            for x in d["exchanges"])
        lat, gaps = d["latency"], d["gaps"]
        sections.append(
            f"<h2>queue {e(q)}</h2><p>relocations {d['relocations']}, scale-outs {d['scale_outs']}, scale-ins "
            f"{d['scale_ins']}, exchanges lost {d['exchanges_lost']}; subscriber latency: median p50 "
            f"{lat.get('median_p50_ms', '-')} ms, median p99 {lat.get('median_p99_ms', '-')} ms, worst p99 "
            f"{lat.get('max_p99_ms', '-')} ms; gaps {gaps.get('gaps', 0)} ({gaps.get('records_lost_in_gaps', 0)} "
            f"records) over {gaps.get('subscribers', 0)} subscribers</p>"
            f"<table><tr><th>exchange</th><th>host</th><th>periods</th><th>mean records/s</th>"
            f"<th>max records/s</th><th>mean CPU %</th><th>p95 CPU %</th></tr>{rows}</table>")
    hosts = "".join(f"<tr><td>{e(str(h['host']))}</td><td>{h['periods']}</td><td>{(h['mean_cpu_percent'] or 0):.1f}</td>"
                    f"<td>{(h['max_cpu_percent'] or 0):.1f}</td><td>{(h['mean_memory_percent'] or 0):.1f}</td></tr>"
                    for h in doc["hosts"])
    skipped = doc["skipped"]
    images = "".join(f'<p><img src="{name}" alt="{name}"></p>' for name in PLOTS)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>RoQ-Py KPI report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}img{{max-width:100%}}</style></head>
<body><h1>RoQ-Py KPI report</h1>
<p>{e(doc['archive'])}: {skipped['records']:,} records from {when(doc['from'])} to {when(doc['to'])};
skipped {skipped['corrupt']:,} corrupt lines, {skipped['unknown_kind']:,} records of unknown kind and
{skipped['files_being_written']} files still being written.</p>
{''.join(sections)}
<h2>hosts</h2><table><tr><th>host</th><th>periods</th><th>mean CPU %</th><th>max CPU %</th><th>mean memory %</th></tr>
{hosts}</table>
{images}
<p>Every figure is in <a href="report.json">report.json</a>.</p>
</body></html>
"""
