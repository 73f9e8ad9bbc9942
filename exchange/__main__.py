"""``python -m exchange``: run one exchange until SIGTERM (graceful drain) or a second signal."""

from __future__ import annotations

import sys

from exchange._exchange import Exchange
from roq.config import ExchangeConfig
from roq.runtime import run_main

DESCRIPTION = (
    "Run one RoQ exchange: it receives publisher batches on its frontend, forwards them untouched to "
    "subscribers on its backend, acknowledges publishers, and reports heartbeats and KPIs to the queue's "
    "monitor. With --commands-on-stdin it reads its host manager's commands (BSON control messages) on "
    "standard input. SIGTERM drains it (the monitor moves its publishers away); a second signal stops it at "
    "once. Settings come from the [exchange] table of --config, overridden by flags. It prints one line "
    "'READY {json}' with its endpoints when bound."
)


def make_exchange(config: ExchangeConfig) -> Exchange:
    return Exchange(config, commands_fd=sys.stdin.fileno() if config.commands else None)


def main(argv: list[str] | None = None) -> int:
    return run_main("exchange", ExchangeConfig, make_exchange, argv, description=DESCRIPTION)


if __name__ == "__main__":
    sys.exit(main())
