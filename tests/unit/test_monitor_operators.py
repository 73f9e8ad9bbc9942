"""Operators' commands (ping, status, forced relocation) and the status reply's bound."""

from __future__ import annotations

import bson
import pytest

from monitor._operators import fit
from monitor.testing import Driver, Peers
from roq import control
from roq.config import MonitorConfig
from roq.control import Result

CONFIG = MonitorConfig(queue="orders", high_records_per_s=1000)


def test_ping_names_the_queue():
    reply = Driver(CONFIG).send(control.Ping())
    assert (reply.result, reply.comment, reply.data, reply.request) == (Result.OK, "pong", {"queue": "orders"}, 42)


def test_status_shows_what_callers_read():
    q = Peers(Driver(CONFIG), ("x1", "x2"), ("s1",))
    q.publisher("p1")
    status = q.d.status()
    assert {"queue", "pid", "exchanges", "publishers", "subscribers", "relocations_in_flight", "rules", "scaling",
            "relocations", "counters", "dropped", "events"} <= set(status)
    assert status["queue"] == "orders" and status["rules"]["exchange_records_per_s"] == 1000
    x1 = status["exchanges"][0]
    assert {"id", "frontend", "backend", "pid", "draining", "records_per_s", "bytes_per_s", "cpu_percent",
            "rss_bytes", "busy", "dropped", "publishers", "silent_s"} <= set(x1)
    assert status["publishers"] == [{"id": "p1", "exchange": "x1", "relocating": False, "records_per_s": 0.0}]
    assert status["subscribers"] == [{"id": "s1", "prefix": b"", "confirmed": ["x1", "x2"], "live": True}]
    assert status["counters"]["dropped_messages"] == 0 and status["counters"]["relocations"] == 0
    assert [e["kind"] for e in status["events"]] == ["exchange_joined", "exchange_joined"]
    assert status["scaling"] == {"placement": {}, "starting": [], "retiring": "", "asking_gcm": False}


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
