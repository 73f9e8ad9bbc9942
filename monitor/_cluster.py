"""The monitor's link to the cluster: its queue's rules and placement in ZooKeeper, the GCM, its events.

A monitor started by a host manager is given the ZooKeeper servers. Through them it

* adopts its queue's rules (operator rules over tuner thresholds over defaults) as they change;
* knows the queue's placement (exchange slots and their hosts), so it can tell an exchange still starting
  from one that is missing, and asks for "one more than placed" (an idempotent request);
* finds the GCM leader and sends it scaling requests (scale out, remove a drained exchange) over one
  DEALER socket, answered asynchronously: the monitor's loop never waits on the GCM;
* keeps its recent events and counters in ``/queues/<q>/events/monitor``, written at most every
  ``FLUSH_PERIOD``, so that a restarted monitor continues them and ``roq events`` shows them.

Every watch wakes the monitor's poll loop through :attr:`fd` (see :class:`roq.zk.Session`).
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Callable

import zmq
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from roq import control, management as m
from roq.errors import ProtocolError
from roq.rules import DEFAULT_RULES, effective_rules
from roq.zk import MAX_EVENTS, Paths, Session, dumps, loads

__all__ = ["ClusterLink", "Answer"]

log = logging.getLogger(__name__)

FLUSH_PERIOD = 0.5  # seconds between writes of the event log
ANSWER_TIMEOUT = 5.0  # a GCM request without an answer by then is given up (it is idempotent: ask again)

#: ``answer(result, comment, data)``; result None = no answer in time (or the leader changed)
Answer = Callable[[int | None, str, dict[str, Any]], None]


class ClusterLink:
    """ZooKeeper and GCM access of one queue's monitor.

    Args:
        zk: ZooKeeper connection string.
        root: the cluster's root znode.
        queue: the queue's name.
        context: the monitor's ZeroMQ context.
        session_timeout: ZooKeeper session timeout.
    """

    def __init__(self, zk: str, root: str, queue: str, context: zmq.Context, *, session_timeout: float = 6.0) -> None:
        self.paths = Paths(root)
        self.queue = queue
        self.session = Session(zk, timeout=session_timeout)
        self._ctx = context
        self.rules: dict[str, Any] = dict(DEFAULT_RULES)
        self.thresholds: dict[str, Any] = {}  # as the tuner (or an operator) wrote them
        self.explicit: dict[str, Any] = {}  # the rules an operator set
        self.placement: dict[str, str] = {}  # slot -> host
        self.state = ""
        self.leader = ""  # the GCM leader's management endpoint
        self.gcm: zmq.Socket | None = None
        self._waiting: collections.deque[tuple[str, Answer, float]] = collections.deque()
        self._dirty = True
        self._next_flush = 0.0

    @property
    def fd(self) -> int:
        return self.session.fd

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Connect; return the events and counters a previous monitor of the queue left.

        Raises:
            BrokerConnectionError: ZooKeeper cannot be reached.
        """
        self.session.start()
        self.session.zk.ensure_path(self.paths.events(self.queue))
        self.refresh()
        try:
            data, _ = self.session.zk.get(self.paths.events(self.queue, "monitor"))
        except NoNodeError:
            return [], {}
        doc = loads(data)
        events = doc.get("events", []) if isinstance(doc, dict) else []
        counters = doc.get("counters", {}) if isinstance(doc, dict) else {}
        return (
            [e for e in events if isinstance(e, dict)] if isinstance(events, list) else [],
            {k: v for k, v in counters.items() if isinstance(v, int)} if isinstance(counters, dict) else {},
        )

    def close(self) -> None:
        if self.gcm is not None:
            self.gcm.close(linger=0)
            self.gcm = None
        self.session.close()

    # ------------------------------------------------------------------ ZooKeeper

    def on_session(self) -> bool:
        """Consume the session's wake-ups; True if the rules or the placement may have changed."""
        states, fired = self.session.consume()
        if fired or "connected" in states:
            self._dirty = True
        if "lost" in states:
            log.warning("queue %s: the monitor's ZooKeeper session was lost; reconnecting", self.queue)
            self._dirty = True
        return self.refresh() if self._dirty else False

    def refresh(self) -> bool:
        """Re-read rules, placement and leader (re-arming the watches); True if anything was read."""
        self._dirty = False
        paths, watch = self.paths, self.session.watch
        try:
            explicit = self._get(paths.rules(self.queue), watch)
            thresholds = self._get(paths.thresholds(self.queue), watch)
            queue = self._get(paths.queue(self.queue), watch)
            leader = self._get(paths.leader, watch)
        except KazooException as exc:
            log.warning("queue %s: reading ZooKeeper failed (%s); keeping the rules in force", self.queue, exc)
            self._dirty = True
            return False
        self.thresholds, self.explicit = thresholds, explicit
        rules = effective_rules(explicit, thresholds)
        if rules != self.rules:
            changed = {k: v for k, v in rules.items() if self.rules.get(k) != v}
            log.info("queue %s: rules now in force: %s", self.queue, changed)
            self.rules = rules
        placement = queue.get("placement", {})
        self.placement = {str(k): str(v) for k, v in placement.items()} if isinstance(placement, dict) else {}
        self.state = str(queue.get("state", ""))
        endpoint = str(leader.get("management", ""))
        if endpoint != self.leader:
            self._follow(endpoint)
        return True

    def _get(self, path: str, watch: Callable[..., Any]) -> dict[str, Any]:
        try:
            data, _ = self.session.zk.get(path, watch=watch)
        except NoNodeError:
            self.session.zk.exists(path, watch=watch)
            return {}
        value = loads(data)
        return value if isinstance(value, dict) else {}

    # ------------------------------------------------------------------ GCM

    def _follow(self, endpoint: str) -> None:
        """A new GCM leader (or none): requests in flight there are given up (they are idempotent)."""
        log.info("queue %s: GCM leader now %s", self.queue, endpoint or "(none)")
        self.leader = endpoint
        if self.gcm is not None:
            self.gcm.close(linger=0)
            self.gcm = None
        waiting, self._waiting = self._waiting, collections.deque()
        for what, answer, _ in waiting:
            answer(None, f"{what}: the GCM leader changed before answering", {})
        if endpoint:
            self.gcm = self._ctx.socket(zmq.DEALER)
            self.gcm.setsockopt(zmq.LINGER, 0)
            self.gcm.setsockopt(zmq.SNDHWM, 100)
            self.gcm.connect(endpoint)

    @property
    def asking(self) -> bool:
        return bool(self._waiting)

    def ask(self, request: control.Message, what: str, answer: Answer) -> None:
        """Send ``request`` to the GCM leader; ``answer`` is called with its reply, or None at the timeout."""
        if self.gcm is None:
            answer(None, f"{what}: no GCM leader known", {})
            return
        try:
            self.gcm.send(control.encode(request), zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            answer(None, f"{what}: cannot reach the GCM ({exc})", {})
            return
        self._waiting.append((what, answer, time.monotonic() + ANSWER_TIMEOUT))

    def on_gcm(self) -> None:
        """Read the GCM's replies (in the order of the requests)."""
        assert self.gcm is not None
        while True:
            try:
                frame = self.gcm.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if not self._waiting:
                log.warning("queue %s: an answer from the GCM nobody waits for (late?)", self.queue)
                continue
            what, answer, _ = self._waiting.popleft()
            try:
                result, comment, data = m.parse_reply(frame)
            except ProtocolError as exc:
                answer(None, f"{what}: the GCM answered garbage ({exc})", {})
                continue
            answer(result, comment, data)

    def expire(self, now: float) -> None:
        """Give up requests the GCM did not answer in time; later replies would not match: reconnect."""
        if self._waiting and now >= self._waiting[0][2]:
            self._follow(self.leader)

    # ------------------------------------------------------------------ events

    def flush(self, events: list[dict[str, Any]], counters: dict[str, int], now: float, *, force: bool = False) -> bool:
        """Write the recent events and the counters (at most every FLUSH_PERIOD unless ``force``); True if written."""
        if now < self._next_flush and not force:
            return False
        self._next_flush = now + FLUSH_PERIOD
        if not self.session.zk.connected:
            return False  # a write now would wait for ZooKeeper to come back, and the loop with it
        doc = dumps({"events": events[-MAX_EVENTS:], "counters": counters})
        path = self.paths.events(self.queue, "monitor")
        zk = self.session.zk
        try:
            try:
                zk.set(path, doc)
            except NoNodeError:
                try:
                    zk.create(path, doc, makepath=True)
                except NodeExistsError:
                    zk.set(path, doc)
        except KazooException as exc:
            log.warning("queue %s: writing the event log failed (%s); will retry", self.queue, exc)
            return False
        return True
