"""``python -m exchange``: run one exchange until SIGTERM (graceful drain) or a second signal."""

from __future__ import annotations

import argparse
import logging
import sys

from exchange._exchange import Exchange
from roq.config import ExchangeConfig
from roq.errors import ConfigError
from roq.runtime import ExitCode, run_node, setup_logging
from roq.sockets import check_endpoint

log = logging.getLogger("exchange")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = ExchangeConfig(monitor="tcp://127.0.0.1:5500")
    p = argparse.ArgumentParser(
        prog="python -m exchange",
        description="Run one RoQ exchange: it receives publisher batches on its frontend, forwards them "
        "untouched to subscribers on its backend, acknowledges publishers, and reports heartbeats and "
        "KPIs to the queue's monitor. SIGTERM drains it (the monitor moves its publishers away); a "
        "second signal stops it at once. It prints one line 'READY {json}' with its endpoints when bound.",
    )
    p.add_argument("--monitor", required=True, help="control endpoint of the queue's monitor, e.g. tcp://127.0.0.11:5500")
    p.add_argument("--commands-on-stdin", action="store_true",
                   help='read commands as JSON lines on standard input: {"monitor": ENDPOINT} (the host manager '
                        "tells its exchanges where their monitor moved)")
    p.add_argument("--address", default=d.address, help=f"address to bind (default {d.address}; loopback aliases work)")
    p.add_argument("--frontend-port", type=int, default=d.frontend_port, help="publisher port (default 0 = any free port)")
    p.add_argument("--backend-port", type=int, default=d.backend_port, help="subscriber port (default 0 = any free port)")
    p.add_argument("--id", default=d.exchange_id, help="name of the exchange (default: generated)")
    p.add_argument("--heartbeat-interval", type=float, default=d.heartbeat_interval, help=f"seconds (default {d.heartbeat_interval})")
    p.add_argument("--kpi-period", type=float, default=d.kpi_period, help=f"seconds between KPI reports (default {d.kpi_period})")
    p.add_argument("--max-batch-bytes", type=int, default=d.max_batch_bytes, help=f"larger batch bodies are dropped (default {d.max_batch_bytes})")
    p.add_argument("--backend-hwm", type=int, default=d.backend_hwm, help=f"per-subscriber queue bound in batches (default {d.backend_hwm})")
    p.add_argument("--drain-timeout", type=float, default=d.drain_timeout, help=f"longest drain on SIGTERM, seconds (default {d.drain_timeout})")
    p.add_argument("--ack-interval", type=float, default=d.ack_interval,
                   help=f"seconds over which acknowledgements are coalesced (default {d.ack_interval})")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING... (default INFO)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level)
    try:
        config = ExchangeConfig(
            monitor=check_endpoint(args.monitor),
            address=args.address,
            frontend_port=args.frontend_port,
            backend_port=args.backend_port,
            exchange_id=args.id,
            heartbeat_interval=args.heartbeat_interval,
            kpi_period=args.kpi_period,
            max_batch_bytes=args.max_batch_bytes,
            backend_hwm=args.backend_hwm,
            drain_timeout=args.drain_timeout,
            ack_interval=args.ack_interval,
        )
    except ConfigError as exc:
        print(f"exchange: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    node = Exchange(config, commands_fd=sys.stdin.fileno() if args.commands_on_stdin else None)
    return run_node("exchange", node, lambda: dict(id=node.id, frontend=node.frontend_endpoint, backend=node.backend_endpoint))


if __name__ == "__main__":
    sys.exit(main())
