"""The event log: numbered, stamped by the clock it is given, continued by a restarted monitor."""

from __future__ import annotations

from monitor._events import EventLog


def test_events_are_numbered_and_stamped_and_a_successor_continues_them():
    clock = iter([100.0, 101.5])
    log = EventLog(clock=lambda: next(clock))
    first = log.add("exchange_joined", "x1 joined", exchange="x1")
    log.count("relocations", 2)
    assert first == {"seq": 1, "time": 100.0, "kind": "exchange_joined", "text": "x1 joined", "exchange": "x1"}
    assert log.changed and log.counters["relocations"] == 2
    successor = EventLog(clock=lambda: 200.0)
    successor.restore(list(log.events), {**log.counters, "odd": "not a count"})
    nxt = successor.add("monitor_started", "again")
    assert nxt["seq"] == 2 and successor.counters["relocations"] == 2 and "odd" not in successor.counters
    assert [e["seq"] for e in successor.recent(1)] == [2] and successor.recent(0) == []


def test_the_log_is_bounded():
    log = EventLog(size=3, clock=lambda: 0.0)
    for i in range(10):
        log.add("k", str(i))
    assert [e["text"] for e in log.events] == ["7", "8", "9"]
