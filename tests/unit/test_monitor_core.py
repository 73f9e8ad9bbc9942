"""The monitor's core driven by messages and a simulated clock, without sockets: placement, relocation by the
rule, fail-over, a restarted monitor settling, the stall discount, and hostile input."""

from __future__ import annotations

import bson
import pytest

from monitor._operators import MAX_STATUS_BYTES
from monitor._topology import MAX_NAME, MAX_PUBLISHERS, MAX_SUBSCRIBERS
from monitor.testing import Driver, Peers
from roq.wire import control
from roq.config import MonitorConfig
from roq.wire.control import Result
from roq.wire.shape import to_document

CONFIG = MonitorConfig(high_records_per_s=1000, sustain=1, cooldown=5, kpi_period=1, heartbeat_timeout=1,
                       smoothing=1.0)


def Queue(exchanges=("x1", "x2"), subscribers=("s1",), config=CONFIG, **kwargs) -> Peers:
    return Peers(Driver(config, **kwargs), exchanges, subscribers)


def test_new_publishers_are_spread_over_cold_exchanges():
    q = Queue()
    placed = [q.publisher(p).exchange for p in ("p1", "p2", "p3")]
    assert placed == ["x1", "x2", "x1"]
    assert all(r.reason == "assign" for p in ("p1", "p2", "p3") for r in q.d.to(p.encode(), control.Relocate))


def test_the_rule_moves_the_busiest_publisher_that_fits_make_before_break():
    q = Queue()
    for p in ("p1", "p2", "p3"):
        q.publisher(p)
    q.rates = {"x1": {"p1": 600, "p3": 500}, "x2": {"p2": 100}}
    q.live(1.0, answer_ready=False)
    assert not q.d.events("relocated")  # hot, not for the sustain yet
    q.live(1.5, answer_ready=False)
    [prepare] = q.d.to(b"s1", control.Prepare)
    assert (prepare.publisher, prepare.source, prepare.target) == ("p1", "x1", "x2")  # 600 + 100 < 1000
    assert q.d.to(b"p1", control.Relocate)[-1].reason == "assign"  # not told before the subscriber is ready
    q.ready()
    relocate = q.moved("p1")
    assert (relocate.exchange, relocate.reason) == ("x2", "relocate")
    [moved] = q.d.events("relocated")
    assert moved["reason"] == "rule" and "1,100 rec/s > high 1,000" in moved["detail"]
    assert q.d.log.counters["relocations"] == 1
    status = q.d.status()
    assert {p.id: p.exchange for p in status.publishers} == {"p1": "x2", "p2": "x2", "p3": "x1"}


def test_a_silent_exchange_is_lost_within_the_timeout_and_its_publishers_fail_over():
    q = Queue(subscribers=("s1", "s2"))
    for p in ("p1", "p2"):
        q.publisher(p)
    q.live(3.0)
    q.silent.add("x1")
    q.d.sent.clear()
    lost_at = None
    for _ in range(40):
        q.live(0.25, answer_ready=False)
        if q.d.events("exchange_lost"):
            lost_at = q.d.now
            break
    [lost] = q.d.events("exchange_lost")
    assert lost["exchange"] == "x1" and lost["publishers"] == 1 and 1.0 <= lost["silent_s"] <= 1.35
    assert lost_at is not None
    for s in (b"s1", b"s2"):  # subscribers drop it at once
        assert any(m.lost == ["x1"] and [x.exchange for x in m.exchanges] == ["x2"] for m in q.d.to(s, control.Exchanges))
    # both subscribers hear x2 already: a failover waits for nobody
    [relocate] = q.d.to(b"p1", control.Relocate)
    assert (relocate.exchange, relocate.reason) == ("x2", "failover")
    assert not q.d.to(b"s1", control.Prepare)
    q.moved("p1")
    assert q.d.log.counters["failovers"] == 1 and q.d.log.counters["exchanges_lost"] == 1
    assert all(p.exchange == "x2" and not p.relocating for p in q.d.status().publishers)


def test_a_restarted_monitor_settles_before_failing_anybody_over():
    d = Driver(CONFIG)  # settles for 2 x heartbeat_timeout
    d.send(control.Heartbeat("x1", "tcp://127.0.0.1:7000", "tcp://127.0.0.1:8000", 1), b"x1")
    d.send(control.SubscriberHello("s1", b"", ["x1", "x9"]), b"s1")  # x9 has not reported yet
    d.send(control.PublisherHello("p9", "x9"), b"p9")
    d.run(0.2)
    d.send(control.Heartbeat("x1", "tcp://127.0.0.1:7000", "tcp://127.0.0.1:8000", 1), b"x1")
    assert not d.to(b"p9") and not d.to(b"s1", control.Exchanges)  # a list now would take x9 away from s1
    for _ in range(8):
        d.run(0.25)
        d.send(control.Heartbeat("x1", "tcp://127.0.0.1:7000", "tcp://127.0.0.1:8000", 1), b"x1")
    # settled: x9 never reported, so its publisher fails over and the subscriber is told the whole list
    assert [m.reason for m in d.to(b"p9", control.Relocate)] == ["failover"]
    assert [x.exchange for x in d.to(b"s1", control.Exchanges)[-1].exchanges] == ["x1"]


def test_a_restarted_monitor_fails_a_panicking_publisher_over_once_settled_with_its_subscribers_prepared():
    # the monitor's host was lost with x1: the new monitor hears x2 and x1's replacement x3 (no publisher yet)
    d = Driver(CONFIG)
    for x in ("x2", "x3"):
        d.send(control.Heartbeat(x, f"tcp://127.0.0.1:70{x[1]}0", f"tcp://127.0.0.1:80{x[1]}0", 1), x.encode())
    d.send(control.PublisherHello("p2", "x2"), b"p2")
    d.send(control.Panic("p1", "x1", "no acknowledgement for 1.6s"), b"p1")  # before any subscriber said hello
    assert not d.to(b"p1", control.Relocate)  # not to an exchange whose subscribers nobody knows yet
    d.send(control.SubscriberHello("s1", b"", ["x1", "x2"]), b"s1")  # it hears x2 (and the dead x1), not x3
    for _ in range(9):
        d.run(0.25)
        for x in ("x2", "x3"):
            d.send(control.Heartbeat(x, f"tcp://127.0.0.1:70{x[1]}0", f"tcp://127.0.0.1:80{x[1]}0", 1), x.encode())
        d.send(control.SubscriberHello("s1", b"", ["x1", "x2"]), b"s1")
        if d.to(b"p1", control.Relocate) or d.to(b"s1", control.Prepare):
            break
    # settled: failed over where its subscriber hears (x2), or with the subscriber prepared first
    prepared = {m.target for m in d.to(b"s1", control.Prepare)}
    relocations = d.to(b"p1", control.Relocate)
    assert relocations and relocations[0].reason == "failover", relocations
    assert relocations[0].exchange == "x2" or relocations[0].exchange in prepared


def test_the_tick_may_come_seldom_only_while_nothing_is_under_way_and_never_past_an_exchanges_silence():
    q = Queue()
    core = q.d.core
    assert not core.quiet()  # settling after its start
    for p in ("p1", "p2", "p3"):
        q.publisher(p)
    q.rates = {"x1": {"p1": 60, "p3": 50}, "x2": {"p2": 10}}
    q.live(2.5, answer_ready=False)
    assert core.quiet()  # settled, nothing to move
    assert core.silent_at() == pytest.approx(q.d.now + 1.0)  # both beat just now; the timeout is 1 s
    q.rates = {"x1": {"p1": 600, "p3": 500}, "x2": {"p2": 100}}
    for _ in range(5):
        q.live(1.0, answer_ready=False)
        if q.d.to(b"s1", control.Prepare):
            break
    assert q.d.to(b"s1", control.Prepare) and not core.quiet()  # a relocation prepares: its timeouts are ticked
    q.ready()
    q.moved("p1")
    assert core.quiet()
    q.silent.add("x1")
    q.d.run(0.5)
    q.beat()
    assert core.silent_at() == pytest.approx(q.d.now - 0.5 + 1.0)  # x1's last beat, plus the timeout


def test_time_the_monitor_did_not_run_is_nobody_elses_silence():
    q = Queue()
    q.live(3.0)
    q.d.now += 1.6  # the monitor was stopped (SIGSTOP) for 1.6 s: its tick comes that late
    q.d.core.discount_stall(1.6)
    q.d.run(0.05)
    assert not q.d.events("exchange_lost")
    q.d.run(1.1)  # but silence after it counts
    assert len(q.d.events("exchange_lost")) == 2


WRONG = [bson.Code("x"), 1.5, -(2**63), 2**63 - 1, "x" * 100_000, {"a": {"b": {"c": [1, {"d": None}]}}},
         [1, "two"], None, b"\x00\xff", True, bson.Int64(7), bson.Regex("x")]


def _valid(kind: type) -> dict:
    """A valid document of every message the monitor serves."""
    return control.decode(control.encode(SAMPLES[kind])).document()


SAMPLES = {
    control.Heartbeat: control.Heartbeat("x1", "tcp://127.0.0.1:7000", "tcp://127.0.0.1:8000", 1),
    control.ExchangeBye: control.ExchangeBye("x1"),
    control.ExchangeKpi: control.ExchangeKpi("x1", 1.0, 10, 10, 10, 10, [control.PublisherRate("p1", 10, 10)],
                                             1.0, 1, 0.1, 0),
    control.PublisherHello: control.PublisherHello("p1", "x1", 1),
    control.Moved: control.Moved("p1", "x1", 1, 1),
    control.Panic: control.Panic("p1", "x1", "why"),
    control.PublisherBye: control.PublisherBye("p9"),
    control.SubscriberHello: control.SubscriberHello("s1", b"", ["x1"]),
    control.Ready: control.Ready("s1", 1),
    control.SubscriberBye: control.SubscriberBye("s9"),
    control.Ping: control.Ping(),
    control.Status: control.Status(),
    control.ForceRelocate: control.ForceRelocate(),
}


@pytest.mark.parametrize("kind", list(SAMPLES), ids=lambda k: k.__name__)
def test_every_field_of_the_wrong_type_is_refused_and_the_monitor_serves_on(kind):
    q = Queue()
    q.publisher("p1")
    doc = _valid(kind)
    for field in [f for f in doc if f != "CMD"]:
        for wrong in WRONG:
            reply = q.d.frame(bson.encode({**doc, field: wrong}), b"fuzzer")
            assert reply is None or reply.result in (Result.OK, Result.BAD_REQUEST, Result.NOT_FOUND,
                                                     Result.UNAVAILABLE), (field, wrong, reply)
            assert reply is None or reply.result != Result.FAIL
    assert q.d.dispatcher.failures == 0
    q.live(3.0)
    status = q.d.status()
    assert {x.id for x in status.exchanges} >= {"x1", "x2"}
    assert len(bson.encode(to_document(status))) < MAX_STATUS_BYTES


def test_odd_numbers_and_names_from_peers_break_no_timer():
    q = Queue()
    q.publisher("p1")
    huge = 2**63 - 1
    for period in (1e-300, 0.0, -5.0, 1e300):
        q.d.send(control.ExchangeKpi("x1", period, huge, -huge, huge, huge,
                                     [control.PublisherRate("p1", huge, -1), control.PublisherRate("nobody", 1, 1)],
                                     1e300, huge, -3.0, huge), b"x1")
    q.d.send(control.Moved("p1", "x2", 12345, 2**62), b"p1")  # a move that does not exist
    q.d.send(control.Ready("s1", -1), b"s1")
    q.d.send(control.Panic("p1", "x-unknown", "z" * 10_000), b"p1")
    for bad in (control.Heartbeat("x" * (MAX_NAME + 1), "tcp://a:1", "tcp://a:2", 1),
                control.Heartbeat("x3", "tcp://a:1" + "9" * 1000, "tcp://a:2", 1),
                control.Heartbeat("", "tcp://a:1", "tcp://a:2", 1),
                control.PublisherHello("p" * 1000), control.SubscriberHello("", b"", [])):
        assert q.d.send(bad).result == Result.BAD_REQUEST
    q.live(12.0)  # ticks, rule evaluations, moves, their timeouts
    status = q.d.status()
    x1 = next(x for x in status.exchanges if x.id == "x1")
    assert 0 <= x1.dropped < 2**63
    assert len(bson.encode(to_document(status))) < MAX_STATUS_BYTES
    assert q.d.dispatcher.failures == 0
    assert all(len(r.detail) < 400 for r in q.d.core.mover.relocations.values())


def test_every_table_a_peer_fills_is_bounded_and_the_status_stays_under_a_megabyte():
    q = Queue(exchanges=("x1",))
    d = q.d
    for i in range(MAX_PUBLISHERS):
        d.send(control.PublisherHello(f"{i:032x}", "x1"), b"p")
    assert d.send(control.PublisherHello("one-too-many")).result == Result.UNAVAILABLE
    assert d.send(control.Panic("one-too-many", "x1")).result == Result.UNAVAILABLE
    confirmed = ["x1"] + [f"unknown-{i}" for i in range(1000)]
    for i in range(MAX_SUBSCRIBERS - 1):  # s1 is there already
        d.send(control.SubscriberHello(f"s-{i:030x}", b"k" * 5000, confirmed), b"s")
    assert d.send(control.SubscriberHello("one-too-many", b"", [])).result == Result.UNAVAILABLE
    # rates are kept for known publishers only, at most MAX_RATES per exchange
    rates = [control.PublisherRate(f"{i:032x}", 1, 1) for i in range(0, 20_000, 2)]
    d.send(control.ExchangeKpi("x1", 1.0, 1, 1, 1, 1, rates, 1.0, 1, 0.1, 0), b"x1")
    x1 = d.core.topology.exchanges["x1"]
    assert len(x1.rates) == 5_000
    subscriber = d.core.topology.subscribers["s-" + "0" * 30]
    assert len(subscriber.prefix) <= 1024 and len(subscriber.confirmed) <= 17 and subscriber.overflow
    status = d.status()
    size = len(bson.encode(control.Reply(data=to_document(status)).document()))
    print(f"status of {MAX_PUBLISHERS} publishers and {MAX_SUBSCRIBERS} subscribers: {size} bytes")
    assert size < MAX_STATUS_BYTES
    assert status.shown("publishers").total == MAX_PUBLISHERS > len(status.publishers)
    assert status.shown("subscribers").total == MAX_SUBSCRIBERS > len(status.subscribers)
    assert status.refused == {"exchanges": 0, "publishers": 2, "subscribers": 1}
    assert status.exchanges[0].id == "x1" and status.events and status.shown("exchanges") is None  # short lists whole


def test_a_saturated_exchange_far_below_the_mark_sheds_publishers_make_before_break():
    q = Queue(exchanges=("x1", "x2"), subscribers=("s1",))
    for name in ("p1", "p2", "p3"):
        q.publisher(name, "x1")
    q.rates["x1"] = {"p1": 150, "p2": 100, "p3": 50}  # 300 rec/s, a third of the mark...
    q.busy["x1"] = 1.0  # ...but busy all the time: a small host
    q.live(3.0)
    [relocate] = q.d.to(b"p1", control.Relocate)
    assert (relocate.exchange, relocate.reason) == ("x2", "relocate")  # make-before-break: nothing resent
    q.moved("p1")
    q.live(0.5)
    [done] = q.d.events("relocated")
    assert done["reason"] == "rule" and "300 rec/s > its saturation mark 255" in done["detail"]
    assert q.d.core.events.counters.get("failovers", 0) == 0


def test_a_panic_about_a_live_exchange_is_no_failover_and_one_about_a_silent_exchange_is():
    q = Queue(exchanges=("x1", "x2"), subscribers=("s1",))
    for name in ("p1", "p2"):
        q.publisher(name, "x1")
    q.rates = {"x1": {"p1": 300, "p2": 300}, "x2": {"p0": 500}}
    q.busy = {"x1": 1.0, "x2": 1.0}  # both saturated: nowhere to go
    q.live(1.0)
    q.d.send(control.Panic("p1", "x1", "no acknowledgement for 1.6s"), b"p1")
    assert q.d.to(b"p1", control.Relocate) == []  # x1 still beats: p1 waits for it (back-pressure)
    q.busy["x2"] = 0.2  # x2 has room now
    q.live(1.0)
    q.d.send(control.Panic("p1", "x1", "no acknowledgement for 1.6s"), b"p1")
    q.ready()  # planned: subscribers note the move first
    [relocate] = q.d.to(b"p1", control.Relocate)
    assert (relocate.exchange, relocate.reason) == ("x2", "relocate")
    q.d.send(control.Panic("p2", "x-gone", "no acknowledgement for 1.6s"), b"p2")  # an exchange nobody hears
    assert q.d.to(b"p2", control.Relocate)[-1].reason == "failover"
    assert q.d.core.events.counters["failovers"] == 1
