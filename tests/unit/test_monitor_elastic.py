"""The scaling rule (pure): out when stuck hot, in only well below the mark, sustained, no flapping."""

from __future__ import annotations

import pytest

from monitor._elastic import QueueLoad, Scaler
from monitor._rule import ExchangeLoad, evaluate
from roq.rules import DEFAULT_RULES

RULES = {**DEFAULT_RULES, "exchange_records_per_s": 1000.0, "sustain_s": 1.0, "cooldown_s": 5.0,
         "min_exchanges": 1, "max_exchanges": 4, "scale_in_ratio": 0.6}


def run(scaler, load, times, rules=RULES):
    """Evaluate at each time; return (time, decision) of the first decision."""
    for t in times:
        d = scaler.evaluate(load, rules, t)
        if d is not None:
            return t, d
    return None, None


def test_scale_out_at_once_when_stuck():
    # the relocation rule calls an exchange stuck only once it has been hot for the sustain: not counted twice
    s = Scaler()
    load = QueueLoad({"a": 1500.0}, {"a": 3}, stuck=["a"])
    t, d = run(s, load, [0.0, 0.5])
    assert (t, d.kind, d.exchanges, d.bound) == (0.0, "out", 1, False)
    assert "no other exchange can take" in d.reason and d.numbers["total_records_per_s"] == 1500.0


def test_no_scale_out_at_max_or_when_the_condition_lapses():
    s = Scaler()
    assert run(s, QueueLoad({"a": 1500.0, "b": 1500.0}, stuck=["a"], placed=4), [0, 2, 4])[1] is None
    rules = {**RULES, "scale_out_records_per_s": 700.0}
    s = Scaler()
    hot, calm = QueueLoad({"a": 800.0}), QueueLoad({"a": 600.0})
    assert s.evaluate(hot, rules, 0.0) is None
    assert s.evaluate(calm, rules, 0.9) is None  # the timer restarts
    assert s.evaluate(hot, rules, 1.0) is None
    assert s.evaluate(hot, rules, 1.9) is None
    assert s.evaluate(hot, rules, 2.0).kind == "out"


def test_the_operators_bounds_apply_at_once_whatever_the_cooldown():
    s = Scaler()
    s.last = ("in", 0.0)  # a scale-in just now: a load-driven scale-out would wait for the cool-down
    d = s.evaluate(QueueLoad({"a": 0.0}), {**RULES, "min_exchanges": 2}, 0.1)
    assert (d.kind, d.bound, d.reason) == ("out", True, "1 exchange, below min_exchanges 2")
    assert s.decided(d, 0.1, RULES) is False  # not a flap: the operator asked for it
    s = Scaler()
    s.last = ("out", 0.0)
    d = s.evaluate(QueueLoad({"a": 900.0, "b": 900.0, "c": 10.0}), {**RULES, "max_exchanges": 2}, 0.1)
    assert (d.kind, d.victim, d.bound, d.reason) == ("in", "c", True, "3 exchanges, above max_exchanges 2")


def test_scale_out_on_queue_averages():
    rules = {**RULES, "scale_out_records_per_s": 700.0}
    t, d = run(Scaler(), QueueLoad({"a": 800.0, "b": 700.0}), [0, 1], rules)
    assert d.kind == "out" and "average load 750" in d.reason
    rules = {**RULES, "publishers_per_exchange": 2}
    t, d = run(Scaler(), QueueLoad({"a": 10.0, "b": 10.0}, {"a": 3, "b": 2}), [0, 1], rules)
    assert d.kind == "out" and "5 publishers on 2 exchanges" in d.reason


def test_scale_in_only_well_below_the_mark():
    # 2 exchanges at 1100 in all: fits in one at the mark (1000)? no. At 0.6 of it? no.
    assert run(Scaler(), QueueLoad({"a": 600.0, "b": 500.0}), [0, 1, 2, 10])[1] is None
    # 590 in all fits in one exchange at 600 (0.6 x 1000)
    t, d = run(Scaler(), QueueLoad({"a": 400.0, "b": 190.0}, {"a": 2, "b": 1}), [0, 0.5, 1.0])
    assert (t, d.kind, d.victim) == (1.0, "in", "b")
    assert d.numbers["victim_records_per_s"] == 190.0


def test_never_below_the_minimum_and_not_while_one_is_starting():
    assert run(Scaler(), QueueLoad({"a": 0.0}), [0, 5])[1] is None
    assert run(Scaler(), QueueLoad({"a": 0.0, "b": 0.0}), [0, 5], {**RULES, "min_exchanges": 2})[1] is None
    assert run(Scaler(), QueueLoad({"a": 0.0, "b": 0.0}, placed=3), [0, 5])[1] is None


def test_scale_in_respects_the_publisher_limit():
    rules = {**RULES, "publishers_per_exchange": 2}
    assert run(Scaler(), QueueLoad({"a": 0.0, "b": 0.0}, {"a": 2, "b": 1}), [0, 5], rules)[1] is None
    assert run(Scaler(), QueueLoad({"a": 0.0, "b": 0.0}, {"a": 1, "b": 1}), [0, 5], rules)[1].kind == "in"


def test_reversal_waits_for_the_cooldown_and_counts_a_flap_within_two():
    s = Scaler()
    out = s.evaluate(QueueLoad({"a": 1500.0}, stuck=["a"]), RULES, 1.0)
    assert out.kind == "out" and s.decided(out, 1.0, RULES) is False
    cold = QueueLoad({"a": 100.0, "b": 100.0})
    t, d = run(s, cold, [1.5, 3, 5.9, 6.0, 6.5])
    assert (t, d.kind) == (6.0, "in")  # cooldown 5 s after the scale-out at 1.0
    assert s.decided(d, t, RULES) is True  # within 2 x cooldown: a flap
    s2 = Scaler()
    s2.last = ("out", 0.0)
    d = s2.evaluate(cold, RULES, 20.0) or s2.evaluate(cold, RULES, 21.0)
    assert d.kind == "in" and s2.decided(d, 21.0, RULES) is False


def test_same_direction_needs_only_the_sustain():
    s = Scaler()
    s.last = ("out", 0.0)
    hot = QueueLoad({"a": 1500.0, "b": 1400.0})
    rules = {**RULES, "scale_out_records_per_s": 1000.0}
    assert s.evaluate(hot, rules, 0.1) is None
    assert s.evaluate(hot, rules, 1.1).kind == "out"
    s = Scaler()
    s.last = ("in", 0.0)
    stuck = QueueLoad({"a": 1500.0, "b": 1400.0}, stuck=["a"])
    assert s.evaluate(stuck, RULES, 0.1) is None  # the other way: the cool-down first
    assert s.evaluate(stuck, RULES, 5.0).kind == "out"


@pytest.mark.parametrize("other, stuck", [(600.0, ["a"]), (100.0, [])])
def test_rule_reports_stuck_exchanges(other, stuck):
    xs = [
        ExchangeLoad("a", 1400.0, hot_since=0.0, publishers={"p1": 700.0, "p2": 700.0}),
        ExchangeLoad("b", other, publishers={"p3": other}),
    ]
    found: list[str] = []
    moves, _ = evaluate(xs, now=5.0, high=1000.0, sustain=1.0, cooldown=5.0, moved_at={}, stuck=found)
    assert found == stuck
    assert bool(moves) == (not stuck)


def test_rule_a_lone_heavy_publisher_is_not_stuck():
    xs = [ExchangeLoad("a", 1400.0, hot_since=0.0, publishers={"p1": 1400.0}), ExchangeLoad("b", 0.0)]
    found: list[str] = []
    moves, limits = evaluate(xs, now=5.0, high=1000.0, sustain=1.0, cooldown=5.0, moved_at={}, stuck=found)
    assert (moves, found, [c.publisher for c in limits]) == ([], [], ["p1"])


def test_rule_single_exchange_with_two_publishers_is_stuck():
    xs = [ExchangeLoad("a", 1400.0, hot_since=0.0, publishers={"p1": 700.0, "p2": 700.0})]
    found: list[str] = []
    evaluate(xs, now=5.0, high=1000.0, sustain=1.0, cooldown=5.0, moved_at={}, stuck=found)
    assert found == ["a"]


def test_scale_in_counts_the_exchanges_own_marks_where_they_saturate_first():
    # 2 exchanges at 300 rec/s, each busy 60%: far below the queue's mark (1000), but each forwards about 500
    # at most; 600 would not fit in one
    marks = {"a": 425.0, "b": 425.0}
    assert run(Scaler(), QueueLoad({"a": 300.0, "b": 300.0}, marks=marks), [0, 1, 2, 10])[1] is None
    t, d = run(Scaler(), QueueLoad({"a": 300.0, "b": 300.0}), [0, 1, 2])
    assert d.kind == "in"  # with the queue's mark alone it would have scaled in
    t, d = run(Scaler(), QueueLoad({"a": 500.0}, {"a": 3}, stuck=["a"], marks={"a": 425.0}), [0.0])
    assert d.kind == "out" and "mark 425" in d.reason


def test_scale_in_takes_an_exchange_not_saturated_yet_to_saturate_like_the_others():
    # 3 exchanges, two saturating near 400 rec/s and a new one without a mark of its own: 900 rec/s in all does
    # not fit in 2 at 0.6 x 400 each, although the queue's mark (1000) would leave room for it
    marks = {"a": 400.0, "b": 400.0}
    load = QueueLoad({"a": 400.0, "b": 400.0, "c": 100.0}, marks=marks)
    assert run(Scaler(), load, [0, 1, 2, 10])[1] is None
    t, d = run(Scaler(), QueueLoad({"a": 200.0, "b": 200.0, "c": 50.0}, marks=marks), [0, 1, 2])
    assert d.kind == "in" and "room 480" in d.reason  # 0.6 x 400 x 2
