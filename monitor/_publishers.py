"""The monitor's publishers: hellos (where they send), Moved, panics and goodbyes.

A publisher says hello at start (no exchange yet: it is assigned one) and every second (with the exchange it
sends to: the publisher knows best, and a restarted monitor learns it this way). A publisher whose exchange
stops acknowledging *panics*. If the monitor still hears that exchange, it is alive (saturated, or cut off from
this publisher): the publisher is moved make-before-break to an exchange with room, if one has and the
publisher is not cooling down, and nothing is resent (it fails over by itself if the old exchange never
acknowledges its marker). Only a panic about an exchange the monitor does not hear is a failover.
"""

from __future__ import annotations

import logging

from monitor._moves import Mover
from monitor._outbox import Outbox
from monitor._topology import PublisherEntry, Topology, check_name
from roq.wire import control
log = logging.getLogger(__name__)

__all__ = ["Publishers"]

MAX_REASON = 200  # characters of a panic's reason kept in the move's detail


class Publishers:
    """Handles what publishers send.

    Args:
        topology: the queue's peers.
        mover: assigns, moves and fails over publishers.
        outbox: where answers go.
        publisher_timeout: a publisher silent this long (and not moving) is forgotten.
    """

    def __init__(self, topology: Topology, mover: Mover, outbox: Outbox, *, publisher_timeout: float) -> None:
        self.topology = topology
        self.mover = mover
        self.outbox = outbox
        self.publisher_timeout = publisher_timeout

    def _entry(self, name: str, identity: bytes, now: float, exchange: str | None = None) -> PublisherEntry:
        p = self.topology.publishers.get(name)
        if p is None:
            self.topology.admit("publishers", name)
            p = self.topology.publishers[name] = PublisherEntry(name, identity, now, exchange=exchange)
        return p

    def hello(self, hello: control.PublisherHello, identity: bytes, now: float) -> None:
        name = check_name(hello.publisher, "publisher")
        if hello.exchange:
            check_name(hello.exchange, "exchange")
        p = self._entry(name, identity, now)
        p.identity, p.last_seen, p.epoch = identity, now, hello.epoch
        p.pressure = min(max(hello.pressure, 0.0), 1.0)
        if p.relocation is not None:
            if hello.moving == p.relocation:
                self.mover.still_moving(p.relocation, now)
            return
        if hello.exchange:
            p.exchange = hello.exchange  # the publisher knows best where it sends
            if hello.exchange not in self.topology.exchanges and not self.topology.settling(now):
                self.mover.failover(p, f"its exchange {hello.exchange} is not alive", now)
        else:
            self.mover.assign(p, now)

    def moved(self, moved: control.Moved, identity: bytes, now: float) -> None:
        check_name(moved.exchange, "exchange")
        self.mover.moved(moved, now)

    def panic(self, panic: control.Panic, identity: bytes, now: float) -> None:
        name = check_name(panic.publisher, "publisher")
        if panic.exchange:
            check_name(panic.exchange, "exchange")
        p = self._entry(name, identity, now, panic.exchange or None)
        p.identity, p.last_seen = identity, now
        if p.relocation is not None:
            return
        p.exchange = panic.exchange or p.exchange
        reason = panic.reason[:MAX_REASON]
        x = self.topology.exchanges.get(p.exchange) if p.exchange else None
        if x is not None:
            self.mover.relieve(p, x, f"publisher reports {x.id} unresponsive: {reason}", now)
            return
        if self.topology.settling(now):
            # a (re)started monitor knows neither every exchange nor the subscribers yet: a failover now would send
            # the publisher to an exchange its subscribers do not hear, and preparing them needs knowing them. It
            # is failed over once settled (Mover.place_orphans), with its subscribers prepared like any other's
            log.info("publisher %s reports exchange %s unresponsive: %s; failed over once the monitor settled",
                     p.id[:8], panic.exchange, reason)
            return
        log.warning("publisher %s reports exchange %s unresponsive: %s", p.id[:8], panic.exchange, reason)
        self.mover.failover(p, f"publisher reports {panic.exchange} unresponsive, and the monitor does not hear it: "
                               f"{reason}", now)

    def bye(self, bye: control.PublisherBye, identity: bytes, now: float) -> None:
        p = self.topology.publishers.pop(bye.publisher, None)
        if p is not None:
            self.mover.publisher_left(p)

    def forget_silent(self, now: float) -> None:
        publishers = self.topology.publishers
        for p in [p for p in publishers.values() if now - p.last_seen > self.publisher_timeout and p.relocation is None]:
            log.info("publisher %s silent for %.1fs: forgotten", p.id[:8], now - p.last_seen)
            del publishers[p.id]
