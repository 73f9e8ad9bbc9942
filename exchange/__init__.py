"""The exchange process: carries one logical queue's traffic from publishers to subscribers.

Run it with ``python -m exchange --monitor tcp://HOST:PORT --address ADDR`` (see ``--help``).
"""

from __future__ import annotations

from exchange._exchange import Exchange, main
from exchange._journaling import MAX_UNCONFIRMED_BYTES
from roq.config import ExchangeConfig

__all__ = ["Exchange", "ExchangeConfig", "main", "MAX_UNCONFIRMED_BYTES"]
