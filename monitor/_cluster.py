"""The monitor's link to the cluster: its queue's rules and placement in ZooKeeper, the GCM, its events.

A monitor started by a host manager is given the ZooKeeper servers. Through them it

* adopts its queue's rules (operator rules over tuner thresholds over defaults) as they change, and knows
  the queue's state and placement (exchange slots and their hosts): :attr:`ClusterLink.view`;
* finds the GCM leader and sends it the core's scaling requests (scale out, remove a drained exchange) over
  one DEALER socket, answered asynchronously: the monitor's loop never waits on the GCM;
* keeps its recent events and counters in ``/queues/<q>/events/monitor``, written at most every
  :data:`FLUSH_PERIOD`, so that a restarted monitor continues them and ``roq events`` shows them.

Every znode is read and written as a document of :mod:`roq.wire.documents` through :class:`roq.zk.Session`;
every watch wakes the monitor's poll loop through :attr:`ClusterLink.fd`.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

import zmq

from monitor._outbox import GcmRequest
from monitor._topology import QueueView
from roq.wire import control
from roq.wire.control import Reply
from roq.security.curve import Curve
from roq.wire.documents import AclDoc, EventsDoc, GcmDoc, QueueDoc, RulesDoc
from roq.errors import BrokerConnectionError, ProtocolError, ZooKeeperError
from roq.rules import effective_rules
from roq.zk import MAX_EVENTS, Paths, Session, ZkAuth
from roq import defaults

__all__ = ["ClusterLink", "FLUSH_PERIOD", "ANSWER_TIMEOUT"]

log = logging.getLogger(__name__)

FLUSH_PERIOD = 0.5  # seconds between writes of the event log
ANSWER_TIMEOUT = 5.0  # a GCM request without an answer by then is given up (it is idempotent: ask again)
MAX_WAITING = 100  # GCM requests in flight at once (the core asks one at a time)
MAX_COUNTERS = 64  # counters continued from a previous monitor's document


class ClusterLink:
    """ZooKeeper and GCM access of one queue's monitor.

    Args:
        zk: ZooKeeper connection string.
        root: the cluster's root znode.
        queue: the queue's name.
        context: the monitor's ZeroMQ context.
        session_timeout: ZooKeeper session timeout.
        curve: the monitor's CURVE (it speaks to the GCM as the cluster), or None for plaintext.
        auth: the cluster's ZooKeeper identity, or None.

    Raises:
        ConfigError: a malformed connection string or root.
    """

    def __init__(self, zk: str, root: str, queue: str, context: zmq.Context, *, session_timeout: float = defaults.SESSION_TIMEOUT,
                 curve: Curve | None = None, auth: ZkAuth | None = None) -> None:
        self.paths = Paths(root)
        self._curve = curve
        self.queue = queue
        self.session = Session(zk, timeout=session_timeout, auth=auth)
        self._ctx = context
        self.view = QueueView()
        self.leader = ""  # the GCM leader's management endpoint
        self.gcm: zmq.Socket | None = None
        self._waiting: collections.deque[tuple[GcmRequest, float]] = collections.deque()
        self._dirty = True
        self._next_flush = 0.0

    @property
    def fd(self) -> int:
        return self.session.fd

    # ------------------------------------------------------------------ lifecycle

    def start(self, now: float) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Connect; return the events and counters a previous monitor of the queue left.

        Raises:
            BrokerConnectionError: ZooKeeper cannot be reached.
        """
        self.session.start()
        try:
            self.session.ensure(self.paths.events(self.queue))
            self.refresh(now)
            doc, _ = self.session.read(self.paths.events(self.queue, "monitor"), EventsDoc.decode)
        except ZooKeeperError as exc:
            raise BrokerConnectionError(f"ZooKeeper at {self.session.hosts}: {exc}") from exc
        if doc is None:
            return [], {}
        counters = {k: v for k, v in list(doc.counters.items())[:MAX_COUNTERS] if len(k) <= 64}
        return doc.events[-MAX_EVENTS:], counters

    def close(self) -> None:
        if self.gcm is not None:
            self.gcm.close(linger=0)
            self.gcm = None
        self.session.close()

    # ------------------------------------------------------------------ ZooKeeper

    def on_session(self, now: float) -> bool:
        """Consume the session's wake-ups; True if the rules or the placement may have changed."""
        states, fired = self.session.consume()
        if fired or "connected" in states:
            self._dirty = True
        if "lost" in states:
            log.warning("queue %s: the monitor's ZooKeeper session was lost; reconnecting", self.queue)
            self._dirty = True
        return self.refresh(now) if self._dirty else False

    def refresh(self, now: float) -> bool:
        """Re-read rules, thresholds, the queue, the leader and the permissions (re-arming the watches); True if
        read."""
        self._dirty = False
        paths, read = self.paths, self.session.read
        try:
            explicit, _ = read(paths.rules(self.queue), RulesDoc.decode, watch=True)
            thresholds, _ = read(paths.thresholds(self.queue), RulesDoc.decode, watch=True)
            queue, version = read(paths.queue(self.queue), QueueDoc.decode, watch=True)
            leader, _ = read(paths.leader, GcmDoc.decode, watch=True)
            acl, acl_version = read(paths.acl, AclDoc.decode, watch=True)
        except ZooKeeperError as exc:
            log.warning("queue %s: reading ZooKeeper failed (%s); keeping the rules in force", self.queue, exc)
            self._dirty = True
            return False
        rules = (explicit or RulesDoc()).values
        tuned = (thresholds or RulesDoc()).values
        view = QueueView(
            state=queue.state if queue is not None else "",
            placement=dict(queue.placement) if queue is not None else {},
            rules=effective_rules(rules, tuned),
            thresholds=tuned,
            explicit=rules,
            # no node: no rule was ever set; a node that does not read allows nothing (it must not open the doors)
            acl=None if acl_version < 0 else (acl.rules if acl is not None else ()),
            replicas=tuple(queue.journal_replicas) if queue is not None else (),
            learners=tuple(queue.journal_learners) if queue is not None else (),
            version=version,
        )
        if view.rules != self.view.rules:
            changed = {k: v for k, v in view.rules.items() if self.view.rules.get(k) != v}
            log.info("queue %s: rules now in force: %s", self.queue, changed)
        self.view = view
        endpoint = leader.management if leader is not None else ""
        if endpoint != self.leader:
            self._follow(endpoint, now)
        return True

    # ------------------------------------------------------------------ GCM

    def _follow(self, endpoint: str, now: float) -> None:
        """A new GCM leader (or none): requests in flight there are given up (they are idempotent)."""
        log.info("queue %s: GCM leader now %s", self.queue, endpoint or "(none)")
        self.leader = endpoint
        if self.gcm is not None:
            self.gcm.close(linger=0)
            self.gcm = None
        waiting, self._waiting = self._waiting, collections.deque()
        for request, _ in waiting:
            request.answer(None, f"{request.what}: the GCM leader changed before answering", now)
        if endpoint:
            self.gcm = self._ctx.socket(zmq.DEALER)
            self.gcm.setsockopt(zmq.LINGER, 0)
            self.gcm.setsockopt(zmq.SNDHWM, 100)
            self.gcm.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
            if self._curve is not None:
                self._curve.connect(self.gcm)
            try:
                self.gcm.connect(endpoint)
            except zmq.ZMQError as exc:  # a leader document with a malformed endpoint
                log.warning("queue %s: cannot connect to the GCM at %r: %s", self.queue, endpoint, exc)
                self.gcm.close(linger=0)
                self.gcm = None

    @property
    def asking(self) -> bool:
        return bool(self._waiting)

    def ask(self, request: GcmRequest, now: float) -> None:
        """Send ``request`` to the GCM leader; its answer comes with its reply, or None at the timeout."""
        if self.gcm is None:
            request.answer(None, f"{request.what}: no GCM leader known", now)
            return
        if len(self._waiting) >= MAX_WAITING:
            request.answer(None, f"{request.what}: {len(self._waiting)} requests wait for the GCM already", now)
            return
        try:
            self.gcm.send(control.encode(request.message), zmq.NOBLOCK)
        except (zmq.ZMQError, ProtocolError) as exc:
            request.answer(None, f"{request.what}: cannot reach the GCM ({exc})", now)
            return
        self._waiting.append((request, now + ANSWER_TIMEOUT))

    def on_gcm(self, now: float) -> None:
        """Read the GCM's replies (in the order of the requests)."""
        while self.gcm is not None:
            try:
                frame = self.gcm.recv_multipart(zmq.NOBLOCK)[-1]
            except zmq.Again:
                return
            if not self._waiting:
                log.warning("queue %s: an answer from the GCM nobody waits for (late?)", self.queue)
                continue
            request, _ = self._waiting.popleft()
            try:
                reply = Reply.parse(frame)
            except ProtocolError as exc:
                request.answer(None, f"{request.what}: the GCM answered garbage ({exc})", now)
                continue
            request.answer(reply, reply.comment, now)

    def expire(self, now: float) -> None:
        """Give up requests the GCM did not answer in time; later replies would not match: reconnect."""
        if self._waiting and now >= self._waiting[0][1]:
            self._follow(self.leader, now)

    # ------------------------------------------------------------------ events

    def flush(self, events: list[dict[str, Any]], counters: dict[str, int], now: float, *, force: bool = False) -> bool:
        """Write the recent events and the counters (at most every FLUSH_PERIOD unless ``force``); True if written."""
        if now < self._next_flush and not force:
            return False
        self._next_flush = now + FLUSH_PERIOD
        if not self.session.connected:
            return False  # a write now would wait for ZooKeeper to come back, and the loop with it
        try:
            doc = EventsDoc(events=events[-MAX_EVENTS:], counters=counters).encode()
            self.session.put(self.paths.events(self.queue, "monitor"), doc)
        except (ZooKeeperError, ValueError, TypeError) as exc:
            log.warning("queue %s: writing the event log failed (%s); will retry", self.queue, exc)
            return False
        return True
