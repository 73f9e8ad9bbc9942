"""Moving publishers: assignment, make-before-break relocation, failover, drains, and their timeouts.

A move (:class:`~monitor._topology.Relocation`) is *preparing* while the monitor waits for subscribers
to answer its Prepare (they note the move and confirm they hear the target), then *moving* once the
publisher has been told to go, until it reports Moved. A planned move waits for every live subscriber;
a failover (the publisher resends its window) only for those that do not hear the target yet.

Pure: every message goes to the :class:`~monitor._outbox.Outbox`, every method is given ``now``. A
publisher has at most one move in flight, so there are never more moves than publishers.
"""

from __future__ import annotations

import logging

from monitor._events import EventLog
from monitor._outbox import Outbox
from monitor._rules import Rules
from monitor._topology import ExchangeEntry, PublisherEntry, Relocation, SubscriberEntry, Topology
from roq.wire import control
from roq.config import MonitorConfig
from roq.wire.status import RelocationStatus

log = logging.getLogger(__name__)

__all__ = ["Mover"]


class Mover:
    """Starts and follows every move of one queue's publishers.

    Args:
        topology: the queue's exchanges, publishers and subscribers.
        config: the prepare and move timeouts.
        rules: the rules in force (the mark, for placement; the cool-down, for flaps).
        events: the counters.
        outbox: where messages and events go.
    """

    def __init__(self, topology: Topology, config: MonitorConfig, rules: Rules, events: EventLog, outbox: Outbox) -> None:
        self.topology = topology
        self.config = config
        self.rules = rules
        self.events = events
        self.outbox = outbox
        self.relocations: dict[int, Relocation] = {}
        self._next = 1

    # ------------------------------------------------------------------ placing

    def least_loaded(self, exclude: set[str], now: float) -> ExchangeEntry | None:
        return self.topology.least_loaded(exclude, now, self.rules.high)

    def assign(self, p: PublisherEntry, now: float) -> None:
        """Give a new publisher its exchange (again, if it did not get the first answer)."""
        exchanges = self.topology.exchanges
        target = (exchanges.get(p.exchange) if p.exchange else None) or self.least_loaded(set(), now)
        if target is None:
            self.outbox.send(p.identity, control.NoExchange(publisher=p.id, comment="the queue has no live exchange"))
            return
        if p.exchange != target.id:
            log.info("publisher %s assigned to exchange %s", p.id[:8], target.id)
        p.exchange = target.id
        self.outbox.send(p.identity, control.Relocate(publisher=p.id, exchange=target.id, frontend=target.frontend,
                                                      reason="assign"))

    def failover(self, p: PublisherEntry, why: str, now: float) -> None:
        target = self.least_loaded({p.exchange} if p.exchange else set(), now)
        if target is None:
            log.warning("publisher %s has no exchange to fail over to (%s); it keeps buffering", p.id[:8], why)
            self.outbox.send(p.identity, control.NoExchange(publisher=p.id, comment=why))
            return
        self.events.count("failovers")
        self.start(p, target, "failover", why, now)

    def relieve(self, p: PublisherEntry, source: ExchangeEntry, why: str, now: float) -> None:
        """``p`` waits for acknowledgements from ``source``, which is alive: move it make-before-break to an
        exchange with room for it (below its own mark with it), unless it moved within the cool-down.
        Otherwise it stays: back-pressure holds it, and the scaling rule sees the saturation."""
        if now - p.moved_at < self.rules.cooldown:
            log.info("publisher %s waits for %s, alive; it moved %.1fs ago: it stays (%s)", p.id[:8], source.id,
                     now - p.moved_at, why)
            return
        rate = self.topology.publisher_rate(p)
        target = self.least_loaded({source.id}, now)
        if target is None or target.load.value + rate >= (target.mark or self.rules.high):
            log.info("publisher %s waits for %s, alive; no other exchange has room for it (%s)", p.id[:8], source.id,
                     why)
            return
        self.start(p, target, "backlog", f"{why}; {source.id} is alive (busy {source.busy:.0%})", now)

    def place_orphans(self, now: float) -> None:
        """Give an exchange to publishers whose exchange is gone (or who never had one).

        While the monitor settles after a start, an exchange it has not heard of yet is not gone.
        """
        exchanges = self.topology.exchanges
        settling = self.topology.settling(now)
        for p in list(self.topology.publishers.values()):
            if p.relocation is None and (p.exchange is None or p.exchange not in exchanges):
                if p.exchange is None:
                    self.assign(p, now)
                elif not settling:
                    self.failover(p, f"exchange {p.exchange} is gone", now)

    def continue_drains(self, now: float) -> None:
        """Move every settled publisher off draining exchanges (also those that arrived there late)."""
        exchanges = self.topology.exchanges
        if not any(x.draining for x in exchanges.values()):
            return
        for p in list(self.topology.publishers.values()):
            x = exchanges.get(p.exchange) if p.exchange else None
            if x is None or not x.draining or p.relocation is not None:
                continue
            target = self.least_loaded({x.id}, now)
            if target is None:
                log.warning("exchange %s drains but no other exchange can take publisher %s", x.id, p.id[:8])
                continue
            self.start(p, target, "drain", f"exchange {x.id} is draining", now)

    # ------------------------------------------------------------------ one move

    def start(self, p: PublisherEntry, target: ExchangeEntry, reason: str, why: str, now: float) -> Relocation:
        """Begin moving ``p`` to ``target``; ``reason`` is rule, forced, drain, backlog or failover."""
        if p.relocation is not None:  # never two moves of one publisher: there are never more moves than publishers
            log.warning("relocation %s of publisher %s replaced by a new one", p.relocation, p.id[:8])
            self.relocations.pop(p.relocation, None)
        subs = self.topology.live_subscribers(now)
        rel = Relocation(self._next, p.id, p.exchange, target.id, reason, now, set(), detail=why)
        self._next += 1
        # A failover is urgent: only subscribers that do not hear the target yet are waited for.
        # A planned move waits for every subscriber to note it (see client._ordering, "notes").
        rel.waiting = {s.id for s in subs if not rel.resends or target.id not in s.confirmed}
        self.relocations[rel.id] = rel
        p.relocation = rel.id
        log.info("relocation %d (%s): publisher %s %s -> %s: %s", rel.id, reason, p.id[:8], p.exchange, target.id, why)
        # no note for a resend: the publisher resends its whole window, nothing older can be missed
        prepare = control.Prepare(
            relocation=rel.id,
            publisher=p.id,
            source="" if rel.resends else p.exchange or "",
            target=target.id,
            target_backend=target.backend,
        )
        for s in subs:
            if s.id in rel.waiting:
                self.outbox.send(s.identity, prepare)
        if not rel.waiting:
            self._move(rel, now)
        return rel

    def _answered(self, rel: Relocation, subscriber: str, now: float) -> None:
        rel.waiting.discard(subscriber)
        if not rel.waiting:
            self._move(rel, now)

    def _move(self, rel: Relocation, now: float) -> None:
        p = self.topology.publishers.get(rel.publisher)
        target = self.topology.exchanges.get(rel.target)
        if p is None or target is None:
            self.cancel(rel, "publisher or target gone", now)
            return
        rel.phase = "moving"
        rel.moving_since = now
        self.outbox.send(
            p.identity,
            control.Relocate(
                publisher=p.id,
                exchange=target.id,
                frontend=target.frontend,
                reason="failover" if rel.resends else "relocate",
                relocation=rel.id,
            ),
        )

    def still_moving(self, relocation: int, now: float) -> None:
        """The publisher says it is still carrying out ``relocation`` (its old exchange holds it back): the move's
        timeout counts from now."""
        rel = self.relocations.get(relocation)
        if rel is not None and rel.phase == "moving":
            rel.moving_since = now

    def cancel(self, rel: Relocation, why: str, now: float) -> None:
        self.relocations.pop(rel.id, None)
        p = self.topology.publishers.get(rel.publisher)
        if p is not None and p.relocation == rel.id:
            p.relocation = None
        self.events.count("relocations_failed")
        self.outbox.event(
            "relocation_failed",
            f"relocation {rel.id} of publisher {rel.publisher[:8]} {rel.source} -> {rel.target} abandoned: {why}",
            publisher=rel.publisher,
            source=rel.source,
            target=rel.target,
        )
        self.continue_drains(now)

    # ------------------------------------------------------------------ what peers tell us

    def moved(self, msg: control.Moved, now: float) -> None:
        """The publisher reports a move done: book it, count a flap if it is one."""
        rel = self.relocations.get(msg.relocation)
        p = self.topology.publishers.get(msg.publisher)
        if rel is None or p is None or rel.publisher != p.id:
            return
        del self.relocations[rel.id]
        p.relocation = None
        p.exchange = msg.exchange
        p.epoch = msg.epoch
        p.moved_at = now
        self.events.count("relocations")
        self.events.count(f"relocations_by_{rel.reason}")  # the metrics' reason label
        cooldown = self.rules.cooldown
        flap = rel.reason == "rule" and now - p.left.get(rel.target, float("-inf")) < 2 * cooldown
        if rel.source and rel.reason == "rule":
            # only the last two cool-downs matter for flaps: forget older departures (bounded)
            p.left = {x: t for x, t in p.left.items() if now - t < 2 * cooldown}
            p.left[rel.source] = now
        if flap:
            self.events.count("flaps")
        duration = (now - rel.started) * 1000
        self.outbox.event(
            "relocated",
            f"publisher {p.id[:8]} moved from {rel.source} to {rel.target} ({rel.reason}) in {duration:.1f} ms"
            f"{'; FLAP: it left ' + rel.target + ' recently' if flap else ''}",
            publisher=p.id,
            source=rel.source,
            target=rel.target,
            reason=rel.reason,
            duration_ms=round(duration, 2),
            flap=flap,
            detail=rel.detail,  # why: the loads and the mark the decision used
        )
        self.continue_drains(now)  # it may have landed on an exchange that started draining meanwhile

    def ready(self, relocation: int, subscriber: str, now: float) -> None:
        rel = self.relocations.get(relocation)
        if rel is not None and rel.phase == "preparing":
            self._answered(rel, subscriber, now)

    def subscriber_heard(self, s: SubscriberEntry, now: float) -> None:
        """A hello: a failover waiting for this subscriber to hear its target may go on."""
        for rel in list(self.relocations.values()):
            if rel.phase == "preparing" and rel.resends and rel.target in s.confirmed and s.id in rel.waiting:
                self._answered(rel, s.id, now)

    def subscriber_left(self, subscriber: str, now: float) -> None:
        for rel in list(self.relocations.values()):
            if rel.phase == "preparing" and subscriber in rel.waiting:
                self._answered(rel, subscriber, now)

    def publisher_left(self, p: PublisherEntry) -> None:
        if p.relocation is not None:
            self.relocations.pop(p.relocation, None)

    def exchange_lost(self, exchange: str, now: float) -> None:
        """Abandon the moves from or to a lost exchange (their publishers are failed over after)."""
        for rel in list(self.relocations.values()):
            if rel.target == exchange or rel.source == exchange:
                p = self.topology.publishers.get(rel.publisher)
                if p is not None and rel.target == exchange and rel.phase == "moving":
                    p.exchange = exchange  # it may already send there: fail it over too
                self.cancel(rel, f"exchange {exchange} lost", now)

    def tick(self, now: float) -> None:
        """Time out preparations (move anyway) and moves the publisher never confirmed (abandon)."""
        cfg = self.config
        for rel in list(self.relocations.values()):
            if rel.phase == "preparing" and now - rel.started > cfg.prepare_timeout:
                log.warning(
                    "relocation %d: %d subscribers did not confirm within %.1fs; moving anyway (%s)",
                    rel.id, len(rel.waiting), cfg.prepare_timeout, ", ".join(s[:8] for s in sorted(rel.waiting)[:10]),
                )
                rel.waiting.clear()
                self._move(rel, now)
            elif rel.phase == "moving" and now - rel.moving_since > cfg.move_timeout:
                self.cancel(rel, f"publisher did not confirm within {cfg.move_timeout:.1f}s", now)

    def describe(self) -> list[RelocationStatus]:
        return [
            RelocationStatus(id=r.id, publisher=r.publisher, source=r.source or "", target=r.target, reason=r.reason,
                             phase=r.phase, waiting=len(r.waiting))
            for r in self.relocations.values()
        ]
