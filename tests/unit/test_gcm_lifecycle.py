"""gcm's queue lifecycle decisions (create, stop, start, remove, create exchange, the end of a removal): what
each writes, records and waits for, on views built here; nothing touches ZooKeeper."""

from __future__ import annotations

import pytest

from gcm._lifecycle import create, create_exchange, finish_removals, remove, start, stop
from gcm._outcome import READY, REMOVED, STOPPED
from gcm._view import HostView, QueueView, View
from roq.wire import management as m
from roq.wire.control import Reply
from roq.wire.documents import EventsDoc, ExchangeDoc, HostDoc, MonitorDoc, QueueDoc, RulesDoc
from roq.errors import BadRequestError, NotFoundError, UnavailableError
from roq.zk import Create, Delete, Paths, SetData

P = Paths("/roq")
NOW = 1_767_225_600.0


def _host(address: str, max_exchanges: int = 4) -> HostView:
    return HostView(address, HostDoc(address=address, max_exchanges=max_exchanges))


def _queue(name: str, placement: dict[str, str], *, host: str = "a", state: str = "running", version: int = 3,
           monitor: MonitorDoc | None = None, exchanges: dict | None = None, **rules) -> QueueView:
    doc = QueueDoc(state=state, host=host, placement=placement, next_exchange=len(placement) + 1, created=5.0)
    return QueueView(name, doc, version=version, monitor=monitor, exchanges=exchanges or {}, explicit_rules=rules)


def _view(queues: list[QueueView], hosts: list[HostView], assignments: dict[str, set[str]] | None = None) -> View:
    return View({q.name: q for q in queues}, {h.address: h for h in hosts},
                {h: frozenset(names) for h, names in (assignments or {}).items()}, P)


def _ready(q: QueueView) -> QueueView:
    """``q`` with its monitor and every placed exchange registered by their hosts."""
    return QueueView(q.name, q.doc, q.version, MonitorDoc(endpoint="tcp://m:1", host=q.host),
                     {x: ExchangeDoc(name=f"{x}-0001", host=h) for x, h in q.placement.items()})


# =========================================================================== create


def test_create_on_a_host_is_one_transaction_with_its_rules_and_assignments():
    out = create(_view([], [_host("a")]), m.CreateQueue(QName="q", Host="a", Exchanges=2), NOW)
    queue_doc = QueueDoc(state="running", host="a", placement={"x1": "a", "x2": "a"}, next_exchange=3, created=NOW)
    assert out.ops == (
        Create("/roq/queues/q", queue_doc.encode()),
        Create("/roq/queues/q/rules", RulesDoc({"min_exchanges": 2}).encode()),  # what was asked for is kept
        Create("/roq/queues/q/thresholds", b"{}"),
        Create("/roq/queues/q/exchanges"),
        Create("/roq/queues/q/events"),
        Create("/roq/queues/q/events/gcm", EventsDoc().encode()),
        Create("/roq/assignments/a/q@monitor"),
        Create("/roq/assignments/a/q@x1"),
        Create("/roq/assignments/a/q@x2"),
    )
    assert out.ensure == ("/roq/assignments/a",) and out.reply is None
    assert [(e.kind, e.text, e.fields) for e in out.events] == [
        ("queue_created", "created on a with 2 exchange(s)", {"host": "a", "exchanges": 2})]
    assert (out.wait.queue, out.wait.until) == ("q", READY)
    q = QueueView("q", queue_doc, 0)
    assert out.wait.done(q) is None  # nothing registered yet
    reply = out.wait.done(_ready(q))
    assert reply.ok and reply.comment == "created" and reply.data["Name"] == "q" and len(reply.data["Exchanges"]) == 2


def test_a_queue_of_more_exchanges_than_the_default_maximum_gets_both_rules():
    out = create(_view([], [_host("a", 8)]), m.CreateQueue(QName="q", Host="a", Exchanges=6), NOW)
    assert out.ops[1] == Create("/roq/queues/q/rules", RulesDoc({"min_exchanges": 6, "max_exchanges": 6}).encode())
    one = create(_view([], [_host("a")]), m.CreateQueue(QName="q", Host="a"), NOW)
    assert one.ops[1] == Create("/roq/queues/q/rules", b"{}")  # defaults and thresholds stay live


def test_creating_a_queue_that_exists_waits_for_it_and_writes_nothing():
    q = _queue("q", {"x1": "a"})
    view = _view([q], [_host("a")])
    out = create(view, m.CreateQueue(QName="q", Host="a"), NOW)
    assert out.ops == () and out.events == () and out.wait.done(q) is None
    assert out.wait.done(_ready(q)).comment == "already exists"
    stopped = create(_view([_queue("q", {"x1": "a"}, state="stopped")], []), m.CreateQueueAnywhere(QName="q"), NOW)
    assert stopped.ops == () and stopped.reply.comment == "queue 'q' already exists and is stopped"
    with pytest.raises(UnavailableError, match="being removed"):
        create(_view([_queue("q", {}, state="removing")], [_host("a")]), m.CreateQueue(QName="q", Host="a"), NOW)


@pytest.mark.parametrize("count", [0, -3, 65, 10**6])
def test_a_count_out_of_range_is_a_bad_request(count):
    with pytest.raises(BadRequestError, match="Exchanges must be between 1 and 64"):
        create(_view([], [_host("a")]), m.CreateQueue(QName="q", Host="a", Exchanges=count), NOW)


def test_creating_on_an_unknown_host_names_the_known_ones():
    with pytest.raises(NotFoundError, match=r"no host manager registered at '10.1.2.3' \(hosts: a, b\)"):
        create(_view([], [_host("a"), _host("b")]), m.CreateQueue(QName="q", Host="10.1.2.3"), NOW)


def test_an_explicit_host_cannot_take_more_than_its_maximum():
    other = _queue("other", {"x1": "h", "x2": "h"})
    view = _view([other], [_host("h", 4)])
    with pytest.raises(UnavailableError) as err:
        create(view, m.CreateQueue(QName="q", Host="h", Exchanges=3), NOW)
    assert str(err.value) == "queue 'q' not created: h: has room for 2 of the 3 exchanges asked (2/4 placed)"
    assert create(view, m.CreateQueue(QName="q", Host="h", Exchanges=2), NOW).ops  # exactly what fits
    full = _view([_queue("other", {f"x{i}": "h" for i in range(1, 5)})], [_host("h", 4)])
    with pytest.raises(UnavailableError, match=r"h: full \(4/4\)"):
        create(full, m.CreateQueue(QName="q", Host="h"), NOW)
    with pytest.raises(UnavailableError, match=r"h: full \(0/0\)"):
        create(_view([], [_host("h", 0)]), m.CreateQueue(QName="q", Host="h"), NOW)


def test_a_queue_created_anywhere_is_spread_over_hosts_its_monitor_beside_the_first_exchange():
    view = _view([_queue("other", {"x1": "a", "x2": "a", "x3": "a"})], [_host("a", 8), _host("b", 4)])
    out = create(view, m.CreateQueueAnywhere(QName="q", Exchanges=4), NOW)
    assigned = {op.path for op in out.ops if op.path.startswith("/roq/assignments/")}
    assert assigned == {"/roq/assignments/a/q@monitor", "/roq/assignments/a/q@x1", "/roq/assignments/b/q@x2",
                        "/roq/assignments/a/q@x3", "/roq/assignments/b/q@x4"}
    assert set(out.ensure) == {"/roq/assignments/a", "/roq/assignments/b"}
    assert out.events[0].text == "created on x1@a, x2@b, x3@a, x4@b with 4 exchange(s)"
    with pytest.raises(UnavailableError, match=r"no room for a new queue of 10 exchange\(s\): exchange slots 9 free "
                                               r"in all \(a: 3/8 placed; b: 0/4 placed\)"):
        create(view, m.CreateQueueAnywhere(QName="q", Exchanges=10), NOW)


@pytest.mark.parametrize("name", ["", "../etc", "a b", "x" * 65, "x" * 2_000_000])
def test_bad_queue_names_are_refused_briefly(name):
    with pytest.raises(BadRequestError) as err:
        create(_view([], [_host("a")]), m.CreateQueue(QName=name, Host="a"), NOW)
    assert len(str(err.value)) < 300


# =========================================================================== stop and start


def test_stop_writes_the_state_and_deletes_only_the_assignments_that_exist():
    q = _queue("q", {"x1": "a", "x2": "b"})
    view = _view([q], [_host("a"), _host("b")], {"a": {"q@monitor", "q@x1"}, "b": set()})
    out = stop(view, m.StopQueue(QName="q"), NOW)
    stopped = QueueDoc(state="stopped", host="a", placement={"x1": "a", "x2": "b"}, next_exchange=3, created=5.0)
    assert out.ops == (SetData("/roq/queues/q", stopped.encode(), 3), Delete("/roq/assignments/a/q@monitor"),
                       Delete("/roq/assignments/a/q@x1"))
    assert [e.kind for e in out.events] == ["queue_stopped"] and out.wait.until == STOPPED
    assert out.wait.done(_ready(q)) is None
    assert out.wait.done(QueueView("q", stopped)) == Reply(comment="stopped", data={"State": "stopped"})


def test_stopping_a_stopped_queue_only_waits_and_a_removing_one_is_refused():
    out = stop(_view([_queue("q", {"x1": "a"}, state="stopped")], []), m.StopQueue(QName="q"), NOW)
    assert out.ops == () and out.events == () and out.wait is not None
    with pytest.raises(UnavailableError, match="being removed"):
        stop(_view([_queue("q", {}, state="removing")], []), m.StopQueue(QName="q"), NOW)
    with pytest.raises(NotFoundError):
        stop(_view([], []), m.StopQueue(QName="q"), NOW)


def test_start_brings_the_slots_back_where_they_were_or_off_hosts_that_are_gone():
    q = _queue("q", {"x1": "a", "x2": "gone"}, host="gone", state="stopped")
    out = start(_view([q], [_host("a"), _host("b")]), m.StartQueue(QName="q"), NOW)
    doc = QueueDoc.decode(out.ops[0].data)
    assert (doc.state, doc.host, doc.placement) == ("running", "a", {"x1": "a", "x2": "b"})
    assert out.ops[1:] == (Create("/roq/assignments/a/q@monitor"), Create("/roq/assignments/a/q@x1"),
                           Create("/roq/assignments/b/q@x2"))
    assert out.ensure == ("/roq/assignments/a", "/roq/assignments/b") and out.events[0].kind == "queue_started"
    with pytest.raises(UnavailableError, match="no live host"):
        start(_view([q], []), m.StartQueue(QName="q"), NOW)
    running = start(_view([_queue("q", {"x1": "a"})], [_host("a")]), m.StartQueue(QName="q"), NOW)
    assert running.ops == () and running.wait.until == READY


# =========================================================================== remove


def test_remove_marks_the_queue_and_answers_once_it_is_gone():
    q = _queue("q", {"x1": "a"})
    out = remove(_view([q], [_host("a")], {"a": {"q@x1"}}), m.RemoveQueue(QName="q"), NOW)
    doc = QueueDoc.decode(out.ops[0].data)
    assert (doc.state, doc.removing_since) == ("removing", NOW) and out.ops[1:] == (Delete("/roq/assignments/a/q@x1"),)
    assert out.wait.until == REMOVED and out.wait.done(q) is None and out.wait.done(None).comment == "removed"
    again = remove(_view([QueueView("q", doc)], []), m.RemoveQueue(QName="q"), NOW)
    assert again.ops == () and again.wait is not None


def test_a_removed_queue_goes_once_quiet_or_after_the_stop_timeout():
    quiet = QueueView("quiet", QueueDoc(state="removing", removing_since=NOW))
    busy = QueueView("busy", QueueDoc(state="removing", removing_since=NOW), monitor=MonitorDoc())
    view = _view([quiet, busy, _queue("kept", {})], [])
    assert [o.purge for o in finish_removals(view, NOW + 1, 15.0)] == [("/roq/queues/quiet",)]
    assert sorted(o.purge for o in finish_removals(view, NOW + 16, 15.0)) == [("/roq/queues/busy",), ("/roq/queues/quiet",)]


# =========================================================================== create exchange


def test_create_exchange_takes_the_next_slot_and_answers_once_it_runs():
    q = _queue("q", {"x1": "a", "x3": "a"})
    out = create_exchange(_view([q], [_host("a"), _host("b")]), m.CreateExchange(QName="q"), NOW)
    doc = QueueDoc.decode(out.ops[0].data)
    assert doc.placement == {"x1": "a", "x3": "a", "x4": "b"} and doc.next_exchange == 5
    assert out.ops[1:] == (Create("/roq/assignments/b/q@x4"),) and out.events[0].fields["placed"] == "x4"
    running = QueueView("q", doc, exchanges={"x4": ExchangeDoc(name="x4-00aa", host="b", frontend="tcp://b:1")})
    reply = out.wait.done(running)
    assert reply.comment == "created" and reply.data["Exchange"] == "x4" and reply.data["Host"] == "b"
    assert reply.data["name"] == "x4-00aa" and reply.data["frontend"] == "tcp://b:1"


def test_create_exchange_on_a_named_host_respects_its_maximum_and_the_queues_per_host_maximum():
    q = _queue("q", {"x1": "h", "x2": "h"}, max_exchanges_per_host=2)
    view = _view([q, _queue("o", {"x1": "full", "x2": "full"})], [_host("h", 8), _host("full", 2)])
    with pytest.raises(UnavailableError, match=r"full: full \(2/2\)"):
        create_exchange(view, m.CreateExchange(QName="q", Host="full"), NOW)
    with pytest.raises(UnavailableError, match=r"h: holds 2 of q's exchanges \(max_exchanges_per_host 2\)"):
        create_exchange(view, m.CreateExchange(QName="q", Host="h"), NOW)
    with pytest.raises(NotFoundError, match="no host manager registered at 'nope'"):
        create_exchange(view, m.CreateExchange(QName="q", Host="nope"), NOW)
    with pytest.raises(UnavailableError, match="no host can take an exchange of 'q'"):
        create_exchange(view, m.CreateExchange(QName="q"), NOW)
    with pytest.raises(UnavailableError, match="is stopped"):
        create_exchange(_view([_queue("q", {}, state="stopped")], [_host("h")]), m.CreateExchange(QName="q"), NOW)
