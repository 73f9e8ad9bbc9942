"""``roq kpi report``: the KPI archive's figures per queue, exchange and host, as ``report.json`` (every
figure, with units), PNG plots and ``index.html``.

Per queue: throughput (per queue and per exchange, over time), subscriber latency percentiles and gaps,
relocations, scale events and lost exchanges, and the capacity of an exchange as ``roq kpi tune`` estimates
it (:func:`roqcli.kpi.job.tune_frame`): which resource binds, CPU or link, against its host's budget. Per
host: CPU, memory and network.
"""

from __future__ import annotations

import datetime
import html
import json
import math
import os
import time
from typing import Any, Callable

from roq.kpi.archive import HOSTS_PARTITION
from roqcli.kpi.job import KpiQueue, Source, load, tune_frame

__all__ = ["report", "PLOTS"]

PLOTS = ("throughput.png", "latency.png", "capacity.png", "hosts.png")


def report(spark: Any, archive: Source, out_dir: str, *, queue: str | None = None, since: float | None = None,
           until: float | None = None, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Write ``report.json``, the plots and ``index.html`` to ``out_dir``; return the report.

    Raises:
        ConfigError: as :func:`load`.
    """
    from pyspark.sql import functions as F

    started = time.monotonic()
    progress(f"reading {archive}{f' (queue {queue})' if queue else ''}...")
    loaded = load(spark, archive, queue=queue, since=since, until=until)
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
    progress("capacity...")
    decisions = tune_frame(frame)
    scatter = ex.select("queue", rate.alias("x"), F.col("cpu_percent").alias("y")).where(F.col("y").isNotNull())
    total = scatter.count()
    points = scatter.sample(fraction=min(1.0, 5000 / total), seed=1).collect() if total else []

    queues = sorted({e["queue"] for e in exchanges} | set(latency) | set(gaps) | set(events))
    doc: dict[str, Any] = {
        "archive": str(archive) if isinstance(archive, KpiQueue) else os.path.abspath(archive), "queue": queue,
        "since": since, "until": until, "from": first, "to": last,
        "bucket_s": bucket, "skipped": counts,
        "units": {"records_per_s": "records/s", "cpu_percent": "% of one core", "ms": "ms", "bytes": "bytes",
                  "time": "s since the epoch", "bucket_s": "s", "cpus": "cores", "link_bytes_per_s": "bytes/s"},
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
            "capacity": _capacity(decisions.get(q)),
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


def _capacity(decision: dict[str, Any] | None) -> dict[str, Any]:
    """A queue's capacity per exchange as the tuner sees it: what binds, against its host's budget."""
    if decision is None:
        return {"records_per_s": None, "why": "no exchange samples"}
    hosts = decision["evidence"]["hosts"]
    host = decision["from_host"]
    if not host:
        return {"records_per_s": None, "why": "; ".join(f"{h}: {e.get('why')}" for h, e in hosts.items())}
    e = hosts[host]
    budget = e["budget"]
    capacity = e["capacity"]
    return {"records_per_s": capacity, "host": host, "binds": e["binds"], "cpu_method": e["cpu_method"],
            "cpu_records_per_s": e["cpu_capacity"], "link_records_per_s": e.get("link_capacity"), **budget,
            "cpu_records_per_s_per_core": round(e["cpu_capacity"] / budget["cpus"], 1) if budget["cpus"] else None,
            "link_share": (round(capacity * max(e["bytes_per_record_in"], e["bytes_per_record_out"])
                                 / budget["link_bytes_per_s"], 3) if "link_capacity" in e else None)}


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


def _capacity_line(c: dict[str, Any]) -> str:
    if c["records_per_s"] is None:
        return f"capacity: not estimated ({c['why']})"
    cpu = (f"{c['cpus']:g} cores, an exchange saturated at {c['saturation_cpu']:g}% of a core" if c["cpus"]
           else f"budget unknown, an exchange saturated at {c['saturation_cpu']:g}% of a core")
    link = (f"link {c['link_bytes_per_s']:,.0f} bytes/s, {100 * c['link_share']:.0f}% used at capacity"
            if c["link_records_per_s"] is not None else "link not limited or unknown")
    how = "seen saturated" if c["cpu_method"] == "saturated" else "extrapolated: a lower bound"
    per_core = (f", {c['cpu_records_per_s_per_core']:,.0f} per core of budget"
                if c["cpu_records_per_s_per_core"] else "")
    return (f"capacity: {c['records_per_s']:,.0f} records/s per exchange, {c['binds']} binds (host {c['host']}: "
            f"{cpu}; {link}; CPU capacity {c['cpu_records_per_s']:,.0f} records/s{per_core}, {how})")


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
        sections.append(f"<h2>queue {e(q)}</h2><p>{e(_capacity_line(d['capacity']))}</p>")
        sections.append(
            f"<p>relocations {d['relocations']}, scale-outs {d['scale_outs']}, scale-ins "
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
