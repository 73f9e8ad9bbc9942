"""``python -m hostmanager``: run the host manager of one host until SIGTERM."""

from __future__ import annotations

import sys

from hostmanager._config import HostManagerConfig
from hostmanager._hostmanager import HostManager
from roq.runtime import run_main

DESCRIPTION = (
    "Run the RoQ host manager of one host: it registers the host in ZooKeeper (an ephemeral node with its "
    "capacity and CPU/memory/network KPIs), runs the monitors and exchanges the GCM assigns to it, restarts "
    "them when they crash and stops them when it stops. Settings come from the [hostmanager] table of "
    "--config, overridden by flags; --exchange-option and --monitor-option (KEY=VALUE, repeatable) set fields "
    "of every exchange's and monitor's settings and are checked at start. Prints 'READY {json}' once "
    "registered."
)


def main(argv: list[str] | None = None) -> int:
    return run_main("hostmanager", HostManagerConfig, HostManager, argv, description=DESCRIPTION)


if __name__ == "__main__":
    sys.exit(main())
