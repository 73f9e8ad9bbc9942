"""The monitor's exchanges: they join and beat, drain when they stop, and are lost when they fall silent.

An exchange registers with its first heartbeat (which carries its endpoints) and beats every 250 ms; one
silent for ``heartbeat_timeout`` is declared lost and its publishers fail over. An exchange that stops
(ExchangeBye, or a heartbeat saying it drains) keeps forwarding while its publishers are moved away
make-before-break.
"""

from __future__ import annotations

import logging

from monitor._events import EventLog
from monitor._moves import Mover
from monitor._outbox import Outbox
from monitor._rule import Ewma
from monitor._rules import Rules
from monitor._subscribers import Subscribers
from monitor._topology import ExchangeEntry, Topology, check_name
from roq.wire import control
log = logging.getLogger(__name__)

__all__ = ["Exchanges"]


class Exchanges:
    """Handles what exchanges send, and declares the silent ones lost.

    Args:
        topology: the queue's peers.
        rules: the rules in force (smoothing, the KPI period sent to a newcomer).
        mover: moves publishers off draining and lost exchanges.
        subscribers: told of every change of the exchanges.
        events: the counters.
        outbox: where messages and events go.
        heartbeat_timeout: an exchange silent this long is lost.
        clustered: whether the rules come from ZooKeeper (then a newcomer is sent the queue's KPI period).
    """

    def __init__(self, topology: Topology, rules: Rules, mover: Mover, subscribers: Subscribers, events: EventLog,
                 outbox: Outbox, *, heartbeat_timeout: float, clustered: bool) -> None:
        self.topology = topology
        self.rules = rules
        self.mover = mover
        self.subscribers = subscribers
        self.events = events
        self.outbox = outbox
        self.heartbeat_timeout = heartbeat_timeout
        self.clustered = clustered

    def heartbeat(self, hb: control.Heartbeat, identity: bytes, now: float) -> ExchangeEntry | None:
        """A heartbeat (the first one registers the exchange); returns the exchange if it just joined."""
        name = check_name(hb.exchange, "exchange")
        check_name(hb.frontend, "frontend")
        check_name(hb.backend, "backend")
        exchanges = self.topology.exchanges
        x = exchanges.get(name)
        joined = None
        if x is None:
            self.topology.admit("exchanges", name)
            alpha = self.rules.smoothing
            x = joined = ExchangeEntry(name, hb.frontend, hb.backend, hb.pid, identity, now, Ewma(alpha), Ewma(alpha),
                                       joined=now, busy_load=Ewma(alpha), out_load=Ewma(alpha),
                                       out_bytes_load=Ewma(alpha))
            exchanges[name] = x
            self.outbox.event("exchange_joined", f"exchange {x.id} joined: frontend {x.frontend}, backend {x.backend}",
                              exchange=x.id)
            if self.clustered:
                self.outbox.send(identity, control.KpiPeriod(period=self.rules.kpi_period))
            self.subscribers.broadcast(now)
            self.mover.place_orphans(now)
            self.mover.continue_drains(now)
        elif (x.frontend, x.backend) != (hb.frontend, hb.backend):
            x.frontend, x.backend, x.pid = hb.frontend, hb.backend, hb.pid
            self.outbox.event("exchange_restarted", f"exchange {x.id} came back on new endpoints", exchange=x.id)
            self.subscribers.broadcast(now)
        x.identity = identity
        x.last_seen = now
        if hb.draining and not x.draining:
            self.drain(x, now)
        return joined

    def bye(self, bye: control.ExchangeBye, identity: bytes, now: float) -> None:
        x = self.topology.exchanges.get(bye.exchange)
        if x is not None and not x.draining:
            self.drain(x, now)

    def drain(self, x: ExchangeEntry, now: float) -> None:
        """Take no new publisher on ``x`` and move its publishers away."""
        x.draining = True
        moving = sum(1 for p in self.topology.publishers.values() if p.exchange == x.id and p.relocation is None)
        self.outbox.event("exchange_draining", f"exchange {x.id} draining: moving its {moving} publishers away",
                          exchange=x.id)
        self.subscribers.broadcast(now)
        self.mover.continue_drains(now)

    def check(self, now: float) -> None:
        """Declare lost every exchange silent for longer than the heartbeat timeout."""
        for x in [x for x in self.topology.exchanges.values() if now - x.last_seen > self.heartbeat_timeout]:
            self.lose(x, now)

    def lose(self, x: ExchangeEntry, now: float) -> None:
        del self.topology.exchanges[x.id]
        self.mover.exchange_lost(x.id, now)
        on_it = [p for p in self.topology.publishers.values() if p.exchange == x.id]
        if x.draining and not on_it:
            self.outbox.event("exchange_left", f"exchange {x.id} left after draining", exchange=x.id)
        else:
            self.events.count("exchanges_lost")
            self.outbox.event(
                "exchange_lost",
                f"exchange {x.id} lost: silent for {now - x.last_seen:.2f}s (timeout "
                f"{self.heartbeat_timeout:.2f}s); {len(on_it)} publishers fail over",
                exchange=x.id,
                silent_s=round(now - x.last_seen, 3),
                publishers=len(on_it),
            )
        self.subscribers.broadcast(now, lost=[x.id])
        for p in on_it:
            if p.relocation is None:
                self.mover.failover(p, f"exchange {x.id} lost", now)
        self.mover.place_orphans(now)  # e.g. a failover still preparing whose target was this exchange
