"""How ``roq kpi tune`` turns an exchange's history into thresholds (pure).

**Evidence.** Every exchange KPI period gives one sample: its throughput ``x`` (records in per second)
and its process CPU ``y`` (% of one core). An exchange is a single-threaded forwarding loop, so its
CPU grows about linearly with its throughput until it saturates at ``saturation_cpu`` (100%: one core);
beyond that it cannot carry more, and backlog and latency grow.

**Capacity.** Samples with ``x > 0`` and ``y`` below ``linear_limit`` x ``saturation_cpu`` (80%: away
from the bend where queueing starts) are fitted with least squares, ``y = a + b x``. The capacity is
where the fitted line reaches saturation: ``C = (saturation_cpu - a) / b``. The fit is trusted only
with at least ``min_samples`` samples in the linear region, a positive slope, ``r^2`` of at least
``min_r2``, and some sample at ``min_cpu_reached`` x ``saturation_cpu`` or more (otherwise the line is
extrapolated too far from what was seen).

**Thresholds** (written with that evidence):

* ``exchange_records_per_s`` (relocation high-water mark; an exchange above it that no other exchange
  can relieve also scales the queue out) = ``margin`` x C; 0.8 leaves 20% of an exchange's capacity
  for bursts and for the seconds a reaction takes;
* ``scale_out_records_per_s`` (the queue scales out when its average load per exchange stays above
  it) = ``scale_out_margin`` x C, 0.7: the queue grows before its exchanges reach the mark;
* scale-in follows the mark: the queue drains an exchange when its load fits in one fewer at
  ``scale_in_ratio`` (a rule, 0.6 by default) x the mark each, so at 0.48 C with the defaults.

Exchanges on different hosts may have different capacities: samples are grouped per host, and a
queue's thresholds come from the host with the lowest capacity (a mark safe for all of its exchanges).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["Moments", "TuneRule", "Evidence", "estimate", "thresholds_for"]


@dataclasses.dataclass
class Moments:
    """Sufficient statistics of one group's samples: sums over the linear region, and what was seen in all."""

    n: int = 0  # samples in the linear region
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    syy: float = 0.0
    samples: int = 0  # all samples with x > 0
    max_x: float = 0.0
    max_y: float = 0.0
    first: float = math.inf  # time range of the samples
    last: float = -math.inf

    def merge(self, other: Moments) -> Moments:
        return Moments(self.n + other.n, self.sx + other.sx, self.sy + other.sy, self.sxx + other.sxx,
                       self.sxy + other.sxy, self.syy + other.syy, self.samples + other.samples,
                       max(self.max_x, other.max_x), max(self.max_y, other.max_y),
                       min(self.first, other.first), max(self.last, other.last))


@dataclasses.dataclass(frozen=True)
class TuneRule:
    saturation_cpu: float = 100.0
    linear_limit: float = 0.8
    min_samples: int = 30
    min_r2: float = 0.5
    min_cpu_reached: float = 0.25
    margin: float = 0.8
    scale_out_margin: float = 0.7


class Evidence:
    """Moments per (queue, host) kept in buckets of ``bucket_s`` seconds of sample time, so that a
    continuous tuner weighs only the last ``window_s`` of history: an exchange that got faster (a new
    host, a new version) is judged on what it does now, and memory stays bounded."""

    def __init__(self, window_s: float, bucket_s: float = 3600.0) -> None:
        self.window_s, self.bucket_s = window_s, bucket_s
        self.buckets: dict[tuple[str, str], dict[int, Moments]] = {}

    def add(self, queue: str, host: str, time_s: float, m: Moments) -> None:
        bucket = int(time_s // self.bucket_s)
        cells = self.buckets.setdefault((queue, host), {})
        cells[bucket] = cells.get(bucket, Moments()).merge(m)

    def moments(self, queue: str, now_s: float) -> dict[str, Moments]:
        """host -> the moments of the window ending at ``now_s``; older buckets are forgotten."""
        oldest = int((now_s - self.window_s) // self.bucket_s)
        out = {}
        for (q, host), cells in self.buckets.items():
            for bucket in [b for b in cells if b < oldest]:
                del cells[bucket]
            if q == queue and cells:
                total = Moments()
                for m in cells.values():
                    total = total.merge(m)
                out[host] = total
        return out


def estimate(m: Moments, rule: TuneRule = TuneRule()) -> dict[str, Any]:
    """The capacity of one group, with the evidence; ``capacity`` is None (and ``why`` says why) when the
    samples cannot support one."""
    out: dict[str, Any] = {"samples": m.samples, "linear_samples": m.n, "max_records_per_s": round(m.max_x, 1),
                           "max_cpu_percent": round(m.max_y, 1), "from": m.first if m.samples else None,
                           "to": m.last if m.samples else None, "capacity": None}
    if m.n < rule.min_samples:
        return {**out, "why": f"{m.n} samples below {rule.linear_limit * rule.saturation_cpu:g}% CPU, "
                              f"fewer than {rule.min_samples}"}
    var_x = m.sxx - m.sx * m.sx / m.n
    var_y = m.syy - m.sy * m.sy / m.n
    cov = m.sxy - m.sx * m.sy / m.n
    if var_x <= 0 or var_y <= 0 or cov <= 0:
        return {**out, "why": "CPU does not grow with throughput in these samples"}
    slope = cov / var_x
    intercept = (m.sy - slope * m.sx) / m.n
    r2 = cov * cov / (var_x * var_y)
    out.update(slope_cpu_per_record_per_s=slope, intercept_cpu=round(intercept, 3), r2=round(r2, 4))
    if r2 < rule.min_r2:
        return {**out, "why": f"CPU follows throughput too loosely (r^2 {r2:.2f} < {rule.min_r2:g})"}
    if m.max_y < rule.min_cpu_reached * rule.saturation_cpu:
        return {**out, "why": f"the exchanges never worked above {m.max_y:.0f}% CPU (need "
                              f"{rule.min_cpu_reached * rule.saturation_cpu:g}%): too far to extrapolate"}
    capacity = (rule.saturation_cpu - intercept) / slope
    if capacity <= 0:
        return {**out, "why": f"the fit puts saturation at {capacity:.0f} records/s"}
    return {**out, "capacity": round(capacity, 1)}


def thresholds_for(estimates: dict[str, dict[str, Any]], rule: TuneRule = TuneRule()) -> tuple[dict[str, float], str]:
    """A queue's thresholds from its groups' estimates (host -> :func:`estimate`), and the group they
    came from; ``({}, "")`` when no group has a capacity."""
    able = {group: e["capacity"] for group, e in estimates.items() if e.get("capacity")}
    if not able:
        return {}, ""
    group = min(able, key=able.__getitem__)
    capacity = able[group]
    return {"exchange_records_per_s": round(rule.margin * capacity, 1),
            "scale_out_records_per_s": round(rule.scale_out_margin * capacity, 1)}, group
