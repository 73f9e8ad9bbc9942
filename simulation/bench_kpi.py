"""(f) of ``python -m simulation.bench``: the KPI pipeline's costs, each beside a baseline from the same run.

* archive write cost in the monitor: :meth:`ArchiveWriter.append` (and the writes of its ``tick``) per
  record, beside decoding the KPI message the record comes from (what the monitor does for it anyway);
* ``roq kpi report`` over an archive of ``--kpi-records`` records (default 1,000,000, from
  :mod:`simulation.kpi_history`), timed as a user runs it (a new process: Spark's start included), beside
  one Python process that only reads and parses the same lines.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

__all__ = ["run", "render"]


def _archive_cost(records: int) -> tuple[float, float]:
    """(µs per archived record, µs per decoded KPI message)."""
    from roq.wire import control
    from roq.kpi.archive import ArchiveWriter
    from roq.kpi.records import ExchangeRecord

    kpi = control.ExchangeKpi(
        exchange="x1-abcd", period=1.0, records_in=40_000, bytes_in=8_000_000, records_out=80_000,
        bytes_out=16_000_000, publishers=[control.PublisherRate(f"{i:032x}", 10_000, 2_000_000) for i in range(4)],
        cpu_percent=63.5, rss_bytes=60 << 20, busy=0.6, dropped=0)
    frame = control.encode(kpi)
    started = time.perf_counter()
    for _ in range(records):
        control.decode(frame)
    decode = (time.perf_counter() - started) / records * 1e6
    directory = tempfile.mkdtemp(prefix="roq-bench-archive-")
    try:
        writer = ArchiveWriter(directory, "bench", "bench", rotate_bytes=64 << 20)
        record = ExchangeRecord(exchange="x1-abcd", host="127.0.0.11", period=1.0, records_in=40_000,
                                bytes_in=8_000_000, records_out=80_000, bytes_out=16_000_000, publishers=4,
                                cpu_percent=63.5, rss_bytes=60 << 20, busy=0.6, dropped=0)
        now = time.time()
        started = time.perf_counter()
        for i in range(records):
            writer.append(record, now)
            if i % 1000 == 999:  # a busy monitor: a thousand records a second, written out each second
                now += 1.0
                writer.tick(now)
        writer.close()
        append = (time.perf_counter() - started) / records * 1e6
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return append, decode


def _parse_only(archive: str) -> tuple[float, int]:
    """Seconds for one Python process to read and parse every line of the archive, and the lines."""
    started = time.perf_counter()
    lines = 0
    for d, _, files in os.walk(archive):
        for name in files:
            if name.startswith("."):
                continue
            with open(os.path.join(d, name), "rb") as f:
                for line in f:
                    json.loads(line)
                    lines += 1
    return time.perf_counter() - started, lines


def run(args: Any, progress: Any) -> list[Any]:
    from simulation.bench_common import Result
    from simulation.kpi_history import generate

    progress("(f) archive write cost")
    append, decode = _archive_cost(100_000)
    results = [Result("(f) archive: append + write per record", notes={"us_per_record": append,
                                                                      "baseline_decode_us": decode})]
    n = args.kpi_records
    archive = tempfile.mkdtemp(prefix="roq-bench-kpi-")
    out = tempfile.mkdtemp(prefix="roq-bench-kpi-report-")
    try:
        progress(f"(f) writing a synthetic archive of {n:,} records")
        written = generate(archive, records=n, queues=2, exchanges=4, hosts=3)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(archive) for f in fs)
        progress("(f) roq kpi report (a new process, Spark's start included)")
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "roqcli", "kpi", "report", "--archive", archive, "--out", out],
                              capture_output=True, text=True, timeout=1800)
        report_s = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"roq kpi report failed: {done.stderr[-2000:]}")
        with open(os.path.join(out, "report.json")) as f:
            inside = json.load(f)["seconds"]
        progress("(f) baseline: parse every line in one Python process")
        parse_s, lines = _parse_only(archive)
    finally:
        shutil.rmtree(archive, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    results.append(Result(f"(f) roq kpi report over {written:,} records", notes={
        "seconds": report_s, "seconds_after_spark_started": inside, "archive_mb": size / 1e6,
        "baseline_parse_s": parse_s, "lines": lines}))
    return results


def render(results: list[Any]) -> list[str]:
    rows = [r for r in results if r.name.startswith("(f)")]
    if not rows:
        return []
    lines = ["", "KPI pipeline"]
    for r in rows:
        n = r.notes
        if "us_per_record" in n:
            lines.append(f"(f) archive: {n['us_per_record']:.1f} µs per record appended and written; baseline: "
                         f"decoding one ExchangeKpi message {n['baseline_decode_us']:.1f} µs")
        else:
            lines.append(f"{r.name}: {n['seconds']:.1f} s in all ({n['seconds_after_spark_started']:.1f} s once Spark "
                         f"ran), {n['archive_mb']:.0f} MB of JSON lines (target <= 60 s); baseline: one Python "
                         f"process parsing the {n['lines']:,} lines {n['baseline_parse_s']:.1f} s")
    return lines
