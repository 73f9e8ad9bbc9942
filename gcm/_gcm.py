"""The GCM's shell: its sockets, its ZooKeeper session, its poll loop, and the outcomes of decisions applied.

One process, one poll loop. ZooKeeper holds every decision; the GCM's memory is only a cache of it (the
:class:`~gcm._view.View`, read again whenever a watch fires: only the hosts' nodes when their figures, which
every host manager rewrites each KPI period, are all that changed), so a standby that takes over knows everything
the old leader knew. What to answer and what to decide is :mod:`gcm._api` and the pure decisions behind it;
this module carries their :class:`~gcm._outcome.Outcome` s out: the paths ensured, the operations committed
as one transaction (decided again on a fresh view if that one was stale), the events recorded, the view read
again, and the reply sent now or kept pending (:class:`~roq.server.PendingReplies`) until the view shows
the state waited for or its deadline (``ready_timeout``, ``stop_timeout``) passes. The loop never blocks on
them. It also runs the election, the host-loss clocks (:mod:`gcm._hostloss`), the removal of removed
queues, the broadcast (:mod:`gcm._broadcast`) and the stats fan-out (:mod:`gcm._stats`); none of these lets
an exception out of the loop.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from typing import Any, Callable

import zmq

from gcm._acl import bootstrap
from gcm._federation import Federation
from gcm._links import place_links
from gcm._api import Api
from gcm._audit import AuditTrail, KeyRefusals, action_entry
from gcm._broadcast import Broadcaster
from gcm._config import GcmConfig
from gcm._election import Election, Endpoints
from gcm._census import Census
from gcm._events import EventLog
from gcm._http import HttpApi, read_token
from gcm._tokens import Tokens
from gcm._hostloss import HostLoss
from gcm._lifecycle import finish_removals
from gcm._outcome import READY, REMOVED, STOPPED, Event, Outcome, Wait
from gcm._stats import StatsAsks
from gcm._view import QueueView, View, read_view
from roq.wire import management as m
from roq.wire.control import Reply
from roq.security.curve import Curve
from roq.security.zap import Decision, ZapRequest, public_key
from roq.wire.documents import FederationDoc, GcmDoc
from roq.errors import (BrokerConnectionError, NodeExistsError, NodeMissingError, Result, VersionConflictError,
                        ZooKeeperError)
from roq.wire.ready import GcmReady
from roq.runtime import DropCounter, SignalWakeup, run_main
from roq.http import HttpServer
from roq.server import Dispatcher, PendingReplies, Request, RouterServer
from roq.loop import Loop
from roq.sockets import bind
from roq.zk import Create, Paths, Session, ZkAuth

__all__ = ["Gcm"]

log = logging.getLogger("gcm")

_MAX_ZMQ_MESSAGE = 128 << 20  # beyond this ZeroMQ drops the peer; below it a too-large request is answered
_RETRY = 0.1  # seconds before reading ZooKeeper again after a failed read
STANDBY_WAKE = 0.25  # the longest poll (a standby has no timer of its own)
INF = float("inf")
MAX_KNOWN = 100_000  # clusters ever below this one, kept in its place at most
_STALE = (NodeExistsError, NodeMissingError, VersionConflictError)  # the transaction was decided on a stale view


class Gcm:
    """A global configuration manager: leader or standby (see the module).

    Args:
        config: its settings.
    """

    def __init__(self, config: GcmConfig) -> None:
        self.config = config
        self.paths = Paths(config.root)
        self.id = config.gcm_id or f"gcm-{uuid.uuid4().hex[:6]}"
        # ConfigError: unsafe or unreadable ZooKeeper credentials
        self.session = Session(config.zk, timeout=config.session_timeout,
                               auth=ZkAuth.load(config.zk_auth) if config.zk_auth else None)
        self.election = Election(self.session, self.paths, GcmDoc(id=self.id, pid=os.getpid()))
        self._ctx = zmq.Context()
        self.drops = DropCounter(log, "gcm")
        try:  # ConfigError: an unsafe or unreadable key file, an unreadable keyring
            self.curve = Curve.of(self._ctx, config.secret_key, config.keyring, self.drops, self._key_refused)
        except BaseException:
            self._ctx.term()
            raise
        keyring = self.curve.keyring if self.curve is not None else None
        self.audit = AuditTrail(self.session, self.paths)
        self.federation = Federation(config.cluster_name, config.cluster_role)
        self.key_refusals = KeyRefusals(self.audit)
        self._led = False  # whether it led at the end of the last turn (a new leader forgets the tree's children)
        api = Api(self, audit=self.audit)
        self.lookup, self.management = (
            RouterServer(_socket(self._ctx, zmq.ROUTER, self.curve, port), Dispatcher(
                f"gcm {port} port", api.handlers(port), self.drops, max_bytes=m.MAX_REQUEST_BYTES), keyring=keyring)
            for port in ("lookup", "management"))
        self.broadcaster = Broadcaster(_socket(self._ctx, zmq.PUB, self.curve, "broadcast"), config.broadcast_period)
        self.pending = PendingReplies()
        self.stats = StatsAsks(self._ctx, curve=self.curve)
        self.census = Census(self._ctx, config.census_period, curve=self.curve)
        self.http_api: HttpApi | None
        self.http: HttpServer | None
        self.http_api, self.http = self._http(api) if config.http_port >= 0 else (None, None)
        self.events = EventLog(self.session, self.paths)
        self.host_loss = HostLoss(config.host_grace)
        self.view = View(paths=self.paths)
        self._dirty = True
        self._retry_at = 0.0
        self._asking: set[zmq.Socket] = set()  # the monitors' sockets the loop reads answers on
        self.loop = Loop(f"GCM {self.id}", self.drops, on_error=self._on_error, idle=STANDBY_WAKE)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Bind the ports, connect to ZooKeeper and stand for election.

        Raises:
            BrokerConnectionError: a port cannot be bound or ZooKeeper cannot be reached.
        """
        c = self.config
        if self.curve is not None:
            self.curve.start()  # before anyone can connect
        log.log(logging.INFO if self.curve else logging.WARNING, "GCM %s: %s", self.id,
                self.curve.describe() if self.curve else "plaintext, no CURVE: anyone who reaches its ports may "
                                                         "manage the cluster")
        endpoints: Endpoints = {"lookup": bind(self.lookup.socket, c.address, c.lookup_port),
                     "management": bind(self.management.socket, c.address, c.management_port),
                     "broadcast": bind(self.broadcaster.socket, c.address, c.broadcast_port)}
        if self.http is not None:
            endpoints["http"] = self.http.bind(c.http_address, c.http_port)
        self.election.publish(**endpoints)
        self.session.start()
        try:
            _prepare(self.session, self.paths, c.admin if self.curve is not None else None)
        except ZooKeeperError as exc:
            raise BrokerConnectionError(f"cannot prepare the cluster's nodes in ZooKeeper: {exc}") from exc
        self._refresh()

    def ready_info(self) -> GcmReady:
        """The ready line: this GCM's id, whether it leads, its endpoints."""
        me = self.election.me
        return GcmReady(pid=os.getpid(), id=self.id, leader=self.leading, lookup=me.lookup, management=me.management,
                        broadcast=me.broadcast, http=me.http)

    @property
    def me(self) -> GcmDoc:
        return self.election.me

    @property
    def connected(self) -> bool:
        return self.session.connected

    @property
    def leading(self) -> bool:
        return self.election.leading

    @property
    def leader(self) -> GcmDoc | None:
        return self.election.leader

    def serve(self, wakeup: SignalWakeup) -> None:
        """Serve until a signal asks to stop: the loop's table of registrations."""
        loop, census, acting = self.loop, self.census, self._acting
        loop.on_signal(wakeup, self._on_signal)
        loop.add(self.session.fd, self._on_zookeeper, "session events")
        loop.deadline(lambda: self._retry_at if self._dirty else INF, lambda now: self._refresh(), "reading again")
        if self.curve is not None:
            self.curve.attach(loop)
        loop.add(self.lookup.socket, self.lookup.readable, "the look-up port")
        loop.add(self.management.socket, self.management.readable, "the management port")
        # The broadcast PUB never has input for us, but libzmq handles what peers send it (subscriptions,
        # closed connections) only when its owner calls into the socket: a standby's PUB, never sent on, kept
        # every message and every connection that ever came (the 1,000-seed fuzz grew a standby by 388 MB).
        # Polled, the socket is tended whenever something arrives.
        loop.add(self.broadcaster.socket, lambda: None, "the broadcast's connections")
        loop.before_poll(self._follow_asks, "the monitors' answers")
        if self.http is not None:
            self.http.attach(loop)
        loop.deadline(lambda: census.next_at if acting() else INF, self._census, "the census")
        loop.deadline(lambda: (self.host_loss.next_deadline(time.monotonic()) or INF) if acting() else INF,
                      lambda now: None, "a lost host's grace")  # (acted on at the end of the turn)
        loop.deadline(lambda: self.broadcaster.next_at if self.leading else INF, self._broadcast, "the broadcast")
        loop.after_turn(self._expire, "deadlines")
        loop.after_turn(self._lead, "the leader's own decisions")
        loop.run()

    def _on_zookeeper(self) -> None:
        """Session events and watches: the view read again before the requests of this turn are decided (when the
        figures of some hosts are all that changed, as every host manager writes them each KPI period, only their
        nodes)."""
        hosts = self._on_session()
        if self._dirty and time.monotonic() >= self._retry_at:
            self._refresh()
        elif hosts and not self._dirty:
            self._refresh_hosts(hosts)

    def _on_signal(self) -> None:
        log.info("GCM %s: stopping on signal", self.id)
        self.loop.stop()

    def _acting(self) -> bool:
        """The leader, with a view read since the last change: it may decide on its own."""
        return self.leading and not self._dirty

    def _follow_asks(self) -> None:
        """The monitors' sockets that the stats and the census ask on come and go: keep the loop in step."""
        wanted = self.stats.sockets() | self.census.sockets()
        for sock in self._asking - wanted:  # asks answered since the last turn
            self.loop.remove(sock)
        for sock in wanted - self._asking:
            self.loop.add(sock, lambda sock=sock: self._answered(sock), "a monitor's status")
        self._asking = wanted

    def _answered(self, sock: zmq.Socket) -> None:
        (self.census.readable if sock in self.census.sockets() else self.stats.readable)(sock)

    def _census(self, now: float) -> None:
        self.census.round(self.view, now)  # the feeds follow its answers

    def _broadcast(self, now: float) -> None:
        self.broadcaster.publish(self.view, now, force=True)

    def _expire(self, now: float) -> None:
        self.pending.expire(now)
        self.loop.guarded("stats deadlines", self.stats.expire, now)
        self.loop.guarded("census deadlines", self.census.expire, now)

    def _lead(self, now: float) -> None:
        if self.leading != self._led:
            self._led = self.leading
            self.federation.reset()  # its children say hello again to whoever leads now
        if self.leading:
            self.federation.expire(now)
            self.loop.guarded("the cluster's place in its tree", self._publish_federation)
            self._record_links()
        if self._acting():
            self.loop.guarded("host loss and removals", self._maintain, now)
        if self.leading:
            self.audit.flush()

    def _on_error(self, what: str, exc: Exception) -> bool:
        """ZooKeeper away: a warning, and the view read again; anything else is the loop's (a bug)."""
        if not isinstance(exc, ZooKeeperError):
            return False
        log.warning("GCM %s: %s failed (%s)", self.id, what, exc)
        self._dirty = True
        return True

    def close(self) -> None:
        self.stats.close()
        self.census.close()
        if self.http is not None:
            self.http.close()
        self.session.close()
        for sock in (self.lookup.socket, self.management.socket, self.broadcaster.socket):
            sock.close()
        if self.curve is not None:
            self.curve.close()
        self._ctx.term()

    # ------------------------------------------------------------------ outcomes

    def apply(self, decide: Callable[[View], Outcome], request: Request, cmd: int) -> Reply | None:
        """Carry out ``decide(view)``'s outcome (decided again once on a fresh view if the transaction finds
        the view stale); the reply to send now, or None once it waits.

        Raises:
            ZooKeeperError: ZooKeeper refused or did not answer (nothing was written: the request can be
                repeated).
        """
        outcome = decide(self.view)
        try:
            try:
                self._commit(outcome)
            except _STALE as exc:
                log.info("GCM %s: request %d met a change it had not read yet (%s); deciding again", self.id, cmd, exc)
                self._refresh()
                outcome = decide(self.view)
                self._commit(outcome)
        except ZooKeeperError as exc:
            log.warning("GCM %s: request %d not carried out: %s", self.id, cmd, exc)
            self._dirty = True  # read again before the next decision
            raise
        self._settle(outcome)
        return self._wait(outcome.wait, request, cmd) if outcome.wait is not None else outcome.reply

    def read(self, path: str, decode: Callable[[bytes], Any]) -> Any:
        return self.session.read(path, decode)[0]

    def ask_stats(self, queue: QueueView, request: Request) -> Reply | None:
        return self.stats.ask(queue, request, time.monotonic())

    def _commit(self, outcome: Outcome) -> None:
        if outcome.ops:
            self.session.ensure(*outcome.ensure)
            self.session.commit(outcome.ops)
            self._dirty = True
        for path in outcome.purge:
            self.session.delete(path, recursive=True)
            self._dirty = True

    def _settle(self, outcome: Outcome) -> None:
        """What follows a committed outcome: its events and log lines, and a fresh view."""
        for event in outcome.events:
            self.events.record(event, time.time())
        for note in outcome.notes:
            log.info("%s", note)
        if self._dirty:
            self._refresh()

    def _wait(self, wait: Wait, request: Request, cmd: int) -> Reply | None:
        c = self.config
        timeout = {READY: c.ready_timeout, STOPPED: c.stop_timeout, REMOVED: c.stop_timeout + 5.0}[wait.until]

        def ready() -> Reply | None:
            reply = wait.done(self.view.queues.get(wait.queue))
            return dataclasses.replace(reply, request=cmd) if reply is not None else None

        def expired() -> Reply:
            return Reply(request=cmd, result=Result.UNAVAILABLE,
                         comment=f"queue {wait.queue!r}: {wait.what} not reached within {timeout:.0f}s; the change is "
                                 "recorded and will complete when the hosts can carry it out")

        return self.pending.wait(request, ready, time.monotonic() + timeout, expired)

    def _publish_federation(self) -> None:
        """Write the cluster's place in its tree (``/federation``) for the host managers that start links, when the
        view holds another (a ZooKeeper error: tried again next turn)."""
        c = self.config
        tree = self.federation.tree
        subtree = tree.whole_names().add if tree is not None else []
        known = set(self.view.federation.known) if self.view.federation is not None else set()
        known.update(n.name for n in subtree[1:])
        doc = FederationDoc(name=c.cluster_name, role=c.cluster_role if c.cluster_name else "",
                            parent_zk=c.parent_zk, parent_root=c.parent_root if c.parent_zk else "",
                            parent_credentials=os.path.abspath(c.parent_credentials) if c.parent_credentials else "",
                            subtree=subtree if c.cluster_name else [], known=sorted(known)[:MAX_KNOWN])
        if self.view.federation != doc and not self._dirty:
            self.session.put(self.paths.federation, doc.encode())
            self._dirty = True

    def _record_links(self) -> None:
        """Each child's link that began or stopped carrying into one of this cluster's queues: an event of the
        queue (a crossing into a monitor that is no queue's here, such as a link's way down, records nothing)."""
        changes = self.federation.take_changes()
        if not changes:
            return
        queues = {q.monitor.endpoint: q.name for q in self.view.queues.values() if q.monitor is not None}
        for kind, child, target, why in changes:
            queue = queues.get(target)
            if queue is None:
                continue
            text = {"link_up": f"the link of child cluster {child} carries into this queue",
                    "link_down": f"the link of child cluster {child} carries into this queue no more ({why})",
                    "link_refused": f"the link of child cluster {child} may not carry into this queue: {why}"}[kind]
            self.events.record(Event(queue, kind, text, {"child": child}), time.time())
            if kind == "link_refused":  # (what the queue's permissions refused a child: in the audit trail too)
                self.audit.record(action_entry("LinkCarry", queue, {"cluster": child}, child, "link", Result.FORBIDDEN,
                                               why, time.time()))

    def _key_refused(self, request: ZapRequest, decision: Decision) -> None:
        """A key refused at the CURVE handshake: in the audit trail, and counted as a refused link
        (``unknown_key``: a child cluster's link says hello with the cluster's key)."""
        self.key_refusals.refuse(public_key(request.credentials) or "(no CURVE key)", request.address,
                                 decision.reason)
        self.federation.count("unknown_key")

    def _maintain(self, now: float) -> None:
        """The leader's own decisions: slots moved off lost hosts, removed queues deleted once quiet, links placed
        where they should run. One that fails is decided again on a later turn."""
        for outcome in [*self.host_loss.act(self.view, now), *finish_removals(self.view, time.time(), self.config.stop_timeout),
                        *place_links(self.view)]:
            try:
                self._commit(outcome)
            except ZooKeeperError as exc:  # the queue changed meanwhile, or ZooKeeper is unreachable
                log.warning("GCM %s: %s failed (%s); will retry", self.id, (outcome.ops or outcome.purge)[0], exc)
                self._dirty = True
                continue
            self._settle(outcome)

    def _http(self, api: Api) -> tuple[HttpApi, HttpServer]:
        """The GCM's HTTP API, fed by its census, and the server that serves it.

        Raises:
            ConfigError: the token file or the token directory is unsafe or unreadable.
        """
        c = self.config
        dispatcher = Dispatcher(f"gcm {self.id} http", api.handlers("http"), self.drops, max_bytes=m.MAX_REQUEST_BYTES)
        token = read_token(c.api_token_file)
        http_api = HttpApi(self, dispatcher, token=token, top=c.metrics_top, secure=self.curve is not None,
                           tokens=Tokens(token, c.admin, c.api_tokens))
        self.census.follow(http_api.census_taken, http_api.feed.tick)
        return http_api, HttpServer(http_api.handle, where=f"gcm {self.id} http", drops=self.drops,
                                    max_body=m.MAX_REQUEST_BYTES)

    # ------------------------------------------------------------------ ZooKeeper

    def _on_session(self) -> frozenset[str]:
        """The session's states and watches taken in; the hosts whose node's data changed when that is all that
        changed (anything else: the whole view to be read again)."""
        states, fired = self.session.consume_changes()
        prefix = self.paths.hosts + "/"
        hosts = frozenset(path[len(prefix):] for path in fired.changed if path.startswith(prefix))
        whole = fired.other or bool(states) or not all(a in self.view.hosts for a in hosts) or \
            len(hosts) < len(fired.changed)
        self._dirty = self._dirty or whole
        if "lost" in states:
            self.election.lost()
            self.host_loss.reset()
            self.pending.fail_all(Reply(result=Result.UNAVAILABLE, comment="the GCM lost its ZooKeeper session; retry",
                                        data={"Retry": True}))
        return frozenset() if whole else hosts

    def _refresh_hosts(self, addresses: frozenset[str]) -> None:
        """Read again the nodes of hosts whose figures changed, and answer what waited for it; anything amiss (a
        host gone meanwhile, ZooKeeper failing): the whole view, as :meth:`_refresh`. Never raises."""
        if not self.leading:
            return  # (a standby reads no topology)
        try:
            view = self.view.with_hosts(self.session, addresses)
        except ZooKeeperError as exc:
            log.warning("GCM %s: reading ZooKeeper failed (%s); retrying", self.id, exc)
            self._dirty, self._retry_at = True, time.monotonic() + _RETRY
            return
        if view is None:
            self._refresh()
            return
        self._adopt(view)

    def _adopt(self, view: View) -> None:
        """Decide from ``view`` from now on: the host-loss clocks, the requests waiting for a state, the broadcast."""
        self.view = view
        self.host_loss.update(view, time.monotonic())
        self.pending.check()
        self.broadcaster.publish(view, time.monotonic(), force=False)

    def _refresh(self) -> None:
        """Read the election and the topology again (re-arming the watches) and answer what waited for it.
        Never raises: a failure is logged and the read tried again shortly."""
        self._dirty = False
        try:
            changed = self.election.update()
            if not self.leading:
                self.host_loss.reset()
                if changed:
                    self.pending.fail_all(Reply(result=Result.UNAVAILABLE, data={"Retry": True},
                                                comment="this GCM is no longer the leader; retry"))
                return
            self._adopt(read_view(self.session, self.paths))
        except ZooKeeperError as exc:
            log.warning("GCM %s: reading ZooKeeper failed (%s); retrying", self.id, exc)
            self._dirty, self._retry_at = True, time.monotonic() + _RETRY
        except Exception as exc:  # a bug: logged, and the read tried again; the loop goes on
            self.loop.failed("reading the topology", exc)
            self._dirty, self._retry_at = True, time.monotonic() + 1.0


def _prepare(session: Session, paths: Paths, admin: str | None) -> None:
    """The cluster's nodes, made if missing; with ``admin`` (a secure cluster), its first permissions too.

    Raises:
        ZooKeeperError: ZooKeeper refused or did not answer.
    """
    session.ensure(paths.queues, paths.hosts, paths.assignments)
    if admin is not None and session.exists(paths.acl) is None:
        try:
            session.commit([Create(paths.acl, bootstrap(admin).encode())])
            log.info("the cluster's permissions start with %s administering it", admin)
        except NodeExistsError:
            pass  # another GCM wrote them first


def _socket(ctx: zmq.Context, kind: int, curve: Curve | None, name: str) -> zmq.Socket:
    """One of the GCM's bound sockets: a ROUTER for requests or the broadcast's PUB (``name``: for the count of
    failed handshakes)."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.MAXMSGSIZE, _MAX_ZMQ_MESSAGE)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
    if curve is not None:
        curve.serve(sock, name)
    return sock


DESCRIPTION = (
    "Run a RoQ global configuration manager. GCMs elect a leader through ZooKeeper; the leader serves queue "
    "look-ups, the BSON management API (create, remove, stop, start, rules...) and broadcasts the configuration; "
    "standbys answer 'not leader' naming it and take over when it dies. Settings come from the [gcm] table of "
    "--config, overridden by flags. Prints 'READY {json}' with its endpoints once bound."
)


def main(argv: list[str] | None = None) -> int:
    return run_main("gcm", GcmConfig, Gcm, argv, description=DESCRIPTION)
