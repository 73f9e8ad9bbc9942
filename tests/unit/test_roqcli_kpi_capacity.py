"""The tuning rule (pure): capacity from CPU against throughput on the host's budget, or from saturation
seen; the link's capacity; and the thresholds they give."""

from __future__ import annotations

import math
import random

from roqcli.kpi.capacity import Budget, HostMoments, Moments, TuneRule, estimate, fanout, thresholds_for


def moments(samples: list[tuple], rule: TuneRule = TuneRule(), budget: Budget = Budget()) -> Moments:
    """Samples (x records/s, y CPU %[, busy[, bytes in per record, bytes out per record]]) of 1 s each, as
    the Spark job sums them: the linear region is the host's."""
    m = Moments()
    limit = budget.linear_limit(rule)
    for i, (x, y, *more) in enumerate(samples):
        if x <= 0:
            continue
        busy, b_in, b_out = (*more, *(0.0, 100.0, 100.0)[len(more):])
        lin = y < limit
        sat = busy >= rule.saturated_busy and not lin
        part = Moments(n=int(lin), sx=x * lin, sy=y * lin, sxx=x * x * lin, sxy=x * y * lin, syy=y * y * lin,
                       samples=1, max_x=x, max_y=y, first=i, last=i, saturated=int(sat), saturated_sx=x * sat,
                       records=x, bytes_in=x * b_in, bytes_out=x * b_out)
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
    # the hosts' budgets and the records delivered are kept and forgotten alike
    from roqcli.kpi.capacity import HostMoments

    evidence.add_host("h1", 1_000 * hour, HostMoments(cpus=0.1, seconds=10.0, other_cpu_s=10.0))
    evidence.add_host("h1", 1_047 * hour, HostMoments(cpus=0.5, seconds=10.0, other_cpu_s=20.0))
    evidence.add_delivered("q", 1_000 * hour, 5.0)
    assert evidence.delivered_to("q", now) is None
    evidence.add_delivered("q", 1_047 * hour, 7.0)
    evidence.add_delivered("q", 1_047 * hour + 5, 3.0)
    assert evidence.delivered_to("q", now) == 10.0
    budget = evidence.budgets(now)["h1"]
    assert (budget.cpus, budget.other_cpu) == (0.5, 2.0)  # the old, smaller budget is forgotten


def budget_history(capacity: float, cpus: float, other: float = 0.0, n: int = 600, seed: int = 1) -> list:
    """An exchange on a host of ``cpus`` cores of which the host spends ``other`` % of a core elsewhere: its
    CPU grows linearly up to what is left, which it reaches at ``capacity``; loads up to 1.3 x capacity."""
    rng = random.Random(seed)
    top = 100 * cpus - other
    out = []
    for _ in range(n):
        x = rng.uniform(0, 1.3 * capacity)
        y = min(top, 1.0 + (top - 1.0) * x / capacity) + rng.gauss(0, 0.01 * top)
        out.append((min(x, capacity), max(0.0, y)))
    return out


def test_a_host_of_a_quarter_core_gives_a_capacity_four_times_lower_than_the_same_slope_on_an_unknown_budget():
    slope = 25.0 / 10_000  # % of a core per record/s: one core would carry 40,000 records/s
    samples = [(x, 1.0 + slope * x + 0.2 * math.sin(x)) for x in range(100, 9_700, 25)]  # CPU up to 25% of a core
    unknown = estimate(moments(samples))
    quarter = Budget(cpus=0.25)
    known = estimate(moments(samples, budget=quarter), budget=quarter)
    assert known["budget"]["saturation_cpu"] == 25.0 and unknown["budget"]["saturation_cpu"] == 100.0
    assert known["cpu_method"] == unknown["cpu_method"] == "extrapolated" and known["binds"] == "cpu"
    # (100 - 1) / slope against (25 - 1) / slope: the intercept (the idle exchange) is the same on both
    assert abs(unknown["capacity"] / 39_600 - 1) < 0.02 and abs(known["capacity"] / 9_600 - 1) < 0.02
    assert abs(unknown["capacity"] / known["capacity"] - 99 / 24) < 0.1
    # what the host spends beyond its exchanges is not theirs: 5% of a core out of 25 leaves 20
    crowded = Budget(cpus=0.25, other_cpu=5.0)
    less = estimate(moments(samples, budget=crowded), budget=crowded)
    assert less["budget"]["saturation_cpu"] == 20.0 and abs(less["capacity"] / 7_600 - 1) < 0.02
    # ...but never more than half of its budget (more is a crowded host, not the overhead of one)
    assert Budget(cpus=0.25, other_cpu=40.0).saturation_cpu(TuneRule()) == 12.5
    assert Budget(cpus=0.25, other_cpu=-3.0).saturation_cpu(TuneRule()) == 25.0
    assert Budget(cpus=4.0).saturation_cpu(TuneRule()) == 100.0  # one exchange uses one core at most


def test_the_linear_region_is_below_the_hosts_saturation_and_a_synthetic_history_on_a_budget_is_found():
    quarter = Budget(cpus=0.25, other_cpu=2.0)
    history = budget_history(8_000, cpus=0.25, other=2.0)
    e = estimate(moments(history, budget=quarter), budget=quarter)
    assert abs(e["capacity"] / 8_000 - 1) < 0.05, e
    assert e["linear_samples"] < e["samples"]  # the saturated ones (at 23% of a core, what is left) are not fitted
    # judged as if the host had a core, every sample is "linear" and none near saturation: no capacity
    blind = estimate(moments(history))
    assert blind["linear_samples"] == blind["samples"] and "never worked above" in blind["why"]


def test_saturation_seen_gives_the_capacity_and_the_line_is_only_the_fallback():
    # CPU per record falls as the load grows (a loop woken per batch pays per wakeup): the CPU reaches the
    # budget at a third of what the exchange carries busy all the time
    budget = Budget(cpus=0.2)
    rng = random.Random(3)
    light = [(x, 20.0 * min(1.0, x / 4_500) * rng.uniform(0.9, 1.0), x / 60_000) for x in range(100, 4_500, 30)]
    saturated = [(rng.gauss(14_000, 800), rng.uniform(16, 20), rng.uniform(0.9, 1.0)) for _ in range(12)]
    starved = [(3_500, 6.0, 0.99), (7_000, 11.0, 0.95)]  # busy, but on CPU the machine did not give it
    e = estimate(moments(light + saturated + starved, budget=budget), budget=budget)
    assert e["cpu_method"] == "saturated" and e["saturated_samples"] == 12 and e["binds"] == "cpu"
    assert abs(e["capacity"] / 14_000 - 1) < 0.05, e
    assert e["extrapolated_capacity"] < 0.5 * e["capacity"]  # the line alone: a lower bound
    few = estimate(moments(light + saturated[:4], budget=budget), budget=budget)
    assert few["cpu_method"] == "extrapolated" and few["capacity"] == few["extrapolated_capacity"]


def test_a_link_that_binds_and_one_that_does_not():
    # 1,000-byte records, two subscribers reading each: 2,000 bytes out per record in; a 20 Mbit/s link
    link = 20e6 / 8
    history = [(x, y, 0.0, 1_000.0, 1_000.0) for x, y in synthetic(10_000)]
    spread = fanout(delivered=2 * sum(x for x, _ in synthetic(10_000)), records_in=sum(x for x, _ in synthetic(10_000)))
    assert spread == 2.0
    slow = Budget(link_bytes_per_s=link, fanout=spread)
    e = estimate(moments(history, budget=slow), budget=slow)
    assert e["binds"] == "link" and e["link_capacity"] == round(link / 2_000, 1) == e["capacity"]
    assert e["bytes_per_record_in"] == 1_000.0 and e["bytes_per_record_out"] == 2_000.0
    assert abs(e["cpu_capacity"] / 10_000 - 1) < 0.05  # what the CPU alone would allow
    fast = Budget(link_bytes_per_s=1e9, fanout=spread)
    assert estimate(moments(history, budget=fast), budget=fast)["binds"] == "cpu"
    # publishers send more than subscribers read: the way in binds
    one_way = estimate(moments(history, budget=slow), budget=Budget(link_bytes_per_s=link, fanout=0.1))
    assert one_way["link_capacity"] == round(link / 1_000, 1)
    # without a CPU capacity there is none, whatever the link says
    weak = estimate(moments([(x, y, 0.0, 1_000.0, 1_000.0) for x, y in synthetic(10_000, n=10)]), budget=slow)
    assert weak["capacity"] is None and "fewer than 30" in weak["why"]
    assert fanout(None, 100.0) == 1.0 and fanout(50.0, 0.0) == 1.0


def test_an_archive_without_budgets_keeps_the_rule_of_one_core():
    history = synthetic(40_000)
    old = estimate(moments(history))  # no busy, no host records: as before budgets
    assert old["budget"] == {"cpus": 0.0, "link_bytes_per_s": 0.0, "saturation_cpu": 100.0, "other_cpu": 0.0,
                             "fanout": 1.0}
    assert old["cpu_method"] == "extrapolated" and old["binds"] == "cpu" and "link_capacity" not in old
    assert old["capacity"] == old["extrapolated_capacity"] and abs(old["capacity"] / 40_000 - 1) < 0.05
    # host records without a budget (cpus 0) leave it so too
    assert HostMoments(cpus=0.0, seconds=10.0, other_cpu_s=30.0).budget().saturation_cpu(TuneRule()) == 100.0


def test_host_moments_keep_the_smallest_budget_and_the_mean_other_use():
    h = HostMoments(cpus=0.5, link_bytes_per_s=0.0, other_cpu_s=20.0, seconds=10.0)
    h = h.merge(HostMoments(cpus=0.25, link_bytes_per_s=1e6, other_cpu_s=40.0, seconds=10.0)).merge(HostMoments())
    b = h.budget()
    assert (b.cpus, b.link_bytes_per_s, b.other_cpu) == (0.25, 1e6, 3.0)
