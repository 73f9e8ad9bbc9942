"""What the monitor knows of its queue: names checked, tables bounded, what a subscriber hears."""

from __future__ import annotations

import pytest

from monitor._rule import Ewma
from monitor._topology import MAX_NAME, ExchangeEntry, SubscriberEntry, Topology
from roq.errors import UnavailableError


def exchange(name: str) -> ExchangeEntry:
    return ExchangeEntry(name, "tcp://a:1", "tcp://a:2", 1, b"", 0.0, Ewma(0.5), Ewma(0.5), joined=0.0)


def test_a_full_table_refuses_newcomers_and_counts_them():
    t = Topology(subscriber_timeout=3)
    t.LIMITS = {**t.LIMITS, "exchanges": 2}
    for name in ("x1", "x2"):
        t.admit("exchanges", name)
        t.exchanges[name] = exchange(name)
    with pytest.raises(UnavailableError, match="2 exchanges"):
        t.admit("exchanges", "x3")
    assert t.refused["exchanges"] == 1


def test_a_subscriber_keeps_the_exchanges_it_hears_that_are_known_and_a_few_others():
    known = {"x1": exchange("x1"), "x2": exchange("x2")}
    s = SubscriberEntry("s", b"", b"", 0.0)
    s.hears(["x1", "x9"], known)
    assert s.confirmed == {"x1", "x9"} and not s.overflow
    s.hears(["x2"] + [f"u{i}" for i in range(100)] + ["y" * (MAX_NAME + 1)], known)
    assert "x2" in s.confirmed and len(s.confirmed) == 17 and s.overflow
    assert s.confirmed.issuperset({"x2", "u0"}) and all(len(x) <= MAX_NAME for x in s.confirmed)
    assert next(x for x in s.confirmed if x == "x2") is known["x2"].id  # the table's string, not a copy


def test_heard_means_heard_by_every_live_subscriber():
    t = Topology(subscriber_timeout=3)
    t.exchanges = {"x1": exchange("x1"), "x2": exchange("x2")}
    t.subscribers = {"a": SubscriberEntry("a", b"", b"", 10.0, {"x1", "x2"}),
                     "b": SubscriberEntry("b", b"", b"", 10.0, {"x1"}),
                     "silent": SubscriberEntry("silent", b"", b"", 0.0, set())}
    alive, heard = t.accepting(set(), 11.0)
    assert [x.id for x in alive] == ["x1", "x2"] and heard == {"x1"}
