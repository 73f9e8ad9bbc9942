"""The tuning rule (pure): capacity from CPU against throughput, and the thresholds it gives."""

from __future__ import annotations

import math
import random

from roqcli.kpi.capacity import Moments, TuneRule, estimate, thresholds_for


def moments(samples: list[tuple[float, float]], rule: TuneRule = TuneRule()) -> Moments:
    m = Moments()
    for i, (x, y) in enumerate(samples):
        if x <= 0:
            continue
        lin = y < rule.linear_limit * rule.saturation_cpu
        part = Moments(n=int(lin), sx=x * lin, sy=y * lin, sxx=x * x * lin, sxy=x * y * lin, syy=y * y * lin,
                       samples=1, max_x=x, max_y=y, first=i, last=i)
        m = m.merge(part)
    return m


def synthetic(capacity: float, n: int = 600, noise: float = 4.0, idle: float = 3.0, seed: int = 1) -> list:
    """CPU = idle + (100 - idle) x / capacity, saturating at 100, with noise; loads up to 1.3 x capacity."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = rng.uniform(0, 1.3 * capacity)
        y = min(100.0, idle + (100 - idle) * x / capacity) + rng.gauss(0, noise)
        out.append((min(x, capacity), max(0.0, y)))  # a saturated exchange carries no more than its capacity
    return out


def test_the_capacity_of_a_synthetic_history_is_found():
    for capacity in (2_000, 40_000, 250_000):
        e = estimate(moments(synthetic(capacity)))
        assert e["capacity"] == e["capacity"] and abs(e["capacity"] / capacity - 1) < 0.05, (capacity, e)
        assert e["r2"] > 0.9 and e["samples"] > e["linear_samples"] > 300


def test_thresholds_come_from_the_weakest_host_with_the_documented_margins():
    estimates = {"127.0.0.11": estimate(moments(synthetic(10_000))),
                 "127.0.0.12": estimate(moments(synthetic(20_000, seed=2))),
                 "127.0.0.13": estimate(moments(synthetic(1_000, n=10)))}  # too few samples: not used
    assert estimates["127.0.0.13"]["capacity"] is None and "fewer than 30" in estimates["127.0.0.13"]["why"]
    thresholds, host = thresholds_for(estimates)
    c = estimates["127.0.0.11"]["capacity"]
    assert host == "127.0.0.11"
    assert thresholds == {"exchange_records_per_s": round(0.8 * c, 1), "scale_out_records_per_s": round(0.7 * c, 1)}
    assert thresholds_for({"h": estimates["127.0.0.13"]}) == ({}, "")


def test_weak_evidence_gives_no_capacity_and_says_why():
    idle_only = [(x, 2.0 + 0.0001 * x) for x in range(1, 200)]  # never above 2% CPU
    assert "never worked above 2% CPU" in estimate(moments(idle_only))["why"]
    flat = [(x, 50.0 + math.sin(x)) for x in range(1, 200)]  # CPU does not follow throughput
    assert estimate(moments(flat))["capacity"] is None
    assert estimate(Moments())["why"].startswith("0 samples")
    falling = [(x, 80.0 - x / 10) for x in range(1, 200)]
    assert "does not grow" in estimate(moments(falling))["why"]


def test_a_continuous_tuner_weighs_only_its_window_of_history():
    from roqcli.kpi.capacity import Evidence

    hour = 3600.0
    evidence = Evidence(window_s=24 * hour)
    old = moments(synthetic(10_000, seed=5))  # what the exchanges did two days ago
    new = moments(synthetic(20_000, seed=6))  # what they do now (a faster host)
    evidence.add("q", "h1", 1_000 * hour, old)
    evidence.add("q", "h1", 1_047 * hour, new)
    evidence.add("q", "h1", 1_047 * hour + 10, new)  # the same hour: merged
    evidence.add("other", "h1", 1_047 * hour, new)
    now = 1_048 * hour
    got = evidence.moments("q", now)
    assert set(got) == {"h1"} and got["h1"].samples == 2 * new.samples
    assert abs(estimate(got["h1"])["capacity"] / 20_000 - 1) < 0.05
    assert list(evidence.buckets[("q", "h1")]) == [1_047]  # the old hour is forgotten
    assert evidence.moments("missing", now) == {}
