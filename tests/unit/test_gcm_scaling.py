"""gcm's scale-out and exchange removal: idempotent totals and slots, the rules' limits, one transaction
each (pure, on views built here)."""

from __future__ import annotations

import pytest

from gcm._scaling import remove_exchange, scale_out
from gcm._view import HostView, QueueView, View
from roq.wire import management as m
from roq.wire.documents import HostDoc, HostKpis, QueueDoc
from roq.errors import BadRequestError, NotFoundError, UnavailableError
from roq.zk import Create, Delete, Paths, SetData

NOW = 1000.0


def _host(address: str, max_exchanges: int = 4, cpu: float = 10.0) -> HostView:
    return HostView(address, HostDoc(address=address, max_exchanges=max_exchanges, kpis=HostKpis(cpu_percent=cpu)))


def _queue(name: str, placement: dict[str, str], *, state: str = "running", **rules) -> QueueView:
    doc = QueueDoc(state=state, host="a", placement=placement, next_exchange=len(placement) + 1)
    return QueueView(name, doc, version=7, explicit_rules=rules)


def _view(queues: list[QueueView], hosts: list[HostView], assignments: dict[str, set[str]] | None = None) -> View:
    return View({q.name: q for q in queues}, {h.address: h for h in hosts},
                {h: frozenset(names) for h, names in (assignments or {}).items()}, Paths("/roq"))


def _out(q: QueueView, hosts: list[HostView], wanted: int, reason: str = ""):
    return scale_out(_view([q], hosts), m.ScaleOut(QName=q.name, Exchanges=wanted, Reason=reason), NOW)


def test_scale_out_places_the_missing_exchanges_spread_in_one_transaction():
    q = _queue("q", {"x1": "a"})
    out = _out(q, [_host("a"), _host("b"), _host("c")], 3, "publishers 9 > 2 x 4")
    doc = QueueDoc.decode(out.ops[0].data)
    assert out.ops[0].version == 7 and doc.placement == {"x1": "a", "x2": "b", "x3": "c"} and doc.next_exchange == 4
    assert out.ops[1:] == (Create("/roq/assignments/b/q@x2"), Create("/roq/assignments/c/q@x3"))
    assert out.ensure == ("/roq/assignments/b", "/roq/assignments/c")
    assert out.reply.data == {"Placed": [{"Exchange": "x2", "Host": "b"}, {"Exchange": "x3", "Host": "c"}], "Exchanges": 3}
    (event,) = out.events
    assert event.kind == "exchange_placed" and event.text == (
        "scale-out to 3 exchanges (publishers 9 > 2 x 4): placed x2 on b, x3 on c; 1 -> 3 exchanges")
    assert event.fields == {"reason": "publishers 9 > 2 x 4", "hosts": "b,c", "placed": "x2,x3", "exchanges": 3,
                            "previous": 1, "wanted": 3}


def test_scale_out_places_what_fits_and_says_why_the_rest_did_not():
    out = _out(_queue("q", {"x1": "a"}), [_host("a", 1), _host("b", 1)], 3)
    assert out.reply.data["Exchanges"] == 2 and "1 more did not fit (a: full (1/1); b: full (1/1))" in out.reply.comment


def test_scale_out_beyond_max_exchanges_names_the_rule():
    with pytest.raises(BadRequestError, match=r"at most 2 exchanges \(rule max_exchanges\); 3 asked, 1 placed"):
        _out(_queue("q", {"x1": "a"}, max_exchanges=2), [_host("a")], 3)


def test_scale_out_to_what_is_placed_changes_nothing_even_above_the_maximum():
    out = _out(_queue("q", {"x1": "a", "x2": "a", "x3": "a"}, max_exchanges=2), [_host("a")], 3)
    assert out.ops == () and out.events == ()
    assert (out.reply.comment, out.reply.data) == ("already 3 placed", {"Placed": [], "Exchanges": 3})


def test_scale_out_of_a_stopped_queue_is_unavailable():
    with pytest.raises(UnavailableError, match="is stopped"):
        _out(_queue("q", {"x1": "a"}, state="stopped"), [_host("a")], 2)


def test_scale_out_without_room_says_why_for_each_host():
    with pytest.raises(UnavailableError) as err:
        _out(_queue("q", {"x1": "a"}), [_host("a", 1), _host("b", cpu=95.0)], 2)
    assert "a: full (1/1)" in str(err.value) and "b: CPU 95% > 90%" in str(err.value)


@pytest.mark.parametrize("wanted", [0, -3, -(2**63)])
def test_scale_out_to_less_than_one_is_a_bad_request(wanted):
    with pytest.raises(BadRequestError, match="at least 1"):
        _out(_queue("q", {"x1": "a"}), [_host("a")], wanted)


def test_scale_out_of_too_many_at_once_is_a_bad_request():
    with pytest.raises(BadRequestError, match="at most 64 exchanges can be added at once"):
        _out(_queue("q", {"x1": "a"}, max_exchanges=256), [_host("a", 1000)], 100)


def test_scale_out_of_an_unknown_queue_is_not_found():
    with pytest.raises(NotFoundError):
        scale_out(_view([], [_host("a")]), m.ScaleOut(QName="q", Exchanges=2), NOW)


def test_a_long_reason_is_cut_in_the_event():
    out = _out(_queue("q", {"x1": "a"}), [_host("a"), _host("b")], 2, "r" * 5000)
    assert len(out.events[0].fields["reason"]) == 200


def test_removing_a_slot_writes_the_placement_and_deletes_its_assignment():
    q = _queue("q", {"x1": "a", "x2": "b"})
    out = remove_exchange(_view([q], [], {"b": {"q@x2"}}), m.RemoveExchange(QName="q", Exchange="x2-1a2b", Reason="drained"), NOW)
    assert out.ops[0] == SetData("/roq/queues/q", QueueDoc(host="a", placement={"x1": "a"}, next_exchange=3).encode(), 7)
    assert out.ops[1:] == (Delete("/roq/assignments/b/q@x2"),)
    assert out.reply.data == {"Exchange": "x2", "Host": "b", "Exchanges": 1}
    assert out.events[0].text == "exchange x2 removed from b (drained): 2 -> 1 exchanges"
    gone = remove_exchange(_view([q], []), m.RemoveExchange(QName="q", Exchange="x2"), NOW)
    assert len(gone.ops) == 1  # its assignment was not there: only the placement


def test_removing_below_min_exchanges_is_refused_with_the_numbers():
    q = _queue("q", {"x1": "a", "x2": "a"}, min_exchanges=2)
    with pytest.raises(BadRequestError) as err:
        remove_exchange(_view([q], []), m.RemoveExchange(QName="q", Exchange="x2"), NOW)
    assert str(err.value) == "removing x2 would leave 1 exchanges, below min_exchanges 2"


def test_removing_a_slot_already_gone_is_ok_also_by_incarnation_name():
    view = _view([_queue("q", {"x1": "a"})], [])
    out = remove_exchange(view, m.RemoveExchange(QName="q", Exchange="x7"), NOW)
    assert out.ops == () and out.reply.comment == "exchange x7 of 'q' already gone"
    assert remove_exchange(view, m.RemoveExchange(QName="q", Exchange="x7-1a2b"), NOW).reply.data == {
        "Exchange": "x7", "Exchanges": 1}


@pytest.mark.parametrize("name", ["", "   ", "x" * 100_000])
def test_removing_no_slot_is_a_bad_request(name):
    with pytest.raises(BadRequestError, match="Exchange must name an exchange slot") as err:
        remove_exchange(_view([_queue("q", {"x1": "a"})], []), m.RemoveExchange(QName="q", Exchange=name), NOW)
    assert len(str(err.value)) < 200


def test_removing_from_a_queue_being_removed_is_unavailable():
    with pytest.raises(UnavailableError, match="being removed"):
        remove_exchange(_view([_queue("q", {"x1": "a"}, state="removing")], []), m.RemoveExchange(QName="q", Exchange="x1"), NOW)
