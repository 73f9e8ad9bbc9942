"""Applying the relocation rule (:mod:`monitor._rule`) to the queue: which publisher moves where, now.

Four times per KPI period (and at once when a new exchange every subscriber hears could take load off hot
ones) the balancer shows the rule the accepting exchanges and their publishers' rates, starts the moves it
decides and books them in the smoothed loads at once, so that the next evaluation does not move more than
needed. Limit cases are reported at most once per cool-down. The hot exchanges that no move could cool are
:attr:`Balancer.stuck`: the scaling rule asks for a new exchange for them.
"""

from __future__ import annotations

import collections

from monitor._events import EventLog
from monitor._moves import Mover
from monitor._outbox import Outbox
from monitor._rule import ExchangeLoad, evaluate
from monitor._rules import Rules
from monitor._topology import Topology

__all__ = ["Balancer"]


class Balancer:
    """Runs the relocation rule over the queue and starts the moves it decides.

    Args:
        topology: the queue's exchanges and publishers.
        rules: the mark, the sustain and the cool-down in force.
        mover: starts the moves.
        events: the counters.
        outbox: where limit cases are reported.
    """

    def __init__(self, topology: Topology, rules: Rules, mover: Mover, events: EventLog, outbox: Outbox) -> None:
        self.topology = topology
        self.rules = rules
        self.mover = mover
        self.events = events
        self.outbox = outbox
        self.stuck: list[str] = []  # hot exchanges whose movable publishers no exchange can take
        self.fresh: str | None = None  # a new exchange that hot exchanges wait for
        self._limit_reported: dict[str, float] = {}  # publisher -> when last reported as a limit case

    def apply(self, now: float) -> None:
        """Evaluate the rule once and start its moves."""
        rules = self.rules
        publishers = self.topology.publishers
        alive, heard = self.topology.accepting(set(), now)
        arriving = collections.Counter(rel.target for rel in self.mover.relocations.values())
        views = []
        for x in alive:
            rates = {
                pub: ewma.value
                for pub, ewma in x.rates.items()
                if (p := publishers.get(pub)) is not None and p.exchange == x.id and p.relocation is None
            }
            views.append(ExchangeLoad(x.id, x.load.value, x.hot_since, rates, accepts=x.id in heard, mark=x.mark,
                                      arriving=arriving[x.id]))
        moved_at = {p.id: p.moved_at for p in publishers.values()}
        stuck: list[str] = []
        moves, limits = evaluate(views, now=now, high=rules.high, sustain=rules.sustain, cooldown=rules.cooldown,
                                 moved_at=moved_at, stuck=stuck)
        self.stuck = stuck
        quiet = max(rules.cooldown, rules.sustain)
        self._limit_reported = {pub: t for pub, t in self._limit_reported.items() if now - t < quiet}
        for case in limits:
            if case.publisher not in self._limit_reported:
                self._limit_reported[case.publisher] = now
                self.events.count("limit_cases")
                self.outbox.event("limit_case", case.describe(), exchange=case.exchange, publisher=case.publisher,
                                  publisher_rate=round(case.publisher_rate, 1), high=case.high)
        exchanges = self.topology.exchanges
        for move in moves:
            source, target = exchanges[move.source], exchanges[move.target]
            self.mover.start(publishers[move.publisher], target, "rule", move.describe(), now)
            # book the move at once so that the next evaluation does not move more than needed
            source.load.shift(-move.publisher_rate)
            target.load.shift(move.publisher_rate)
            source.hot_since = source.over_since = None

    def wait_for(self, exchange: str) -> None:
        """The hot exchanges move onto ``exchange`` once every subscriber hears it."""
        self.fresh = exchange

    def check_fresh(self, now: float, *, enabled: bool) -> None:
        """Once every subscriber hears the new exchange, the hot exchanges need not wait for the next
        evaluation (``enabled``: whether the rule runs at all)."""
        if self.fresh is None:
            return
        _, heard = self.topology.accepting(set(), now)
        if self.fresh not in self.topology.exchanges or self.fresh in heard:
            if self.fresh in heard and enabled:
                self.apply(now)
            self.fresh = None
