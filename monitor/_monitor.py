"""The monitor of one logical queue.

One ROUTER socket serves everybody: exchanges (heartbeats, KPIs), publishers (hello, moved, panic),
subscribers (hello, ready) and operators (ping, status, forced relocation). The monitor

* assigns a new publisher to the least loaded exchange that every live subscriber already hears;
* tells subscribers the exchange list on every change;
* moves publishers make-before-break: subscribers are prepared first (they note the move and confirm
  they hear the target), then the publisher is told to move;
* declares an exchange dead after ``heartbeat_timeout`` of silence and fails its publishers over;
* every KPI period, applies the relocation rule (:mod:`monitor._rule`) and logs each decision.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import zmq

from monitor import _rule
from monitor._moves import Mover
from monitor._topology import EventLog, ExchangeEntry, PublisherEntry, SubscriberEntry, Topology
from roq import control
from roq.config import MonitorConfig
from roq.control import Result
from roq.errors import ProtocolError, UnknownCommandError
from roq.runtime import DropCounter, SignalWakeup
from roq.sockets import HandshakeWatch, bind, poll_ms

log = logging.getLogger(__name__)

__all__ = ["Monitor"]

BURST = 512
TICK = 0.05  # seconds between checks of heartbeats and timeouts


class Monitor:
    """One monitor's socket, state and loop.

    Args:
        config: where to bind, thresholds and timeouts.
        context: the ZeroMQ context (default: a new one, terminated by :meth:`close`).
    """

    def __init__(self, config: MonitorConfig, *, context: zmq.Context | None = None) -> None:
        self.config = config
        self._own_context = context is None
        self._ctx = context or zmq.Context()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._router.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
        self._router.setsockopt(zmq.LINGER, 500)
        self._watch: HandshakeWatch | None = None
        self.endpoint = ""
        self.drops = DropCounter(log, f"monitor {config.queue}")
        self.log = EventLog()
        self.topology = Topology(high_records_per_s=config.high_records_per_s, subscriber_timeout=config.subscriber_timeout)
        self.exchanges = self.topology.exchanges
        self.publishers = self.topology.publishers
        self.subscribers = self.topology.subscribers
        self.mover = Mover(self.topology, config, self.log, lambda ident, msg: self._send([ident], msg), self._event)
        self._limit_reported: dict[str, float] = {}
        self._stopping = False
        self._handlers: dict[type, Callable[[list[bytes], Any], None]] = {
            control.Heartbeat: self._on_heartbeat,
            control.ExchangeKpi: self._on_kpi,
            control.ExchangeBye: self._on_exchange_bye,
            control.PublisherHello: self._on_publisher_hello,
            control.Moved: self._on_moved,
            control.Panic: self._on_panic,
            control.PublisherBye: self._on_publisher_bye,
            control.SubscriberHello: self._on_subscriber_hello,
            control.Ready: self._on_ready,
            control.SubscriberBye: self._on_subscriber_bye,
            control.Ping: self._on_ping,
            control.Status: self._on_status,
            control.ForceRelocate: self._on_force_relocate,
        }

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Bind the control endpoint.

        Raises:
            BrokerConnectionError: the address cannot be bound.
        """
        self.endpoint = bind(self._router, self.config.address, self.config.port)
        self._watch = HandshakeWatch(self._router, "control", self.drops)
        log.info("monitor of queue %r listening on %s", self.config.queue, self.endpoint)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
        self._router.close()
        if self._own_context:
            self._ctx.term()

    def serve(self, wakeup: SignalWakeup | None = None) -> None:
        """Run until a signal arrives on ``wakeup``."""
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        if self._watch is not None:
            poller.register(self._watch.socket, zmq.POLLIN)
        if wakeup is not None:
            poller.register(wakeup.fd, zmq.POLLIN)
        next_tick = time.monotonic() + TICK
        next_rule = time.monotonic() + self.config.kpi_period
        while not self._stopping:
            timeout = max(0.0, min(next_tick, next_rule) - time.monotonic())
            events = dict(poller.poll(poll_ms(timeout)))
            if self._router in events:
                self._on_router()
            if self._watch is not None and self._watch.socket in events:
                self._watch.handle()
            if wakeup is not None and wakeup.fd in events and wakeup.consume():
                log.info("monitor of queue %r stopping on signal", self.config.queue)
                self._stopping = True
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + TICK
                self._tick(now)
            if now >= next_rule:
                next_rule = now + self.config.kpi_period
                if self.config.relocation_rule:
                    self._apply_rule(now)

    # ------------------------------------------------------------------ socket

    def _on_router(self) -> None:
        for _ in range(BURST):
            try:
                frames = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            envelope, body = frames[:-1], frames[-1]
            if len(envelope) > 2 or (len(envelope) == 2 and envelope[1] != b""):
                self.drops.drop("bad envelope", f"{len(frames)} frames")
                continue
            try:
                msg = control.decode(body)
            except UnknownCommandError as exc:
                self.drops.drop("unknown command", str(exc))
                self._reply(envelope, getattr(exc, "cmd", 0), Result.UNKNOWN_COMMAND, str(exc))
                continue
            except ProtocolError as exc:
                self.drops.drop("malformed message", str(exc))
                self._reply(envelope, 0, Result.BAD_REQUEST, str(exc))
                continue
            handler = self._handlers.get(type(msg))
            if handler is None:
                self.drops.drop("unexpected command", type(msg).__name__)
                self._reply(envelope, msg.CMD, Result.UNKNOWN_COMMAND, f"{type(msg).__name__} is not served by a monitor")
                continue
            handler(envelope, msg)


    def _send(self, envelope: list[bytes], msg: control.Message) -> None:
        try:
            self._router.send_multipart([*envelope, control.encode(msg)], zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # peer gone or its pipe full
            log.debug("cannot send %s: %s", type(msg).__name__, exc)

    def _reply(self, envelope: list[bytes], request: int, result: int, comment: str = "", **data: Any) -> None:
        self._send(envelope, control.Reply(request=request, result=int(result), comment=comment, data=data))

    # ------------------------------------------------------------------ exchanges

    def _on_heartbeat(self, envelope: list[bytes], hb: control.Heartbeat) -> None:
        now = time.monotonic()
        x = self.exchanges.get(hb.exchange)
        if x is None:
            alpha = self.config.smoothing
            x = ExchangeEntry(
                hb.exchange, hb.frontend, hb.backend, hb.pid, envelope[0], now,
                _rule.Ewma(alpha), _rule.Ewma(alpha), joined=now,
            )
            self.exchanges[x.id] = x
            self._event("exchange_joined", f"exchange {x.id} joined: frontend {x.frontend}, backend {x.backend}", exchange=x.id)
            self._broadcast_exchanges()
            self.mover.place_orphans()
            self.mover.continue_drains()
        elif (x.frontend, x.backend) != (hb.frontend, hb.backend):
            x.frontend, x.backend, x.pid = hb.frontend, hb.backend, hb.pid
            self._event("exchange_restarted", f"exchange {x.id} came back on new endpoints", exchange=x.id)
            self._broadcast_exchanges()
        x.identity = envelope[0]
        x.last_seen = now
        if hb.draining and not x.draining:
            self._drain(x)

    def _on_exchange_bye(self, envelope: list[bytes], bye: control.ExchangeBye) -> None:
        x = self.exchanges.get(bye.exchange)
        if x is not None and not x.draining:
            self._drain(x)

    def _on_kpi(self, envelope: list[bytes], kpi: control.ExchangeKpi) -> None:
        x = self.exchanges.get(kpi.exchange)
        if x is None:
            return  # its first heartbeat, which carries its endpoints, registers it
        now = time.monotonic()
        x.last_seen = now
        period = max(kpi.period, 1e-3)
        x.load.add(kpi.records_in / period)
        x.bytes_load.add(kpi.bytes_in / period)
        x.cpu_percent, x.rss_bytes, x.busy = kpi.cpu_percent, kpi.rss_bytes, kpi.busy
        x.dropped += kpi.dropped
        seen = set()
        for rate in kpi.publishers:
            seen.add(rate.publisher)
            x.rates.setdefault(rate.publisher, _rule.Ewma(self.config.smoothing)).add(rate.records / period)
        for pub in list(x.rates):
            if pub not in seen:
                value = x.rates[pub].add(0.0)
                entry = self.publishers.get(pub)
                if value < 1.0 and (entry is None or entry.exchange != x.id):
                    del x.rates[pub]
        x.hot_since = (x.hot_since or now) if x.load.value > self.config.high_records_per_s else None

    def _drain(self, x: ExchangeEntry) -> None:
        x.draining = True
        moving = [p for p in self.publishers.values() if p.exchange == x.id and p.relocation is None]
        self._event("exchange_draining", f"exchange {x.id} draining: moving its {len(moving)} publishers away", exchange=x.id)
        self._broadcast_exchanges()
        self.mover.continue_drains()

    def _lose(self, x: ExchangeEntry, now: float) -> None:
        del self.exchanges[x.id]
        self.mover.exchange_lost(x.id)
        on_it = [p for p in self.publishers.values() if p.exchange == x.id]
        if x.draining and not on_it:
            self._event("exchange_left", f"exchange {x.id} left after draining", exchange=x.id)
        else:
            self.log.count("exchanges_lost")
            self._event(
                "exchange_lost",
                f"exchange {x.id} lost: silent for {now - x.last_seen:.2f}s (timeout "
                f"{self.config.heartbeat_timeout:.2f}s); {len(on_it)} publishers fail over",
                exchange=x.id,
                silent_s=round(now - x.last_seen, 3),
                publishers=len(on_it),
            )
        self._broadcast_exchanges(lost=[x.id])
        for p in on_it:
            self.mover.failover(p, f"exchange {x.id} lost")
        self.mover.place_orphans()  # e.g. a failover still preparing whose target was this exchange

    # ------------------------------------------------------------------ publishers

    def _on_publisher_hello(self, envelope: list[bytes], hello: control.PublisherHello) -> None:
        now = time.monotonic()
        p = self.publishers.get(hello.publisher)
        if p is None:
            p = PublisherEntry(hello.publisher, envelope[0], now)
            self.publishers[p.id] = p
        p.identity, p.last_seen, p.epoch = envelope[0], now, hello.epoch
        if p.relocation is not None:
            return
        if hello.exchange:
            if hello.exchange in self.exchanges:
                p.exchange = hello.exchange  # the publisher knows best where it sends
            else:
                p.exchange = hello.exchange
                self.mover.failover(p, f"its exchange {hello.exchange} is not alive")
        else:
            self.mover.assign(p)

    def _on_moved(self, envelope: list[bytes], moved: control.Moved) -> None:
        self.mover.moved(moved)

    def _on_panic(self, envelope: list[bytes], panic: control.Panic) -> None:
        p = self.publishers.get(panic.publisher)
        if p is None:
            p = PublisherEntry(panic.publisher, envelope[0], time.monotonic(), exchange=panic.exchange)
            self.publishers[p.id] = p
        p.identity, p.last_seen = envelope[0], time.monotonic()
        if p.relocation is not None:
            return
        p.exchange = panic.exchange or p.exchange
        log.warning("publisher %s reports exchange %s unresponsive: %s", p.id[:8], panic.exchange, panic.reason)
        target = self.mover.least_loaded(exclude={panic.exchange})
        if target is None:
            self._send([p.identity], control.NoExchange(publisher=p.id, comment="no other live exchange"))
            return
        self.mover.start(p, target, "panic", f"publisher reports {panic.exchange} unresponsive: {panic.reason}")

    def _on_publisher_bye(self, envelope: list[bytes], bye: control.PublisherBye) -> None:
        p = self.publishers.pop(bye.publisher, None)
        if p is not None:
            self.mover.publisher_left(p)

    # ------------------------------------------------------------------ subscribers

    def _on_subscriber_hello(self, envelope: list[bytes], hello: control.SubscriberHello) -> None:
        now = time.monotonic()
        s = self.subscribers.get(hello.subscriber)
        if s is None:
            s = SubscriberEntry(hello.subscriber, envelope[0], hello.prefix, now)
            self.subscribers[s.id] = s
            log.info("subscriber %s joined (prefix %r)", s.id[:8], hello.prefix)
        s.identity, s.last_seen, s.prefix = envelope[0], now, hello.prefix
        s.confirmed = set(hello.confirmed)
        if s.confirmed != set(self.exchanges):
            self._send([s.identity], self._exchange_list())
        self.mover.subscriber_heard(s)

    def _on_ready(self, envelope: list[bytes], ready: control.Ready) -> None:
        self.mover.ready(ready.relocation, ready.subscriber)

    def _on_subscriber_bye(self, envelope: list[bytes], bye: control.SubscriberBye) -> None:
        self.subscribers.pop(bye.subscriber, None)
        self.mover.subscriber_left(bye.subscriber)

    def _exchange_list(self, lost: list[str] | None = None) -> control.Exchanges:
        return control.Exchanges(
            exchanges=[control.ExchangeInfo(x.id, x.backend) for x in self.exchanges.values()],
            lost=lost or [],
        )

    def _broadcast_exchanges(self, lost: list[str] | None = None) -> None:
        msg = self._exchange_list(lost)
        for s in self.subscribers.values():
            self._send([s.identity], msg)

    def _tick(self, now: float) -> None:
        cfg = self.config
        for x in list(self.exchanges.values()):
            if now - x.last_seen > cfg.heartbeat_timeout:
                self._lose(x, now)
        self.mover.tick(now)
        for p in list(self.publishers.values()):
            if now - p.last_seen > cfg.publisher_timeout and p.relocation is None:
                log.info("publisher %s silent for %.1fs: forgotten", p.id[:8], now - p.last_seen)
                del self.publishers[p.id]
        for s in list(self.subscribers.values()):
            if now - s.last_seen > 10 * cfg.subscriber_timeout:
                log.info("subscriber %s silent for %.1fs: forgotten", s.id[:8], now - s.last_seen)
                del self.subscribers[s.id]

    def _apply_rule(self, now: float) -> None:
        cfg = self.config
        alive, heard = self.topology.accepting(set(), now)
        views = []
        for x in alive:
            rates = {
                pub: ewma.value
                for pub, ewma in x.rates.items()
                if (p := self.publishers.get(pub)) is not None and p.exchange == x.id and p.relocation is None
            }
            views.append(_rule.ExchangeLoad(x.id, x.load.value, x.hot_since, rates, accepts=x.id in heard))
        moved_at = {p.id: p.moved_at for p in self.publishers.values()}
        moves, limits = _rule.evaluate(
            views, now=now, high=cfg.high_records_per_s, sustain=cfg.sustain, cooldown=cfg.cooldown, moved_at=moved_at
        )
        for case in limits:
            if now - self._limit_reported.get(case.publisher, float("-inf")) >= max(cfg.cooldown, cfg.sustain):
                self._limit_reported[case.publisher] = now
                self.log.count("limit_cases")
                self._event("limit_case", case.describe(), exchange=case.exchange, publisher=case.publisher,
                            publisher_rate=round(case.publisher_rate, 1), high=case.high)
        for move in moves:
            source, target = self.exchanges[move.source], self.exchanges[move.target]
            self.mover.start(self.publishers[move.publisher], target, "rule", move.describe())
            # book the move at once so that the next evaluation does not move more than needed
            source.load.value -= move.publisher_rate
            target.load.value += move.publisher_rate
            source.hot_since = None

    # ------------------------------------------------------------------ operators

    def _on_ping(self, envelope: list[bytes], ping: control.Ping) -> None:
        self._reply(envelope, ping.CMD, Result.OK, "pong", queue=self.config.queue)

    def _on_status(self, envelope: list[bytes], status: control.Status) -> None:
        self._reply(
            envelope,
            status.CMD,
            Result.OK,
            queue=self.config.queue,
            **self.topology.describe(time.monotonic()),
            relocations_in_flight=len(self.mover.relocations),
            relocations=self.mover.describe(),
            counters={**self.log.counters, "dropped_messages": self.drops.total},
            dropped=dict(self.drops.by_reason),
            events=list(self.log.events)[-200:],
        )

    def _on_force_relocate(self, envelope: list[bytes], force: control.ForceRelocate) -> None:
        def fail(code: Result, why: str) -> None:
            self._reply(envelope, force.CMD, code, why)

        if force.publisher:
            p = self.publishers.get(force.publisher)
            if p is None:
                return fail(Result.NOT_FOUND, f"no publisher {force.publisher}")
        else:
            busiest = [
                (ewma.value, pub)
                for x in self.exchanges.values()
                for pub, ewma in x.rates.items()
                if (q := self.publishers.get(pub)) is not None and q.exchange == x.id and q.relocation is None
            ]
            idle = [q for q in self.publishers.values() if q.relocation is None and q.exchange in self.exchanges]
            if busiest:
                p = self.publishers[max(busiest)[1]]
            elif idle:
                p = idle[0]
            else:
                return fail(Result.NOT_FOUND, "no publisher can be moved now")
        if p.relocation is not None:
            return fail(Result.UNAVAILABLE, f"publisher {p.id[:8]} is already moving")
        if force.target:
            target = self.exchanges.get(force.target)
            if target is None or target.draining:
                return fail(Result.NOT_FOUND, f"no live exchange {force.target}")
            if target.id == p.exchange:
                return fail(Result.BAD_REQUEST, f"publisher {p.id[:8]} already sends through {target.id}")
        else:
            target = self.mover.least_loaded(exclude={p.exchange} if p.exchange else set())
            if target is None:
                return fail(Result.UNAVAILABLE, "no other exchange to move to")
        rel = self.mover.start(p, target, "forced", "asked by an operator")
        self._reply(envelope, force.CMD, Result.OK, f"moving {p.id[:8]} to {target.id}",
                    relocation=rel.id, publisher=p.id, source=p.exchange or "", target=target.id)

    # ------------------------------------------------------------------ events

    def _event(self, kind: str, text: str, **fields: Any) -> None:
        self.log.add(kind, text, queue=self.config.queue, **fields)
        log.info("%s", text)
