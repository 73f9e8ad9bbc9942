"""A link's rate limit (pure): how many bytes may cross now, kept to ``rate`` bytes a second.

A token bucket: it fills at ``rate`` bytes a second up to ``burst`` (a tenth of a second's worth), and a batch
may go whenever the bucket is not below zero; it then takes the batch's size, and the bucket may go below zero. So a batch larger than the burst still crosses (a cap never blocks a link for
good), and over any stretch of time what crossed is at most ``rate`` times its length plus one burst plus one
batch: the cap is exact over seconds, and never exceeded by more than a tenth of a second's worth.
"""

from __future__ import annotations

__all__ = ["Pace"]

#: bytes below zero that still count as zero (the clock's arithmetic at the time :meth:`Pace.ready_at` named)
EPSILON = 1e-6


class Pace:
    """``rate`` bytes a second at most; :meth:`take` a batch when :meth:`ready_at` has come."""

    def __init__(self, rate: int, now: float, burst: int = 0) -> None:
        if rate <= 0:
            raise ValueError(f"a rate limit is above 0 bytes a second, got {rate}")
        self.rate = rate
        self.burst = max(burst, rate // 10, 1)
        self.tokens = float(self.burst)
        self.at = now
        self.taken = 0  # bytes taken in all

    def _fill(self, now: float) -> None:
        if now > self.at:
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
            self.at = now

    def ready_at(self, now: float) -> float:
        """When a batch may go: now if the bucket is not below zero, else when it will not be."""
        self._fill(now)
        return now if self.tokens >= -EPSILON else now + -self.tokens / self.rate

    def take(self, size: int, now: float) -> bool:
        """Let ``size`` bytes go now if the bucket is not below zero (True); False: wait for :meth:`ready_at`."""
        self._fill(now)
        if self.tokens < -EPSILON:
            return False
        self.tokens -= size
        self.taken += size
        return True
