"""gcm's host loss: the clocks of missing hosts, and the moves off lost ones as transactions (pure)."""

from __future__ import annotations

from gcm._hostloss import HostLoss, LostHosts
from gcm._view import HostView, QueueView, View
from roq.wire.documents import HostDoc, QueueDoc
from roq.zk import Create, Delete, Paths


def _host(address: str, max_exchanges: int = 4) -> HostView:
    return HostView(address, HostDoc(address=address, max_exchanges=max_exchanges))


def _queue(name: str, placement: dict[str, str], *, host: str, state: str = "running") -> QueueView:
    return QueueView(name, QueueDoc(state=state, host=host, placement=placement, next_exchange=len(placement) + 1),
                     version=9)


def _view(queues: list[QueueView], hosts: list[HostView], assignments: dict[str, set[str]] | None = None) -> View:
    return View({q.name: q for q in queues}, {h.address: h for h in hosts},
                {h: frozenset(names) for h, names in (assignments or {}).items()}, Paths("/roq"))


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
    lost.update(_view([_queue("q", {"x1": "gone"}, host="gone", state="stopped")], []), now=0.0)
    assert lost.lost(10.0) == set()


def test_nothing_moves_before_the_grace():
    loss = HostLoss(grace=2.0)
    view = _view([_queue("q", {"x1": "a", "x2": "dead"}, host="a")], [_host("a")])
    loss.update(view, 10.0)
    assert loss.act(view, 11.9) == [] and loss.next_deadline(11.0) == 12.0


def test_a_queues_slots_and_monitor_move_in_one_transaction_with_the_assignments_that_exist():
    loss = HostLoss(grace=2.0)
    q = _queue("q", {"x1": "a", "x2": "dead", "x3": "dead"}, host="dead")
    view = _view([q], [_host("a"), _host("b")], {"dead": {"q@monitor", "q@x2"}, "b": {"q@x3"}})
    loss.update(view, 10.0)
    (outcome,) = loss.act(view, 12.0)
    doc = QueueDoc.decode(outcome.ops[0].data)
    assert outcome.ops[0].version == 9 and doc.host == "a" and doc.placement == {"x1": "a", "x2": "b", "x3": "a"}
    assert set(outcome.ops[1:]) == {Delete("/roq/assignments/dead/q@monitor"), Delete("/roq/assignments/dead/q@x2"),
                                    Create("/roq/assignments/b/q@x2"), Create("/roq/assignments/a/q@x3"),
                                    Create("/roq/assignments/a/q@monitor")}
    assert outcome.ensure == ("/roq/assignments/a", "/roq/assignments/b")
    replaced, moved = outcome.events
    assert replaced.kind == "exchanges_replaced" and replaced.fields["moves"] == "x2@b,x3@a"
    assert replaced.text == "host dead lost (unregistered for over 2s): moved x2 to b, x3 to a; 3 exchange(s) placed"
    assert moved.kind == "monitor_moved" and moved.fields == {"lost_host": "dead", "host": "a"}
    assert loss.act(view, 12.5) == [] and loss.next_deadline(12.5) == 13.0  # at most once a second per queue
    assert len(loss.act(view, 13.0)) == 1


def test_a_slot_no_host_can_take_is_reported_once_until_it_moves():
    loss = HostLoss(grace=1.0)
    q = _queue("q", {"x1": "a", "x2": "dead"}, host="a")
    view = _view([q, _queue("o", {"x1": "a"}, host="a")], [_host("a", 2)])
    loss.update(view, 0.0)
    (blocked,) = loss.act(view, 1.0)
    assert blocked.ops == () and [e.kind for e in blocked.events] == ["replacement_blocked"]
    assert blocked.events[0].fields == {"slot": "x2", "lost_host": "dead", "why": "a: full (2/2)"}
    assert loss.act(view, 2.0) == []  # still stuck: not reported again
    room = _view([q, _queue("o", {"x1": "a"}, host="a")], [_host("a", 2), _host("new")])
    (moved,) = loss.act(room, 3.0)
    assert moved.ops and [e.kind for e in moved.events] == ["exchanges_replaced"]


def test_a_new_term_starts_the_clocks_again():
    loss = HostLoss(grace=1.0)
    view = _view([_queue("q", {"x1": "dead"}, host="a")], [_host("a")])
    loss.update(view, 0.0)
    loss.reset()
    loss.update(view, 5.0)
    assert loss.act(view, 5.5) == [] and len(loss.act(view, 6.0)) == 1


def test_a_durable_queues_journal_on_a_lost_host_starts_anew_beside_the_monitor():
    loss = HostLoss(grace=1.0)
    doc = QueueDoc(state="running", host="a", placement={"x1": "a"}, next_exchange=2, journal_host="dead",
                   journal_generation=1)
    q = QueueView("q", doc, version=4, explicit_rules={"durability": "always"})
    view = _view([q], [_host("a")], {"dead": {"q@journal"}, "a": {"q@monitor", "q@x1"}})
    loss.update(view, 0.0)
    assert loss.act(view, 0.9) == []
    (outcome,) = loss.act(view, 1.0)
    moved = QueueDoc.decode(outcome.ops[0].data)
    assert moved.journal_host == "a" and moved.host == "a" and moved.placement == {"x1": "a"}
    assert moved.journal_generation == 2  # the queue's journal of the next generation, in the same transaction
    assert set(outcome.ops[1:]) == {Delete("/roq/assignments/dead/q@journal"), Create("/roq/assignments/a/q@journal")}
    assert outcome.ensure == ("/roq/assignments/a",)
    (event,) = outcome.events
    assert event.kind == "journal_moved" and event.fields == {"lost_host": "dead", "host": "a"}
    # not durable: its journal's old host is nobody's concern
    plain = QueueView("q", doc, version=4)
    loss = HostLoss(grace=1.0)
    loss.update(_view([plain], [_host("a")]), 0.0)
    assert loss.act(_view([plain], [_host("a")]), 5.0) == []


def test_a_replicated_journal_on_a_lost_host_is_not_moved_its_replicas_elect_another_leader():
    loss = HostLoss(grace=1.0)
    doc = QueueDoc(state="running", host="a", placement={"x1": "a"}, next_exchange=2, journal_host="dead",
                   journal_replicas=["dead", "a", "b"])
    q = QueueView("q", doc, version=4, explicit_rules={"durability": "always", "replicas": 3})
    view = _view([q], [_host("a"), _host("b")], {"dead": {"q@journal"}, "a": {"q@monitor", "q@x1", "q@journal"},
                                                 "b": {"q@journal"}})
    loss.update(view, 0.0)
    assert loss.act(view, 5.0) == []
