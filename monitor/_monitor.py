"""The monitor of one logical queue.

One ROUTER socket serves everybody: exchanges (heartbeats, KPIs), publishers (hello, moved, panic),
subscribers (hello, ready) and operators (ping, status, forced relocation). The monitor

* assigns a new publisher to the least loaded exchange that every live subscriber already hears;
* tells subscribers the exchange list on every change;
* moves publishers make-before-break: subscribers are prepared first (they note the move and confirm
  they hear the target), then the publisher is told to move;
* declares an exchange dead after ``heartbeat_timeout`` of silence and fails its publishers over;
* four times per KPI period, applies the relocation rule (:mod:`monitor._rule`) and, in a cluster, the
  scaling rule (:mod:`monitor._elastic`), and logs each decision with its reason and numbers.

In a cluster (``config.zk`` set, see :mod:`monitor._cluster`) the queue's rules come from ZooKeeper and
change without a restart; scaling out asks the GCM for one more exchange, scaling in drains the least
loaded exchange and then asks the GCM to remove it. A restarted monitor rebuilds its state from what the
exchanges, publishers and subscribers report (they all report periodically) and from ZooKeeper (rules,
placement, its earlier events and counters); while it settles it does not take a publisher's exchange it
has not heard from yet for dead.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Callable

import zmq

from monitor import _rule
from monitor._cluster import ClusterLink
from monitor._elastic import Decision, QueueLoad, Scaler
from monitor._moves import Mover
from monitor._topology import EventLog, ExchangeEntry, PublisherEntry, SubscriberEntry, Topology
from roq import control
from roq.config import MonitorConfig
from roq.control import Result
from roq import management as m
from roq.errors import ProtocolError, UnknownCommandError
from roq.kpi.archive import ArchiveWriter
from roq.kpi.records import EventRecord, ExchangeRecord, PublisherRecord, SubscriberRecord
from roq.rules import DEFAULT_RULES
from roq.runtime import DropCounter, SignalWakeup
from roq.sockets import HandshakeWatch, bind, poll_ms
from roq.zk import exchange_slot

log = logging.getLogger(__name__)

__all__ = ["Monitor"]

BURST = 512
TICK = 0.05  # seconds between checks of heartbeats and timeouts
STALL = 0.25  # a tick this late means the loop itself stopped (see Monitor._discount_stall)
EVALUATIONS_PER_PERIOD = 4  # rule evaluations per KPI period (each acts only on sustained conditions)
STARTING_LIMIT = 20.0  # a placed exchange not heard of for this long no longer holds scaling back
REFUSED_BACKOFF = 5.0  # at least this long between scale-outs after the GCM refused one


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
        self.cluster = (
            ClusterLink(config.zk, config.root, config.queue, self._ctx, session_timeout=config.session_timeout)
            if config.zk else None
        )
        self.rules = self._rules_of(config)
        self.archive: ArchiveWriter | None = None  # opened by start()
        self._thresholds_seen: dict[str, Any] = {}
        self.scaler = Scaler()
        self._missing_since: dict[str, float] = {}  # placed slots not heard of yet -> since when
        self._scaled_out_at: float | None = None  # when the last scale-out was decided (until its exchange joins)
        self._out_refused_until = 0.0
        self._retiring: str | None = None  # the exchange drained to scale in
        self._remove_asked = False
        self._stuck: list[str] = []
        self._fresh: str | None = None  # a new exchange that hot exchanges wait for
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
        if self.config.kpi_archive:
            self.archive = ArchiveWriter(self.config.kpi_archive, self.config.queue,
                                         f"monitor-{self.config.address}-{os.getpid()}",
                                         retention_days=self.config.archive_retention_days)
        self.topology.settle_until = time.monotonic() + 2 * self.config.heartbeat_timeout
        log.info("monitor of queue %r listening on %s", self.config.queue, self.endpoint)
        if self.cluster is not None:
            events, counters = self.cluster.start()
            self.log.restore(events, counters)
            self._adopt(self.cluster.rules)
            self._thresholds_seen = dict(self.cluster.thresholds)
            self._event(
                "monitor_started",
                f"monitor of queue {self.config.queue} started on {self.endpoint}"
                + (f"; continuing {len(events)} earlier events" if events else ""),
                endpoint=self.endpoint,
            )

    def close(self) -> None:
        if self.archive is not None:
            self.archive.close()
        if self.cluster is not None:
            if self.log.changed:
                self.cluster.flush(list(self.log.events), self.log.counters, time.monotonic(), force=True)
            self.cluster.close()
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
        if self.cluster is not None:
            poller.register(self.cluster.fd, zmq.POLLIN)
        gcm: zmq.Socket | None = None
        next_tick = time.monotonic() + TICK
        next_rule = time.monotonic() + self.config.kpi_period / EVALUATIONS_PER_PERIOD
        settled = False
        while not self._stopping:
            if self.cluster is not None and self.cluster.gcm is not gcm:  # the GCM leader changed
                if gcm is not None:
                    poller.unregister(gcm)  # works on a closed socket too
                gcm = self.cluster.gcm
                if gcm is not None:
                    poller.register(gcm, zmq.POLLIN)
            timeout = max(0.0, min(next_tick, next_rule) - time.monotonic())
            events = dict(poller.poll(poll_ms(timeout)))
            if self.cluster is not None:
                if self.cluster.fd in events and self.cluster.on_session():
                    self._adopt(self.cluster.rules)
                    self._note_thresholds()
                if gcm is not None and gcm in events and not gcm.closed:
                    self.cluster.on_gcm()
            if self._router in events:
                self._on_router()
            if self._watch is not None and self._watch.socket in events:
                self._watch.handle()
            if wakeup is not None and wakeup.fd in events and wakeup.consume():
                log.info("monitor of queue %r stopping on signal", self.config.queue)
                self._stopping = True
            now = time.monotonic()
            if now >= next_tick:
                self._discount_stall(now - next_tick)
                next_tick = now + TICK
                self._tick(now)
                if not settled and not self.topology.settling(now):
                    settled = True
                    self.mover.place_orphans()  # publishers whose exchange never reported: fail them over
                    self._broadcast_exchanges()  # and subscribers drop the exchanges that never reported
            if now >= next_rule:
                next_rule = now + self.config.kpi_period / EVALUATIONS_PER_PERIOD
                if self.config.relocation_rule:
                    self._apply_rule(now)
                if self.cluster is not None:
                    self._scale(now)

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
            if self.cluster is not None:
                self._send([x.identity], control.KpiPeriod(period=self.config.kpi_period))
            self._broadcast_exchanges()
            self.mover.place_orphans()
            self.mover.continue_drains()
            if self._scaled_out_at is not None and self.cluster is not None and exchange_slot(x.id) in self.cluster.placement:
                took = now - self._scaled_out_at
                self._scaled_out_at = None
                self._fresh = x.id
                self._event("scale_out_done", f"exchange {x.id} joined {took:.2f}s after the scale-out decision",
                            exchange=x.id, took_s=round(took, 3))
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
        raw = kpi.records_in / period
        x.load.add(raw)
        x.bytes_load.add(kpi.bytes_in / period)
        x.cpu_percent, x.rss_bytes, x.busy = kpi.cpu_percent, kpi.rss_bytes, kpi.busy
        x.dropped += kpi.dropped
        if self.archive is not None:
            self._archive_kpi(x, kpi)
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
        # smoothing decides *whether* the exchange is hot; the sustain counts from when the raw load went over,
        # so smoothing does not delay the reaction to a real overload a second time
        high = self.config.high_records_per_s
        x.over_since = (x.over_since or now) if raw > high else None
        x.hot_since = (x.hot_since or x.over_since or now) if x.load.value > high else None

    def _archive_kpi(self, x: ExchangeEntry, kpi: control.ExchangeKpi) -> None:
        assert self.archive is not None
        wall = time.time()
        host = x.frontend.rsplit("/", 1)[-1].rsplit(":", 1)[0]
        self.archive.append(ExchangeRecord(
            exchange=x.id, host=host, period=kpi.period, records_in=kpi.records_in, bytes_in=kpi.bytes_in,
            records_out=kpi.records_out, bytes_out=kpi.bytes_out, publishers=len(kpi.publishers),
            cpu_percent=kpi.cpu_percent, rss_bytes=kpi.rss_bytes, busy=kpi.busy, dropped=kpi.dropped), wall)
        for rate in kpi.publishers:
            self.archive.append(PublisherRecord(publisher=rate.publisher, exchange=x.id, host=host, period=kpi.period,
                                                records=rate.records, bytes=rate.bytes), wall)

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
            p.exchange = hello.exchange  # the publisher knows best where it sends
            if hello.exchange not in self.exchanges and not self.topology.settling(now):
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
        if self.archive is not None and hello.period > 0:
            self.archive.append(SubscriberRecord(
                subscriber=s.id, prefix=hello.prefix.decode("utf-8", "backslashreplace"), period=hello.period,
                records=hello.records, latency_p50_ms=hello.latency_p50_ms, latency_p99_ms=hello.latency_p99_ms,
                gaps=hello.gaps, lost=hello.lost, duplicates=hello.duplicates))
        if s.confirmed != set(self.exchanges) and self._may_list(s, now):
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
        now = time.monotonic()
        for s in self.subscribers.values():
            if self._may_list(s, now):
                self._send([s.identity], msg)

    def _may_list(self, s: SubscriberEntry, now: float) -> bool:
        """Whether ``s`` may be sent the exchange list now.

        A list makes a subscriber drop every exchange it does not name. A (re)started monitor that has not
        heard from every exchange yet would make subscribers drop live exchanges whose publishers still send
        there (for instance exchanges that were still reporting to a monitor on a host that died): until it
        settles it only sends lists that take nothing away.
        """
        return not self.topology.settling(now) or s.confirmed <= set(self.exchanges)

    def _discount_stall(self, late: float) -> None:
        """Time this loop did not run (SIGSTOP, a blocking call, a starved CPU) is nobody else's silence.

        Heartbeats and hellos sent meanwhile wait in the socket; judged before they are read, every peer
        would look dead. So a tick that comes ``late`` moves every peer's last sign of life forward by as
        much: a peer that really died is declared so that much later, none is declared dead for our pause.
        """
        if late < STALL:
            return
        log.warning("monitor loop stalled for %.2fs: that silence is not counted against its peers", late)
        for peers in (self.exchanges, self.publishers, self.subscribers):
            for peer in peers.values():
                peer.last_seen += late

    def _tick(self, now: float) -> None:
        cfg = self.config
        if self.archive is not None:
            self.archive.tick()
        for x in list(self.exchanges.values()):
            if now - x.last_seen > cfg.heartbeat_timeout:
                self._lose(x, now)
        self.mover.tick(now)
        if self._fresh is not None:
            # the hot exchanges need not wait for the next evaluation once every subscriber hears the new one
            _, heard = self.topology.accepting(set(), now)
            if self._fresh not in self.exchanges or self._fresh in heard:
                if self._fresh in heard and self.config.relocation_rule:
                    self._apply_rule(now)
                self._fresh = None
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
        self._stuck = []
        moves, limits = _rule.evaluate(
            views, now=now, high=cfg.high_records_per_s, sustain=cfg.sustain, cooldown=cfg.cooldown,
            moved_at=moved_at, stuck=self._stuck,
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
            source.hot_since = source.over_since = None

    # ------------------------------------------------------------------ rules and scaling

    @staticmethod
    def _rules_of(config: MonitorConfig) -> dict[str, Any]:
        """The rules of a monitor on its own: its flags."""
        return {
            **DEFAULT_RULES,
            "exchange_records_per_s": config.high_records_per_s,
            "kpi_period_s": config.kpi_period,
            "smoothing": config.smoothing,
            "sustain_s": config.sustain,
            "cooldown_s": config.cooldown,
        }

    def _adopt(self, rules: dict[str, Any]) -> None:
        """Put the queue's rules in force now: marks, periods and smoothing, without a restart."""
        changed = {k: v for k, v in rules.items() if self.rules.get(k) != v}
        self.rules = dict(rules)
        if not changed:
            return
        old = self.config
        self.config = dataclasses.replace(
            old,
            high_records_per_s=float(rules["exchange_records_per_s"]),
            kpi_period=float(rules["kpi_period_s"]),
            smoothing=float(rules["smoothing"]),
            sustain=float(rules["sustain_s"]),
            cooldown=float(rules["cooldown_s"]),
        )
        self.topology.high = self.config.high_records_per_s
        self.mover.config = self.config
        for x in self.exchanges.values():
            for ewma in (x.load, x.bytes_load, *x.rates.values()):
                ewma.alpha = self.config.smoothing
            if self.config.kpi_period != old.kpi_period:
                self._send([x.identity], control.KpiPeriod(period=self.config.kpi_period))
        self.scaler.reset()
        self._event("rules_changed", "rules in force: " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())),
                    rules=changed)

    def _note_thresholds(self) -> None:
        """New thresholds (from the KPI tuner) are an event of their own: which are now in force, which the
        queue's rules override."""
        assert self.cluster is not None
        new = self.cluster.thresholds
        changed = {k: v for k, v in new.items() if self._thresholds_seen.get(k) != v}
        self._thresholds_seen = dict(new)
        if not changed:
            return
        adopted = {k: v for k, v in changed.items() if k not in self.cluster.explicit and self.rules.get(k) == v}
        overridden = {k: self.cluster.explicit[k] for k in changed if k in self.cluster.explicit}
        text = "new thresholds: " + ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                                              for k, v in sorted(changed.items()))
        if adopted:
            text += "; in force: " + ", ".join(sorted(adopted))
        if overridden:
            text += "; the queue's rules override " + ", ".join(f"{k} (rule {v})" for k, v in sorted(overridden.items()))
        self._event("thresholds_adopted", text, thresholds=changed, adopted=sorted(adopted),
                    overridden=sorted(overridden))

    def _scale(self, now: float) -> None:
        """Carry on a scale-in, then take a new scaling decision if nothing is under way."""
        assert self.cluster is not None
        self._continue_scale_in()
        if self.log.changed and self.cluster.flush(list(self.log.events), self.log.counters, now):
            self.log.changed = False
        self.cluster.expire(now)
        if self.cluster.state != "running":
            return
        joined = {exchange_slot(x) for x in self.exchanges}
        for slot in list(self._missing_since):
            if slot in joined or slot not in self.cluster.placement:
                del self._missing_since[slot]
        for slot in self.cluster.placement:
            if slot not in joined:
                self._missing_since.setdefault(slot, now)
        starting = [s for s, since in self._missing_since.items() if now - since < STARTING_LIMIT]
        # an exchange that joined but that some subscriber does not hear yet cannot take publishers: the hot
        # exchanges still look stuck until it can, and asking for another would be one too many
        _, heard = self.topology.accepting(set(), now)
        starting += [x.id for x in self.exchanges.values()
                     if not x.draining and x.id not in heard and now - x.joined < STARTING_LIMIT]
        if self.cluster.asking or starting or self._retiring is not None or now < self._out_refused_until:
            self.scaler.reset()
            return
        # one exchange per slot: a crashed exchange's successor may join before the monitor declares the
        # crashed one lost, and the two must not count as two (which looked like one above max_exchanges)
        newest: dict[str, ExchangeEntry] = {}
        for x in self.exchanges.values():
            slot = exchange_slot(x.id)
            if not x.draining and (slot not in newest or x.joined > newest[slot].joined):
                newest[slot] = x
        live = list(newest.values())
        load = QueueLoad(
            loads={x.id: x.load.value for x in live},
            publishers={x.id: self.topology.publisher_count(x.id) for x in live},
            stuck=[x for x in self._stuck if x in self.exchanges],
            placed=len(self.cluster.placement),
        )
        decision = self.scaler.evaluate(load, self.rules, now)
        if decision is not None:
            self._decide(decision, now)

    def _decide(self, d: Decision, now: float) -> None:
        assert self.cluster is not None
        if self.scaler.decided(d, now, self.rules):
            self.log.count("flaps")
            flap = "; FLAP: it reverses the previous scaling decision"
        else:
            flap = ""
        if d.kind == "out":
            self.log.count("scale_outs")
            self._scaled_out_at = now
            self._event("scale_out", f"scale out from {d.exchanges} exchanges: {d.reason}{flap}",
                        reason=d.reason, flap=bool(flap), **d.numbers)
            request = m.ScaleOut(QName=self.config.queue, Exchanges=d.exchanges + 1, Reason=d.reason)
            self.cluster.ask(request, "scale out", self._on_scale_out_answer)
        else:
            x = self.exchanges[d.victim]
            self.log.count("scale_ins")
            self._retiring, self._remove_asked = x.id, False
            self._event("scale_in", f"scale in from {d.exchanges} exchanges, draining {x.id}: {d.reason}{flap}",
                        exchange=x.id, reason=d.reason, flap=bool(flap), **d.numbers)
            self._drain(x)

    def _on_scale_out_answer(self, result: int | None, comment: str, data: dict[str, Any]) -> None:
        if result == Result.OK:
            placed = data.get("Placed", [])
            log.info("queue %s: GCM placed %s (%s)", self.config.queue, placed, comment)
            return
        self._scaled_out_at = None
        if result is None:  # no answer: the request is idempotent, the next evaluation may ask again
            self._event("scale_out_unanswered", f"scale out not answered: {comment}", comment=comment)
            return
        self._out_refused_until = time.monotonic() + max(REFUSED_BACKOFF, self.config.cooldown)
        self._event("scale_out_refused", f"the GCM refused to scale out ({result}): {comment}",
                    result=result, comment=comment)

    def _continue_scale_in(self) -> None:
        """Once the exchange drained to scale in carries no publisher, ask the GCM to remove it."""
        assert self.cluster is not None
        x = self.exchanges.get(self._retiring) if self._retiring else None
        if x is None:
            self._retiring = None
            return
        self.mover.continue_drains()
        busy = any(p.exchange == x.id for p in self.publishers.values()) or any(
            x.id in (r.source, r.target) for r in self.mover.relocations.values()
        )
        if busy or self._remove_asked:
            return
        self._remove_asked = True
        slot = exchange_slot(x.id)

        def answer(result: int | None, comment: str, data: dict[str, Any]) -> None:
            if result == Result.OK:
                log.info("queue %s: GCM removes %s (%s)", self.config.queue, slot, comment)
            elif result is None:
                self._remove_asked = False  # ask again
            elif self._retiring == x.id:
                self._retiring = None
                x.draining = False
                self._event("scale_in_refused", f"the GCM refused to remove {x.id} ({result}): {comment}; it takes "
                            "publishers again", exchange=x.id, result=result, comment=comment)
                self._broadcast_exchanges()

        self.cluster.ask(m.RemoveExchange(QName=self.config.queue, Exchange=slot, Reason="drained to scale in"),
                         f"remove {slot}", answer)

    # ------------------------------------------------------------------ operators

    def _on_ping(self, envelope: list[bytes], ping: control.Ping) -> None:
        self._reply(envelope, ping.CMD, Result.OK, "pong", queue=self.config.queue)

    def _on_status(self, envelope: list[bytes], status: control.Status) -> None:
        self._reply(
            envelope,
            status.CMD,
            Result.OK,
            queue=self.config.queue,
            pid=os.getpid(),
            **self.topology.describe(time.monotonic()),
            relocations_in_flight=len(self.mover.relocations),
            rules=self.rules,
            scaling={
                "placement": dict(self.cluster.placement) if self.cluster is not None else {},
                "starting": sorted(self._missing_since),
                "retiring": self._retiring or "",
                "asking_gcm": self.cluster is not None and self.cluster.asking,
            },
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
        self.log.add(kind, text, queue=self.config.queue, origin="monitor", **fields)
        log.info("%s", text)
        if self.archive is not None:  # the event's own fields nested: their types vary from kind to kind
            self.archive.append(EventRecord(event=kind, text=text, exchange=fields.get("exchange"),
                                            publisher=fields.get("publisher"), reason=fields.get("reason"),
                                            fields=fields))
