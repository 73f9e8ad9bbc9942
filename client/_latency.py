"""A subscriber's latency and delivery counts: the samples ``stats()`` summarises, and the figures each hello
to the monitor carries (over the period since the previous hello: records, p50/p99, a histogram)."""

from __future__ import annotations

import bisect
import collections
from itertools import islice
from typing import Any

from roq.wire import control
__all__ = ["Latency", "BOUNDS_S"]

BOUNDS_S = [b / 1000 for b in control.LATENCY_BOUNDS_MS]  # the latency histogram's bounds, in seconds


class Latency:
    """Every delivered batch's end-to-end latency (the newest ``samples`` kept) and records delivered."""

    def __init__(self, samples: int) -> None:
        self.samples: collections.deque[float] = collections.deque(maxlen=samples)
        self.count = 0  # batches measured in all
        self.received = 0  # records delivered in all
        self._buckets = [0] * (len(control.LATENCY_BOUNDS_MS) + 1)  # batches per bound since the hello
        self._sum = 0.0  # seconds, of the batches counted there
        self._from = (0.0, 0, 0)  # the previous hello: when, records received, batches measured

    def batch(self, latency: float, records: int) -> None:
        self.received += records
        self.samples.append(latency)
        self.count += 1
        self._buckets[bisect.bisect_left(BOUNDS_S, latency)] += 1
        self._sum += latency

    def summary(self) -> dict[str, float]:
        """count, mean, p50, p99, max of the samples kept (seconds)."""
        samples = sorted(self.samples)
        out: dict[str, float] = {"count": len(samples)}
        if samples:
            out.update(mean=sum(samples) / len(samples), p50=samples[len(samples) // 2],
                       p99=samples[min(len(samples) - 1, int(len(samples) * 0.99))], max=samples[-1])
        return out

    def period(self, now: float) -> dict[str, Any]:
        """The hello's fields for the period since the previous one (then a new period begins)."""
        since, received, measured = self._from
        self._from = (now, self.received, self.count)
        fresh = min(self.count - measured, len(self.samples))
        window = sorted(islice(reversed(self.samples), fresh)) if fresh else []
        out = dict(period=round(now - since, 3) if since else 0.0, records=self.received - received,
                   latency_p50_ms=round(window[len(window) // 2] * 1000, 3) if window else -1.0,
                   latency_p99_ms=round(window[min(len(window) - 1, int(len(window) * 0.99))] * 1000, 3)
                   if window else -1.0,
                   latency_buckets=self._buckets, latency_sum_ms=round(max(self._sum, 0.0) * 1000, 3))
        self._buckets = [0] * len(self._buckets)
        self._sum = 0.0
        return out
