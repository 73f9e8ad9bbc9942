"""gcm's placement: where exchanges and monitors go, why a host cannot take one, where a lost host's slots
go (pure, on views built here)."""

from __future__ import annotations

from gcm._placement import Blocked, Move, Placer, choose_host, explain_no_host, plan_replacements
from gcm._view import HostView, QueueView, View
from roq.wire.documents import HostDoc, HostKpis, QueueDoc
from roq.rules import DEFAULT_RULES


def _host(address: str, max_exchanges: int = 4, cpu: float = 10.0, memory: float = 10.0, cpus: float = 1.0,
          net: float = 0.0) -> HostView:
    kpis = HostKpis(cpu_percent=cpu, memory_percent=memory, net_percent=net)
    return HostView(address, HostDoc(address=address, max_exchanges=max_exchanges, kpis=kpis, cpus=cpus))


def _queue(name: str, placement: dict[str, str], *, host: str = "", state: str = "running", **rules) -> QueueView:
    doc = QueueDoc(state=state, host=host or next(iter(placement.values()), "a"), placement=placement,
                   next_exchange=len(placement) + 1)
    return QueueView(name, doc, version=3, explicit_rules=rules)


def _view(queues: list[QueueView], hosts: list[HostView]) -> View:
    return View({q.name: q for q in queues}, {h.address: h for h in hosts})


# =========================================================================== ranking


def test_a_queue_is_spread_before_free_slots_count():
    q = _queue("q", {"x1": "a"})
    view = _view([q], [_host("a", max_exchanges=10), _host("b", max_exchanges=2)])
    assert choose_host(view, q) == "b"  # b has fewer free slots but none of q's exchanges
    assert choose_host(view) == "a"  # a new queue: most free slots


def test_most_headroom_then_free_slots_then_memory_then_address():
    q = _queue("q", {})
    assert choose_host(_view([q], [_host("a", 3), _host("b", 4)]), q) == "b"
    assert choose_host(_view([q], [_host("a", cpu=30.0), _host("b", cpu=20.0)]), q) == "b"
    assert choose_host(_view([q], [_host("a", memory=30.0), _host("b", memory=20.0)]), q) == "b"
    assert choose_host(_view([q], [_host("b"), _host("a")]), q) == "a"
    # a few percent apart is equal headroom (tenths of a core): the free slots decide
    assert choose_host(_view([q], [_host("a", 4, cpu=20.0), _host("b", 3, cpu=17.0)]), q) == "a"


def test_headroom_is_counted_in_cores_of_each_hosts_own_budget():
    q = _queue("q", {})
    small, big = _host("a", cpus=0.25, cpu=10.0), _host("b", cpus=1.0, cpu=50.0)
    assert (small.headroom, big.headroom) == (0.225, 0.5)
    assert choose_host(_view([q], [small, big]), q) == "b"  # busier, but it has more cores left
    assert choose_host(_view([], [small, big])) == "b"
    assert choose_host(_view([q], [small, _host("b", cpus=1.0, cpu=85.0)]), q) == "a"


def test_a_new_queue_goes_to_the_most_headroom_then_most_free_slots_then_lower_address():
    full = _queue("q", {"x1": "a", "x2": "a", "x3": "a"})
    assert choose_host(_view([full], [_host("a", 4, cpu=1.0), _host("b", 2, cpu=80.0)])) == "a"
    assert choose_host(_view([full], [_host("a", 4, cpu=10.0), _host("b", 2, cpu=10.0)])) == "b"
    assert choose_host(_view([], [_host("a", cpu=50.0), _host("b", cpu=10.0)])) == "b"
    assert choose_host(_view([], [_host("c"), _host("a"), _host("b")])) == "a"


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


def test_slots_of_a_removing_queue_are_free_for_placement():
    view = _view([_queue("old", {"x1": "a"}, state="removing")], [_host("a", 1)])
    assert choose_host(view) == "a"


# =========================================================================== refusals


def test_every_refusal_reason_is_named():
    q = _queue("q", {"x1": "b", "x2": "b"}, max_exchanges_per_host=2, host_cpu_percent=80, host_memory_percent=70)
    full = _queue("filler", {"x1": "a", "x2": "a"})
    view = _view([q, full], [_host("a", 2), _host("b", 8), _host("c", cpu=97.0), _host("d", memory=75.5)])
    assert choose_host(view, q) is None
    assert explain_no_host(view, q) == (
        "a: full (2/2); b: holds 2 of q's exchanges (max_exchanges_per_host 2); c: CPU 97% > 80%; d: memory 76% > 70%"
    )


def test_a_host_whose_link_is_busy_takes_no_exchange_and_a_quieter_link_is_preferred():
    q = _queue("q", {}, host_net_percent=80)
    view = _view([q], [_host("a", net=85.0), _host("b", net=40.0), _host("c", net=10.0)])
    assert choose_host(view, q) == "c"  # equal headroom in cores: the least busy link
    view = _view([q], [_host("a", net=85.0)])
    assert choose_host(view, q) is None and explain_no_host(view, q) == "a: link 85% > 80%"


def test_a_host_at_the_limit_is_accepted():
    q = _queue("q", {}, host_cpu_percent=50, host_memory_percent=60)
    assert choose_host(_view([q], [_host("a", cpu=50.0, memory=60.0)]), q) == "a"


def test_a_new_queue_needs_a_free_slot_and_prefers_hosts_within_the_default_limits():
    busy = DEFAULT_RULES["host_cpu_percent"] + 1
    view = _view([_queue("q", {"x1": "a"}, max_exchanges_per_host=1)], [_host("a", 1), _host("b", cpu=busy)])
    assert choose_host(view) == "b"  # every host with room is busy: the operator's request still goes through
    view = _view([], [_host("a", cpu=busy), _host("b", cpu=busy + 5), _host("c", memory=95.0), _host("d", cpu=20.0)])
    assert choose_host(view) == "d"
    view = _view([_queue("q", {"x1": "a"})], [_host("a", 1)])
    assert choose_host(view) is None and explain_no_host(view) == "a: full (1/1)"


def test_a_host_without_exchange_slots_is_never_chosen():
    assert choose_host(_view([], [_host("a", 0, cpu=0.0)])) is None
    assert choose_host(_view([], [HostView("a")])) is None
    assert choose_host(_view([], [_host("a", 0, cpu=0.0), _host("z", 1, cpu=89.0)])) == "z"


def test_without_hosts_nothing_is_chosen_and_the_reason_says_so():
    assert choose_host(_view([], [])) is None
    assert explain_no_host(_view([], [])) == "no host manager is registered"


def test_excluded_hosts_are_neither_chosen_nor_explained():
    q = _queue("q", {"x1": "a"})
    view = _view([q], [_host("a"), _host("b", 1, cpu=99.0)])
    assert choose_host(view, q, exclude={"a"}) is None
    assert explain_no_host(view, q, exclude={"a"}) == "b: CPU 99% > 90%"


# =========================================================================== room on a named host


def test_room_counts_the_host_maximum_over_every_queue():
    view = _view([_queue("other", {"x1": "a", "x2": "a"})], [_host("a", 4)])
    placer = Placer(view)
    assert placer.room(view.hosts["a"], None, 2) == ""
    assert placer.room(view.hosts["a"], None, 5) == "has room for 2 of the 5 exchanges asked (2/4 placed)"
    placer.place("other", "a")
    placer.place("other", "a")
    assert placer.room(view.hosts["a"], None, 1) == "full (4/4)"


def test_room_for_one_more_of_a_queue_counts_its_per_host_maximum_but_not_cpu_or_memory():
    q = _queue("q", {"x1": "a", "x2": "a"}, max_exchanges_per_host=2, host_cpu_percent=10)
    view = _view([q], [_host("a", 8, cpu=99.0), _host("b", 8, cpu=99.0)])
    placer = Placer(view)
    assert placer.room(view.hosts["a"], q) == "holds 2 of q's exchanges (max_exchanges_per_host 2)"
    assert placer.room(view.hosts["b"], q) == ""  # busy, but room: an explicit placement goes through
    assert placer.refusal(view.hosts["b"], q) == "CPU 99% > 10%"  # an automatic one does not


def test_a_new_queue_of_several_exchanges_is_spread_over_the_hosts_with_room():
    hosts = [_host("a", 4), _host("b", 4), _host("c", 4, cpus=2.0)]
    assert Placer(_view([], hosts)).spread("q", 3) == ["c", "a", "b"]  # the most headroom first
    assert Placer(_view([], hosts)).spread("q", 5) == ["c", "a", "b", "c", "a"]
    view = _view([_queue("other", {"x1": "a", "x2": "a", "x3": "b"})], [_host("a", 4), _host("b", 4)])
    placer = Placer(view)
    assert placer.spread("q", 4) == ["b", "a", "b", "a"]  # the most free slots first
    assert placer.spread("q", 1) == ["b"]  # counted: b has the one free slot left
    assert placer.spread("q", 1) is None
    assert Placer(view).spread("q", 6) is None
    assert Placer(view).slots() == "5 free in all (a: 2/4 placed; b: 1/4 placed)"


def test_a_new_queue_goes_to_hosts_within_the_default_limits_before_it_is_spread_further():
    hosts = [_host("a", cpu=99.0), _host("b", cpu=10.0, cpus=0.5), _host("c", cpu=10.0, cpus=0.5)]
    assert Placer(_view([], hosts)).spread("q", 3) == ["b", "c", "b"]
    assert Placer(_view([], hosts[:1])).spread("q", 2) == ["a", "a"]  # a busy cluster still takes it


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
