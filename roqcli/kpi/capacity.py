"""How ``roq kpi tune`` turns an exchange's history into thresholds (pure).

**Evidence.** Every exchange KPI period gives one sample: its throughput ``x`` (records in per second),
its process CPU ``y`` (% of one core), its busy fraction (the part of the period its loop spent on work
rather than waiting for it) and the bytes it took in and sent out. Samples are grouped per (queue, host).

**The host's budget** (:class:`Budget`, from the host records of the same window, partition ``@hosts``):
``cpus``, the cores its exchanges, its host manager and the monitors it runs share (the smallest seen in
the window: a safe figure if the host was resized), and ``link_bytes_per_s``, its link's rate (the
smallest seen; 0 = unknown or not limited). The CPU an exchange of that host can have is its *saturation
CPU*: ``S = min(saturation_cpu, 100 x cpus - other)``, where ``other`` is what the host spends beyond its
exchanges (its host manager, a monitor; exchanges of queues not read): the host's own CPU use minus its
exchanges', averaged over the time its exchanges reported, and taken as at most half the budget (more is
a host crowded with busy exchanges, whose shares this rule does not model). A host whose budget is
unknown (``cpus`` 0: an archive older than budgets, or no host records) keeps ``S = saturation_cpu``
(100%: one core), as before budgets.

**CPU capacity, seen.** A sample is *saturated* when the exchange was busy for ``saturated_busy`` (90%)
of its period or more (it was offered more than it could forward) while using at least ``linear_limit`` x
``S`` (it was held back by its budget; an exchange busy on less CPU was starved, by a busy machine or its
host's other processes, and what it carried then says less). What it carried in those samples is what it
can carry: with at least ``min_saturated`` of them (and ``min_samples`` samples in all), the CPU capacity
is their mean throughput (``cpu_method`` ``saturated``).

**CPU capacity, extrapolated** (no saturation seen, the common case once thresholds keep exchanges below
it). Samples with ``x > 0`` and ``y`` below ``linear_limit`` x ``S`` (80%: away from the bend) are fitted
with least squares, ``y = a + b x``; the capacity is where the line reaches ``S``: ``(S - a) / b``
(``cpu_method`` ``extrapolated``). It is trusted only with at least ``min_samples`` samples in the linear
region, a positive slope, ``r^2`` of at least ``min_r2``, and some sample at ``min_cpu_reached`` x ``S``
or more (otherwise the line is extrapolated too far from what was seen). **It is a lower bound**: an
exchange's CPU per record falls as its load grows, since a loop woken for every batch pays per wakeup,
per poll and per acknowledgement what a saturated loop (or one its quota throttles, which then finds a
backlog each time it runs) spreads over a burst. Measured on an emulated host of 0.2 core
(tests/integration/test_tuner_budget.py): the exchange's CPU reaches the budget at about a third of
the throughput it sustains saturated, and the line says less than half of it; on a core of its own the CPU still
grows more slowly than linearly. Thresholds from it are safe, and low, until saturation is seen.

**Link capacity.** With a known link rate ``L``: per record in, ``bytes_in / records`` come in over the
host's link and ``bytes_out / records x fanout`` go out (an exchange counts the bytes of one copy;
``fanout`` is the records the queue's subscribers received per record in, from their KPI records, 1 when
none reported). A link is limited each way (as the emulated hosts' links are, a token bucket at both
ends), so the busier direction binds: ``L / max(in, out)`` records/s. Counted are the batches' bodies:
headers and TCP/IP add a little per batch, so with small batches the link fills a little sooner; other
traffic on the link (other exchanges, the monitor) is not counted.

**Capacity** = the lower of the CPU capacity and the link capacity; ``binds`` says which (``cpu`` or
``link``), with the budget figures used. Without a CPU capacity there is none (the link alone says what
the link could carry, not what the exchange can).

**Thresholds** (written with that evidence):

* ``exchange_records_per_s`` (relocation high-water mark; an exchange above it that no other exchange
  can relieve also scales the queue out) = ``margin`` x C; 0.8 leaves 20% of an exchange's capacity
  for bursts and for the seconds a reaction takes;
* ``scale_out_records_per_s`` (the queue scales out when its average load per exchange stays above
  it) = ``scale_out_margin`` x C, 0.7: the queue grows before its exchanges reach the mark;
* scale-in follows the mark: the queue drains an exchange when its load fits in one fewer at
  ``scale_in_ratio`` (a rule, 0.6 by default) x the mark each, so at 0.48 C with the defaults.

Exchanges on different hosts may have different capacities: a queue's thresholds come from the host with
the lowest capacity (a mark safe for all of its exchanges).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["Moments", "TuneRule", "Budget", "HostMoments", "Evidence", "estimate", "thresholds_for", "fanout",
           "MAX_OTHER_SHARE"]

#: at most this share of a host's budget is taken as spent beyond its exchanges
MAX_OTHER_SHARE = 0.5


@dataclasses.dataclass
class Moments:
    """Sufficient statistics of one group's samples: sums over the linear region, over the saturated
    samples, and what was seen in all."""

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
    saturated: int = 0  # samples busy for TuneRule.saturated_busy of their period, on their host's CPU
    saturated_sx: float = 0.0
    records: float = 0.0  # records in, over all samples
    bytes_in: float = 0.0
    bytes_out: float = 0.0

    def merge(self, other: Moments) -> Moments:
        return Moments(self.n + other.n, self.sx + other.sx, self.sy + other.sy, self.sxx + other.sxx,
                       self.sxy + other.sxy, self.syy + other.syy, self.samples + other.samples,
                       max(self.max_x, other.max_x), max(self.max_y, other.max_y),
                       min(self.first, other.first), max(self.last, other.last),
                       self.saturated + other.saturated, self.saturated_sx + other.saturated_sx,
                       self.records + other.records, self.bytes_in + other.bytes_in,
                       self.bytes_out + other.bytes_out)


@dataclasses.dataclass(frozen=True)
class TuneRule:
    saturation_cpu: float = 100.0
    linear_limit: float = 0.8
    min_samples: int = 30
    min_r2: float = 0.5
    min_cpu_reached: float = 0.25
    margin: float = 0.8
    scale_out_margin: float = 0.7
    saturated_busy: float = 0.9
    min_saturated: int = 5


@dataclasses.dataclass(frozen=True)
class Budget:
    """What a host gives its exchanges, from its records; 0 = unknown (or, for the link, not limited).

    Attributes:
        cpus: the host's CPU budget, cores.
        link_bytes_per_s: its link's rate, each way.
        other_cpu: % of one core the host spends beyond its exchanges (mean over the window).
        fanout: records sent to subscribers per record in (the queue's, see :func:`fanout`).
    """

    cpus: float = 0.0
    link_bytes_per_s: float = 0.0
    other_cpu: float = 0.0
    fanout: float = 1.0

    def saturation_cpu(self, rule: TuneRule) -> float:
        """The CPU % (of one core) at which an exchange of this host is saturated."""
        if self.cpus <= 0:
            return rule.saturation_cpu
        whole = 100.0 * self.cpus
        return min(rule.saturation_cpu, whole - min(max(self.other_cpu, 0.0), MAX_OTHER_SHARE * whole))

    def linear_limit(self, rule: TuneRule) -> float:
        """The CPU % below which this host's samples are in the linear region."""
        return rule.linear_limit * self.saturation_cpu(rule)


@dataclasses.dataclass
class HostMoments:
    """A host's budget and the CPU it spent beyond its exchanges, mergeable over time."""

    cpus: float = 0.0  # the smallest budget seen (0 = none known)
    link_bytes_per_s: float = 0.0  # the smallest link rate seen (0 = none known)
    other_cpu_s: float = 0.0  # sum of (other CPU % x seconds)
    seconds: float = 0.0  # seconds the other CPU was measured over

    def merge(self, other: HostMoments) -> HostMoments:
        return HostMoments(_least(self.cpus, other.cpus), _least(self.link_bytes_per_s, other.link_bytes_per_s),
                           self.other_cpu_s + other.other_cpu_s, self.seconds + other.seconds)

    def budget(self) -> Budget:
        return Budget(self.cpus, self.link_bytes_per_s, self.other_cpu_s / self.seconds if self.seconds > 0 else 0.0)


def _least(a: float, b: float) -> float:
    """The smaller known (positive) value; 0 if neither is known."""
    return min(a, b) if a > 0 and b > 0 else max(a, b, 0.0)


def fanout(delivered: float | None, records_in: float) -> float:
    """Records sent to subscribers per record in: ``delivered`` (the records the queue's subscribers
    reported receiving; None = no subscriber reported) over the records its exchanges took in."""
    if delivered is None or records_in <= 0:
        return 1.0
    return max(0.0, delivered / records_in)


class Evidence:
    """Moments per (queue, host), host budgets and records delivered per queue, kept in buckets of
    ``bucket_s`` seconds of sample time, so that a continuous tuner weighs only the last ``window_s`` of
    history: an exchange that got faster (a new host, a new version) is judged on what it does now, and
    memory stays bounded."""

    def __init__(self, window_s: float, bucket_s: float = 3600.0) -> None:
        self.window_s, self.bucket_s = window_s, bucket_s
        self.buckets: dict[tuple[str, str], dict[int, Moments]] = {}
        self.hosts: dict[str, dict[int, HostMoments]] = {}
        self.delivered: dict[str, dict[int, float]] = {}

    def add(self, queue: str, host: str, time_s: float, m: Moments) -> None:
        cells = self.buckets.setdefault((queue, host), {})
        bucket = int(time_s // self.bucket_s)
        cells[bucket] = cells.get(bucket, Moments()).merge(m)

    def add_host(self, host: str, time_s: float, h: HostMoments) -> None:
        cells = self.hosts.setdefault(host, {})
        bucket = int(time_s // self.bucket_s)
        cells[bucket] = cells.get(bucket, HostMoments()).merge(h)

    def add_delivered(self, queue: str, time_s: float, records: float) -> None:
        cells = self.delivered.setdefault(queue, {})
        bucket = int(time_s // self.bucket_s)
        cells[bucket] = cells.get(bucket, 0.0) + records

    def moments(self, queue: str, now_s: float) -> dict[str, Moments]:
        """host -> the moments of the window ending at ``now_s``; older buckets are forgotten."""
        out = {}
        for (q, host), cells in self.buckets.items():
            self._forget(cells, now_s)
            if q == queue and cells:
                total = Moments()
                for m in cells.values():
                    total = total.merge(m)
                out[host] = total
        return out

    def budgets(self, now_s: float) -> dict[str, Budget]:
        """host -> its budget over the window ending at ``now_s``."""
        out = {}
        for host, cells in self.hosts.items():
            self._forget(cells, now_s)
            total = HostMoments()
            for h in cells.values():
                total = total.merge(h)
            out[host] = total.budget()
        return out

    def delivered_to(self, queue: str, now_s: float) -> float | None:
        """Records the queue's subscribers reported receiving in the window (None: none reported)."""
        cells = self.delivered.get(queue, {})
        self._forget(cells, now_s)
        return sum(cells.values()) if cells else None

    def _forget(self, cells: dict[int, Any], now_s: float) -> None:
        oldest = int((now_s - self.window_s) // self.bucket_s)
        for bucket in [b for b in cells if b < oldest]:
            del cells[bucket]


def estimate(m: Moments, rule: TuneRule = TuneRule(), budget: Budget = Budget()) -> dict[str, Any]:
    """The capacity of one group on its host's ``budget``, with the evidence; ``capacity`` is None (and
    ``why`` says why) when the samples cannot support one."""
    saturation = budget.saturation_cpu(rule)
    out: dict[str, Any] = {
        "samples": m.samples, "linear_samples": m.n, "saturated_samples": m.saturated,
        "max_records_per_s": round(m.max_x, 1), "max_cpu_percent": round(m.max_y, 1),
        "from": m.first if m.samples else None, "to": m.last if m.samples else None,
        "budget": {"cpus": budget.cpus, "link_bytes_per_s": budget.link_bytes_per_s,
                   "saturation_cpu": round(saturation, 2), "other_cpu": round(budget.other_cpu, 2),
                   "fanout": round(budget.fanout, 3)},
        "capacity": None}
    out.update(_link(m, budget))
    cpu, why = _cpu_capacity(m, rule, saturation, out)
    if cpu is None:
        return {**out, "why": why}
    out["cpu_capacity"] = round(cpu, 1)
    link = out.get("link_capacity")
    if link is not None and link < cpu:
        return {**out, "capacity": round(link, 1), "binds": "link"}
    return {**out, "capacity": round(cpu, 1), "binds": "cpu"}


def _cpu_capacity(m: Moments, rule: TuneRule, saturation: float, out: dict[str, Any]) -> tuple[float | None, str]:
    """The CPU capacity (seen saturated, else extrapolated) and why there is none; the fit goes in ``out``."""
    fit, why = _fit(m, rule, saturation)
    out.update(fit)
    if m.saturated >= rule.min_saturated and m.samples >= rule.min_samples:
        out["cpu_method"] = "saturated"
        return m.saturated_sx / m.saturated, ""
    if "extrapolated_capacity" not in fit:
        return None, why
    out["cpu_method"] = "extrapolated"
    return fit["extrapolated_capacity"], ""


def _fit(m: Moments, rule: TuneRule, saturation: float) -> tuple[dict[str, Any], str]:
    """The line through the linear region and where it reaches ``saturation``, or why it cannot say."""
    if m.n < rule.min_samples:
        return {}, f"{m.n} samples below {rule.linear_limit * saturation:g}% CPU, fewer than {rule.min_samples}"
    var_x = m.sxx - m.sx * m.sx / m.n
    var_y = m.syy - m.sy * m.sy / m.n
    cov = m.sxy - m.sx * m.sy / m.n
    if var_x <= 0 or var_y <= 0 or cov <= 0:
        return {}, "CPU does not grow with throughput in these samples"
    slope = cov / var_x
    intercept = (m.sy - slope * m.sx) / m.n
    r2 = cov * cov / (var_x * var_y)
    fit = {"slope_cpu_per_record_per_s": slope, "intercept_cpu": round(intercept, 3), "r2": round(r2, 4)}
    if r2 < rule.min_r2:
        return fit, f"CPU follows throughput too loosely (r^2 {r2:.2f} < {rule.min_r2:g})"
    if m.max_y < rule.min_cpu_reached * saturation:
        return fit, (f"the exchanges never worked above {m.max_y:.0f}% CPU (need "
                     f"{rule.min_cpu_reached * saturation:g}%): too far to extrapolate")
    capacity = (saturation - intercept) / slope
    if capacity <= 0:
        return fit, f"the fit puts saturation at {capacity:.0f} records/s"
    return {**fit, "extrapolated_capacity": round(capacity, 1)}, ""


def _link(m: Moments, budget: Budget) -> dict[str, Any]:
    """The link's capacity in records/s (with the bytes per record each way), if the link is known."""
    if budget.link_bytes_per_s <= 0 or m.records <= 0:
        return {}
    into = m.bytes_in / m.records
    out = m.bytes_out / m.records * budget.fanout
    per_record = max(into, out)
    if per_record <= 0:
        return {}
    return {"bytes_per_record_in": round(into, 1), "bytes_per_record_out": round(out, 1),
            "link_capacity": round(budget.link_bytes_per_s / per_record, 1)}


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
