"""Pure logic of the GCM's elastic decisions: placement with headroom, rule precedence, event merging, host loss.

Views are built in the test; nothing touches ZooKeeper (the scale-out and removal refusals below are decided
before any ZooKeeper access, so no client is given).
"""

from __future__ import annotations

import pytest

from gcm._events import merge_events
from gcm._hostloss import LostHosts
from gcm._placement import Blocked, Move, Placer, choose_host, explain_no_host, plan_replacements
from gcm._scaling import Scaling
from gcm._view import HostView, QueueView, View
from roq.control import Result
from roq.errors import ConfigError
from roq.rules import DEFAULT_RULES, effective_rules, update_rules


def _host(address: str, max_exchanges: int = 4, cpu: float = 10.0, memory: float = 10.0) -> HostView:
    return HostView(address, {"max_exchanges": max_exchanges, "kpis": {"cpu_percent": cpu, "memory_percent": memory}})


def _queue(name: str, placement: dict[str, str], *, host: str = "", state: str = "running", **rules) -> QueueView:
    return QueueView(name=name, state=state, host=host or next(iter(placement.values()), "a"), placement=placement,
                     next_exchange=len(placement) + 1, version=3, rules=effective_rules(rules))


def _view(queues: list[QueueView], hosts: list[HostView]) -> View:
    return View({q.name: q for q in queues}, {h.address: h for h in hosts})


# =========================================================================== placement: ranking


def test_a_queue_is_spread_before_free_slots_count():
    q = _queue("q", {"x1": "a"})
    view = _view([q], [_host("a", max_exchanges=10), _host("b", max_exchanges=2)])
    assert choose_host(view, q) == "b"  # b has fewer free slots but none of q's exchanges
    assert choose_host(view) == "a"  # a new queue: most free slots


def test_most_free_slots_then_cpu_then_memory_then_address():
    q = _queue("q", {})
    assert choose_host(_view([q], [_host("a", 3), _host("b", 4)]), q) == "b"
    assert choose_host(_view([q], [_host("a", cpu=30.0), _host("b", cpu=20.0)]), q) == "b"
    assert choose_host(_view([q], [_host("a", memory=30.0), _host("b", memory=20.0)]), q) == "b"
    assert choose_host(_view([q], [_host("b"), _host("a")]), q) == "a"


def test_exchanges_of_other_queues_take_slots_but_do_not_count_for_spreading():
    q = _queue("q", {"x1": "a"})
    other = _queue("other", {"x1": "b", "x2": "b", "x3": "b"})
    view = _view([q, other], [_host("a", 4), _host("b", 4)])
    assert choose_host(view, q) == "b"  # one free slot, but none of q's exchanges
    assert choose_host(view, other) == "a"


def test_placements_decided_in_one_pass_are_counted_for_the_next():
    q = _queue("q", {"x1": "a"})
    placer = Placer(_view([q], [_host("a"), _host("b"), _host("c")]))
    chosen = []
    for _ in range(5):
        host = placer.choose(q)
        placer.place(q.name, host)
        chosen.append(host)
    assert chosen == ["b", "c", "a", "b", "c"]


# =========================================================================== placement: refusals


def test_every_refusal_reason_is_named():
    q = _queue("q", {"x1": "b", "x2": "b"}, max_exchanges_per_host=2, host_cpu_percent=80, host_memory_percent=70)
    full = _queue("filler", {"x1": "a", "x2": "a"})
    view = _view([q, full], [_host("a", 2), _host("b", 8), _host("c", cpu=97.0), _host("d", memory=75.5)])
    assert choose_host(view, q) is None
    assert explain_no_host(view, q) == (
        "a: full (2/2); b: holds 2 of q's exchanges (max_exchanges_per_host 2); c: CPU 97% > 80%; d: memory 76% > 70%"
    )


def test_a_host_at_the_limit_is_accepted():
    q = _queue("q", {}, host_cpu_percent=50, host_memory_percent=60)
    assert choose_host(_view([q], [_host("a", cpu=50.0, memory=60.0)]), q) == "a"


def test_a_new_queue_needs_a_free_slot_and_prefers_hosts_within_the_default_limits():
    busy = DEFAULT_RULES["host_cpu_percent"] + 1
    hosts = [_host("a", 1), _host("b", cpu=busy)]
    view = _view([_queue("q", {"x1": "a"}, max_exchanges_per_host=1)], hosts)
    assert choose_host(view) == "b"  # every host with room is busy: the operator's request still goes through
    view = _view([], [_host("a", cpu=busy), _host("b", cpu=busy + 5), _host("c", memory=95.0), _host("d", cpu=20.0)])
    assert choose_host(view) == "d"
    view = _view([_queue("q", {"x1": "a"})], [_host("a", 1)])
    assert choose_host(view) is None and explain_no_host(view) == "a: full (1/1)"


def test_explaining_without_hosts_says_so():
    assert explain_no_host(_view([], [])) == "no host manager is registered"


def test_excluded_hosts_are_neither_chosen_nor_explained():
    q = _queue("q", {"x1": "a"})
    view = _view([q], [_host("a"), _host("b", 1, cpu=99.0)])
    assert choose_host(view, q, exclude={"a"}) is None
    assert explain_no_host(view, q, exclude={"a"}) == "b: CPU 99% > 90%"


def test_host_memory_percent_of_a_bad_shape_reads_as_zero():
    assert HostView("a", {"kpis": {"memory_percent": "lots"}}).memory_percent == 0.0
    assert HostView("a", {"kpis": {"memory_percent": True}}).memory_percent == 0.0
    assert HostView("a", {"kpis": [1]}).memory_percent == 0.0
    assert _host("a", memory=42.5).memory_percent == 42.5


# =========================================================================== readiness after a move


def test_an_exchange_registered_by_another_host_than_its_placement_is_not_ready():
    q = _queue("q", {"x1": "b"}, host="a")
    q.monitor = {"endpoint": "tcp://a:1", "host": "a"}
    q.exchanges = {"x1": {"host": "c"}}
    assert not q.ready
    q.exchanges = {"x1": {"host": "b"}}
    assert q.ready
    q.monitor = {"endpoint": "tcp://c:1", "host": "c"}  # a monitor left on the host it was moved off
    assert not q.ready


# =========================================================================== rules: precedence


def test_effective_rules_are_defaults_then_thresholds_then_explicit():
    rules = effective_rules({"cooldown_s": 3.0}, {"cooldown_s": 7.0, "exchange_records_per_s": 9000.0})
    assert rules["cooldown_s"] == 3.0  # operator over tuner
    assert rules["exchange_records_per_s"] == 9000.0  # tuner over default
    assert rules["smoothing"] == DEFAULT_RULES["smoothing"]
    assert set(rules) == set(DEFAULT_RULES)


def test_update_rules_stores_only_the_keys_set_and_none_unsets():
    explicit = update_rules({}, {"max_exchanges": 6, "cooldown_s": 2})
    assert explicit == {"max_exchanges": 6, "cooldown_s": 2.0}
    explicit = update_rules(explicit, {"cooldown_s": None})
    assert explicit == {"max_exchanges": 6}
    assert effective_rules(explicit, {"cooldown_s": 4.0})["cooldown_s"] == 4.0  # the threshold applies again


def test_min_above_max_is_refused_across_sources():
    with pytest.raises(ConfigError, match="min_exchanges"):
        update_rules({}, {"min_exchanges": 3}, {"max_exchanges": 2})  # max from the tuner
    with pytest.raises(ConfigError, match="min_exchanges"):
        update_rules({"min_exchanges": 3}, {"max_exchanges": 2})  # min set earlier
    assert update_rules({}, {"min_exchanges": 3, "max_exchanges": 3}, {"max_exchanges": 2}) == {
        "min_exchanges": 3, "max_exchanges": 3}


def test_a_refused_update_leaves_the_explicit_rules_as_they_were():
    explicit = {"max_exchanges": 5}
    for bad in ({"max_exchanges": 0}, {"nope": 1}, {"nope": None}, {"smoothing": "x", "cooldown_s": 1}):
        with pytest.raises(ConfigError):
            update_rules(explicit, bad)
    assert explicit == {"max_exchanges": 5}


def test_a_threshold_that_contradicts_the_operator_is_ignored():
    rules = effective_rules({"min_exchanges": 3}, {"max_exchanges": 2})
    assert (rules["min_exchanges"], rules["max_exchanges"]) == (3, DEFAULT_RULES["max_exchanges"])


# =========================================================================== scale-out and removal refusals


def _scaling() -> Scaling:
    return Scaling(None, None, None, None)  # type: ignore[arg-type]  # refusals never reach ZooKeeper


def test_scale_out_beyond_max_exchanges_names_the_rule():
    q = _queue("q", {"x1": "a"}, max_exchanges=2)
    result, comment, _ = _scaling().scale_out(_view([q], [_host("a")]), q, 3, "")
    assert result == Result.BAD_REQUEST and "max_exchanges" in comment and "at most 2" in comment


def test_scale_out_to_what_is_placed_changes_nothing_even_above_the_maximum():
    q = _queue("q", {"x1": "a", "x2": "a", "x3": "a"}, max_exchanges=2)
    result, comment, data = _scaling().scale_out(_view([q], [_host("a")]), q, 3, "")
    assert (result, comment, data) == (Result.OK, "already 3 placed", {"Placed": [], "Exchanges": 3})


def test_scale_out_of_a_stopped_queue_is_unavailable():
    q = _queue("q", {"x1": "a"}, state="stopped")
    assert _scaling().scale_out(_view([q], [_host("a")]), q, 2, "")[0] == Result.UNAVAILABLE


def test_scale_out_without_room_says_why_for_each_host():
    q = _queue("q", {"x1": "a"})
    result, comment, _ = _scaling().scale_out(_view([q], [_host("a", 1), _host("b", cpu=95.0)]), q, 2, "")
    assert result == Result.UNAVAILABLE and "a: full (1/1)" in comment and "b: CPU 95% > 90%" in comment


def test_scale_out_to_zero_is_a_bad_request():
    q = _queue("q", {"x1": "a"})
    with pytest.raises(ConfigError, match="at least 1"):
        _scaling().scale_out(_view([q], [_host("a")]), q, 0, "")


def test_removing_below_min_exchanges_is_refused_with_the_numbers():
    q = _queue("q", {"x1": "a", "x2": "a"}, min_exchanges=2)
    result, comment, _ = _scaling().remove(q, "x2", "")
    assert result == Result.BAD_REQUEST and comment == "removing x2 would leave 1 exchanges, below min_exchanges 2"


def test_removing_a_slot_already_gone_is_ok_also_by_incarnation_name():
    q = _queue("q", {"x1": "a"})
    assert _scaling().remove(q, "x7", "")[:2] == (Result.OK, "exchange x7 of 'q' already gone")
    assert _scaling().remove(q, "x7-1a2b", "")[2] == {"Exchange": "x7", "Exchanges": 1}


# =========================================================================== events


def test_events_of_all_sources_are_merged_by_time_then_source_then_seq():
    documents = {
        "monitor": {"events": [{"seq": 1, "time": 10.0, "kind": "a"}, {"seq": 2, "time": 12.0, "kind": "c"}],
                    "counters": {"moves": 1}},
        "gcm": {"events": [{"seq": 7, "time": 10.0, "kind": "b"}, {"seq": 8, "time": 11.0, "kind": "x"},
                           {"seq": 6, "time": 11.0, "kind": "w"}]},
    }
    merged = merge_events(documents, 10)
    assert [(e["origin"], e["kind"]) for e in merged] == [
        ("gcm", "b"), ("monitor", "a"), ("gcm", "w"), ("gcm", "x"), ("monitor", "c")]
    assert [e["kind"] for e in merge_events(documents, 2)] == ["x", "c"]  # the newest, still oldest first


def test_merging_skips_what_is_not_an_event_and_keeps_a_named_source():
    documents = {"monitor": None, "gcm": {"events": [5, "x", {"time": "late", "kind": "k", "origin": "gcm"}]},
                 "other": {"events": "none"}}
    assert merge_events(documents, 5) == [{"time": "late", "kind": "k", "origin": "gcm"}]
    assert merge_events({}, 5) == []


# =========================================================================== host loss


def test_slots_of_a_lost_host_go_to_live_hosts_spread_and_counted():
    q = _queue("q", {"x1": "a", "x2": "dead", "x3": "dead", "x10": "dead"}, host="a")
    view = _view([q], [_host("a"), _host("b"), _host("c", 1)])
    moves, blocked = plan_replacements(view, {"dead"})
    assert moves == [Move("q", "x2", "dead", "b"), Move("q", "x3", "dead", "c"), Move("q", "x10", "dead", "a")]
    assert blocked == []


def test_a_lost_monitor_moves_to_the_host_with_fewest_monitors():
    q = _queue("q", {"x1": "a"}, host="dead")
    other = _queue("other", {"x1": "b"}, host="b")
    moves, _ = plan_replacements(_view([q, other], [_host("a"), _host("b")]), {"dead"})
    assert moves == [Move("q", "monitor", "dead", "a")]


def test_a_monitor_avoids_hosts_over_the_queue_limits_when_it_can():
    q = _queue("q", {"x1": "a"}, host="dead", host_cpu_percent=50)
    moves, _ = plan_replacements(_view([q], [_host("a", cpu=60.0), _host("b", cpu=55.0, max_exchanges=0)]), {"dead"})
    assert moves == [Move("q", "monitor", "dead", "b")]  # over the limit, but the only choice left: the lowest CPU
    moves, _ = plan_replacements(_view([q], [_host("a", cpu=60.0), _host("c", cpu=40.0)]), {"dead"})
    assert moves == [Move("q", "monitor", "dead", "c")]


def test_slots_no_host_can_take_stay_blocked_with_the_reasons():
    q = _queue("q", {"x1": "a", "x2": "dead", "x3": "dead"}, host="a")
    moves, blocked = plan_replacements(_view([q], [_host("a", 2)]), {"dead"})
    assert moves == [Move("q", "x2", "dead", "a")]
    assert blocked == [Blocked("q", "x3", "dead", "a: full (2/2)")]


def test_only_running_queues_and_the_queues_asked_for_are_planned():
    running = _queue("r", {"x1": "dead"}, host="a")
    stopped = _queue("s", {"x1": "dead"}, host="dead", state="stopped")
    view = _view([running, stopped], [_host("a")])
    assert plan_replacements(view, {"dead"})[0] == [Move("r", "x1", "dead", "a")]
    assert plan_replacements(view, {"dead"}, queues=["s"]) == ([], [])


def test_lost_hosts_are_counted_from_the_first_time_they_are_seen_missing():
    lost = LostHosts(grace=2.0)
    q = _queue("q", {"x1": "a", "x2": "b"}, host="c")
    view = _view([q], [_host("a")])
    lost.update(view, now=100.0)
    assert lost.lost(101.9) == set() and sorted(lost.deadlines()) == [102.0, 102.0]
    lost.update(view, now=101.0)  # seen again: the clock keeps its start
    assert lost.lost(102.0) == {"b", "c"}
    lost.update(_view([q], [_host("a"), _host("b")]), now=102.5)  # b came back: its clock is gone
    assert lost.lost(200.0) == {"c"}
    lost.update(_view([q], [_host("a")]), now=103.0)
    assert lost.lost(104.0) == {"c"} and lost.lost(105.0) == {"b", "c"}
    lost.reset()
    assert lost.lost(1e9) == set()


def test_hosts_of_stopped_queues_are_not_watched():
    lost = LostHosts(grace=0.5)
    lost.update(_view([_queue("q", {"x1": "gone"}, state="stopped")], []), now=0.0)
    assert lost.lost(10.0) == set()
