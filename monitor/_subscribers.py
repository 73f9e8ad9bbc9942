"""The monitor's subscribers: their hellos (what they hear), their answers to Prepare, and the exchange list.

A subscriber says hello every second with the exchanges it hears; the monitor sends it the exchange list
whenever what it hears differs from the queue's exchanges, and every subscriber the list on every change.
A list makes a subscriber drop every exchange it does not name, so a monitor that is still settling after a
start sends a subscriber a list only if it takes nothing away from it.
"""

from __future__ import annotations

from typing import Callable

import logging

from monitor._moves import Mover
from monitor._outbox import Outbox
from monitor._topology import MAX_PREFIX, SubscriberEntry, Topology, check_name
from roq.wire import control
log = logging.getLogger(__name__)

__all__ = ["Subscribers"]


class Subscribers:
    """Handles what subscribers send and keeps them told of the exchanges.

    Args:
        topology: the queue's peers.
        mover: moves waiting for subscribers' answers.
        outbox: where the lists go.
        subscriber_timeout: a subscriber silent ten times this long is forgotten.
    """

    def __init__(self, topology: Topology, mover: Mover, outbox: Outbox, *, subscriber_timeout: float,
                 journal: Callable[[], str] = lambda: "",
                 on_change: Callable[[float], None] = lambda now: None) -> None:
        self.journal = journal  # where the queue's journal is read ("" none)
        self.topology = topology
        self.mover = mover
        self.outbox = outbox
        self.forget_after = 10 * subscriber_timeout
        self.on_change = on_change  # a subscriber came or went (its prefix with it)

    def hello(self, hello: control.SubscriberHello, identity: bytes, now: float) -> None:
        """A subscriber's hello (also its first): note what it hears, send it the list if that differs."""
        name = check_name(hello.subscriber, "subscriber")
        prefix = hello.prefix[:MAX_PREFIX]
        s = self.topology.subscribers.get(name)
        new = False
        if s is None:
            self.topology.admit("subscribers", name)
            s = SubscriberEntry(name, identity, prefix, now)
            new = True
            self.topology.subscribers[name] = s
            log.info("subscriber %s joined (prefix %r)", name[:8], prefix[:64])
        changed = s.prefix != prefix
        s.identity, s.last_seen, s.prefix = identity, now, prefix
        exchanges = self.topology.exchanges
        s.hears(hello.confirmed, exchanges)
        if (s.overflow or s.confirmed != exchanges.keys() or hello.journal != self.journal()) and self.may_list(s, now):
            self.outbox.send(s.identity, self.exchange_list())
        self.mover.subscriber_heard(s, now)
        if new or changed:
            self.on_change(now)

    def ready(self, ready: control.Ready, identity: bytes, now: float) -> None:
        self.mover.ready(ready.relocation, ready.subscriber, now)

    def bye(self, bye: control.SubscriberBye, identity: bytes, now: float) -> None:
        if self.topology.subscribers.pop(bye.subscriber, None) is not None:
            self.on_change(now)
        self.mover.subscriber_left(bye.subscriber, now)

    def exchange_list(self, lost: list[str] | None = None) -> control.Exchanges:
        return control.Exchanges(
            exchanges=[control.ExchangeInfo(x.id, x.backend) for x in self.topology.exchanges.values()],
            lost=lost or [],
            journal=self.journal(),
        )

    def broadcast(self, now: float, lost: list[str] | None = None) -> None:
        """Send the exchange list to every subscriber that may be sent it now."""
        msg = self.exchange_list(lost)
        for s in self.topology.subscribers.values():
            if self.may_list(s, now):
                self.outbox.send(s.identity, msg)

    def may_list(self, s: SubscriberEntry, now: float) -> bool:
        """Whether ``s`` may be sent the exchange list now.

        A list makes a subscriber drop every exchange it does not name. A (re)started monitor that has not
        heard from every exchange yet would make subscribers drop live exchanges whose publishers still send
        there (for instance exchanges that were still reporting to a monitor on a host that died): until it
        settles it only sends lists that take nothing away.
        """
        return not self.topology.settling(now) or (not s.overflow and s.confirmed <= self.topology.exchanges.keys())

    def forget_silent(self, now: float) -> None:
        subscribers = self.topology.subscribers
        silent = [s for s in subscribers.values() if now - s.last_seen > self.forget_after]
        for s in silent:
            log.info("subscriber %s silent for %.1fs: forgotten", s.id[:8], now - s.last_seen)
            del subscribers[s.id]
        if silent:
            self.on_change(now)
