"""The exchange: forwards publisher batches to subscribers, acknowledges them, reports to its monitor.

One thread owns every socket and runs :meth:`Exchange.serve`, a poll loop over

* the data plane (:class:`~exchange._forwarder.Forwarder`: frontend in, backend out, acknowledgements),
* the control path (:mod:`exchange._control`): the monitor's commands on the control DEALER, the host
  manager's on standard input, each through a :class:`~roq.server.Dispatcher`,
* the signal wake-up (SIGTERM drains: the monitor moves the publishers away, then the exchange stops),
* its timers: heartbeats and beacons, KPI reports, coalesced acknowledgements.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid

import psutil
import zmq

from exchange._control import MAX_CONTROL_BYTES, CommandPipe, MonitorLink
from exchange._forwarder import Forwarder
from exchange._journaling import JournalFeed
from roq.wire import control
from roq.config import DURABILITIES, ExchangeConfig
from roq.errors import ProtocolError
from roq.loop import Loop, Timer
from roq.wire.pipe import MAX_FRAME
from roq.wire.ready import ExchangeReady
from roq.runtime import DropCounter, LogLimit, SignalWakeup, run_main
from roq.server import Dispatcher, Request
from roq.sockets import HandshakeWatch, check_endpoint
from exchange._admission import Admission
from roq.security.curve import Curve

log = logging.getLogger(__name__)

__all__ = ["Exchange", "MIN_KPI_PERIOD", "MAX_KPI_PERIOD"]

#: the KPI periods a monitor may ask for, in seconds
MIN_KPI_PERIOD, MAX_KPI_PERIOD = 0.05, 3600.0
#: at most one log line per this many seconds about the monitor's refusals
REPLY_LOG_INTERVAL = 10.0


class Exchange:
    """One exchange process's sockets and loop.

    Args:
        config: what to bind, where the monitor is, periods and bounds.
        context: the ZeroMQ context (default: a new one, terminated by :meth:`close`).
        commands_fd: a pipe on which the host manager writes commands (:class:`~roq.wire.control.Retarget`, see
            :mod:`roq.wire.pipe`); None = no commands.
    """

    def __init__(self, config: ExchangeConfig, *, context: zmq.Context | None = None,
                 commands_fd: int | None = None) -> None:
        self.config = config
        self.id = config.exchange_id or f"x-{uuid.uuid4().hex[:8]}"
        self._own_context = context is None
        self._ctx = context or zmq.Context()
        self.drops = DropCounter(log, f"exchange {self.id}")
        self._process = psutil.Process()
        self._process.cpu_percent(None)
        self._draining_since: float | None = None
        self._kpi_period = config.kpi_period
        self._refusals = LogLimit(REPLY_LOG_INTERVAL)
        # ConfigError: an unsafe or unreadable key file, an unreadable keyring
        self.curve = Curve.of(self._ctx, config.secret_key, config.keyring, self.drops)
        # with CURVE, nobody is read until the monitor sent the permissions
        self.admission = Admission() if self.curve is not None else None
        self.forwarder = Forwarder(self._ctx, config, self.drops, name=self.id, beacon_id=uuid.uuid4().bytes,
                                   curve=self.curve, admission=self.admission)
        monitor_orders = Dispatcher(f"exchange {self.id} (monitor)", {
            control.Shutdown: self._on_shutdown,
            control.KpiPeriod: self._on_kpi_period,
            control.Reply: self._on_reply,
            control.AclRules: self._on_permissions,
            control.Journaling: self._on_journaling,
        }, self.drops, max_bytes=MAX_CONTROL_BYTES)
        self.monitor = MonitorLink(self._ctx, config.monitor, monitor_orders, self.curve)
        host_orders = Dispatcher(f"exchange {self.id} (commands)", {control.Retarget: self._on_retarget},
                                 self.drops, max_bytes=MAX_FRAME)
        self._commands = CommandPipe(commands_fd, host_orders, self.drops) if commands_fd is not None else None
        self._watches: list[HandshakeWatch] = []
        self._journal_told = False  # no publisher is read before the monitor said whether the queue is durable
        self._durability = "none"
        self.loop = Loop(f"exchange {self.id}", self.drops)
        self._kpi_timer: Timer | None = None
        self._dropped_at_report = 0

    @property
    def frontend_endpoint(self) -> str:
        return self.forwarder.frontend_endpoint

    @property
    def backend_endpoint(self) -> str:
        return self.forwarder.backend_endpoint

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Bind the frontend and backend, connect to the monitor, say hello.

        Raises:
            BrokerConnectionError: an address could not be bound.
        """
        cfg = self.config
        fwd = self.forwarder
        if self.curve is not None:
            self.curve.start()  # before anyone can connect
        fwd.bind(cfg.address, cfg.frontend_port, cfg.backend_port)
        self._watches = [HandshakeWatch(fwd.frontend, "frontend", self.drops),
                         HandshakeWatch(fwd.backend, "backend", self.drops)]
        self.monitor.connect()
        self.monitor.send(self._heartbeat())
        log.info("exchange %s: frontend %s, backend %s, monitor %s", self.id, fwd.frontend_endpoint,
                 fwd.backend_endpoint, cfg.monitor)
        log.info("exchange %s: memory bounds: %s", self.id, fwd.describe_bounds())
        if self.curve is not None:
            log.info("exchange %s: %s", self.id, self.curve.describe())
        else:
            log.warning("exchange %s: plaintext, no CURVE: anyone who reaches its ports may publish and subscribe",
                        self.id)

    def ready_info(self) -> ExchangeReady:
        """The ready line."""
        return ExchangeReady(pid=os.getpid(), id=self.id, frontend=self.frontend_endpoint, backend=self.backend_endpoint)

    def close(self) -> None:
        for watch in self._watches:
            watch.close()
        if self.curve is not None:
            self.curve.close()
        self.forwarder.close()
        self.monitor.close()
        if self._own_context:
            self._ctx.term()

    # ------------------------------------------------------------------ loop

    def serve(self, wakeup: SignalWakeup | None = None) -> None:
        """Run until stopped: by a signal on ``wakeup`` (graceful drain), or a Shutdown from the monitor. The
        loop's table of registrations: publishers and subscribers (the forwarder's), the monitor, the host
        manager's commands, ZAP, the handshake watches, the heartbeat and the KPIs."""
        loop = self.loop
        if self.curve is not None:
            self.curve.attach(loop, on_change=self.forwarder.revoke)  # a key removed: its subscribers go now
        if wakeup is not None:
            loop.on_signal(wakeup, lambda: self._begin_drain("signal"))
        self.forwarder.attach(loop, self.config.heartbeat_interval)
        if self._open():  # publishers and subscribers wait until the monitor said whether the queue is durable,
            self.forwarder.admit()  # and with CURVE until it sent the permissions
        loop.add(self.monitor.socket, self._on_monitor, "the monitor")
        if self._commands is not None:
            self._commands.attach(loop, self.config.heartbeat_interval)
        for watch in self._watches:
            loop.add(watch.socket, watch.handle, "handshakes")
        loop.every(self.config.heartbeat_interval, self._beat, "the heartbeat")
        self._kpi_timer = loop.every(lambda: self._kpi_period, self._report, "the KPIs")
        loop.run()
        self.forwarder.finish()
        log.info("exchange %s stopped (%d malformed inputs dropped in all)", self.id, self.drops.total)

    def _on_monitor(self) -> None:
        admitted = self._open()
        self.monitor.readable()
        if not admitted and self._open():
            self.forwarder.admit()

    def _beat(self, now: float) -> None:
        self.monitor.send(self._heartbeat())
        self._check_drained(now)

    def _report(self, now: float) -> None:
        kpi = self.forwarder.acct.report(self.id, now, cpu_percent=self._process.cpu_percent(None),
                                         rss_bytes=self._process.memory_info().rss,
                                         dropped=self.drops.total - self._dropped_at_report)
        self._dropped_at_report = self.drops.total
        self.monitor.send(kpi)

    # ------------------------------------------------------------------ commands

    def _on_shutdown(self, msg: control.Shutdown, _request: Request) -> None:
        log.info("exchange %s: shutdown asked by the monitor (%s)", self.id, msg.reason[:200] or "no reason")
        self.loop.stop()

    def _on_kpi_period(self, msg: control.KpiPeriod, _request: Request) -> None:
        if not MIN_KPI_PERIOD <= msg.period <= MAX_KPI_PERIOD:
            raise ProtocolError(f"KPI period {msg.period!r} out of {MIN_KPI_PERIOD}..{MAX_KPI_PERIOD} s")
        if msg.period != self._kpi_period:
            log.info("exchange %s: KPI period now %.2fs (was %.2fs)", self.id, msg.period, self._kpi_period)
            self._kpi_period = msg.period
            if self._kpi_timer is not None:  # a shorter period: the next report is due sooner
                self._kpi_timer.at(min(self._kpi_timer.due, time.monotonic() + msg.period))

    def _on_permissions(self, msg: control.AclRules, _request: Request) -> None:
        """The cluster's permissions, from the monitor: held from now on; a subscriber they no longer allow gets
        nothing more at once (a publisher's batches are refused as they are read)."""
        admission = self.admission
        if admission is None or not admission.adopt(msg):  # ConfigError: a rule that does not read, counted
            return
        gone = self.forwarder.revoke()
        log.info("exchange %s: permissions %s (%s)%s", self.id, admission.digest,
                 f"{len(msg.rules)} rules" if msg.enforced else "none set: every key of the keyring",
                 f"; {len(gone)} subscribers no longer allowed, dropped" if gone else "")

    def _open(self) -> bool:
        """May publishers and subscribers be read: the monitor said whether the queue is durable, and (CURVE)
        sent the permissions."""
        return self._journal_told and (self.admission is None or self.admission.known)

    def _on_journaling(self, msg: control.Journaling, _request: Request) -> None:
        """The queue's durability and journal, from the monitor: feed that journal from now on; a durable
        queue with no journal named: acknowledge nothing new until one is (what waits for the old one stays)."""
        if msg.durability not in DURABILITIES:
            raise ProtocolError(f"durability {msg.durability!r}: not one of {', '.join(DURABILITIES)}")
        endpoint = check_endpoint(msg.journal) if msg.journal else ""
        durable = msg.durability != "none"
        if endpoint and not durable:
            raise ProtocolError(f"a journal ({msg.journal!r}) for a queue that is not durable")
        self._journal_told = True
        self._durability = msg.durability
        fwd = self.forwarder
        holding = durable and not endpoint
        if holding != fwd.hold_for_journal:
            fwd.hold(holding)
            if holding:
                log.warning("exchange %s: the queue is durable (%s) and no journal is known: nothing new is "
                            "acknowledged until one is", self.id, msg.durability)
        current = fwd.journal.endpoint if fwd.journal is not None else ""
        if holding or endpoint == current:
            return
        fwd.set_journal(JournalFeed(self._ctx, endpoint, msg.durability, self.curve) if endpoint else None)
        log.info("exchange %s: %s", self.id, f"journal {endpoint} ({msg.durability}): publishers are acknowledged "
                 "once it has their records" if endpoint else "no journal: the queue is not durable")

    def _on_reply(self, msg: control.Reply, _request: Request) -> None:
        if msg.result != control.Result.OK and self._refusals.due():
            log.warning("exchange %s: monitor answered %d: %s", self.id, msg.result, msg.comment[:200])

    def _on_retarget(self, msg: control.Retarget, _request: Request) -> None:
        """The queue's monitor moved to another host: report there from now on."""
        monitor = check_endpoint(msg.monitor)
        old = self.monitor.endpoint
        if self.monitor.retarget(monitor):
            log.info("exchange %s: the queue's monitor moved: %s -> %s", self.id, old, monitor)
            self.monitor.send(self._heartbeat())  # the new monitor learns about us at once

    # ------------------------------------------------------------------ reports and draining

    def _heartbeat(self) -> control.Heartbeat:
        return control.Heartbeat(exchange=self.id, frontend=self.frontend_endpoint, backend=self.backend_endpoint,
                                 pid=os.getpid(), draining=self._draining_since is not None,
                                 permissions=self.admission.digest if self.admission is not None else "-",
                                 journal=self._journal_said(), **_journal_figures(self.forwarder.journal))

    def _journal_said(self) -> str:
        """What the heartbeat says of the durability and journal held (:meth:`~roq.wire.control.Journaling.digest`);
        "?" not told yet."""
        fwd = self.forwarder
        if not self._journal_told:
            return "?"
        endpoint = "" if fwd.hold_for_journal or fwd.journal is None else fwd.journal.endpoint
        return control.Journaling(journal=endpoint, durability=self._durability).digest()

    def _begin_drain(self, why: str) -> None:
        if self._draining_since is not None:
            return
        log.info("exchange %s: draining (%s); the monitor moves its publishers away", self.id, why)
        self._draining_since = time.monotonic()
        self.monitor.send(control.ExchangeBye(exchange=self.id))
        self.monitor.send(self._heartbeat())

    def _check_drained(self, now: float) -> None:
        """Stop once no publisher has sent for a while after the drain began and every subscriber that reads took
        what it was sent (:mod:`exchange._delivery`: a subscriber stalled for ``delivery_hold`` is not waited for),
        or at the drain timeout."""
        if self._draining_since is None:
            return
        idle = now - max(self.forwarder.last_data, self._draining_since)
        delivered = self.forwarder.delivery.due == float("inf")  # nothing acknowledged waits to be taken
        if (idle >= 2 * self.config.heartbeat_interval and delivered) or \
                now - self._draining_since >= self.config.drain_timeout:
            self.loop.stop()


def _journal_figures(journal: JournalFeed | None) -> dict[str, int]:
    """What a heartbeat says of the exchange's journal: its end as last acknowledged, and what waits for it."""
    return {} if journal is None else {"journal_end": journal.end, "journal_waiting": journal.bytes}


DESCRIPTION = (
    "Run one RoQ exchange: it receives publisher batches on its frontend, forwards them untouched to "
    "subscribers on its backend, acknowledges publishers, and reports heartbeats and KPIs to the queue's "
    "monitor. With --commands-on-stdin it reads its host manager's commands (BSON control messages) on "
    "standard input. SIGTERM drains it (the monitor moves its publishers away); a second signal stops it at "
    "once. Settings come from the [exchange] table of --config, overridden by flags. It prints one line "
    "'READY {json}' with its endpoints when bound."
)


def make_exchange(config: ExchangeConfig) -> Exchange:
    return Exchange(config, commands_fd=sys.stdin.fileno() if config.commands else None)


def main(argv: list[str] | None = None) -> int:
    return run_main("exchange", ExchangeConfig, make_exchange, argv, description=DESCRIPTION)
