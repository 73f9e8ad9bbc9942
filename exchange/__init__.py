"""The exchange process: carries one logical queue's traffic from publishers to subscribers.

Run it with ``python -m exchange --monitor tcp://HOST:PORT --address ADDR``.
"""

from __future__ import annotations

from exchange._exchange import Exchange

__all__ = ["Exchange"]
