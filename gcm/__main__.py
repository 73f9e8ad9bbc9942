"""``python -m gcm``: run one global configuration manager (leader or standby) until SIGTERM."""

from __future__ import annotations

import sys

from gcm._config import GcmConfig
from gcm._gcm import Gcm
from roq.runtime import run_main

DESCRIPTION = (
    "Run a RoQ global configuration manager. GCMs elect a leader through ZooKeeper; the leader serves queue "
    "look-ups, the BSON management API (create, remove, stop, start, rules...) and broadcasts the configuration; "
    "standbys answer 'not leader' naming it and take over when it dies. Settings come from the [gcm] table of "
    "--config, overridden by flags. Prints 'READY {json}' with its endpoints once bound."
)


def main(argv: list[str] | None = None) -> int:
    return run_main("gcm", GcmConfig, Gcm, argv, description=DESCRIPTION)


if __name__ == "__main__":
    sys.exit(main())
