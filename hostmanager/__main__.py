"""``python -m hostmanager``: run the host manager of one host until SIGTERM."""

from __future__ import annotations

import argparse
import sys

from hostmanager._hostmanager import HostManager, HostManagerConfig
from roq.errors import ConfigError
from roq.runtime import ExitCode, run_node, setup_logging
from roq.settings import from_args


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = HostManagerConfig(zk="")
    p = argparse.ArgumentParser(
        prog="python -m hostmanager",
        description="Run the RoQ host manager of one host: it registers the host in ZooKeeper (an ephemeral "
        "node with its capacity and CPU/memory/network KPIs), runs the monitors and exchanges the GCM assigns "
        "to it, restarts them when they crash and stops them when it stops. Settings come from the [hostmanager] "
        "table of --config, overridden by flags. Prints 'READY {json}' once registered.",
    )
    p.add_argument("--config", help="TOML file with a [hostmanager] table")
    p.add_argument("--zk", help="ZooKeeper servers, host:port[,host:port...] (required here or in the file)")
    p.add_argument("--address", help=f"this host's address; children bind to it (default {d.address})")
    p.add_argument("--port", type=int, help="control port (default 0 = any free port)")
    p.add_argument("--root", help=f"ZooKeeper root of the cluster (default {d.root})")
    p.add_argument("--max-exchanges", type=int, help=f"exchanges this host accepts (default {d.max_exchanges})")
    p.add_argument("--kpi-period", type=float, help=f"seconds between host KPI updates (default {d.kpi_period})")
    p.add_argument("--session-timeout", type=float, help=f"ZooKeeper session timeout, seconds (default {d.session_timeout})")
    p.add_argument("--port-low", type=int, help="lowest port for children (default: any free port)")
    p.add_argument("--port-high", type=int, help="highest port for children")
    p.add_argument("--monitor-arg", dest="monitor_args", action="append",
                   help="a flag for every monitor started, e.g. --monitor-arg=--sustain --monitor-arg=1 (repeatable)")
    p.add_argument("--exchange-arg", dest="exchange_args", action="append",
                   help="a flag for every exchange started (repeatable)")
    p.add_argument("--log-dir", help="directory for the children's logs (default: this process's stderr)")
    p.add_argument("--kpi-archive", help="KPI archive directory: host KPIs go there, and the monitors started here "
                                         "archive their queues' KPIs and events (default: none)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING... (default INFO)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level)
    try:
        config = from_args(HostManagerConfig, "hostmanager", args)
    except ConfigError as exc:
        print(f"hostmanager: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    node = HostManager(config)
    return run_node("hostmanager", node, lambda: dict(address=config.address, endpoint=node.endpoint))


if __name__ == "__main__":
    sys.exit(main())
