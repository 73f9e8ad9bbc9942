"""The monitor's core: every decision of one queue's monitor, without a socket, ZooKeeper or a clock.

The core takes messages (with the sender's routing identity) and the time, and puts what should happen in
its :class:`~monitor._outbox.Outbox`. It is made of rooms named after what they handle, wired here:

* :class:`~monitor._exchanges.Exchanges`, :class:`~monitor._publishers.Publishers`,
  :class:`~monitor._subscribers.Subscribers`: what each kind of peer says;
* :class:`~monitor._kpis.Kpis`: KPI reports become loads and archive records;
* :class:`~monitor._moves.Mover`: every move (assignment, relocation, failover, drain);
* :class:`~monitor._balancer.Balancer`: the relocation rule, four times per KPI period;
* :class:`~monitor._scaling.Scaling`: the scaling rule through the GCM (in a cluster only);
* :class:`~monitor._rules.Adoption`: the queue's rules and thresholds from ZooKeeper;
* :class:`~monitor._operators.Operators`: ping, status, forced relocation;
* :class:`~monitor._demand.Demand`: what the queue wants of other clusters, told to the links that carry it in.

The shell (:class:`~monitor._monitor.Monitor`) dispatches to :meth:`Core.handlers`, calls :meth:`tick`
and :meth:`evaluate` on its timers and :meth:`cluster_changed` when ZooKeeper changes, and carries out the
outbox after each.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Callable

from monitor._balancer import Balancer
from monitor._demand import Demand
from monitor._events import EventLog
from monitor._exchanges import Exchanges
from monitor._kpis import Kpis
from monitor._moves import Mover
from monitor._operators import Operators
from monitor._outbox import Outbox
from monitor._durability import Durability
from monitor._permissions import Permissions
from monitor._publishers import Publishers
from monitor._replicas import Replicas
from monitor._rules import Adoption, Rules
from monitor._scaling import Scaling
from monitor._subscribers import Subscribers
from monitor._topology import ExchangeEntry, QueueView, Topology
from roq.wire import control
from roq.config import MonitorConfig
from roq.wire.control import Reply
from roq.runtime import DropCounter
from roq.wire.status import JournalStatus, ScalingStatus

log = logging.getLogger(__name__)

__all__ = ["Core", "Handler"]

#: ``handler(message, identity, now)``: the reply to send now, if any
Handler = Callable[[Any, bytes, float], "Reply | None"]


class Core:
    """The decisions of one queue's monitor.

    Args:
        config: timeouts, and the rules of a monitor on its own.
        events: the event log (the core counts in it; the shell records the events it decides).
        drops: the shell's count of dropped input (the status shows it).
        pid: the process id the status names.
        clustered: whether ZooKeeper and a GCM are there (rules from ZooKeeper, scaling).
        archiving: whether KPI archive records are wanted.
    """

    def __init__(self, config: MonitorConfig, *, events: EventLog, drops: DropCounter, pid: int = 0,
                 clustered: bool = False, archiving: bool = False) -> None:
        self.config = config
        self.events = events
        self.outbox = Outbox()
        self.rules = Rules.of(config)
        self.topology = Topology(subscriber_timeout=config.subscriber_timeout)
        t, out = self.topology, self.outbox
        self.mover = Mover(t, config, self.rules, events, out)
        self.demand = Demand(config.queue, t, out)
        # a subscriber that comes or goes changes what the queue wants
        self.subscribers = Subscribers(t, self.mover, out, subscriber_timeout=config.subscriber_timeout,
                                       journal=lambda: self.durability.reads, on_change=self.demand.changed)
        self.exchanges = Exchanges(t, self.rules, self.mover, self.subscribers, events, out,
                                   heartbeat_timeout=config.heartbeat_timeout, clustered=clustered)
        self.publishers = Publishers(t, self.mover, out, publisher_timeout=config.publisher_timeout)
        self.kpis = Kpis(t, self.rules, out, archiving=archiving)
        self.balancer = Balancer(t, self.rules, self.mover, events, out)
        self.adoption = Adoption(self.rules, t, out)
        self.permissions = Permissions(config.queue, t, out)
        self.durability = Durability(t, out, self.rules, journal_timeout=config.heartbeat_timeout)
        self.replicas = Replicas(out, lambda: self.rules.values, timeout=config.heartbeat_timeout,
                                 own_host=config.address, queue=config.queue)
        self.scaling = (Scaling(config.queue, t, self.rules, self.mover, self.exchanges, self.subscribers, events, out)
                        if clustered else None)
        self.operators = Operators(config.queue, pid, t, self.mover, self.rules, events, drops, self._scaling_state,
                                   totals=self.kpis.totals, latency=self.kpis.latency, journal=self._journal_status,
                                   links=self.demand.describe, adverts=lambda: self.demand.adverts)
        self._settled = False

    def handlers(self) -> dict[type[control.Message], Handler]:
        """The handler of every message a monitor serves."""
        return {
            control.Heartbeat: self._heartbeat,
            control.JournalHeartbeat: self._journal_heartbeat,
            control.ExchangeKpi: self.kpis.exchange,
            control.ExchangeBye: self.exchanges.bye,
            control.PublisherHello: self.publishers.hello,
            control.Moved: self.publishers.moved,
            control.Panic: self.publishers.panic,
            control.PublisherBye: self.publishers.bye,
            control.SubscriberHello: self._subscriber_hello,
            control.Ready: self.subscribers.ready,
            control.SubscriberBye: self.subscribers.bye,
            control.Ping: self.operators.ping,
            control.Status: self.operators.status,
            control.JournalWhere: self.operators.journal_where,
            control.ForceRelocate: self.operators.force_relocate,
            control.Interest: self.demand.told,
        }

    @property
    def kpi_period(self) -> float:
        """The KPI period in force (the rules are evaluated four times per period)."""
        return self.rules.kpi_period

    # ------------------------------------------------------------------ lifecycle

    def start(self, now: float, endpoint: str, view: QueueView | None = None, earlier: int = 0) -> None:
        """The monitor listens on ``endpoint``; in a cluster, ``view`` is what ZooKeeper says of the queue and
        ``earlier`` how many events a previous monitor left.

        For ``2 x heartbeat_timeout`` it settles: it does not fail a publisher over from an exchange it has
        not heard of yet, and sends subscribers no list that would take an exchange away from them.
        """
        self.topology.settle(now + 2 * self.config.heartbeat_timeout)
        if view is None:
            return
        self._adopt(view)
        self.adoption.seen(view)
        self.outbox.event("monitor_started", f"monitor of queue {self.config.queue} started on {endpoint}"
                          + (f"; continuing {earlier} earlier events" if earlier else ""), endpoint=endpoint)

    def cluster_changed(self, view: QueueView) -> None:
        """ZooKeeper says something new of the queue: rules, thresholds, state, placement or permissions."""
        self._adopt(view)
        self.adoption.note_thresholds(view)

    def _adopt(self, view: QueueView) -> None:
        self.permissions.adopt(view.acl)
        self.replicas.adopt(view.replicas, view.learners, view.version)
        if self.scaling is not None:
            self.scaling.adopt(view)
        if self.adoption.adopt(view) and self.scaling is not None:
            self.scaling.scaler.reset()
        self.durability.changed()

    # ------------------------------------------------------------------ timers

    def tick(self, now: float) -> None:
        """Every few tens of milliseconds: silent exchanges, moves' timeouts, silent peers, settling."""
        self.exchanges.check(now)
        self.mover.tick(now)
        self.balancer.check_fresh(now, enabled=self.config.relocation_rule)
        self.publishers.forget_silent(now)
        self.subscribers.forget_silent(now)
        self.demand.forget_silent(now)
        self.replicas.decide(now)
        if not self._settled and not self.topology.settling(now):
            self._settled = True
            self.mover.place_orphans(now)  # publishers whose exchange never reported: fail them over
            self.subscribers.broadcast(now)  # and subscribers drop the exchanges that never reported

    def quiet(self) -> bool:
        """Nothing is under way that the tick must follow closely: no relocation, settled after the start, no hot
        exchange waiting for a new one, no replicated journal (its elections are timed by the tick). Then the
        tick may come seldom, at the latest when an exchange would fall silent (:meth:`silent_at`)."""
        return (self._settled and not self.mover.relocations and self.balancer.fresh is None
                and not self.replicas.active)

    def silent_at(self) -> float:
        """When the exchange heard from longest ago falls silent for the heartbeat timeout, if nothing more comes
        from it (infinity: no exchange)."""
        last = min((x.last_seen for x in self.topology.exchanges.values()), default=math.inf)
        return last + self.exchanges.heartbeat_timeout

    def evaluate(self, now: float) -> None:
        """Four times per KPI period: the relocation rule, then (in a cluster) the scaling rule."""
        if self.config.relocation_rule:
            self.balancer.apply(now)
        if self.scaling is not None:
            self.scaling.evaluate(now, self.balancer.stuck)

    def discount_stall(self, late: float) -> None:
        """Time this loop did not run (SIGSTOP, a blocking call, a starved CPU) is nobody else's silence.

        Heartbeats and hellos sent meanwhile wait in the socket; judged before they are read, every peer
        would look dead. So a tick that comes ``late`` moves every peer's last sign of life forward by as
        much: a peer that really died is declared so that much later, none is declared dead for our pause.
        """
        log.warning("monitor loop stalled for %.2fs: that silence is not counted against its peers", late)
        self.topology.discount(late)
        self.replicas.discount(late)

    # ------------------------------------------------------------------ handlers that span rooms

    def _heartbeat(self, hb: control.Heartbeat, identity: bytes, now: float) -> None:
        self.permissions.heartbeat(hb, identity)  # before anything is assigned to a new exchange
        self.durability.heartbeat(hb, identity)
        x: ExchangeEntry | None = self.exchanges.heartbeat(hb, identity, now)
        if x is not None and self.scaling is not None and self.scaling.exchange_joined(x, now):
            self.balancer.wait_for(x.id)

    def _journal_heartbeat(self, hb: control.JournalHeartbeat, identity: bytes, now: float) -> None:
        self.permissions.heartbeat(hb, identity)  # who may read it (JournalHeartbeat.permissions)
        if hb.replica:  # one replica of a replicated journal: the exchanges and readers are told of its leader
            self.durability.replica_heartbeat(hb, identity)
            self.replicas.heartbeat(hb, identity, now)
            leader = self.replicas.leader(now)
            if leader is None or leader.journal != hb.journal:
                return
        if self.durability.journal_heartbeat(hb, identity, now):
            self.subscribers.broadcast(now)  # where the journal is read from now on

    def _journal_status(self, now: float) -> JournalStatus:
        status = self.durability.describe(now)
        if not self.replicas.known:
            return status
        return dataclasses.replace(status, replicas=self.replicas.describe(now), elections=self.replicas.elections)

    def _subscriber_hello(self, hello: control.SubscriberHello, identity: bytes, now: float) -> None:
        self.subscribers.hello(hello, identity, now)
        self.kpis.subscriber(hello, identity, now)

    def _scaling_state(self) -> ScalingStatus:
        if self.scaling is not None:
            return self.scaling.describe()
        return ScalingStatus(placement={}, starting=[], retiring="", asking_gcm=False)
