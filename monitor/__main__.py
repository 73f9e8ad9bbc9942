"""``python -m monitor``: run the monitor of one logical queue until SIGTERM."""

from __future__ import annotations

import sys

from monitor._monitor import Monitor
from roq.config import MonitorConfig
from roq.runtime import run_main

DESCRIPTION = (
    "Run the monitor of one RoQ logical queue. Exchanges register with it by heartbeat; clients ask it for "
    "exchanges; it moves the most productive publisher off an exchange that stays above the high mark, and fails "
    "publishers over from an exchange that stops heartbeating. With --zk it adopts the queue's rules from "
    "ZooKeeper, keeps its events there and scales the queue out and in through the GCM. It prints one line "
    "'READY {json}' with its endpoint once bound. SIGTERM stops it."
)


def main(argv: list[str] | None = None) -> int:
    return run_main("monitor", MonitorConfig, Monitor, argv, description=DESCRIPTION)


if __name__ == "__main__":
    sys.exit(main())
