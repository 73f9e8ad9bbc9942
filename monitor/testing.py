"""A driver for the monitor's core without sockets, ZooKeeper or a clock: for tests and experiments.

:class:`Driver` does what the shell (:class:`monitor.Monitor`) does, in memory: it dispatches messages to the
core through the same :class:`~roq.server.Dispatcher` boundary (so a refusal comes back as the
:class:`~roq.wire.control.Reply` a peer would get), runs the tick and the rule evaluations on a simulated clock,
and carries out the outbox into lists: messages sent (by peer identity), events recorded in an
:class:`~monitor._events.EventLog`, archive records, and GCM requests waiting for :meth:`Driver.answer`.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar, overload

from monitor._core import Core
from monitor._events import EventLog
from monitor._outbox import GcmRequest
from monitor._topology import QueueView
from roq.wire import control
from roq.config import MonitorConfig
from roq.wire.control import Message, Reply
from roq.kpi.records import Record
from roq.runtime import DropCounter
from roq.server import Dispatcher, Request
from roq.wire.status import QueueStatus, decode

__all__ = ["Driver", "Peers", "TICK"]

TICK = 0.05  # the shell's tick
M = TypeVar("M", bound=Message)
WALL = 1.8e9  # the simulated wall clock at time 0


class Driver:
    """One monitor core on a simulated clock.

    Args:
        config: the monitor's configuration (default: the defaults).
        view: what ZooKeeper says of the queue; given, the core is *clustered* (rules from it, scaling).
        archiving: whether the core makes KPI archive records.
        now: the simulated monotonic time at start.
    """

    def __init__(self, config: MonitorConfig | None = None, *, view: QueueView | None = None, archiving: bool = False,
                 now: float = 0.0) -> None:
        self.config = config or MonitorConfig()
        self.now = now
        self.log = EventLog(clock=lambda: WALL + self.now)
        self.drops = DropCounter(logging.getLogger(__name__), "monitor (driven)")
        self.core = Core(self.config, events=self.log, drops=self.drops, pid=1, clustered=view is not None,
                         archiving=archiving)
        self.dispatcher = Dispatcher("monitor (driven)", {kind: self._serving(h) for kind, h in self.core.handlers().items()},
                                     self.drops)
        self.sent: list[tuple[bytes, Message]] = []
        self.records: list[Record] = []
        self.requests: list[GcmRequest] = []  # waiting for answer()
        self._next_rule = now + self.core.kpi_period / 4
        self.core.start(now, "tcp://127.0.0.1:5500", view)
        self.apply()

    # ------------------------------------------------------------------ inputs

    def send(self, msg: Message, identity: bytes = b"peer", principal: str | None = None) -> Reply | None:
        """Hand ``msg`` from ``identity`` (with CURVE: of ``principal``) to the core; the reply the peer gets,
        if any."""
        return self.dispatcher.handle(msg, Request(None, (identity,), principal))

    def frame(self, body: bytes, identity: bytes = b"peer") -> Reply | None:
        """Hand a raw frame (decoded at the boundary, as the shell does); the reply the peer gets, if any."""
        return self.dispatcher.dispatch(body, Request(None, (identity,)))

    def _serving(self, handler: Any) -> Any:
        def serve(msg: Any, request: Request) -> Reply | None:
            self.core.permissions.check(msg, request.principal)  # as the shell does
            try:
                return handler(msg, request.identity, self.now)
            finally:
                self.apply()
        return serve

    def cluster(self, view: QueueView) -> None:
        """ZooKeeper changed."""
        self.core.cluster_changed(view)
        self.apply()

    def answer(self, reply: Reply | None, why: str = "no answer") -> GcmRequest:
        """Answer the oldest waiting GCM request with ``reply`` (None: no answer came); that request."""
        request = self.requests.pop(0)
        request.answer(reply, why if reply is None else reply.comment, self.now)
        self.apply()
        return request

    # ------------------------------------------------------------------ time

    def run(self, seconds: float) -> None:
        """Let ``seconds`` pass: ticks every :data:`TICK`, the rules four times per KPI period."""
        end = self.now + seconds
        while self.now + TICK <= end + 1e-9:
            self.now += TICK
            self.core.tick(self.now)
            if self.now >= self._next_rule - 1e-9:
                self._next_rule = self.now + self.core.kpi_period / 4
                self.core.evaluate(self.now)
            self.apply()
        self.now = max(self.now, end)

    # ------------------------------------------------------------------ outputs

    def apply(self) -> None:
        """Carry out the outbox, as the shell does."""
        while self.core.outbox:
            out = self.core.outbox.take()
            self.sent += out.sends
            self.records += out.records
            for event in out.events:
                self.log.add(event.kind, event.text, queue=self.config.queue, origin="monitor", **event.fields)
            self.requests += out.requests

    def forget(self, kind: type[Message]) -> None:
        """Forget what was sent of type ``kind``."""
        self.sent = [(i, m) for i, m in self.sent if not isinstance(m, kind)]

    @overload
    def to(self, identity: bytes) -> list[Message]: ...

    @overload
    def to(self, identity: bytes, kind: type[M]) -> list[M]: ...

    def to(self, identity: bytes, kind: type[Message] | None = None) -> list[Any]:
        """What was sent to ``identity`` (of type ``kind``), oldest first."""
        return [m for i, m in self.sent if i == identity and (kind is None or isinstance(m, kind))]

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The events recorded (of ``kind``), oldest first."""
        return [e for e in self.log.events if kind is None or e["kind"] == kind]

    def status(self) -> QueueStatus:
        """The status reply, as a peer reads it (through BSON, then :func:`roq.wire.status.decode`).

        Raises:
            ManagementError: the status was refused (a bug).
            ProtocolError: the monitor's status is not one (a bug).
        """
        reply = self.send(control.Status())
        assert reply is not None
        return decode(Reply.parse(control.encode(reply)).raise_for())


class Peers:
    """Simulated peers around a :class:`Driver`: exchanges that beat every 0.25 s and report KPIs every second,
    subscribers that say hello every second and answer every Prepare, publishers that say hello every second
    (with the exchange they send to) and carry out moves when told (:meth:`moved`).

    Args:
        driver: the monitor they talk to.
        exchanges: the exchanges' names (they register at once).
        subscribers: the subscribers' names (each hears every exchange that beats).
    """

    def __init__(self, driver: Driver, exchanges: tuple[str, ...] = ("x1", "x2"),
                 subscribers: tuple[str, ...] = ("s1",)) -> None:
        self.d = driver
        self.exchanges = list(exchanges)
        self.subscribers = list(subscribers)
        self.rates: dict[str, dict[str, int]] = {}  # exchange -> publisher -> records/s it reports
        self.busy: dict[str, float] = {}  # exchange -> the busy fraction it reports (default 0.1)
        self.pressure: dict[str, float] = {}  # publisher -> the pressure it says in its hellos (default 0)
        self.silent: set[str] = set()  # exchanges that stopped (crashed)
        self.sending: dict[str, str] = {}  # publisher -> the exchange it sends to ("" before it has one)
        self.beat()
        self.hellos()

    def endpoints(self, x: str) -> tuple[str, str]:
        i = self.exchanges.index(x)
        return f"tcp://127.0.0.1:{7000 + i}", f"tcp://127.0.0.1:{8000 + i}"

    def beat(self) -> None:
        for x in self.exchanges:
            if x not in self.silent:
                self.d.send(control.Heartbeat(x, *self.endpoints(x), pid=100), x.encode())

    def hellos(self) -> None:
        heard = [x for x in self.exchanges if x not in self.silent]
        for s in self.subscribers:
            self.d.send(control.SubscriberHello(s, b"", heard), s.encode())
        for p, x in self.sending.items():
            self.d.send(control.PublisherHello(p, x, pressure=self.pressure.get(p, 0.0)), p.encode())

    def kpis(self) -> None:
        for x in self.exchanges:
            if x in self.silent:
                continue
            rates = self.rates.get(x, {})
            total = sum(rates.values())
            self.d.send(control.ExchangeKpi(x, 1.0, total, 100 * total, total, 100 * total,
                                            [control.PublisherRate(p, r, 100 * r) for p, r in rates.items()],
                                            20.0, 50 << 20, self.busy.get(x, 0.1), 0), x.encode())

    def live(self, seconds: float, *, answer_ready: bool = True) -> None:
        """``seconds`` of a live queue: beats, hellos and KPIs; subscribers answer Prepare at once."""
        for i in range(round(seconds / 0.25)):
            self.d.run(0.25)
            self.beat()
            if (i + 1) % 4 == 0:
                self.hellos()
                self.kpis()
            if answer_ready:
                self.ready()

    def ready(self) -> None:
        """Every subscriber answers the Prepares it was sent (and forgets them)."""
        for s in self.subscribers:
            for prepare in self.d.to(s.encode(), control.Prepare):
                self.d.send(control.Ready(s, prepare.relocation), s.encode())
        self.d.forget(control.Prepare)

    def publisher(self, name: str, exchange: str = "") -> control.Relocate | None:
        """A publisher says hello (and takes the exchange it is assigned); the last Relocate it was sent, if any."""
        self.d.send(control.PublisherHello(name, exchange), name.encode())
        moves = self.d.to(name.encode(), control.Relocate)
        self.sending[name] = exchange
        if moves and moves[-1].reason == "assign":  # type: ignore[attr-defined]
            self.sending[name] = moves[-1].exchange  # type: ignore[attr-defined]
        return moves[-1] if moves else None  # type: ignore[return-value]

    def moved(self, name: str) -> control.Relocate:
        """The publisher carries out its last Relocate and reports Moved."""
        relocate = self.d.to(name.encode(), control.Relocate)[-1]
        assert isinstance(relocate, control.Relocate)
        self.d.send(control.Moved(name, relocate.exchange, relocate.relocation, 1), name.encode())
        self.sending[name] = relocate.exchange
        return relocate
