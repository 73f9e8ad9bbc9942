"""``python -m gcm``: run one global configuration manager (leader or standby) until SIGTERM."""

from __future__ import annotations

import argparse
import sys

from gcm._gcm import Gcm, GcmConfig
from roq.errors import ConfigError
from roq.runtime import ExitCode, run_node, setup_logging
from roq.settings import from_args


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = GcmConfig(zk="")
    p = argparse.ArgumentParser(
        prog="python -m gcm",
        description="Run a RoQ global configuration manager. GCMs elect a leader through ZooKeeper; the leader "
        "serves queue look-ups, the BSON management API (create, remove, stop, start, rules...) and broadcasts the "
        "configuration; standbys answer 'not leader' naming it and take over when it dies. Settings come from the "
        "[gcm] table of --config, overridden by flags. Prints 'READY {json}' with its endpoints once bound.",
    )
    p.add_argument("--config", help="TOML file with a [gcm] table")
    p.add_argument("--zk", help="ZooKeeper servers, host:port[,host:port...] (required here or in the file)")
    p.add_argument("--address", help=f"address to bind (default {d.address})")
    p.add_argument("--lookup-port", type=int, help=f"client look-up port (default {d.lookup_port}; 0 = any free port)")
    p.add_argument("--management-port", type=int, help=f"management API port (default {d.management_port})")
    p.add_argument("--broadcast-port", type=int, help=f"configuration broadcast port (default {d.broadcast_port})")
    p.add_argument("--root", help=f"ZooKeeper root of the cluster (default {d.root})")
    p.add_argument("--session-timeout", type=float, help=f"ZooKeeper session timeout, seconds (default {d.session_timeout})")
    p.add_argument("--broadcast-period", type=float, help=f"seconds between periodic broadcasts (default {d.broadcast_period})")
    p.add_argument("--ready-timeout", type=float, help=f"longest wait for a created queue's processes (default {d.ready_timeout})")
    p.add_argument("--stop-timeout", type=float, help=f"longest wait for a stopped queue's processes (default {d.stop_timeout})")
    p.add_argument("--host-grace", type=float,
                   help="seconds a host holding exchanges or monitors of running queues may be unregistered before "
                   f"they are moved to other hosts (default {d.host_grace})")
    p.add_argument("--id", dest="gcm_id", help="a name for this GCM in logs and replies (default: generated)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING... (default INFO)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level)
    try:
        config = from_args(GcmConfig, "gcm", args)
    except ConfigError as exc:
        print(f"gcm: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    node = Gcm(config)
    return run_node("gcm", node, lambda: dict(id=node.id, leader=node.leading, **node.endpoints))


if __name__ == "__main__":
    sys.exit(main())
