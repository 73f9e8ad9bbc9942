"""What a journal measures of itself: its syncs (how many, how long), its failed writes, its last error.

Counted in all, and per heartbeat period (:meth:`Meter.period`: the figures since the last heartbeat, then
reset), which the monitor shows and ``/metrics`` exports.
"""

from __future__ import annotations

__all__ = ["Meter"]


class Meter:
    """A journal's counters."""

    def __init__(self) -> None:
        self.syncs = 0
        self.sync_seconds = 0.0
        self.sync_max = 0.0
        self.write_failures = 0
        self.error = ""
        self._period_syncs = 0
        self._period_seconds = 0.0
        self._period_max = 0.0
        self._period_error = ""

    def synced(self, seconds: float) -> None:
        """One ``fdatasync`` took ``seconds``."""
        self.syncs += 1
        self.sync_seconds += seconds
        self.sync_max = max(self.sync_max, seconds)
        self._period_syncs += 1
        self._period_seconds += seconds
        self._period_max = max(self._period_max, seconds)

    def failed(self, error: str) -> int:
        """A write or sync failed; how many have in all."""
        self.write_failures += 1
        self.error = self._period_error = error
        return self.write_failures

    def period(self) -> tuple[int, float, float, str]:
        """Since the last call: syncs, their mean and longest in milliseconds, the last error ("" none)."""
        n, total, longest, error = self._period_syncs, self._period_seconds, self._period_max, self._period_error
        self._period_syncs, self._period_seconds, self._period_max, self._period_error = 0, 0.0, 0.0, ""
        return n, (total / n * 1000 if n else 0.0), longest * 1000, error

    def describe(self) -> str:
        mean = self.sync_seconds / self.syncs * 1000 if self.syncs else 0.0
        return (f"{self.syncs} syncs (mean {mean:.2f} ms, longest {self.sync_max * 1000:.2f} ms), "
                f"{self.write_failures} failed writes")
