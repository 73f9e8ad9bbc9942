"""What a link carries, and what it says it wants of the queue it reads: demand forwarding, on the link's side.

A link carries the keys of its ``--prefix`` (every key without one). **On demand** it carries, of those, only
what the queue it carries into wants: that queue's monitor tells it (:mod:`monitor._demand`), whole, when it
says hello and on every change, the prefixes its subscribers subscribed to and what the links of other sides
want of it. Until told, an on-demand link carries nothing: with no interest on the far side, only its hellos
cross.

What it carries is what it wants of the queue it reads: it says so to that queue's monitor
(:class:`~roq.wire.control.links.Interest`, under its side), every :data:`TELL_INTERVAL` and at once when it
changes, so that a link that carries into the queue it reads learns it in turn: interest goes from link to link
against the records' way, and a record crosses a chain of links only while a subscriber at its end wants it.
"""

from __future__ import annotations

import logging

import zmq

from client._channel import MonitorChannel
from client._locator import MonitorLocator
from roq.config import CurveClient
from roq.errors import Result
from roq.federation import Prefixes, Relay
from roq.loop import Loop
from roq.wire import control

log = logging.getLogger(__name__)

__all__ = ["Wants", "TELL_INTERVAL"]

#: seconds between two statements of what the link wants, to the monitor of the queue it reads
TELL_INTERVAL = 0.5


class Wants:
    """What ``relay`` lets cross: ``prefixes`` (on demand: and what the far queue wants of them), said to the
    monitor of the queue the link reads (``source``) under ``side``, and the way the relay carries records on a
    tree's edge (its :attr:`~roq.federation.Relay.way`)."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], source: str | MonitorLocator, relay: Relay,
                 prefixes: Prefixes, *,
                 side: str, on_demand: bool, curve: CurveClient | None = None, who: str = "link") -> None:
        self.relay = relay
        self.prefixes = prefixes
        self.side = side
        self.way = relay.way
        self.on_demand = on_demand
        self.far: Prefixes | None = None  # what the far queue wants (None: not told yet)
        self.refused = ""  # why the source queue's monitor refuses what the link says ("": it does not)
        self.who = who
        self._channel = MonitorChannel(context, MonitorLocator.of(source), f"{who} (its wants)", curve)
        relay.want(Prefixes() if on_demand else prefixes)

    def attach(self, loop: Loop) -> None:
        loop.add(self._channel.socket, self._readable, f"{self.who}: the source queue's monitor")
        loop.every(TELL_INTERVAL, self.tell, f"{self.who}: what it wants", first=0.0)

    def told(self, msg: control.Interest) -> None:
        """The far queue's monitor says what that queue wants."""
        far = Prefixes.of(p for q in msg.queues for p in q.add)
        if far == self.far:
            return
        self.far = far
        if not self.on_demand:
            return
        wanted = self.prefixes.intersect(far)
        if self.relay.want(wanted):
            log.info("%s: carries %s (what the far side wants of %s)", self.who,
                     ", ".join(repr(p) for p in wanted.items) or "nothing",
                     ", ".join(repr(p) for p in self.prefixes.items))
            self.tell()

    def hello(self) -> control.Interest:
        """What the link tells the far queue's monitor with each hello: it wants none of that queue's records."""
        return control.Interest(queues=[control.QueueInterest("", add=[])], whole=True, side=self.side, way=self.way)

    def tell(self, now: float = 0.0) -> None:
        """Say what the link carries to the monitor of the queue it reads."""
        self._channel.follow()
        self._channel.send(control.Interest(queues=[control.QueueInterest("", add=list(self.relay.wanted.items))],
                                            whole=True, side=self.side, way=self.way, reads=True))

    def close(self) -> None:
        self._channel.close()

    def _readable(self) -> None:
        for msg in self._channel.receive():  # what the source queue wants of the far side: not this link's business
            if isinstance(msg, control.Reply) and msg.result == Result.FORBIDDEN and msg.comment != self.refused:
                log.error("%s: the source queue's monitor refuses what the link says it wants: %s", self.who,
                          msg.comment)
                self.refused = msg.comment
