"""gcm._placement and gcm._view: where exchanges go, when a queue is ready, what the broadcast says (pure)."""

from __future__ import annotations

import pytest

from gcm._placement import choose_host
from gcm._view import HostView, QueueView, View, broadcast_docs
from roq.management import broadcast_frames, parse_broadcast


def _host(address: str, max_exchanges: int = 4, cpu: float = 10.0, **extra) -> HostView:
    return HostView(address, {"max_exchanges": max_exchanges,
                              "kpis": {"cpu_percent": cpu, "memory_percent": 5.0, "net_bytes_per_s": 0.0}, **extra})


def _queue(name: str, placement: dict[str, str], state: str = "running", host: str = "h:1",
           monitor: dict | None = None, exchanges: dict | None = None) -> QueueView:
    return QueueView(name=name, state=state, host=host, placement=placement, next_exchange=len(placement) + 1,
                     version=0, monitor=monitor, exchanges=exchanges or {})


def _view(queues: list[QueueView], hosts: list[HostView]) -> View:
    return View({q.name: q for q in queues}, {h.address: h for h in hosts})


def test_host_with_most_free_slots_wins_over_lower_cpu():
    view = _view([_queue("q", {"x1": "a:1", "x2": "a:1", "x3": "a:1"})], [_host("a:1", 4, cpu=1.0), _host("b:1", 2, cpu=90.0)])
    assert choose_host(view) == "b:1"


def test_tie_on_free_slots_goes_to_lower_cpu():
    view = _view([], [_host("a:1", cpu=50.0), _host("b:1", cpu=10.0)])
    assert choose_host(view) == "b:1"


def test_tie_on_free_slots_and_cpu_goes_to_lower_address():
    view = _view([], [_host("c:1"), _host("a:1"), _host("b:1")])
    assert choose_host(view) == "a:1"


def test_full_host_is_skipped():
    view = _view([_queue("q", {"x1": "a:1", "x2": "a:1"})], [_host("a:1", 2, cpu=0.0), _host("b:1", 1, cpu=89.0)])
    assert choose_host(view) == "b:1"


def test_excluded_host_is_skipped():
    view = _view([], [_host("a:1", 8), _host("b:1", 1)])
    assert choose_host(view, exclude=frozenset({"a:1"})) == "b:1"


def test_no_host_fits_gives_none():
    view = _view([_queue("q", {"x1": "a:1", "x2": "b:1"})], [_host("a:1", 1), _host("b:1", 1)])
    assert choose_host(view) is None
    assert choose_host(_view([], [])) is None
    assert choose_host(_view([], [_host("a:1")]), exclude=frozenset({"a:1"})) is None


def test_host_with_no_exchange_slots_is_never_chosen():
    assert choose_host(_view([], [_host("a:1", 0, cpu=0.0)])) is None
    assert choose_host(_view([], [HostView("a:1", {})])) is None
    assert choose_host(_view([], [_host("a:1", 0, cpu=0.0), _host("z:1", 1, cpu=89.0)])) == "z:1"


def test_slots_of_a_removing_queue_are_free_for_placement():
    view = _view([_queue("old", {"x1": "a:1"}, state="removing")], [_host("a:1", 1)])
    assert choose_host(view) == "a:1"


def test_assigned_counts_placements_of_queues_not_being_removed():
    view = _view(
        [
            _queue("q1", {"x1": "a:1", "x2": "b:1", "x3": "a:1"}),
            _queue("q2", {"x1": "a:1"}, state="stopped"),
            _queue("q3", {"x1": "a:1", "x2": "c:1"}, state="removing"),
        ],
        [],
    )
    assert view.assigned() == {"a:1": 3, "b:1": 1}


def test_queue_is_ready_when_running_with_monitor_and_every_placed_exchange():
    live = {"x1": {"host": "a:1"}, "x2": {"host": "b:1"}}
    assert _queue("q", {"x1": "a:1", "x2": "b:1"}, monitor={"endpoint": "tcp://a:1"}, exchanges=live).ready


def test_an_extra_live_exchange_does_not_stop_readiness():
    live = {"x1": {}, "x9": {}}
    assert _queue("q", {"x1": "a:1"}, monitor={}, exchanges=live).ready


@pytest.mark.parametrize(
    "state, monitor, placement, exchanges",
    [
        ("running", {"endpoint": "e"}, {"x1": "a:1", "x2": "a:1"}, {"x1": {}}),
        ("running", None, {"x1": "a:1"}, {"x1": {}}),
        ("stopped", {"endpoint": "e"}, {"x1": "a:1"}, {"x1": {}}),
        ("removing", {"endpoint": "e"}, {"x1": "a:1"}, {"x1": {}}),
        ("running", {"endpoint": "e"}, {}, {"x1": {}}),
    ],
)
def test_queue_is_not_ready_when_anything_is_missing(state, monitor, placement, exchanges):
    assert not _queue("q", placement, state=state, monitor=monitor, exchanges=exchanges).ready


def test_queue_is_quiet_only_without_monitor_and_exchanges():
    assert _queue("q", {"x1": "a:1"}, state="stopped").quiet
    assert not _queue("q", {}, monitor={"endpoint": "e"}).quiet
    assert not _queue("q", {}, exchanges={"x1": {}}).quiet


def test_broadcast_docs_are_sorted_and_shaped():
    view = _view(
        [
            _queue("zeta", {"x1": "b:1"}, state="stopped", host="b:1"),
            _queue("alpha", {"x1": "a:1", "x2": "b:1"}, host="a:1", monitor={"endpoint": "tcp://a:7"},
                   exchanges={"x2": {"name": "x2-1", "host": "b:1", "frontend": "tcp://b:8", "backend": "tcp://b:9"},
                              "x1": {"host": "a:1"}}),
        ],
        [_host("b:1", 3, cpu=20.0, endpoint="tcp://b:1", exchanges=2, monitors=1), _host("a:1", 5)],
    )
    queues, hosts = broadcast_docs(view)
    assert [q["Name"] for q in queues] == ["alpha", "zeta"]
    assert all(set(q) == {"Name", "Host", "State", "Running", "Monitor", "Exchanges"} for q in queues)
    alpha, zeta = queues
    assert (alpha["Host"], alpha["State"], alpha["Running"], alpha["Monitor"]) == ("a:1", "running", True, "tcp://a:7")
    assert alpha["Exchanges"] == [
        {"Id": "x1", "Name": "x1", "Host": "a:1", "Frontend": "", "Backend": ""},
        {"Id": "x2", "Name": "x2-1", "Host": "b:1", "Frontend": "tcp://b:8", "Backend": "tcp://b:9"},
    ]
    assert (zeta["Running"], zeta["Monitor"], zeta["Exchanges"]) == (False, "", [])

    assert [h["Address"] for h in hosts] == ["a:1", "b:1"]
    assert all(
        set(h) == {"Address", "Endpoint", "MaxExchanges", "AssignedExchanges", "Exchanges", "Monitors",
                   "CpuPercent", "MemoryPercent", "NetBytesPerS"}
        for h in hosts
    )
    a, b = hosts
    assert (a["MaxExchanges"], a["AssignedExchanges"], a["Endpoint"]) == (5, 1, "")
    assert (b["MaxExchanges"], b["AssignedExchanges"], b["Endpoint"], b["Exchanges"], b["Monitors"]) == (3, 2, "tcp://b:1", 2, 1)
    assert (b["CpuPercent"], b["MemoryPercent"], b["NetBytesPerS"]) == (20.0, 5.0, 0.0)


def test_broadcast_docs_survive_the_broadcast_frames():
    view = _view([_queue("q", {"x1": "a:1"}, exchanges={"x1": {"host": "a:1"}})], [_host("a:1")])
    queues, hosts = broadcast_docs(view)
    assert parse_broadcast(broadcast_frames(queues, hosts)) == (queues, hosts)
