"""Operators' commands (ping, status, forced relocation) and the status reply's bound."""

from __future__ import annotations

import bson
import pytest

import json

from monitor._operators import fit
from monitor._topology import QueueView
from monitor.testing import Driver, Peers
from roq.wire import control
from roq.config import MonitorConfig
from roq.wire.control import Result
from roq.rules import DEFAULT_RULES
from roq.wire.shape import to_document
from roq.wire.status import JournalStatus, PublisherStatus, ScalingStatus, Shown, SubscriberStatus, decode

CONFIG = MonitorConfig(queue="orders", high_records_per_s=1000)


def test_ping_names_the_queue():
    reply = Driver(CONFIG).send(control.Ping())
    assert (reply.result, reply.comment, reply.data, reply.request) == (Result.OK, "pong", {"queue": "orders"}, 42)


def test_status_shows_what_callers_read():
    q = Peers(Driver(CONFIG), ("x1", "x2"), ("s1",))
    q.publisher("p1")
    status = q.d.status()
    assert status.queue == "orders" and status.pid == 1 and status.rules["exchange_records_per_s"] == 1000
    x1 = status.exchanges[0]
    assert (x1.id, x1.frontend, x1.pid, x1.draining, x1.publishers) == ("x1", "tcp://127.0.0.1:7000", 100, False, 1)
    assert status.publishers == [PublisherStatus(id="p1", exchange="x1", relocating=False, records_per_s=0.0)]
    assert status.subscribers == [SubscriberStatus(id="s1", prefix=b"", confirmed=["x1", "x2"], live=True)]
    assert status.count("dropped_messages") == 0 and status.count("relocations") == 0 and status.count("nothing") == 0
    assert [e["kind"] for e in status.events] == ["exchange_joined", "exchange_joined"]
    assert status.scaling == ScalingStatus(placement={}, starting=[], retiring="", asking_gcm=False)
    assert status.journal == JournalStatus(durability="none", journal="") and status.truncated is None


def _busy_queue() -> Peers:
    """A queue with something in every part of its status: loads, KPIs, a move waiting, a journal, drops."""
    view = QueueView(state="running", placement={"x1": "127.0.0.11", "x2": "127.0.0.12"},
                     rules={**DEFAULT_RULES, "exchange_records_per_s": 1000, "durability": "always"})
    q = Peers(Driver(CONFIG, view=view), ("x1", "x2"), ("s1", "s2"))
    for p in ("p1", "p2", "p3"):
        q.publisher(p)
    q.rates = {"x1": {"p1": 300, "p3": 120}, "x2": {"p2": 200}}
    q.live(2.0)
    n = len(control.LATENCY_BOUNDS_MS) + 1
    q.d.send(control.SubscriberHello("s1", b"k\xff", ["x1", "x2"], period=1.0, records=700, latency_p50_ms=1.25,
                                     latency_p99_ms=7.5, gaps=1, lost=2, duplicates=3, latency_buckets=[1] * n,
                                     latency_sum_ms=12.5), b"s1")
    q.d.send(control.JournalHeartbeat(journal="j1", intake="tcp://h:9", pid=2, incarnation=1, next_offset=42,
                                      sync_ms=0.5), b"j1", "cluster")
    assert q.d.send(control.ForceRelocate("p1", "x2")).ok  # waits for the subscribers' Ready
    q.d.frame(b"garbage")
    return q


def test_the_status_a_monitor_sends_decodes_and_reads_back_byte_for_byte():
    q = _busy_queue()
    reply = q.d.send(control.Status())
    doc = control.Reply.parse(control.encode(reply)).data  # what a peer receives
    status = decode(doc)
    assert status.relocations[0].phase == "preparing" and status.relocations_in_flight == 1
    assert status.journal.next_offset == 42 and status.journal.alive is True
    assert {s.id: s.lost for s in status.subscribers} == {"s1": 2, "s2": None}
    assert status.scaling.placement == {"x1": "127.0.0.11", "x2": "127.0.0.12"}
    assert sum(status.latency_histogram.counts) == len(control.LATENCY_BOUNDS_MS) + 1
    assert status.dropped and status.totals.records_in > 0
    assert bson.encode(to_document(status)) == bson.encode(doc)  # every field, its type and its place kept
    assert json.dumps(to_document(status), default=str) == json.dumps(doc, default=str)


def test_a_status_cut_to_fit_decodes_and_says_what_was_cut():
    q = _busy_queue()
    doc = fit(to_document(q.d.core.operators.describe(q.d.now)), 4_000)
    status = decode(doc)
    assert status.shown("events") is not None and len(status.events) < status.shown("events").total
    assert status.shown("exchanges") == Shown(shown=0, total=2) and status.exchanges == []
    assert bson.encode(to_document(status)) == bson.encode(doc)


def test_a_forced_move_takes_the_busiest_publisher_to_the_least_loaded_exchange():
    q = Peers(Driver(CONFIG), ("x1", "x2", "x3"), ())
    for p in ("p1", "p2", "p3", "p4"):
        q.publisher(p)
    q.rates = {"x1": {"p1": 300, "p4": 50}, "x2": {"p2": 200}, "x3": {"p3": 100}}
    q.live(1.0)
    reply = q.d.send(control.ForceRelocate())
    assert reply.ok and reply.data["publisher"] == "p1" and reply.data["source"] == "x1"
    assert reply.data["target"] == "x3" and reply.comment == "moving p1 to x3"
    assert q.d.to(b"p1", control.Relocate)[-1].relocation == reply.data["relocation"]


@pytest.mark.parametrize("publisher, target, result, says", [
    ("nobody", "", Result.NOT_FOUND, "no publisher nobody"),
    ("p1", "x9", Result.NOT_FOUND, "no live exchange x9"),
    ("p1", "x1", Result.BAD_REQUEST, "already sends through x1"),
])
def test_a_forced_move_that_cannot_be_done_is_refused_with_the_reason(publisher, target, result, says):
    q = Peers(Driver(CONFIG), ("x1", "x2"), ())
    q.publisher("p1")
    reply = q.d.send(control.ForceRelocate(publisher, target))
    assert reply.result == result and says in reply.comment and reply.request == 41


def test_a_publisher_already_moving_or_nowhere_to_go_is_unavailable():
    q = Peers(Driver(CONFIG), ("x1", "x2"), ("s1",))
    q.publisher("p1")
    assert q.d.send(control.ForceRelocate("p1")).ok  # waits for s1's Ready
    reply = q.d.send(control.ForceRelocate("p1"))
    assert reply.result == Result.UNAVAILABLE and "already moving" in reply.comment
    lonely = Peers(Driver(CONFIG), ("x1",), ())
    lonely.publisher("p1")
    assert lonely.d.send(control.ForceRelocate()).result == Result.UNAVAILABLE
    assert Driver(CONFIG).send(control.ForceRelocate()).result == Result.NOT_FOUND


def test_fit_keeps_short_lists_whole_and_cuts_the_long_ones_keeping_the_newest_events():
    data = {"queue": "q", "exchanges": [{"id": "x1"}], "publishers": [{"id": "p" * 90 + f"{i:05d}"} for i in range(20_000)],
            "events": [{"seq": i, "text": "e" * 500} for i in range(1000)], "relocations": []}
    out = fit(data, 500_000)
    assert len(bson.encode(out)) <= 500_000
    assert out["exchanges"] == [{"id": "x1"}] and out["relocations"] == []
    assert out["truncated"]["publishers"]["total"] == 20_000 and 0 < len(out["publishers"]) < 20_000
    assert out["events"][-1]["seq"] == 999 and out["events"] == sorted(out["events"], key=lambda e: e["seq"])
    assert fit({"queue": "q", "events": [1]}, 500_000) == {"queue": "q", "events": [1]}  # untouched when it fits
