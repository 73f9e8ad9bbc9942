"""What the benchmark modules share: the result record, the timestamp in payloads, pacing, percentiles."""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["Result", "Check", "STAMP", "END", "TICK", "padding", "paced", "percentiles"]

STAMP = struct.Struct("<q")
END = b"\x00end"
#: Publishers send bursts this often when paced (seconds).
TICK = 0.001


@dataclass
class Result:
    name: str
    records_per_s: float = 0.0
    mb_per_s: float = 0.0
    lost: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)


class Check(NamedTuple):
    """A figure held to its target by ``python -m simulation.bench --check`` (``make bench-check``): the run exits
    non-zero when one misses. ``most``: the figure may be at most ``target`` (else: at least)."""

    what: str
    value: float
    target: float
    most: bool
    unit: str = ""

    @property
    def ok(self) -> bool:
        """Whether the figure meets its target (a figure that was not measured, NaN, does not)."""
        return self.value <= self.target if self.most else self.value >= self.target

    def line(self) -> str:
        def shown(x: float) -> str:
            return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"

        return (f"{'ok  ' if self.ok else 'MISS'} {self.what}: {shown(self.value)}{self.unit} "
                f"({'<=' if self.most else '>='} {shown(self.target)}{self.unit})")


def padding(size: int) -> bytes:
    return b"\x00" * max(0, size - STAMP.size)


def paced(rate: float, duration: float, send: Any) -> int:
    """Send ``rate`` records a second for ``duration`` seconds, ``send(k)`` sending the ``k`` records due
    each tick; return the count."""
    sent = 0
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= duration:
            return sent
        due = int(elapsed * rate) - sent
        if due > 0:
            send(due)
            sent += due
        time.sleep(TICK / 2)


def percentiles(samples: list[float]) -> dict[str, float]:
    from simulation import load

    return {k: round(v, 3) if isinstance(v, float) else v for k, v in load.percentiles(samples).items()}
