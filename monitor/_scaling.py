"""Scaling a queue out and in: the scaling rule (:mod:`monitor._elastic`) carried out through the GCM.

Four times per KPI period, in a cluster, the controller shows the scaling rule the queue's load and acts on
its decision: *out* asks the GCM for one more exchange than placed (``ScaleOut``, idempotent), *in* drains
the least loaded exchange and, once it carries no publisher and no move involves it, asks the GCM to remove
its slot (``RemoveExchange``). One decision at a time: nothing is decided while a GCM request is unanswered,
a placed slot has not joined yet or some subscriber does not hear a joined exchange yet (each for at most
:data:`STARTING_LIMIT`), or an exchange is being drained; after a refused scale-out the controller waits
``max(REFUSED_BACKOFF, cooldown_s)``. Requests go through the outbox; the GCM's answers come back to the
callbacks given with them.
"""

from __future__ import annotations

import logging

from monitor._elastic import Decision, QueueLoad, Scaler
from monitor._events import EventLog
from monitor._exchanges import Exchanges
from monitor._moves import Mover
from monitor._outbox import Outbox
from monitor._rules import Rules
from monitor._subscribers import Subscribers
from monitor._topology import ExchangeEntry, QueueView, Topology
from roq.wire import management as m
from roq.wire.control import Reply
from roq.wire.documents import RUNNING
from roq.wire.status import ScalingStatus
from roq.zk import exchange_slot

log = logging.getLogger(__name__)

__all__ = ["Scaling", "STARTING_LIMIT", "REFUSED_BACKOFF"]

STARTING_LIMIT = 20.0  # a placed exchange not heard of for this long no longer holds scaling back
REFUSED_BACKOFF = 5.0  # at least this long between scale-outs after the GCM refused one


class Scaling:
    """The scaling controller of one queue.

    Args:
        queue: the queue's name (in the requests to the GCM).
        topology: the queue's peers.
        rules: the rules in force.
        mover: whose moves a scale-in waits for.
        exchanges: drains the exchange chosen to scale in.
        subscribers: told when a refused scale-in gives an exchange back.
        events: the counters.
        outbox: where events and GCM requests go.
    """

    def __init__(self, queue: str, topology: Topology, rules: Rules, mover: Mover, exchanges: Exchanges,
                 subscribers: Subscribers, events: EventLog, outbox: Outbox) -> None:
        self.queue = queue
        self.topology = topology
        self.rules = rules
        self.mover = mover
        self.exchanges = exchanges
        self.subscribers = subscribers
        self.events = events
        self.outbox = outbox
        self.scaler = Scaler()
        self.view = QueueView()  # the queue's state and placement, from ZooKeeper
        self.missing_since: dict[str, float] = {}  # placed slots not heard of yet -> since when
        self.scaled_out_at: float | None = None  # when the last scale-out was decided (until its exchange joins)
        self.out_refused_until = 0.0
        self.retiring: str | None = None  # the exchange drained to scale in
        self.remove_asked = False
        self.asking = 0  # GCM requests not answered yet

    def adopt(self, view: QueueView) -> None:
        """The queue's state and placement, as ZooKeeper holds them now."""
        self.view = view

    def describe(self) -> ScalingStatus:
        return ScalingStatus(placement=dict(self.view.placement), starting=sorted(self.missing_since),
                             retiring=self.retiring or "", asking_gcm=self.asking > 0)

    def exchange_joined(self, x: ExchangeEntry, now: float) -> bool:
        """A new exchange; True if it is the one the last scale-out asked for (hot exchanges wait for it)."""
        if self.scaled_out_at is None or exchange_slot(x.id) not in self.view.placement:
            return False
        took = now - self.scaled_out_at
        self.scaled_out_at = None
        self.outbox.event("scale_out_done", f"exchange {x.id} joined {took:.2f}s after the scale-out decision",
                          exchange=x.id, took_s=round(took, 3))
        return True

    def evaluate(self, now: float, stuck: list[str]) -> None:
        """Carry on a scale-in, then take a new scaling decision if nothing is under way.

        ``stuck``: the hot exchanges the relocation rule could not cool (see :class:`~monitor._balancer.Balancer`).
        """
        self._continue_scale_in(now)
        if self.view.state != RUNNING:
            return
        exchanges = self.topology.exchanges
        placement = self.view.placement
        joined = {exchange_slot(x) for x in exchanges}
        for slot in [s for s in self.missing_since if s in joined or s not in placement]:
            del self.missing_since[slot]
        for slot in placement:
            if slot not in joined:
                self.missing_since.setdefault(slot, now)
        starting = [s for s, since in self.missing_since.items() if now - since < STARTING_LIMIT]
        # an exchange that joined but that some subscriber does not hear yet cannot take publishers: the hot
        # exchanges still look stuck until it can, and asking for another would be one too many
        _, heard = self.topology.accepting(set(), now)
        starting += [x.id for x in exchanges.values()
                     if not x.draining and x.id not in heard and now - x.joined < STARTING_LIMIT]
        if self.asking or starting or self.retiring is not None or now < self.out_refused_until:
            self.scaler.reset()
            return
        # one exchange per slot: a crashed exchange's successor may join before the monitor declares the
        # crashed one lost, and the two must not count as two (which looked like one above max_exchanges)
        newest: dict[str, ExchangeEntry] = {}
        for x in exchanges.values():
            slot = exchange_slot(x.id)
            if not x.draining and (slot not in newest or x.joined > newest[slot].joined):
                newest[slot] = x
        live = list(newest.values())
        counts = self.topology.publisher_counts()
        load = QueueLoad(
            loads={x.id: x.load.value for x in live},
            publishers={x.id: counts[x.id] for x in live},
            stuck=[x for x in stuck if x in exchanges],
            placed=len(placement),
            marks={x.id: x.mark for x in live},
            pressure={x.id: x.pressure for x in live},
        )
        decision = self.scaler.evaluate(load, self.rules.values, now)
        if decision is not None:
            self._decide(decision, now)

    def _decide(self, d: Decision, now: float) -> None:
        if self.scaler.decided(d, now, self.rules.values):
            self.events.count("flaps")
            flap = "; FLAP: it reverses the previous scaling decision"
        else:
            flap = ""
        if d.kind == "out":
            self.events.count("scale_outs")
            self.scaled_out_at = now
            self.outbox.event("scale_out", f"scale out from {d.exchanges} exchanges: {d.reason}{flap}",
                              reason=d.reason, flap=bool(flap), **d.numbers)
            self.asking += 1
            self.outbox.ask(m.ScaleOut(QName=self.queue, Exchanges=d.exchanges + 1, Reason=d.reason), "scale out",
                            self._scale_out_answered)
        else:
            x = self.topology.exchanges[d.victim]
            self.events.count("scale_ins")
            self.retiring, self.remove_asked = x.id, False
            self.outbox.event("scale_in", f"scale in from {d.exchanges} exchanges, draining {x.id}: {d.reason}{flap}",
                              exchange=x.id, reason=d.reason, flap=bool(flap), **d.numbers)
            self.exchanges.drain(x, now)

    def _scale_out_answered(self, reply: Reply | None, why: str, now: float) -> None:
        self.asking = max(0, self.asking - 1)
        if reply is not None and reply.ok:
            log.info("queue %s: GCM placed %.200s (%.200s)", self.queue, reply.data.get("Placed", []), reply.comment)
            return
        self.scaled_out_at = None
        if reply is None:  # no answer: the request is idempotent, the next evaluation may ask again
            self.outbox.event("scale_out_unanswered", f"scale out not answered: {why}", comment=why)
            return
        self.out_refused_until = now + max(REFUSED_BACKOFF, self.rules.cooldown)
        self.outbox.event("scale_out_refused", f"the GCM refused to scale out ({reply.result}): {reply.comment}",
                          result=reply.result, comment=reply.comment)

    def _continue_scale_in(self, now: float) -> None:
        """Once the exchange drained to scale in carries no publisher, ask the GCM to remove it."""
        x = self.topology.exchanges.get(self.retiring) if self.retiring else None
        if x is None:
            self.retiring = None
            return
        self.mover.continue_drains(now)
        busy = any(p.exchange == x.id for p in self.topology.publishers.values()) or any(
            x.id in (r.source, r.target) for r in self.mover.relocations.values()
        )
        if busy or self.remove_asked:
            return
        self.remove_asked = True
        slot = exchange_slot(x.id)

        def answered(reply: Reply | None, why: str, now: float) -> None:
            self.asking = max(0, self.asking - 1)
            if reply is not None and reply.ok:
                log.info("queue %s: GCM removes %s (%.200s)", self.queue, slot, reply.comment)
            elif reply is None:
                self.remove_asked = False  # ask again
            elif self.retiring == x.id:
                self.retiring = None
                x.draining = False
                self.outbox.event("scale_in_refused", f"the GCM refused to remove {x.id} ({reply.result}): "
                                  f"{reply.comment}; it takes publishers again", exchange=x.id, result=reply.result,
                                  comment=reply.comment)
                self.subscribers.broadcast(now)

        self.asking += 1
        self.outbox.ask(m.RemoveExchange(QName=self.queue, Exchange=slot, Reason="drained to scale in"),
                        f"remove {slot}", answered)
