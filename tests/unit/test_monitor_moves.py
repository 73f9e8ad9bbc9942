"""Placement and the move lifecycle of the monitor, driven without sockets: messages out of the outbox."""

from __future__ import annotations

import pytest

from monitor._events import EventLog
from monitor._moves import Mover
from monitor._outbox import Outbox
from monitor._publishers import Publishers
from monitor._rule import Ewma
from monitor._rules import Rules
from monitor._topology import ExchangeEntry, PublisherEntry, SubscriberEntry, Topology
from roq.wire import control
from roq.config import MonitorConfig

T0 = 100.0


class World:
    def __init__(self, exchanges=("x1", "x2"), subscribers=("s1", "s2")):
        self.config = MonitorConfig(high_records_per_s=1000, cooldown=10, prepare_timeout=1, move_timeout=5)
        self.topology = Topology(subscriber_timeout=3)
        self.log = EventLog()
        self.outbox = Outbox()
        for i, name in enumerate(exchanges):
            self.topology.exchanges[name] = ExchangeEntry(
                name, f"tcp://f/{name}", f"tcp://b/{name}", 1, name.encode(), T0, Ewma(0.5), Ewma(0.5), joined=T0 + i)
        for name in subscribers:
            self.topology.subscribers[name] = SubscriberEntry(name, name.encode(), b"", T0, set(exchanges))
        self.mover = Mover(self.topology, self.config, Rules.of(self.config), self.log, self.outbox)

    def publisher(self, name, exchange=None):
        p = PublisherEntry(name, name.encode(), T0, exchange=exchange)
        self.topology.publishers[name] = p
        return p

    def to(self, ident: bytes, kind: type) -> list:
        return [m for i, m in self.outbox.sends if i == ident and isinstance(m, kind)]

    def event_kinds(self) -> list[str]:
        return [e.kind for e in self.outbox.events]


def test_cold_exchanges_take_publishers_in_turn_and_prefer_those_everybody_hears():
    w = World(exchanges=("x1", "x2", "x3"))
    w.topology.subscribers["s2"].confirmed.discard("x3")  # s2 does not hear x3 yet
    for i in range(4):
        w.mover.assign(w.publisher(f"p{i}"), T0)
    placed = [w.topology.publishers[f"p{i}"].exchange for i in range(4)]
    assert placed == ["x1", "x2", "x1", "x2"]
    assert all(m.reason == "assign" for _, m in w.outbox.sends)


def test_warm_exchanges_are_chosen_by_load():
    w = World()
    w.topology.exchanges["x1"].load.add(500)
    w.topology.exchanges["x2"].load.add(300)
    w.mover.assign(w.publisher("p"), T0)
    assert w.topology.publishers["p"].exchange == "x2"


def test_a_planned_move_prepares_every_subscriber_before_telling_the_publisher():
    w = World()
    p = w.publisher("p", "x1")
    rel = w.mover.start(p, w.topology.exchanges["x2"], "forced", "test", T0)
    assert [m.source for m in w.to(b"s1", control.Prepare)] == ["x1"]
    assert w.to(b"p", control.Relocate) == []
    w.mover.ready(rel.id, "s1", T0 + 0.01)
    assert w.to(b"p", control.Relocate) == []
    w.mover.ready(rel.id, "s2", T0 + 0.02)
    [relocate] = w.to(b"p", control.Relocate)
    assert (relocate.exchange, relocate.reason, relocate.relocation) == ("x2", "relocate", rel.id)
    w.mover.moved(control.Moved("p", "x2", rel.id, 1), T0 + 0.05)
    assert p.exchange == "x2" and p.relocation is None and w.log.counters["relocations"] == 1
    assert w.log.counters["relocations_by_forced"] == 1
    [event] = w.outbox.events
    assert event.kind == "relocated" and event.fields["duration_ms"] == 50.0 and event.fields["reason"] == "forced"


def test_a_failover_waits_only_for_subscribers_that_do_not_hear_the_target():
    w = World()
    w.topology.subscribers["s2"].confirmed = {"x1"}
    p = w.publisher("p", "x1")
    w.mover.failover(p, "x1 lost", T0)
    [prepare] = w.to(b"s2", control.Prepare)
    assert prepare.source == ""  # no note for a resend
    assert w.to(b"s1", control.Prepare) == []
    w.topology.subscribers["s2"].confirmed.add("x2")
    w.mover.subscriber_heard(w.topology.subscribers["s2"], T0 + 0.1)
    assert w.to(b"p", control.Relocate)[0].reason == "failover"
    assert w.log.counters["failovers"] == 1


def test_a_silent_subscriber_does_not_block_a_move_for_ever():
    w = World()
    p = w.publisher("p", "x1")
    rel = w.mover.start(p, w.topology.exchanges["x2"], "forced", "test", T0)
    w.mover.tick(T0 + 0.5)
    assert w.to(b"p", control.Relocate) == []
    w.mover.tick(T0 + 1.5)
    assert len(w.to(b"p", control.Relocate)) == 1
    w.mover.tick(rel.moving_since + 6)  # the publisher never answers
    assert p.relocation is None and w.log.counters["relocations_failed"] == 1
    assert w.event_kinds() == ["relocation_failed"]


def test_a_publisher_that_says_it_is_still_moving_is_waited_for():
    # its old exchange holds it back for a slow reader: its hellos say the move is under way, and the timeout
    # counts from the last of them; once they stop saying so, the move is abandoned 5 s later
    w = World(subscribers=())
    p = w.publisher("p", "x1")
    hellos = Publishers(w.topology, w.mover, w.outbox, publisher_timeout=30)
    rel = w.mover.start(p, w.topology.exchanges["x2"], "forced", "test", T0)
    assert w.to(b"p", control.Relocate) and rel.phase == "moving"
    for t in range(1, 9):
        hellos.hello(control.PublisherHello("p", "x1", moving=rel.id), b"p", T0 + t)
        w.mover.tick(T0 + t + 0.5)
    hellos.hello(control.PublisherHello("p", "x1", moving=rel.id + 1), b"p", T0 + 9)  # not this move
    w.mover.tick(T0 + 12)
    assert p.relocation == rel.id and w.log.counters["relocations_failed"] == 0
    w.mover.tick(T0 + 13.1)
    assert p.relocation is None and w.log.counters["relocations_failed"] == 1


def test_moving_back_by_the_rule_within_two_cooldowns_is_a_flap():
    w = World(subscribers=())
    p = w.publisher("p", "x1")
    for i, (source, target) in enumerate((("x1", "x2"), ("x2", "x1"))):
        rel = w.mover.start(p, w.topology.exchanges[target], "rule", "test", T0 + i)
        w.mover.moved(control.Moved("p", target, rel.id, 1), T0 + i + 0.1)
    assert w.log.counters["flaps"] == 1
    assert "FLAP" in w.outbox.events[-1].text and w.outbox.events[-1].fields["flap"] is True


def test_a_publisher_remembers_only_recent_departures():
    w = World(exchanges=("x1", "x2", "x3"), subscribers=())
    p = w.publisher("p", "x1")
    for i, target in enumerate(("x2", "x3", "x1")):
        now = T0 + 100 * i  # ten cool-downs apart
        rel = w.mover.start(p, w.topology.exchanges[target], "rule", "test", now)
        w.mover.moved(control.Moved("p", target, rel.id, 1), now)
    assert list(p.left) == ["x3"]  # the older departures are beyond two cool-downs


def test_losing_the_target_of_a_move_in_flight_fails_the_publisher_over_from_it():
    w = World(exchanges=("x1", "x2", "x3"), subscribers=())
    p = w.publisher("p", "x1")
    w.mover.start(p, w.topology.exchanges["x2"], "forced", "test", T0)  # no subscriber: moving at once
    del w.topology.exchanges["x2"]
    w.mover.exchange_lost("x2", T0 + 1)
    assert p.exchange == "x2" and p.relocation is None  # it may already send there
    w.mover.place_orphans(T0 + 1)
    assert w.to(b"p", control.Relocate)[-1].reason == "failover"


def test_drains_move_late_arrivals_too():
    w = World(exchanges=("x1", "x2", "x3"), subscribers=())
    p = w.publisher("p", "x1")
    rel = w.mover.start(p, w.topology.exchanges["x2"], "forced", "test", T0)
    w.topology.exchanges["x2"].draining = True
    w.mover.continue_drains(T0)
    assert len(w.mover.relocations) == 1  # still moving: not touched
    w.mover.moved(control.Moved("p", "x2", rel.id, 1), T0 + 0.1)  # landed on a draining exchange
    [drain] = w.mover.relocations.values()
    assert drain.reason == "drain" and drain.target != "x2"


def test_no_exchange_left_means_the_publisher_is_told_to_keep_buffering():
    w = World(exchanges=("x1",))
    p = w.publisher("p", "x1")
    w.mover.failover(p, "x1 lost", T0)
    assert len(w.to(b"p", control.NoExchange)) == 1 and not w.mover.relocations


def test_a_moved_for_no_move_or_another_publisher_changes_nothing():
    w = World(subscribers=())
    p = w.publisher("p", "x1")
    q = w.publisher("q", "x1")
    rel = w.mover.start(p, w.topology.exchanges["x2"], "forced", "test", T0)
    for bogus in (control.Moved("p", "x2", rel.id + 7, 1), control.Moved("q", "x2", rel.id, 1),
                  control.Moved("nobody", "x2", rel.id, 1)):
        w.mover.moved(bogus, T0 + 0.1)
    assert p.relocation == rel.id and q.exchange == "x1" and w.log.counters["relocations"] == 0


def test_a_publisher_never_has_two_moves():
    w = World(exchanges=("x1", "x2", "x3"))
    p = w.publisher("p", "x1")
    w.mover.start(p, w.topology.exchanges["x2"], "forced", "test", T0)
    second = w.mover.start(p, w.topology.exchanges["x3"], "forced", "test", T0 + 0.1)
    assert list(w.mover.relocations) == [second.id] and p.relocation == second.id


@pytest.mark.parametrize("loads, want", [((50, 40), "x1"), ((900, 200), "x2")])
def test_least_loaded_counts_publishers_while_cold_and_load_once_warm(loads, want):
    w = World()
    for name, load in zip(("x1", "x2"), loads):
        w.topology.exchanges[name].load.add(load)
    w.publisher("a", "x2")
    assert w.topology.least_loaded(set(), T0, 1000).id == want


def test_a_publisher_waiting_for_a_live_exchange_moves_make_before_break_only_where_there_is_room():
    w = World(exchanges=("x1", "x2", "x3"))
    x1, x2, x3 = (w.topology.exchanges[n] for n in ("x1", "x2", "x3"))
    x1.busy, x1.load.value, x1.mark = 1.0, 900.0, 760.0
    x2.load.value, x2.mark = 800.0, 850.0  # saturated too: no room for p's 300 rec/s
    x3.load.value, x3.mark = 700.0, 1000.0
    x1.rates["p"] = Ewma(0.5)
    x1.rates["p"].add(300.0)
    p = w.publisher("p", "x1")
    w.mover.relieve(p, x1, "no acknowledgement for 1.6s", T0)
    assert w.outbox.sends == []  # x3 is the least loaded but 700 + 300 reaches its mark
    x3.load.value = 600.0
    w.mover.relieve(p, x1, "no acknowledgement for 1.6s", T0)
    rel = w.mover.relocations[p.relocation]
    assert (rel.target, rel.reason, rel.resends) == ("x3", "backlog", False)
    assert [m.source for m in w.to(b"s1", control.Prepare)] == ["x1"]  # planned: subscribers note the move
    for s in ("s1", "s2"):
        w.mover.ready(rel.id, s, T0)
    [relocate] = w.to(b"p", control.Relocate)
    assert relocate.reason == "relocate"  # make before break: nothing is resent
    w.mover.moved(control.Moved("p", "x3", rel.id, 1), T0 + 0.5)
    assert w.log.counters.get("failovers", 0) == 0
    w.outbox.sends.clear()
    w.mover.relieve(p, x3, "no acknowledgement for 1.6s", T0 + 5)  # within its cool-down: it stays
    assert w.outbox.sends == [] and p.relocation is None
