"""gcm's View: when a queue is ready or quiet, what the GCM says of queues and hosts, names checked (pure)."""

from __future__ import annotations

import pytest

from gcm._view import HostView, QueueView, View
from roq.wire.documents import ExchangeDoc, HostDoc, HostKpis, MonitorDoc, QueueDoc
from roq.errors import BadRequestError, NotFoundError
from roq.wire.management import HostSummary, QueueSummary, broadcast_frames, parse_broadcast


def _host(address: str, max_exchanges: int = 4, cpu: float = 10.0, **extra) -> HostView:
    kpis = HostKpis(cpu_percent=cpu, memory_percent=5.0, net_bytes_per_s=0.0)
    return HostView(address, HostDoc(address=address, max_exchanges=max_exchanges, kpis=kpis, **extra))


def _queue(name: str, placement: dict[str, str], state: str = "running", host: str = "h:1",
           monitor: MonitorDoc | None = None, exchanges: dict | None = None) -> QueueView:
    doc = QueueDoc(state=state, host=host, placement=placement, next_exchange=len(placement) + 1)
    return QueueView(name, doc, version=0, monitor=monitor, exchanges=exchanges or {})


def _view(queues: list[QueueView], hosts: list[HostView]) -> View:
    return View({q.name: q for q in queues}, {h.address: h for h in hosts})


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


def test_assignments_read_are_known_by_host_queue_and_slot():
    view = View(assignments={"a": frozenset({"q@monitor", "q@x1"})})
    assert view.has_assignment("a", "q", "monitor") and view.has_assignment("a", "q", "x1")
    assert not view.has_assignment("a", "q", "x2") and not view.has_assignment("b", "q", "x1")


def test_queue_is_ready_when_running_with_monitor_and_every_placed_exchange():
    live = {"x1": ExchangeDoc(host="a:1"), "x2": ExchangeDoc(host="b:1")}
    assert _queue("q", {"x1": "a:1", "x2": "b:1"}, monitor=MonitorDoc(endpoint="tcp://a:1"), exchanges=live).ready


def test_an_extra_live_exchange_does_not_stop_readiness():
    live = {"x1": ExchangeDoc(), "x9": ExchangeDoc()}
    assert _queue("q", {"x1": "a:1"}, monitor=MonitorDoc(), exchanges=live).ready


@pytest.mark.parametrize(
    "state, monitor, placement, exchanges",
    [
        ("running", MonitorDoc(endpoint="e"), {"x1": "a:1", "x2": "a:1"}, {"x1": ExchangeDoc()}),
        ("running", None, {"x1": "a:1"}, {"x1": ExchangeDoc()}),
        ("stopped", MonitorDoc(endpoint="e"), {"x1": "a:1"}, {"x1": ExchangeDoc()}),
        ("removing", MonitorDoc(endpoint="e"), {"x1": "a:1"}, {"x1": ExchangeDoc()}),
        ("running", MonitorDoc(endpoint="e"), {}, {"x1": ExchangeDoc()}),
    ],
)
def test_queue_is_not_ready_when_anything_is_missing(state, monitor, placement, exchanges):
    assert not _queue("q", placement, state=state, monitor=monitor, exchanges=exchanges).ready


def test_a_process_registered_by_another_host_than_its_placement_is_not_ready():
    q = _queue("q", {"x1": "b"}, host="a", monitor=MonitorDoc(endpoint="tcp://a:1", host="a"),
               exchanges={"x1": ExchangeDoc(host="c")})
    assert not q.ready
    q = _queue("q", {"x1": "b"}, host="a", monitor=MonitorDoc(endpoint="tcp://a:1", host="a"),
               exchanges={"x1": ExchangeDoc(host="b")})
    assert q.ready
    q = _queue("q", {"x1": "b"}, host="a", monitor=MonitorDoc(endpoint="tcp://c:1", host="c"),
               exchanges={"x1": ExchangeDoc(host="b")})
    assert not q.ready  # a monitor left on the host it was moved off


def test_queue_is_quiet_only_without_monitor_and_exchanges():
    assert _queue("q", {"x1": "a:1"}, state="stopped").quiet
    assert not _queue("q", {}, monitor=MonitorDoc(endpoint="e")).quiet
    assert not _queue("q", {}, exchanges={"x1": ExchangeDoc()}).quiet


def test_rules_in_force_are_the_defaults_then_thresholds_then_the_operators():
    q = QueueView("q", explicit_rules={"cooldown_s": 3.0, "not_a_rule": 1},
                  thresholds={"cooldown_s": 7.0, "exchange_records_per_s": 9000.0})
    assert q.rules["cooldown_s"] == 3.0 and q.rules["exchange_records_per_s"] == 9000.0
    assert "not_a_rule" not in q.rules


def test_summaries_are_sorted_and_shaped():
    view = _view(
        [
            _queue("zeta", {"x1": "b:1"}, state="stopped", host="b:1"),
            _queue("alpha", {"x1": "a:1", "x2": "b:1"}, host="a:1", monitor=MonitorDoc(endpoint="tcp://a:7"),
                   exchanges={"x2": ExchangeDoc(name="x2-1", host="b:1", frontend="tcp://b:8", backend="tcp://b:9"),
                              "x1": ExchangeDoc(host="a:1")}),
        ],
        [_host("b:1", 3, cpu=20.0, endpoint="tcp://b:1", exchanges=2, monitors=1), _host("a:1", 5)],
    )
    queues, hosts = view.summaries()
    assert all(isinstance(q, QueueSummary) for q in queues) and all(isinstance(h, HostSummary) for h in hosts)
    queues, hosts = [q.document() for q in queues], [h.document() for h in hosts]
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
                   "Cpus", "CpuPercent", "MemoryPercent", "NetBytesPerS", "LinkBytesPerS", "NetPercent"}
        for h in hosts
    )
    a, b = hosts
    assert (a["MaxExchanges"], a["AssignedExchanges"], a["Endpoint"]) == (5, 1, "")
    assert (b["MaxExchanges"], b["AssignedExchanges"], b["Endpoint"], b["Exchanges"], b["Monitors"]) == (3, 2, "tcp://b:1", 2, 1)
    assert (b["CpuPercent"], b["MemoryPercent"], b["NetBytesPerS"]) == (20.0, 5.0, 0.0)


def test_summaries_survive_the_broadcast_frames():
    view = _view([_queue("q", {"x1": "a:1"}, exchanges={"x1": ExchangeDoc(host="a:1")})], [_host("a:1")])
    queues, hosts = view.summaries()
    got_queues, got_hosts = parse_broadcast(broadcast_frames(queues, hosts))
    assert [QueueSummary.read(q) for q in got_queues] == queues
    assert [HostSummary.read(h) for h in got_hosts] == hosts


def test_a_queue_is_found_by_a_checked_name():
    view = _view([_queue("q", {"x1": "a"})], [])
    assert view.queue("q").name == "q" and view.find("nope") is None
    with pytest.raises(NotFoundError, match="no queue named 'nope'"):
        view.queue("nope")
    with pytest.raises(BadRequestError, match="bad queue name"):
        view.queue("../etc")


def test_a_huge_name_is_refused_without_being_quoted_whole():
    with pytest.raises(BadRequestError) as err:
        View().find("x" * 1_000_000)
    assert len(str(err.value)) < 200 and "1000000 characters" in str(err.value)


class _Nodes:
    """The reads of a session over a dict of host documents (path -> doc), counting them."""

    def __init__(self, docs: dict[str, HostDoc]) -> None:
        self.docs = docs
        self.reads: list[str] = []

    def read(self, path, decode, *, watch=False):
        self.reads.append(path)
        doc = self.docs.get(path)
        return (doc, 3) if doc is not None else (None, -1)


def test_a_view_with_hosts_read_again_reads_only_the_hosts_named_and_keeps_the_rest_of_the_view():
    view = _view([_queue("q", {"x1": "a"})], [_host("a", cpu=10.0), _host("b", cpu=20.0)])
    busier = HostDoc(address="a", max_exchanges=4, kpis=HostKpis(cpu_percent=70.0, memory_percent=5.0,
                                                                 net_bytes_per_s=0.0))
    nodes = _Nodes({view.paths.host("a"): busier})
    after = view.with_hosts(nodes, ["a"])
    assert after is not None and nodes.reads == [view.paths.host("a")]
    assert after.hosts["a"].cpu_percent == 70.0 and after.hosts["b"] is view.hosts["b"]
    assert after.queues is view.queues and view.hosts["a"].cpu_percent == 10.0  # (the old view unchanged)


def test_a_view_with_hosts_read_again_is_none_when_a_host_is_no_longer_registered():
    view = _view([], [_host("a"), _host("b")])
    assert view.with_hosts(_Nodes({view.paths.host("a"): view.hosts["a"].doc}), ["a", "b"]) is None
