"""The monitor process: one per logical queue; places, moves and fails over publishers.

Run it with ``python -m monitor --address ADDR --port PORT``.
"""

from __future__ import annotations

from monitor._monitor import Monitor
from monitor._rule import Ewma, ExchangeLoad, LimitCase, Move, evaluate

__all__ = ["Monitor", "Ewma", "ExchangeLoad", "LimitCase", "Move", "evaluate"]
