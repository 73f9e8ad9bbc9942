"""``python -m monitor``: run the monitor of one logical queue until SIGTERM."""

from __future__ import annotations

import argparse
import sys

from monitor._monitor import Monitor
from roq.config import MonitorConfig
from roq.errors import ConfigError
from roq.runtime import ExitCode, run_node, setup_logging
from roq.zk import Paths, check_hosts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = MonitorConfig()
    p = argparse.ArgumentParser(
        prog="python -m monitor",
        description="Run the monitor of one RoQ logical queue. Exchanges register with it by heartbeat; "
        "clients ask it for exchanges; it moves the most productive publisher off an exchange that stays "
        "above the high mark, and fails publishers over from an exchange that stops heartbeating. It prints "
        "one line 'READY {json}' with its endpoint once bound. SIGTERM stops it.",
    )
    p.add_argument("--address", default=d.address, help=f"address to bind (default {d.address})")
    p.add_argument("--port", type=int, default=d.port, help=f"control port (default {d.port}; 0 = any free port)")
    p.add_argument("--queue", default=d.queue, help=f"name of the logical queue (default {d.queue!r})")
    p.add_argument("--kpi-period", type=float, default=d.kpi_period, help=f"seconds between rule evaluations (default {d.kpi_period})")
    p.add_argument("--heartbeat-timeout", type=float, default=d.heartbeat_timeout,
                   help=f"an exchange silent this long is dead (default {d.heartbeat_timeout}s)")
    p.add_argument("--high-records-per-s", type=float, default=d.high_records_per_s,
                   help=f"relocation high-water mark per exchange (default {d.high_records_per_s:g} records/s)")
    p.add_argument("--sustain", type=float, default=d.sustain, help=f"seconds above the mark before acting (default {d.sustain})")
    p.add_argument("--cooldown", type=float, default=d.cooldown, help=f"seconds a moved publisher stays put (default {d.cooldown})")
    p.add_argument("--smoothing", type=float, default=d.smoothing, help=f"EWMA weight of the newest KPI (default {d.smoothing})")
    p.add_argument("--no-relocation-rule", action="store_true", help="never move publishers by the rule (forced moves still work)")
    p.add_argument("--zk", default=d.zk, help="ZooKeeper servers host:port[,...]: adopt the queue's rules from there, keep "
                   "events there and scale the queue out and in through the GCM (default: none, a monitor on its own)")
    p.add_argument("--root", default=d.root, help=f"ZooKeeper root of the cluster (default {d.root})")
    p.add_argument("--session-timeout", type=float, default=d.session_timeout,
                   help=f"ZooKeeper session timeout (default {d.session_timeout}s)")
    p.add_argument("--kpi-archive", default=d.kpi_archive,
                   help="append every KPI record and event to this KPI archive directory (default: none)")
    p.add_argument("--archive-retention-days", type=float, default=d.archive_retention_days,
                   help=f"days of the queue's KPI archive kept (default {d.archive_retention_days:g}; 0 = all)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING... (default INFO)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level)
    try:
        config = MonitorConfig(
            address=args.address,
            port=args.port,
            queue=args.queue,
            kpi_period=args.kpi_period,
            heartbeat_timeout=args.heartbeat_timeout,
            high_records_per_s=args.high_records_per_s,
            sustain=args.sustain,
            cooldown=args.cooldown,
            smoothing=args.smoothing,
            relocation_rule=not args.no_relocation_rule,
            zk=args.zk,
            root=args.root,
            session_timeout=args.session_timeout,
            kpi_archive=args.kpi_archive,
            archive_retention_days=args.archive_retention_days,
        )
        if config.zk:
            check_hosts(config.zk)
            Paths(config.root)
    except ConfigError as exc:
        print(f"monitor: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    node = Monitor(config)
    return run_node("monitor", node, lambda: dict(queue=config.queue, endpoint=node.endpoint))


if __name__ == "__main__":
    sys.exit(main())
