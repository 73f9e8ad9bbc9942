"""``roq kpi report`` and ``roq kpi tune``: the command line of the Spark jobs (:mod:`roqcli.kpi.report`,
:mod:`roqcli.kpi.job`)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any, Callable

from roq import defaults
from roq.errors import ConfigError, NotFoundError
from roq.zk import check_queue_name
from roq.runtime import StopFlag
from roqcli.kpi.capacity import TuneRule

__all__ = ["add_parsers", "run"]

ARCHIVE_ENV = "ROQ_KPI_ARCHIVE"


def add_parsers(sub: Any, client_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    kpi = sub.add_parser("kpi", help="reports on the KPI records and thresholds tuned from them (PySpark), from the "
                         "archive or the cluster's KPI queue")
    ksub = kpi.add_subparsers(dest="action", required=True, metavar="ACTION")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--archive", help=f"the KPI archive directory (default ${ARCHIVE_ENV})")
        q.add_argument("--kpi-queue", nargs="?", const=defaults.KPI_QUEUE, metavar="NAME",
                       help="read the cluster's KPI queue instead of an archive (default name "
                       f"{defaults.KPI_QUEUE}): every host's records, shipped there by its host manager (roq cluster "
                       "up --kpi-queue); the cluster is --zk, --root, --credentials")
        q.add_argument("--queue", help="only this queue (default: every queue in the archive)")
        q.add_argument("--since", help="only records from then on: 30m, 6h, 7d ago, or a date / date-time (UTC)")
        q.add_argument("--until", help="only records before then: as --since")
        q.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
        q.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", type=_spark_setting,
                       help="a Spark setting, as spark-submit's --conf (repeat it for more), e.g. "
                       "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 for a short job's quicker start")

    report = ksub.add_parser("report", help="throughput, latency percentiles, relocations and scale events, gaps "
                             "per queue / exchange / host, as report.json, PNG plots and index.html")
    common(report)
    report.add_argument("--out", help="output directory (default out/kpi-report-DATE-TIME)")
    client_flags(report)
    tune = ksub.add_parser(
        "tune", help="estimate each exchange's capacity from the archive and write the thresholds derived from "
        "it, with the evidence, to the cluster (the queue's explicit rules still win)",
        description="Capacity: the throughput of the exchanges when seen saturated (busy 90% of a period), "
        "else where their CPU against throughput, fitted below 80% of their host's CPU budget, reaches that "
        "budget (a lower bound); the lower of that and what the host's link carries. "
        "exchange_records_per_s = MARGIN x capacity, scale_out_records_per_s = SCALE_OUT_MARGIN x capacity "
        "(see roqcli.kpi.capacity).")
    common(tune)
    once = tune.add_mutually_exclusive_group()
    once.add_argument("--once", action="store_true", help="read the archive once, write, exit (the default)")
    once.add_argument("--follow", action="store_true",
                      help="keep reading the archive as it grows (Spark Structured Streaming) and write the "
                           "thresholds again when they move; Ctrl-C stops")
    tune.add_argument("--every", type=float, default=10.0, help="with --follow: seconds between updates (default 10)")
    tune.add_argument("--window", default="7d",
                      help="with --follow: only samples this recent count, e.g. 6h, 7d (default 7d)")
    tune.add_argument("--dry-run", action="store_true", help="print the thresholds and their evidence; write nothing")
    tune.add_argument("--margin", type=float, default=TuneRule.margin,
                      help=f"high-water mark as a fraction of capacity (default {TuneRule.margin})")
    tune.add_argument("--scale-out-margin", type=float, default=TuneRule.scale_out_margin,
                      help=f"scale-out mark as a fraction of capacity (default {TuneRule.scale_out_margin})")
    tune.add_argument("--saturation-cpu", type=float, default=TuneRule.saturation_cpu,
                      help=f"CPU %% at which an exchange is saturated (default {TuneRule.saturation_cpu:g}: one core; "
                      "a host's smaller budget lowers it)")
    client_flags(tune)


def _spark_setting(text: str) -> tuple[str, str]:
    """``--conf KEY=VALUE``: a Spark setting (KEY a dotted name starting ``spark.``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("spark.") or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE with KEY a Spark setting (spark....)")
    return key.strip(), value


def run(args: argparse.Namespace, client: Any) -> int:
    """Run ``roq kpi ACTION``; ``client`` holds the cluster's address (for ``tune``)."""
    from roqcli.kpi import job, report

    archive: job.Source
    if args.kpi_queue:
        if args.archive:
            raise ConfigError("read the KPI archive (--archive) or the KPI queue (--kpi-queue), not both")
        check_queue_name(args.kpi_queue)
        archive = job.KpiQueue(client.zk, args.kpi_queue, client.root, client.credentials or "")
    else:
        archive = args.archive or os.environ.get(ARCHIVE_ENV) or ""
        if not archive:
            raise ConfigError(f"no KPI records given: --archive DIR (or ${ARCHIVE_ENV}), or --kpi-queue")
        if not os.path.isdir(archive):
            raise ConfigError(f"{archive}: no such KPI archive directory")
    since = job.parse_since(args.since)
    until = job.parse_since(args.until, flag="--until")
    if args.action == "tune" and args.follow and until is not None:
        raise ConfigError("--until is for a report or a tuning made once; --follow goes on")
    rule, window = TuneRule(), 0.0
    if args.action == "tune":
        if not 0 < args.scale_out_margin <= args.margin <= 1:
            raise ConfigError("need 0 < --scale-out-margin <= --margin <= 1")
        if not 0 < args.saturation_cpu <= 6400:
            raise ConfigError("--saturation-cpu must be between 0 and 6400")
        if args.follow and args.every <= 0:
            raise ConfigError("--every must be more than 0")
        window = time.time() - (job.parse_since(args.window) or 0.0)
        if args.follow and window <= 0:
            raise ConfigError(f"--window {args.window!r}: give a duration such as 6h or 7d")
        rule = TuneRule(saturation_cpu=args.saturation_cpu, margin=args.margin, scale_out_margin=args.scale_out_margin)
    out = (args.out or os.path.join("out", f"kpi-report-{time.strftime('%Y%m%d-%H%M%S')}")) \
        if args.action == "report" else None
    logs = out or tempfile.mkdtemp(prefix="roq-kpi-")
    os.makedirs(logs, exist_ok=True)
    jvm_log = os.path.join(logs, "spark.log")
    ours = not job.session_running()  # (in a process with one running, a notebook's or a test's: that one, left running)
    kept = "" if out else ", kept if the run fails"
    print(f"starting Spark on {args.master} (its own output goes to {jvm_log}{kept})" if ours else
          "using the Spark session running in this process (--master and --conf are its own)", flush=True)
    spark = job.spark_session(args.master, jvm_log=jvm_log, settings=dict(args.conf))
    writer = _Writer(client, getattr(args, "dry_run", False))
    done = False  # a directory of our own for Spark's output is kept only when a failure points at it
    try:
        code = _jobs(args, spark, archive, out, since, until, rule, window, writer)
        done = True
        return code
    except Exception as exc:
        failure = job.spark_failure(exc, jvm_log)
        if failure is None:
            raise
        raise failure from None
    finally:
        if ours:
            job.stop_session(spark)
        writer.close()
        if done and out is None:
            shutil.rmtree(logs, ignore_errors=True)


def _jobs(args: argparse.Namespace, spark: Any, archive: Any, out: str | None, since: float | None,
          until: float | None, rule: TuneRule, window: float, writer: _Writer) -> int:
    """Run the report or the tuning asked for on ``spark`` (``archive``: a :data:`roqcli.kpi.job.Source`); the
    command's exit status."""
    from roqcli.kpi import job, report

    if args.action == "report":
        assert out is not None
        report.report(spark, archive, out, queue=args.queue, since=since, until=until,
                      progress=lambda s: print(s, flush=True))
        return 0
    if not args.follow:
        print(f"reading {archive}...", flush=True)
        decisions, counts = job.tune(spark, archive, queue=args.queue, since=since, until=until, rule=rule)
        print(f"{counts['records']:,} records; skipped {counts['corrupt']:,} corrupt lines, "
              f"{counts['unknown_kind']:,} of unknown kind and {counts['files_being_written']} files being "
              f"written", flush=True)
        if not decisions:
            print("no exchange KPI records: nothing to tune")
            return 1
        written = [writer.write(q, d, counts) for q, d in decisions.items()]
        if args.json:
            print(json.dumps({"decisions": decisions, "skipped": counts}, indent=1, default=str))
        return 0 if any(written) else 1
    stopping = StopFlag()
    print(f"following {archive} (every {args.every:g} s; Ctrl-C stops)", flush=True)
    job.follow(spark, archive, lambda ds: [writer.write(q, d, None, only_changed=True) for q, d in ds.items()],
               queue=args.queue, rule=rule, every_s=args.every, window_s=window, stop=stopping)
    return 0


class _Writer:
    """Prints each queue's decision and writes its thresholds, with the evidence, through the management API."""

    def __init__(self, client: Any, dry_run: bool) -> None:
        self.client, self.dry_run = client, dry_run
        self._manager: Any = None
        self._last: dict[str, float] = {}

    def write(self, queue: str, decision: dict[str, Any], counts: dict[str, int] | None, *,
              only_changed: bool = False) -> bool:
        thresholds = decision["thresholds"]
        hosts = decision["evidence"]["hosts"]
        if not thresholds:
            whys = "; ".join(f"{h}: {e.get('why')}" for h, e in hosts.items())
            print(f"queue {queue}: no capacity estimated ({whys})", flush=True)
            return False
        mark = thresholds["exchange_records_per_s"]
        if only_changed and queue in self._last and abs(mark / self._last[queue] - 1) < 0.01:
            return False
        e = hosts[decision["from_host"]]
        how = (f"seen saturated in {e['saturated_samples']:,} of {e['samples']:,} samples"
               if e["cpu_method"] == "saturated" else f"extrapolated, a lower bound: {e['linear_samples']:,} of "
               f"{e['samples']:,} samples fitted, r^2 {e['r2']}")
        budget = e["budget"]
        print(f"queue {queue}: capacity {decision['capacity_records_per_s']:,.0f} records/s per exchange (host "
              f"{decision['from_host']}, {e['binds']} binds; CPU {how}; an exchange saturated at "
              f"{budget['saturation_cpu']:g}% of a core"
              + (f", on a budget of {budget['cpus']:g} cores" if budget["cpus"] else "")
              + (f"; link {e['link_capacity']:,.0f} records/s" if "link_capacity" in e else "") + ") -> "
              + ", ".join(f"{k} = {v:,.0f}" for k, v in thresholds.items()), flush=True)
        if self.dry_run:
            return True
        evidence = {**decision["evidence"], "capacity_records_per_s": decision["capacity_records_per_s"],
                    "binds": decision["binds"], "from_host": decision["from_host"], "skipped": counts,
                    "written": time.time()}
        try:
            self.manager().set_thresholds(queue, thresholds, evidence)
        except NotFoundError:
            print(f"queue {queue}: not on the cluster at {self.client.zk}; not written", flush=True)
            return False
        self._last[queue] = mark
        print(f"queue {queue}: thresholds written", flush=True)
        return True

    def manager(self) -> Any:
        if self._manager is None:
            from client import QueueManager

            self._manager = QueueManager(self.client.zk, root=self.client.root, timeout=self.client.timeout,
                                         credentials=self.client.credentials or None)
        return self._manager

    def close(self) -> None:
        if self._manager is not None:
            self._manager.close()
