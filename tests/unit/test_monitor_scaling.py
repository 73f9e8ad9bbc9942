"""The scaling controller through the core: requests to the GCM out of the outbox, answers fed back."""

from __future__ import annotations

from monitor._topology import QueueView
from monitor.testing import Driver, Peers
from roq.wire import control
from roq.wire import management as m
from roq.config import MonitorConfig
from roq.wire.control import Reply, Result
from roq.rules import effective_rules
from roq.wire.status import ScalingStatus

RULES = {"exchange_records_per_s": 1000.0, "sustain_s": 1.0, "cooldown_s": 2.0, "smoothing": 1.0,
         "kpi_period_s": 1.0, "min_exchanges": 1, "max_exchanges": 4}


def view(*slots: str, state: str = "running", **rules) -> QueueView:
    return QueueView(state=state, placement={s: "127.0.0.11" for s in slots},
                     rules=effective_rules({**RULES, **rules}), explicit={**RULES, **rules})


def queue(exchanges: tuple[str, ...], placement: QueueView) -> Peers:
    return Peers(Driver(MonitorConfig(queue="q", heartbeat_timeout=1.0), view=placement), exchanges, ("s1",))


def hot_single_exchange() -> Peers:
    q = queue(("x1-aaaa",), view("x1"))
    for p in ("p1", "p2"):
        q.publisher(p)
    q.rates = {"x1-aaaa": {"p1": 700, "p2": 700}}
    return q


def test_a_hot_exchange_no_other_can_relieve_asks_the_gcm_for_one_more_once():
    q = hot_single_exchange()
    q.live(3.0)
    [request] = q.d.requests
    assert request.message == m.ScaleOut(QName="q", Exchanges=2, Reason=request.message.Reason)
    assert "no other exchange can take" in request.message.Reason
    [out] = q.d.events("scale_out")
    assert out["exchanges"] == 1 and out["total_records_per_s"] == 1400.0 and out["high"] == 1000.0
    q.live(3.0)
    assert len(q.d.requests) == 1  # nothing more while the GCM has not answered
    assert q.d.status().scaling.asking_gcm is True
    q.d.answer(Reply(comment="placed x2", data={"Placed": [{"Exchange": "x2", "Host": "127.0.0.11"}]}))
    q.d.cluster(view("x1", "x2"))
    q.live(1.0)
    assert q.d.status().scaling.starting == ["x2"] and not q.d.requests  # it waits for x2 to join
    # x2 joins; once every subscriber hears it, the hot exchange's publishers move onto it at once
    q.exchanges.append("x2-bbbb")
    q.beat()
    [done] = q.d.events("scale_out_done")
    assert done["exchange"] == "x2-bbbb"
    q.hellos()
    q.d.run(0.05)
    assert [p.target for p in q.d.to(b"s1", control.Prepare)] == ["x2-bbbb"]
    assert q.d.log.counters["scale_outs"] == 1


def test_a_refused_scale_out_waits_and_an_unanswered_one_is_asked_again():
    q = hot_single_exchange()
    q.live(3.0)
    q.d.answer(None, "the GCM leader changed before answering")
    assert q.d.events("scale_out_unanswered")
    q.live(1.0)
    assert len(q.d.requests) == 1  # asked again (the request is idempotent)
    q.d.answer(Reply(result=Result.UNAVAILABLE, comment="no host has room"))
    [refused] = q.d.events("scale_out_refused")
    assert refused["result"] == Result.UNAVAILABLE and "no host has room" in refused["text"]
    q.live(4.5)
    assert not q.d.requests  # at least 5 s after a refusal
    q.live(1.0)
    assert len(q.d.requests) == 1


def test_below_the_minimum_asks_at_once_and_a_stopped_queue_never_scales():
    q = queue(("x1-aaaa",), view("x1", min_exchanges=2))
    q.live(0.5)
    assert [r.message.Exchanges for r in q.d.requests] == [2]
    assert "below min_exchanges 2" in q.d.events("scale_out")[0]["text"]
    q = queue(("x1-aaaa",), view("x1", state="stopped", min_exchanges=2))
    q.live(3.0)
    assert not q.d.requests


def test_no_scale_in_while_publishers_wait_for_their_exchange():
    # the load would fit in one exchange, but x1's publishers wait for it most of the time: demand the queue
    # does not meet, which records/s cannot show (its link may bind); their pressure shows in the status
    q = queue(("x1-aaaa", "x2-bbbb"), view("x1", "x2"))
    for p in ("p1", "p2", "p3"):
        q.publisher(p)
    q.rates = {"x1-aaaa": {"p1": 100, "p3": 100}, "x2-bbbb": {"p2": 50}}
    q.pressure = {"p1": 0.9, "p3": 0.7}
    q.live(4.0)
    assert q.d.events("scale_in") == [] and not q.d.requests
    assert {x.id: x.publisher_pressure for x in q.d.status().exchanges} == {"x1-aaaa": 0.8, "x2-bbbb": 0.0}
    q.pressure = {"p1": 0.3, "p3": 0.2}  # waiting now and then is no unmet demand
    q.live(3.0)
    [scale_in] = q.d.events("scale_in")
    assert scale_in["exchange"] == "x2-bbbb"


def test_scale_in_drains_the_least_loaded_then_asks_to_remove_its_slot():
    q = queue(("x1-aaaa", "x2-bbbb"), view("x1", "x2"))
    for p in ("p1", "p2", "p3"):
        q.publisher(p)
    q.rates = {"x1-aaaa": {"p1": 100, "p3": 100}, "x2-bbbb": {"p2": 50}}
    q.live(2.0)
    [scale_in] = q.d.events("scale_in")
    assert scale_in["exchange"] == "x2-bbbb" and scale_in["victim_records_per_s"] == 50.0
    status = q.d.status()
    assert next(x for x in status.exchanges if x.id == "x2-bbbb").draining
    assert status.scaling.retiring == "x2-bbbb"
    assert not q.d.requests  # p2 is still on it
    relocate = q.moved("p2")
    assert (relocate.exchange, relocate.reason) == ("x1-aaaa", "relocate")
    assert q.d.events("relocated")[-1]["reason"] == "drain"
    q.rates = {"x1-aaaa": {"p1": 100, "p2": 50, "p3": 100}}
    q.live(0.5)
    [request] = q.d.requests
    assert request.message == m.RemoveExchange(QName="q", Exchange="x2", Reason="drained to scale in")
    # refused (an operator raised min_exchanges meanwhile): the exchange takes publishers again
    q.d.sent.clear()
    q.d.answer(Reply(result=Result.BAD_REQUEST, comment="would leave fewer than min_exchanges"))
    assert q.d.events("scale_in_refused")
    assert not next(x for x in q.d.status().exchanges if x.id == "x2-bbbb").draining
    assert [x.exchange for x in q.d.to(b"s1", control.Exchanges)[-1].exchanges] == ["x1-aaaa", "x2-bbbb"]


def test_an_exchange_removed_after_draining_leaves_without_a_failover():
    q = queue(("x1-aaaa", "x2-bbbb"), view("x1", "x2"))
    q.publisher("p1")
    q.rates = {"x1-aaaa": {"p1": 10}}
    q.live(2.0)
    assert q.d.events("scale_in")[0]["exchange"] == "x2-bbbb"
    q.live(0.5)
    q.d.answer(Reply(comment="removing x2"))
    q.silent.add("x2-bbbb")  # its host manager stops it
    q.d.cluster(view("x1"))
    q.live(2.0)
    assert q.d.events("exchange_left") and not q.d.events("exchange_lost")
    assert q.d.status().scaling == ScalingStatus(placement={"x1": "127.0.0.11"}, starting=[], retiring="",
                                                 asking_gcm=False)
