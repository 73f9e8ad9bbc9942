"""A latency distribution in constant memory (pure): logarithmic buckets 1% wide.

A subscriber of a long run receives hundreds of millions of records; keeping one float per record for
the run's percentiles would take gigabytes. Values are counted in buckets whose bounds grow by 1%, so
any percentile is known within 1% while memory grows with the *range* of values (about 230 buckets
per factor of ten), not their number. Count, mean and max are exact.
"""

from __future__ import annotations

import math
from typing import Iterable

__all__ = ["Histogram"]

_GROWTH = 1.01
_SCALE = 1 / math.log(_GROWTH)
_FLOOR = 1e-6  # values at or below this (and negative ones, from clock steps) share the lowest bucket


class Histogram:
    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.max = -math.inf

    def add_all(self, values: Iterable[float]) -> None:
        buckets, log, floor = self.buckets, math.log, _FLOOR
        lowest = math.floor(log(floor) * _SCALE)
        for v in values:
            i = math.floor(log(v) * _SCALE) if v > floor else lowest
            buckets[i] = buckets.get(i, 0) + 1
            self.count += 1
            self.total += v
            if v > self.max:
                self.max = v

    def percentile(self, q: float) -> float:
        """The value below which a fraction ``q`` (0-1) of the values fall: the upper bound of its bucket,
        at most the largest value seen. NaN when empty."""
        if not self.count:
            return math.nan
        rank = min(self.count - 1, int(self.count * q))
        seen = 0
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            if seen > rank:
                return min(_GROWTH ** (i + 1), self.max)
        return self.max  # not reached

    def summary(self) -> dict[str, float]:
        """count, mean, p50, p99, max (as :func:`simulation.load.percentiles` gives them)."""
        if not self.count:
            return {"count": 0}
        return {"count": self.count, "mean": self.total / self.count, "p50": self.percentile(0.5),
                "p99": self.percentile(0.99), "max": self.max}
