"""``python -m simulation``: local clusters, the demo, and (later) scenarios and reports."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from typing import Any

from roq.errors import ConfigError, RoQError
from roq import defaults
from roq.runtime import ExitCode, SignalWakeup, setup_logging


def local(args: argparse.Namespace) -> int:
    from simulation.cluster import LocalCluster

    log_dir = args.log_dir or tempfile.mkdtemp(prefix="roq-local-")
    cluster = LocalCluster(
        address=args.address, exchanges=args.exchanges, monitor_port=args.monitor_port, log_dir=log_dir
    )
    wakeup = SignalWakeup()
    try:
        cluster.start()
        assert cluster.monitor is not None
        print(f"monitor   {cluster.monitor_endpoint}  pid {cluster.monitor.pid}")
        for x in cluster.status().exchanges:
            print(f"exchange  {x.id}  frontend {x.frontend}  backend {x.backend}  pid {x.pid}")
        print(f"logs in {log_dir}; Ctrl-C stops everything", flush=True)
        while not wakeup.count:
            s = cluster.status()
            rate = sum(x.records_per_s for x in s.exchanges)
            line = (f"exchanges {len(s.exchanges)}  publishers {len(s.publishers)}  "
                    f"subscribers {len(s.subscribers)}  {rate:,.0f} records/s  "
                    f"relocations {s.count('relocations')}")
            if sys.stdout.isatty():
                print("\r" + line.ljust(100), end="", flush=True)
            deadline = time.monotonic() + 1.0
            while not wakeup.count and time.monotonic() < deadline:
                time.sleep(0.05)
        print("\nstopping", flush=True)
    except RoQError as exc:
        print(f"simulation local: {exc}", file=sys.stderr)
        return ExitCode.FAILURE
    finally:
        cluster.stop()
        wakeup.close()
    return ExitCode.OK


def demo(args: argparse.Namespace) -> int:
    from simulation import demo as demo_module

    try:
        return demo_module.run()
    except RoQError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return ExitCode.FAILURE


def run(args: argparse.Namespace) -> int:
    from simulation.runner import Runner
    from simulation.scenario import load_scenario

    try:
        scenario = load_scenario(args.scenario)
    except RoQError as exc:
        print(f"simulation run: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    out = args.out or os.path.join("out", f"{scenario.info.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    tty = sys.stdout.isatty()

    def progress(line: str) -> None:
        # on a terminal the per-second status line (it starts with the elapsed time) rewrites itself
        if tty and line[:1] in " 0123456789":
            print("\r" + line.ljust(110), end="", flush=True)
        else:
            print(("\n" if tty else "") + line, flush=True)

    # a ZooKeeper restart is one of the faults: the runner reports it, kazoo's reconnection chatter is noise
    logging.getLogger("kazoo").setLevel(max(logging.ERROR, logging.getLogger().level))
    wakeup = SignalWakeup()
    try:
        print(f"scenario {scenario.info.name} ({scenario.source}): {scenario.info.description or 'no description'}")
        runner = Runner(scenario, out, progress=progress, stop_requested=lambda: wakeup.count > 0,
                        zk=args.zk or "", root=args.root, secure=not args.insecure,
                        credentials=args.credentials or os.environ.get("ROQ_CREDENTIALS") or None)
        summary = runner.run()
    except RoQError as exc:
        print(f"\nsimulation run: {exc}", file=sys.stderr)
        return ExitCode.CONFIG if isinstance(exc, ConfigError) else ExitCode.FAILURE
    finally:
        wakeup.close()
    print_summary(summary, os.path.join(out, "index.html"))
    return ExitCode.OK if summary["keep_up_audit"]["clean"] and not summary["interrupted"] else ExitCode.FAILURE


def print_summary(summary: dict[str, Any], page: str) -> None:
    """What a person reads at the end of a run: throughput, exchanges, decisions, each subscriber group's
    audit, latency as the queue scaled, and where the report is."""
    audit = summary["keep_up_audit"]
    print(f"\npublished {summary['published']:,} records, delivered {summary['delivered']:,} "
          f"({summary['delivered_records_per_s']:,.0f} records/s); exchanges at most {summary['exchanges_peak']}; "
          f"relocations {summary['relocations']} (fail-overs {summary['failovers']}); scale-outs "
          f"{summary['scale_outs']}, scale-ins {summary['scale_ins']}")
    groups: dict[int, list[dict]] = {}
    for x in summary["subscribers"]:
        groups.setdefault(x["group"], []).append(x)
    for members in groups.values():  # one line per group: the sums of its members' audits
        x, audits = members[0], [m["audit"] for m in members if "audit" in m]
        a = {k: sum(m[k] for m in audits) for k in ("expected", "received", "lost", "dropped", "undelivered",
                                                      "duplicated", "reordered")}
        gaps = sum(m.get("gaps", 0) for m in members)
        errors = "; ".join(m["error"] for m in members if "error" in m)
        who = f"{len(members)} subscribers" if len(members) > 1 else "subscriber"
        print(f"  {who} {x['queue']}/{x['prefix']!r}{'' if x['keeps_up'] else ' (slow)'}: expected {a['expected']:,} "
              f"received {a['received']:,} lost {a['lost']:,} ({a['dropped']:,} dropped in {gaps:,} gaps, "
              f"{a['undelivered']:,} still queued at the stop) duplicated {a['duplicated']} reordered {a['reordered']}"
              + (f"; {errors}" if errors else ""))
    scaled = summary.get("latency_by_exchanges")
    if scaled:
        print("latency of subscribers that keep up, by exchanges in the queue (median of per-second p50 / p99): "
              + "; ".join(f"{r['queue']} with {r['exchanges']}: {r['p50_ms']:.1f} / {r['p99_ms']:.1f} ms"
                          for r in scaled))
    print(f"audit of subscribers that keep up: {'clean' if audit['clean'] else 'NOT CLEAN'}")
    print(f"report: {page}")


def report(args: argparse.Namespace) -> int:
    from simulation.report import render

    try:
        written = render(args.dir)
    except RoQError as exc:
        print(f"simulation report: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    print("\n".join(written))
    return ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulation", description="Run RoQ-Py locally.")
    sub = p.add_subparsers(dest="command", required=True)
    lp = sub.add_parser("local", help="start a monitor and exchanges on a loopback address until Ctrl-C")
    lp.add_argument("--exchanges", type=int, default=2, help="number of exchanges (default 2)")
    lp.add_argument("--address", default="127.0.0.11", help="loopback address to bind (default 127.0.0.11)")
    lp.add_argument("--monitor-port", type=int, default=5500, help="monitor port (default 5500; 0 = any free port)")
    lp.add_argument("--log-dir", default=None, help="where the processes log (default: a new temporary directory)")
    lp.set_defaults(run=local)
    dp = sub.add_parser("demo", help="run publishers and subscribers on a local cluster and audit the result")
    dp.set_defaults(run=demo)
    rp = sub.add_parser("run", help="run a scenario file (see simulation/scenarios/) and write its results")
    rp.add_argument("scenario", help="a scenario TOML file, e.g. simulation/scenarios/ramp-and-drain.toml")
    rp.add_argument("--out", default=None, help="results directory (default out/NAME-DATE-TIME)")
    rp.add_argument("--zk", default=None,
                    help="run on the cluster of these ZooKeeper servers instead of starting one (its hosts replace "
                         "the scenario's; faults on hosts, GCMs and ZooKeeper need the runner's own cluster)")
    rp.add_argument("--root", default=defaults.ROOT, help=f"ZooKeeper root of that cluster (default {defaults.ROOT})")
    rp.add_argument("--credentials", default=None, help="with --zk: the credentials directory for that cluster, if it "
                                                        "serves CURVE (default $ROQ_CREDENTIALS)")
    rp.add_argument("--insecure", action="store_true", help="run the runner's own cluster without CURVE (by default "
                                                            "every socket is encrypted and authenticated)")
    rp.set_defaults(run=run)
    pp = sub.add_parser("report", help="render the plots and index.html of a run's results directory again")
    pp.add_argument("dir", help="a results directory written by 'run'")
    pp.set_defaults(run=report)
    p.add_argument("--log-level", default="WARNING", help="log level of this process (default WARNING)")
    args = p.parse_args(argv)
    setup_logging(args.log_level)
    if getattr(args, "exchanges", 1) < 1:
        p.error("--exchanges must be at least 1")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
