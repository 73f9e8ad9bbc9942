"""The monitor of one logical queue: a thin shell around its core.

One ROUTER socket serves everybody: exchanges (heartbeats, KPIs), publishers (hello, moved, panic),
subscribers (hello, ready) and operators (ping, status, forced relocation). Every message goes through a
:class:`~roq.server.Dispatcher` to the handler of :class:`~monitor._core.Core` for its type; whatever the
core decides waits in its outbox, and the shell carries it out after each input and each timer: it sends
messages on the ROUTER, records events (event log, KPI archive, log line), appends KPI records to the
archive and passes requests to the GCM to its :class:`~monitor._cluster.ClusterLink`.

The shell owns the sockets, the ZooKeeper link, the archive writer and the poll loop with its timers: a
tick every :data:`TICK` while something is under way (moves' timeouts, settling, elections) and at most every
:data:`QUIET_TICK` otherwise, always just as an exchange falls silent; the rules four times per KPI period, the
event log written to ZooKeeper at most every 0.5 s, and the stall discount (a tick that comes late means the
loop itself did not run: that time is nobody else's silence).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

import zmq

from monitor._cluster import ClusterLink
from monitor._core import Core, Handler
from monitor._events import EventLog
from monitor._outbox import Event
from roq.wire import control
from roq.config import MonitorConfig
from roq.security.curve import Curve
from roq.errors import ProtocolError, Result
from roq.kpi.archive import ArchiveWriter, writer_name
from roq.kpi.records import EventRecord
from roq.wire.ready import MonitorReady
from roq.runtime import DropCounter, SignalWakeup, run_main
from roq.server import Dispatcher, Request, RouterServer
from roq.loop import Loop
from roq.sockets import HandshakeWatch, bind, send_frames
from roq.zk import ZkAuth

log = logging.getLogger(__name__)

__all__ = ["Monitor"]

TICK = 0.05  # seconds between checks of heartbeats and timeouts while something is under way
#: seconds between two ticks at most while nothing is under way (Core.quiet); an exchange's silence is still
#: noticed as it happens (Core.silent_at)
QUIET_TICK = 0.25
#: what only the cluster's own processes (the queue's exchanges) may send, with CURVE
INTERNAL = (control.Heartbeat, control.ExchangeKpi, control.ExchangeBye, control.JournalHeartbeat)
STALL = 0.25  # a tick this late means the loop itself stopped (see Core.discount_stall)
SILENT_AFTER = 0.001  # the tick after an exchange's silence reached the timeout: just past it (the check is strict)
EVALUATIONS_PER_PERIOD = 4  # rule evaluations per KPI period (each acts only on sustained conditions)
MAX_MESSAGE = 1 << 20  # larger messages make ZeroMQ drop the connection


class Monitor:
    """One monitor's socket, ZooKeeper link, archive and loop around its :class:`~monitor._core.Core`.

    Args:
        config: where to bind, thresholds and timeouts.
        context: the ZeroMQ context (default: a new one, terminated by :meth:`close`).

    Raises:
        ConfigError: a malformed ZooKeeper connection string or root.
    """

    def __init__(self, config: MonitorConfig, *, context: zmq.Context | None = None) -> None:
        self.config = config
        self.cluster: ClusterLink | None = None
        self._own_context = context is None
        self._ctx = context or zmq.Context()
        self.drops = DropCounter(log, f"monitor {config.queue}")
        self.curve: Curve | None = None
        try:
            # ConfigError: an unsafe or unreadable key file, an unreadable keyring
            self.curve = Curve.of(self._ctx, config.secret_key, config.keyring, self.drops)
            if config.zk:
                self.cluster = ClusterLink(config.zk, config.root, config.queue, self._ctx,
                                           session_timeout=config.session_timeout, curve=self.curve,
                                           auth=ZkAuth.load(config.zk_auth) if config.zk_auth else None)
        except BaseException:
            if self.curve is not None:
                self.curve.close()
            if self._own_context:
                self._ctx.term()
            raise
        self.log = EventLog(clock=time.time)  # events are stamped with the wall clock
        self.core = Core(config, events=self.log, drops=self.drops, pid=os.getpid(), clustered=self.cluster is not None,
                         archiving=bool(config.kpi_archive))
        self._router = self._ctx.socket(zmq.ROUTER)
        # no ROUTER_HANDOVER: a second connection never takes an id (our clients choose none: the ROUTER gives
        # each connection its own, and the ids a message names are checked against its sender's key)
        self._router.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        self._router.setsockopt(zmq.LINGER, 500)
        if self.curve is not None:
            self.curve.serve(self._router)
        handlers = {kind: self._serving(handler) for kind, handler in self.core.handlers().items()}
        dispatcher = Dispatcher(f"monitor {config.queue}", handlers, self.drops, max_bytes=MAX_MESSAGE,
                                internal=INTERNAL)
        self._server = RouterServer(self._router, dispatcher,
                                    keyring=self.curve.keyring if self.curve is not None else None)

        self._watch: HandshakeWatch | None = None
        self.archive: ArchiveWriter | None = None  # opened by start()
        self.endpoint = ""
        self.loop = Loop(f"monitor of queue {config.queue!r}", self.drops)
        self._gcm: zmq.Socket | None = None  # the GCM leader's socket the loop reads
        self._next_tick = 0.0
        self._ticked = 0.0  # when the last tick ran

    @property
    def failures(self) -> int:
        """Bugs caught at the boundaries (a handler's, a timer's): each logged, none the end of the loop."""
        return self.loop.failures + self._server.dispatcher.failures

    def ready_info(self) -> MonitorReady:
        """The ready line."""
        return MonitorReady(pid=os.getpid(), queue=self.config.queue, endpoint=self.endpoint)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Bind the control endpoint; in a cluster, connect to ZooKeeper and continue the queue's events.

        Raises:
            BrokerConnectionError: the address cannot be bound, or ZooKeeper cannot be reached.
        """
        if self.curve is not None:
            self.curve.start()  # before anyone can connect
        self.endpoint = bind(self._router, self.config.address, self.config.port)
        self._watch = HandshakeWatch(self._router, "control", self.drops)
        if self.config.kpi_archive:
            self.archive = ArchiveWriter(self.config.kpi_archive, self.config.queue,
                                         writer_name("monitor", self.config.address, os.getpid()),
                                         retention_days=self.config.archive_retention_days,
                                         rotate_s=self.config.archive_rotate_s)
        log.info("monitor of queue %r listening on %s", self.config.queue, self.endpoint)
        if self.curve is not None:
            log.info("monitor of queue %r: %s", self.config.queue, self.curve.describe())
        else:
            log.warning("monitor of queue %r: plaintext, no CURVE: anyone who reaches its port may speak to it",
                        self.config.queue)
        now = time.monotonic()
        if self.cluster is None:
            self.core.start(now, self.endpoint)
        else:
            events, counters = self.cluster.start(now)
            self.log.restore(events, counters)
            self.core.start(now, self.endpoint, self.cluster.view, earlier=len(events))
        self._apply()

    def close(self) -> None:
        if self.archive is not None:
            self.archive.close()
        if self.cluster is not None:
            if self.log.changed:
                self.cluster.flush(self.log.recent(len(self.log.events)), self.log.counters, time.monotonic(),
                                   force=True)
            self.cluster.close()
        if self._watch is not None:
            self._watch.close()
        self._router.close()
        if self.curve is not None:
            self.curve.close()
        if self._own_context:
            self._ctx.term()

    def serve(self, wakeup: SignalWakeup | None = None) -> None:
        """Run until a signal arrives on ``wakeup``: the loop's table of registrations."""
        loop = self.loop
        if wakeup is not None:
            loop.on_signal(wakeup, self._on_signal)
        if self.cluster is not None:
            loop.add(self.cluster.fd, self._on_session, "reading ZooKeeper")
            loop.before_poll(self._follow_gcm, "the GCM leader's socket")
        if self.curve is not None:
            self.curve.attach(loop)
        loop.add(self._router, self._server.readable, "the control port")
        if self._watch is not None:
            loop.add(self._watch.socket, self._watch.handle, "handshakes")
        self._ticked = time.monotonic()
        self._next_tick = self._ticked + TICK
        loop.deadline(self._tick_due, self._tick, "the tick")
        loop.every(lambda: self.core.kpi_period / EVALUATIONS_PER_PERIOD, self.core.evaluate, "the rules")
        loop.after_turn(lambda now: self._apply(), "the core's decisions")
        loop.run()

    def _on_signal(self) -> None:
        log.info("monitor of queue %r stopping on signal", self.config.queue)
        self.loop.stop()

    def _follow_gcm(self) -> None:
        """The GCM leader changed: read the answers of the new one's socket."""
        assert self.cluster is not None
        if self.cluster.gcm is self._gcm:
            return
        if self._gcm is not None:
            self.loop.remove(self._gcm)  # works on a closed socket too
        self._gcm = gcm = self.cluster.gcm
        if gcm is not None:
            self.loop.add(gcm, self._on_gcm, "reading the GCM's answers")

    def _on_gcm(self) -> None:
        assert self.cluster is not None
        if self._gcm is not None and not self._gcm.closed:
            self.cluster.on_gcm(time.monotonic())

    # ------------------------------------------------------------------ inputs and timers

    def _serving(self, handler: Handler) -> Callable[[Any, Request], control.Reply | None]:
        """A Dispatcher handler: the core's handler with the sender and the time, then the outbox applied."""
        keyring = self.curve.keyring if self.curve is not None else None

        def serve(msg: Any, request: Request) -> control.Reply | None:
            forged = self.core.permissions.names_own(msg, request.principal, keyring)
            if forged:  # another's id: refused and counted, nothing changes
                self.drops.drop(forged, f"{type(msg).__name__} from {request.principal}")
                return control.Reply(result=Result.FORBIDDEN,
                                     comment=f"{type(msg).__name__} names an id that is not {request.principal}'s")
            self.core.permissions.check(msg, request.principal)  # ForbiddenError: answered FORBIDDEN
            try:
                return handler(msg, request.identity, time.monotonic())
            finally:
                self._apply()
        return serve

    def _on_session(self) -> None:
        assert self.cluster is not None
        if self.cluster.on_session(time.monotonic()):
            self.core.cluster_changed(self.cluster.view)

    def _quiet(self) -> bool:
        return self.core.quiet() and (self.cluster is None or not self.cluster.asking)

    def _tick_due(self) -> float:
        """When the tick is due: every :data:`TICK` while something is under way (it may have begun since the last
        tick), else as the last tick planned (at most :data:`QUIET_TICK` later)."""
        if self._next_tick > self._ticked + TICK and not self._quiet():
            return self._ticked + TICK
        return self._next_tick

    def _tick(self, now: float) -> None:
        late = now - max(self._tick_due(), self.loop.polled)  # (due before the poll began: it was not waited for)
        if late >= STALL:
            self.core.discount_stall(late)
        if self.archive is not None:
            self.archive.tick()
        self.core.tick(now)
        if self.cluster is not None:
            self.cluster.expire(now)
            if self.log.changed and self.cluster.flush(self.log.recent(len(self.log.events)), self.log.counters, now):
                self.log.saved()
        self._ticked = now
        self._next_tick = now + TICK
        if self._quiet():  # until an exchange falls silent, if it does before the quiet tick
            self._next_tick = max(self._next_tick, min(now + QUIET_TICK, self.core.silent_at() + SILENT_AFTER))

    # ------------------------------------------------------------------ carrying out the core's decisions

    def _apply(self) -> None:
        """Carry out everything the core decided: sends, events, archive records, requests to the GCM."""
        for _ in range(16):  # a GCM request refused at once puts its answer's decisions in the outbox again
            if not self.core.outbox:
                return
            out = self.core.outbox.take()
            encoded: dict[int, bytes] = {}  # one list sent to every subscriber is encoded once
            for identity, msg in out.sends:
                body = encoded.get(id(msg))
                if body is None:
                    try:
                        body = encoded[id(msg)] = control.encode(msg)
                    except ProtocolError as exc:
                        log.warning("cannot encode %s: %s", type(msg).__name__, exc)
                        continue
                try:
                    send_frames(self._router, [identity, body], zmq.NOBLOCK)
                except zmq.ZMQError as exc:  # the peer is gone or its pipe is full: its loss, never ours
                    log.debug("%s to a peer dropped: %s", type(msg).__name__, exc)
            if out.records and self.archive is not None:
                wall = time.time()
                for record in out.records:
                    self.archive.append(record, wall)
            for event in out.events:
                self._record(event)
            now = time.monotonic()
            for request in out.requests:  # each is answered exactly once, or the core would wait for ever
                if self.cluster is None or not self.loop.guarded("asking the GCM", self.cluster.ask, request, now):
                    self.loop.guarded("answering a request not sent", request.answer, None,
                                      f"{request.what}: not sent to the GCM", now)

    def _record(self, event: Event) -> None:
        fields = event.fields
        self.log.add(event.kind, event.text, queue=self.config.queue, origin="monitor", **fields)
        log.info("%s", event.text)
        if self.archive is not None:  # the event's own fields nested: their types vary from kind to kind
            self.archive.append(EventRecord(event=event.kind, text=event.text, exchange=fields.get("exchange"),
                                            publisher=fields.get("publisher"), reason=fields.get("reason"),
                                            fields=fields))


DESCRIPTION = (
    "Run the monitor of one RoQ logical queue. Exchanges register with it by heartbeat; clients ask it for "
    "exchanges; it moves the most productive publisher off an exchange that stays above the high mark, and fails "
    "publishers over from an exchange that stops heartbeating. With --zk it adopts the queue's rules from "
    "ZooKeeper, keeps its events there and scales the queue out and in through the GCM. It prints one line "
    "'READY {json}' with its endpoint once bound. SIGTERM stops it."
)


def main(argv: list[str] | None = None) -> int:
    return run_main("monitor", MonitorConfig, Monitor, argv, description=DESCRIPTION)
