"""The global configuration manager: queue lifecycle, the management API, look-ups and the broadcast.

One process, one poll loop. ZooKeeper holds every decision; the GCM's memory is only a cache of it (the
:class:`~gcm._view.View`, re-read whenever a watch fires), so a standby that takes over knows everything
the old leader knew. Queue state changes are single ZooKeeper transactions (queue node + assignments),
so a GCM that crashes halfway leaves either nothing or a whole decision, which the host managers carry
out on their own; a create retried on the new leader finds the queue and answers once it is ready.

Replies that wait for processes (create, start, stop, remove, create exchange) are kept as pending and
answered when the view shows the outcome, or with UNAVAILABLE at their deadline. The loop never blocks on
them. Scale-out and exchange removal answer once the placement is stored: the queue's monitor sees the
exchanges come and go. Where exchanges go is :mod:`gcm._placement`; what happens when a host is lost is
:mod:`gcm._hostloss`; every decision is logged and recorded as an event of its queue (:mod:`gcm._events`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from typing import Any, Callable

import zmq
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from gcm._election import Election
from gcm._events import MAX_LIMIT, EventLog
from gcm._hostloss import HostLoss
from gcm._placement import Placer, slot_order
from gcm._scaling import MAX_AT_ONCE, Scaling
from gcm._view import REMOVING, RUNNING, STOPPED, QueueView, View, broadcast_docs, read_view
from roq import control, management as m
from roq.control import Result
from roq.errors import ConfigError, ProtocolError, UnknownCommandError
from roq.rules import DEFAULT_RULES, check_thresholds, effective_rules, update_rules
from roq.runtime import DropCounter, SignalWakeup
from roq.sockets import bind, poll_ms
from roq.zk import Paths, Session, check_hosts, check_queue_name, dumps, loads

__all__ = ["Gcm", "GcmConfig"]

log = logging.getLogger("gcm")

_MAX_ZMQ_MESSAGE = 128 << 20  # beyond this ZeroMQ drops the peer; below it a too-large request is answered
MAX_EVIDENCE = 256 << 10  # bytes of thresholds' evidence kept in ZooKeeper (its node limit is 1 MB)


@dataclasses.dataclass(frozen=True)
class GcmConfig:
    """A GCM.

    Attributes:
        zk: ZooKeeper connection string.
        address: address to bind the three ports to.
        lookup_port, management_port, broadcast_port: the ports (0 = any free port); the real endpoints
            are published in ZooKeeper.
        root: ZooKeeper root of the cluster.
        session_timeout: ZooKeeper session timeout; a dead leader is replaced this long after it died.
        broadcast_period: seconds between periodic broadcasts (changes are broadcast at once).
        ready_timeout: how long create/start wait for the queue's processes before answering UNAVAILABLE.
        stop_timeout: how long stop/remove wait for the processes to go.
        host_grace: how long a host holding exchanges or monitors of running queues may be unregistered
            (as seen by the leader) before they are moved to other hosts.
        gcm_id: a name for logs and the election ("" = generated).
    """

    zk: str
    address: str = "127.0.0.1"
    lookup_port: int = 5000
    management_port: int = 5003
    broadcast_port: int = 5005
    root: str = "/roq"
    session_timeout: float = 6.0
    broadcast_period: float = 2.0
    ready_timeout: float = 15.0
    stop_timeout: float = 15.0
    host_grace: float = 2.0
    gcm_id: str = ""

    def __post_init__(self) -> None:
        if self.zk:  # "" only while flags are being gathered
            check_hosts(self.zk)
        Paths(self.root)
        for name in ("session_timeout", "broadcast_period", "ready_timeout", "stop_timeout", "host_grace"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")


@dataclasses.dataclass
class _Pending:
    """A reply that waits for the cluster to reach a state."""

    sock: zmq.Socket
    envelope: list[bytes]
    queue: str
    done: Callable[[QueueView | None], dict[str, Any] | None]  # the reply data once reached, else None
    deadline: float
    what: str
    timeout: float


@dataclasses.dataclass
class _StatsAsk:
    sock: zmq.Socket
    envelope: list[bytes]
    queue: QueueView
    deadline: float


class Gcm:
    def __init__(self, config: GcmConfig) -> None:
        self.config = config
        self.paths = Paths(config.root)
        self.id = config.gcm_id or f"gcm-{uuid.uuid4().hex[:6]}"
        self.session = Session(config.zk, timeout=config.session_timeout)
        self._ctx = zmq.Context()
        self.lookup = self._router()
        self.management = self._router()
        self.broadcast = self._ctx.socket(zmq.PUB)
        self.broadcast.setsockopt(zmq.LINGER, 0)
        self.endpoints: dict[str, str] = {}
        self.drops = DropCounter(log, "gcm")
        self.election: Election | None = None
        self.view = View({}, {})
        self._dirty = True
        self._pending: list[_Pending] = []
        self._stats: dict[zmq.Socket, _StatsAsk] = {}
        self._last_broadcast: tuple[Any, Any] | None = None
        self._next_broadcast = 0.0
        self.requests = 0
        self.events = EventLog(self.session.zk, self.paths)
        self.host_loss = HostLoss(config.host_grace, self.session.zk, self.paths, self.events, self._commit)
        self.scaling = Scaling(self.session.zk, self.paths, self.events, self._commit)

    def _router(self) -> zmq.Socket:
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, _MAX_ZMQ_MESSAGE)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        return sock

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Bind the ports, connect to ZooKeeper and stand for election.

        Raises:
            BrokerConnectionError: a port cannot be bound or ZooKeeper cannot be reached.
        """
        c = self.config
        self.endpoints = {
            "lookup": bind(self.lookup, c.address, c.lookup_port),
            "management": bind(self.management, c.address, c.management_port),
            "broadcast": bind(self.broadcast, c.address, c.broadcast_port),
        }
        self.session.start()
        me = {"id": self.id, "pid": os.getpid(), **self.endpoints}
        self.election = Election(self.session.zk, self.paths, me, lambda: self.session.session_id)
        self.session.zk.ensure_path(self.paths.queues)
        self.session.zk.ensure_path(self.paths.hosts)
        self.session.zk.ensure_path(self.paths.assignments)
        self._refresh()

    @property
    def leading(self) -> bool:
        return self.election is not None and self.election.leading

    def serve(self, wakeup: SignalWakeup) -> None:
        poller = zmq.Poller()
        for item in (wakeup.fd, self.session.fd, self.lookup, self.management):
            poller.register(item, zmq.POLLIN)
        asking: set[zmq.Socket] = set()
        while True:
            for sock in asking - set(self._stats):
                poller.unregister(sock)
            for sock in set(self._stats) - asking:
                poller.register(sock, zmq.POLLIN)
            asking = set(self._stats)
            now = time.monotonic()
            wake = now + 0.25  # a standby wakes only to notice signals; a leader also for its timers
            if self.leading:
                wake = min(wake, self._next_broadcast, self.host_loss.next_deadline(now) or wake)
            timeout = 0.02 if self._dirty else max(0.0, wake - now)
            events = dict(poller.poll(poll_ms(timeout)))
            if wakeup.fd in events and wakeup.consume():
                log.info("GCM %s: stopping on signal", self.id)
                return
            if self.session.fd in events:
                self._on_session()
            if self._dirty:
                self._refresh()
            for sock in (self.lookup, self.management):
                if sock in events:
                    self._serve_requests(sock)
            for sock in [s for s in asking if s in events]:
                self._on_stats_reply(sock)
            now = time.monotonic()
            self._expire(now)
            if self.leading and not self._dirty and self.host_loss.act(self.view, now):
                self._refresh()
            if self.leading and now >= self._next_broadcast:
                self._broadcast(force=True)

    def close(self) -> None:
        for ask in list(self._stats.values()):
            ask.sock.close()
        self._stats.clear()
        self.session.close()
        for sock in (self.lookup, self.management, self.broadcast):
            sock.close()
        self._ctx.term()

    # ------------------------------------------------------------------ ZooKeeper

    def _on_session(self) -> None:
        states, fired = self.session.consume()
        if fired:
            self._dirty = True
        for state in states:
            if state == "lost" and self.election is not None:
                self.election.lost()
                self.host_loss.reset()
                self._fail_pending("the GCM lost its ZooKeeper session; retry")
            self._dirty = True

    def _refresh(self) -> None:
        """Re-read election and topology (re-arming the watches) and act on what changed."""
        assert self.election is not None
        self._dirty = False
        try:
            changed = self.election.update(self.session.watch)
            if not self.leading:
                self.host_loss.reset()
                if changed:
                    self._fail_pending("this GCM is no longer the leader; retry")
                return
            self.view = read_view(self.session.zk, self.paths, self.session.watch)
            self.host_loss.update(self.view, time.monotonic())
            self._finish_removals()
        except KazooException as exc:
            log.warning("GCM %s: reading ZooKeeper failed (%s); retrying", self.id, type(exc).__name__)
            self._dirty = True
            return
        self._check_pending()
        self._broadcast(force=False)

    def _commit(self, ops: Callable[[Any], None]) -> None:
        """Run ``ops(transaction)`` as one ZooKeeper transaction; raise its first real error."""
        t = self.session.zk.transaction()
        ops(t)
        results = t.commit()
        for r in results:
            if isinstance(r, Exception) and type(r).__name__ != "RolledBackError":
                raise r
        self._dirty = True

    def _finish_removals(self) -> None:
        for q in list(self.view.queues.values()):
            if q.state != REMOVING:
                continue
            if q.quiet or time.time() - q.removing_since > self.config.stop_timeout:
                if not q.quiet:
                    log.warning("queue %s: processes still registered after %.0fs; removing anyway", q.name, self.config.stop_timeout)
                try:
                    self.session.zk.delete(self.paths.queue(q.name), recursive=True)
                except NoNodeError:
                    pass
                log.info("queue %s removed", q.name)
                del self.view.queues[q.name]
                self._dirty = True

    # ------------------------------------------------------------------ broadcast

    def _broadcast(self, force: bool) -> None:
        queues, hosts = broadcast_docs(self.view)
        shape = (queues, [{k: v for k, v in h.items() if k in ("Address", "Endpoint", "MaxExchanges")} for h in hosts])
        if not force and shape == self._last_broadcast:
            return
        self._last_broadcast = shape
        self._next_broadcast = time.monotonic() + self.config.broadcast_period
        self.broadcast.send_multipart(m.broadcast_frames(queues, hosts))

    # ------------------------------------------------------------------ requests

    def _serve_requests(self, sock: zmq.Socket) -> None:
        for _ in range(1000):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            self.requests += 1
            # a DEALER sends [body]; a REQ sends ["", body]: answer in the same envelope
            if len(frames) == 2:
                envelope, body = frames[:1], frames[1]
            elif len(frames) == 3 and frames[1] == b"":
                envelope, body = frames[:2], frames[2]
            else:
                self.drops.drop("request with a wrong frame count", f"{len(frames) - 1} frames")
                self._send(sock, frames[:1], Result.BAD_REQUEST, "a request is one frame holding one BSON document")
                continue
            self._handle(sock, envelope, body)

    def _handle(self, sock: zmq.Socket, envelope: list[bytes], body: bytes) -> None:
        if len(body) > m.MAX_REQUEST_BYTES:
            self.drops.drop("oversized request", f"{len(body)} bytes")
            self._send(sock, envelope, Result.BAD_REQUEST,
                       f"request of {len(body)} bytes is over the {m.MAX_REQUEST_BYTES} byte limit")
            return
        try:
            msg = control.decode(body)
        except UnknownCommandError as exc:
            self.drops.drop("unknown command", str(exc))
            self._send(sock, envelope, Result.UNKNOWN_COMMAND, str(exc))
            return
        except ProtocolError as exc:
            self.drops.drop("malformed request", str(exc))
            self._send(sock, envelope, Result.BAD_REQUEST, str(exc))
            return
        handler = self._handlers(sock).get(type(msg))
        if handler is None:
            port = "look-up" if sock is self.lookup else "management"
            self.drops.drop("command not served on this port", f"{msg.CMD} on {port}")
            self._send(sock, envelope, Result.UNKNOWN_COMMAND, f"command {msg.CMD} is not served on the {port} port")
            return
        if not self.leading:
            assert self.election is not None
            leader = self.election.leader
            where = leader.get("lookup" if sock is self.lookup else "management", "")
            text = f"not the leader; the leader is {leader.get('id')} at {where}" if leader else "not the leader; no leader elected yet"
            self._send(sock, envelope, Result.NOT_LEADER, text, Leader=where, LeaderId=str(leader.get("id", "")))
            return
        if self._dirty:
            self._refresh()
        try:
            handler(sock, envelope, msg)
        except ConfigError as exc:
            self._send(sock, envelope, Result.BAD_REQUEST, str(exc))
        except KazooException as exc:
            log.warning("GCM %s: %s failed in ZooKeeper: %r", self.id, type(msg).__name__, exc)
            self._dirty = True
            self._send(sock, envelope, Result.UNAVAILABLE, f"ZooKeeper refused the change ({type(exc).__name__}); retry",
                       Retry=True)

    def _handlers(self, sock: zmq.Socket) -> dict[type, Callable[[zmq.Socket, list[bytes], Any], None]]:
        if sock is self.lookup:
            return {m.Lookup: self._lookup}
        return {
            m.Lookup: self._lookup,
            m.CreateQueue: self._create,
            m.CreateQueueAnywhere: self._create,
            m.RemoveQueue: self._remove,
            m.StopQueue: self._stop,
            m.StartQueue: self._start,
            m.CreateExchange: self._create_exchange,
            m.SetRules: self._set_rules,
            m.GetRules: self._get_rules,
            m.QueueExists: self._exists,
            m.ListQueues: self._list,
            m.QueueStats: self._queue_stats,
            m.ListHosts: self._hosts,
            m.SetThresholds: self._set_thresholds,
            m.GetThresholds: self._get_thresholds,
            m.ScaleOut: self._scale_out,
            m.RemoveExchange: self._remove_exchange,
            m.GetEvents: self._get_events,
        }

    def _send(self, sock: zmq.Socket, envelope: list[bytes], result: int, comment: str = "", **data: Any) -> None:
        try:
            sock.send_multipart([*envelope, m.reply(result, comment, **data)], zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # the peer is gone or not reading: its loss
            log.debug("reply dropped: %s", exc)

    def _queue(self, sock: zmq.Socket, envelope: list[bytes], name: str) -> QueueView | None:
        check_queue_name(name)
        q = self.view.queues.get(name)
        if q is None:
            self._send(sock, envelope, Result.NOT_FOUND, f"no queue named {name!r}")
        return q

    def _wait(self, sock: zmq.Socket, envelope: list[bytes], queue: str, what: str, timeout: float,
              done: Callable[[QueueView | None], dict[str, Any] | None]) -> None:
        p = _Pending(sock, envelope, queue, done, time.monotonic() + timeout, what, timeout)
        if not self._complete(p):
            self._pending.append(p)

    def _complete(self, p: _Pending) -> bool:
        data = p.done(self.view.queues.get(p.queue))
        if data is None:
            return False
        comment = data.pop("COMMENT", "")
        self._send(p.sock, p.envelope, Result.OK, comment, **data)
        return True

    def _check_pending(self) -> None:
        self._pending = [p for p in self._pending if not self._complete(p)]

    def _expire(self, now: float) -> None:
        keep = []
        for p in self._pending:
            if now < p.deadline:
                keep.append(p)
            else:
                self._send(p.sock, p.envelope, Result.UNAVAILABLE,
                           f"queue {p.queue!r}: {p.what} not reached within {p.timeout:.0f}s; the change is recorded "
                           "and will complete when the hosts can carry it out")
        self._pending = keep
        for sock, ask in list(self._stats.items()):
            if now >= ask.deadline:
                self._stats.pop(sock).sock.close()
                self._answer_stats(ask, None)

    def _fail_pending(self, why: str) -> None:
        for p in self._pending:
            self._send(p.sock, p.envelope, Result.UNAVAILABLE, why)
        self._pending = []

    # ------------------------------------------------------------------ reads

    def _lookup(self, sock: zmq.Socket, envelope: list[bytes], msg: m.Lookup) -> None:
        q = self._queue(sock, envelope, msg.QName)
        if q is None:
            return
        if q.state != RUNNING:
            self._send(sock, envelope, Result.UNAVAILABLE, f"queue {q.name!r} is {q.state}", State=q.state)
        elif q.monitor is None:
            self._send(sock, envelope, Result.UNAVAILABLE, f"queue {q.name!r} has no monitor running right now; retry", State=q.state)
        else:
            self._send(sock, envelope, Result.OK, "", Monitor=q.monitor.get("endpoint", ""), Host=q.host, State=q.state)

    def _exists(self, sock: zmq.Socket, envelope: list[bytes], msg: m.QueueExists) -> None:
        q = self.view.queues.get(check_queue_name(msg.QName))
        self._send(sock, envelope, Result.OK, "", Exists=q is not None and q.state != REMOVING,
                   State=q.state if q else "")

    def _list(self, sock: zmq.Socket, envelope: list[bytes], msg: m.ListQueues) -> None:
        queues, _ = broadcast_docs(self.view)
        self._send(sock, envelope, Result.OK, "", Queues=queues)

    def _hosts(self, sock: zmq.Socket, envelope: list[bytes], msg: m.ListHosts) -> None:
        _, hosts = broadcast_docs(self.view)
        self._send(sock, envelope, Result.OK, "", Hosts=hosts)

    def _get_rules(self, sock: zmq.Socket, envelope: list[bytes], msg: m.GetRules) -> None:
        q = self._queue(sock, envelope, msg.QName)
        if q is not None:
            self._send(sock, envelope, Result.OK, "", Rules=q.rules, Explicit=q.explicit_rules)

    def _get_thresholds(self, sock: zmq.Socket, envelope: list[bytes], msg: m.GetThresholds) -> None:
        q = self._queue(sock, envelope, msg.QName)
        if q is not None:
            try:
                data, _ = self.session.zk.get(self.paths.tuning(q.name))
                tuning = loads(data)
            except NoNodeError:
                tuning = {}
            self._send(sock, envelope, Result.OK, "", Thresholds=q.thresholds,
                       Tuning=tuning if isinstance(tuning, dict) else {})

    def _get_events(self, sock: zmq.Socket, envelope: list[bytes], msg: m.GetEvents) -> None:
        if not 1 <= msg.Limit <= MAX_LIMIT:
            raise ConfigError(f"Limit must be between 1 and {MAX_LIMIT}, got {msg.Limit}")
        q = self._queue(sock, envelope, msg.QName)
        if q is not None:
            events, counters = self.events.read(q.name, msg.Limit)
            self._send(sock, envelope, Result.OK, "", Events=events, Counters=counters)

    def _queue_stats(self, sock: zmq.Socket, envelope: list[bytes], msg: m.QueueStats) -> None:
        q = self._queue(sock, envelope, msg.QName)
        if q is None:
            return
        if q.monitor is None or len(self._stats) >= 100:
            self._answer_stats(_StatsAsk(sock, envelope, q, 0.0), None)
            return
        ask = self._ctx.socket(zmq.DEALER)
        ask.setsockopt(zmq.LINGER, 0)
        ask.connect(q.monitor.get("endpoint", ""))
        ask.send(control.encode(control.Status()))
        self._stats[ask] = _StatsAsk(sock, envelope, q, time.monotonic() + 1.0)

    def _on_stats_reply(self, sock: zmq.Socket) -> None:
        try:
            reply = control.decode(sock.recv(zmq.NOBLOCK))
        except (zmq.Again, ProtocolError):
            reply = None
        sock.close()
        ask = self._stats.pop(sock)
        self._answer_stats(ask, reply.data if isinstance(reply, control.Reply) else None)

    def _answer_stats(self, ask: _StatsAsk, status: dict[str, Any] | None) -> None:
        """Answer a stats request with the topology, and the monitor's status when it gave one."""
        q = ask.queue
        data: dict[str, Any] = {"Queue": q.summary(), "Rules": q.rules}
        if status is not None:
            self._send(ask.sock, ask.envelope, Result.OK, "", Monitor=status, **data)
        else:
            self._send(ask.sock, ask.envelope, Result.OK, "the monitor did not answer; topology only", **data)

    # ------------------------------------------------------------------ changes

    def _create(self, sock: zmq.Socket, envelope: list[bytes], msg: m.CreateQueue | m.CreateQueueAnywhere) -> None:
        name = check_queue_name(msg.QName)
        if not 1 <= msg.Exchanges <= MAX_AT_ONCE:
            raise ConfigError(f"Exchanges must be between 1 and {MAX_AT_ONCE}, got {msg.Exchanges}")
        existing = self.view.queues.get(name)
        if existing is not None:
            if existing.state == REMOVING:
                self._send(sock, envelope, Result.UNAVAILABLE, f"queue {name!r} is being removed; retry")
            elif existing.state == STOPPED:
                self._send(sock, envelope, Result.OK, f"queue {name!r} already exists and is stopped", **existing.summary())
            else:  # idempotent: the same create again (a retry, perhaps after a GCM crash) answers when ready
                self._wait(sock, envelope, name, "ready", self.config.ready_timeout, self._ready_reply("already exists"))
            return
        if isinstance(msg, m.CreateQueue):
            host = msg.Host
            if host not in self.view.hosts:
                known = ", ".join(sorted(self.view.hosts)) or "none"
                self._send(sock, envelope, Result.NOT_FOUND, f"no host manager registered at {host!r} (hosts: {known})")
                return
        else:
            placer = Placer(self.view)
            host = placer.choose() or ""
            if not host:
                self._send(sock, envelope, Result.UNAVAILABLE, f"no host can take a new queue: {placer.explain()}")
                return
        placement = {f"x{i}": host for i in range(1, msg.Exchanges + 1)}
        data = {"state": RUNNING, "host": host, "placement": placement, "next_exchange": msg.Exchanges + 1,
                "created": time.time()}
        # asked for N exchanges, the operator keeps at least N: the autoscaler must not take back what was asked
        # for (the rule shows in GetRules and can be lowered); otherwise only what an operator sets is stored,
        # so that defaults and thresholds stay live
        rules = {"min_exchanges": msg.Exchanges} if msg.Exchanges > DEFAULT_RULES["min_exchanges"] else {}
        if msg.Exchanges > DEFAULT_RULES["max_exchanges"]:
            rules["max_exchanges"] = msg.Exchanges
        zk, paths = self.session.zk, self.paths
        zk.ensure_path(paths.host_assignments(host))

        def ops(t: Any) -> None:
            t.create(paths.queue(name), dumps(data))
            t.create(paths.rules(name), dumps(rules))
            t.create(paths.thresholds(name), dumps({}))
            t.create(paths.exchanges(name), b"")
            t.create(paths.events(name), b"")
            t.create(paths.events(name, "gcm"), dumps({"events": [], "counters": {}}))
            t.create(paths.assignment(host, name, "monitor"), b"")
            for xid in placement:
                t.create(paths.assignment(host, name, xid), b"")

        try:
            self._commit(ops)
        except NodeExistsError:  # created meanwhile: answer as for a retry
            self._refresh()
            self._wait(sock, envelope, name, "ready", self.config.ready_timeout, self._ready_reply("already exists"))
            return
        self.events.record(name, "queue_created", f"created on {host} with {msg.Exchanges} exchange(s)",
                           host=host, exchanges=msg.Exchanges)
        self._refresh()
        self._wait(sock, envelope, name, "ready", self.config.ready_timeout, self._ready_reply("created"))

    @staticmethod
    def _ready_reply(comment: str) -> Callable[[QueueView | None], dict[str, Any] | None]:
        def done(q: QueueView | None) -> dict[str, Any] | None:
            return {"COMMENT": comment, **q.summary()} if q is not None and q.ready else None

        return done

    def _existing_assignments(self, q: QueueView) -> list[str]:
        paths, zk = self.paths, self.session.zk
        wanted = [paths.assignment(q.host, q.name, "monitor")]
        wanted += [paths.assignment(host, q.name, xid) for xid, host in q.placement.items()]
        return [p for p in wanted if zk.exists(p)]

    def _set_state(self, q: QueueView, state: str, t: Any, **extra: Any) -> None:
        data = {"state": state, "host": q.host, "placement": q.placement, "next_exchange": q.next_exchange, **extra}
        t.set_data(self.paths.queue(q.name), dumps(data), version=q.version)

    def _changeable(self, sock: zmq.Socket, envelope: list[bytes], name: str) -> QueueView | None:
        """The queue named, unless it does not exist or is being removed (then the request is answered)."""
        q = self._queue(sock, envelope, name)
        if q is not None and q.state == REMOVING:
            self._send(sock, envelope, Result.UNAVAILABLE, f"queue {q.name!r} is being removed")
            return None
        return q

    def _stop(self, sock: zmq.Socket, envelope: list[bytes], msg: m.StopQueue) -> None:
        q = self._changeable(sock, envelope, msg.QName)
        if q is None:
            return
        if q.state == RUNNING:
            doomed = self._existing_assignments(q)

            def ops(t: Any) -> None:
                self._set_state(q, STOPPED, t)
                for path in doomed:
                    t.delete(path)

            self._commit(ops)
            self.events.record(q.name, "queue_stopped",
                               f"stopped: its monitor and {len(q.placement)} exchange(s) are being stopped",
                               exchanges=len(q.placement))
            self._refresh()
        self._wait(sock, envelope, q.name, "stopped", self.config.stop_timeout,
                   lambda v: {"COMMENT": "stopped", "State": STOPPED} if v is not None and v.quiet else None)

    def _start(self, sock: zmq.Socket, envelope: list[bytes], msg: m.StartQueue) -> None:
        q = self._changeable(sock, envelope, msg.QName)
        if q is None:
            return
        if q.state == STOPPED:
            placer = Placer(self.view)
            host = q.host if q.host in self.view.hosts else (placer.choose_monitor(q) or "")
            if not host:
                self._send(sock, envelope, Result.UNAVAILABLE, "no live host to start the queue on")
                return
            placement = {}
            for xid in sorted(q.placement, key=slot_order) or ["x1"]:
                old = q.placement.get(xid, "")
                if old in self.view.hosts:
                    placement[xid] = old
                else:  # its host is gone: where a scale-out would put it, else beside the monitor
                    placement[xid] = placer.choose(q) or host
                    placer.place(q.name, placement[xid], old or None)
            q = dataclasses.replace(q, host=host, placement=placement)
            paths = self.paths
            for h in {host, *placement.values()}:
                self.session.zk.ensure_path(paths.host_assignments(h))

            def ops(t: Any) -> None:
                self._set_state(q, RUNNING, t)
                t.create(paths.assignment(host, q.name, "monitor"), b"")
                for xid, h in placement.items():
                    t.create(paths.assignment(h, q.name, xid), b"")

            self._commit(ops)
            where = ", ".join(f"{x}@{h}" for x, h in placement.items())
            self.events.record(q.name, "queue_started", f"started: monitor on {host}, exchanges {where}",
                               host=host, exchanges=len(placement))
            self._refresh()
        self._wait(sock, envelope, q.name, "ready", self.config.ready_timeout, self._ready_reply("running"))

    def _remove(self, sock: zmq.Socket, envelope: list[bytes], msg: m.RemoveQueue) -> None:
        q = self._queue(sock, envelope, msg.QName)
        if q is None:
            return
        if q.state != REMOVING:
            doomed = self._existing_assignments(q)

            def ops(t: Any) -> None:
                self._set_state(q, REMOVING, t, removing_since=time.time())
                for path in doomed:
                    t.delete(path)

            self._commit(ops)
            log.info("queue %s being removed", q.name)
            self._refresh()
        self._wait(sock, envelope, q.name, "removal", self.config.stop_timeout + 5.0,
                   lambda v: {"COMMENT": "removed"} if v is None else None)

    def _create_exchange(self, sock: zmq.Socket, envelope: list[bytes], msg: m.CreateExchange) -> None:
        q = self._queue(sock, envelope, msg.QName)
        if q is None:
            return
        if q.state != RUNNING:
            self._send(sock, envelope, Result.UNAVAILABLE, f"queue {q.name!r} is {q.state}")
            return
        placer = Placer(self.view)
        host = msg.Host or placer.choose(q) or ""
        if host not in self.view.hosts:
            self._send(sock, envelope, Result.NOT_FOUND if msg.Host else Result.UNAVAILABLE,
                       f"no host manager registered at {host!r}" if msg.Host
                       else f"no host can take an exchange of {q.name!r}: {placer.explain(q)}")
            return
        xid = f"x{q.next_exchange}"
        placement = {**q.placement, xid: host}
        self.session.zk.ensure_path(self.paths.host_assignments(host))

        def ops(t: Any) -> None:
            self._set_state(dataclasses.replace(q, placement=placement, next_exchange=q.next_exchange + 1), RUNNING, t)
            t.create(self.paths.assignment(host, q.name, xid), b"")

        self._commit(ops)
        self.events.record(q.name, "exchange_placed",
                           f"exchange {xid} placed on {host} (create-exchange request): "
                           f"{len(q.placement)} -> {len(placement)} exchanges",
                           reason="create-exchange request", hosts=host, placed=xid,
                           exchanges=len(placement), previous=len(q.placement))
        self._refresh()
        self._wait(sock, envelope, q.name, f"exchange {xid} ready", self.config.ready_timeout,
                   lambda v: {"COMMENT": "created", "Exchange": xid, "Host": host, **v.exchanges[xid]}
                   if v is not None and xid in v.exchanges else None)

    def _scale_out(self, sock: zmq.Socket, envelope: list[bytes], msg: m.ScaleOut) -> None:
        q = self._queue(sock, envelope, msg.QName)
        if q is not None:
            result, comment, data = self.scaling.scale_out(self.view, q, msg.Exchanges, msg.Reason)
            self._send(sock, envelope, result, comment, **data)

    def _remove_exchange(self, sock: zmq.Socket, envelope: list[bytes], msg: m.RemoveExchange) -> None:
        q = self._changeable(sock, envelope, msg.QName)
        if q is not None:
            result, comment, data = self.scaling.remove(q, msg.Exchange, msg.Reason)
            self._send(sock, envelope, result, comment, **data)

    def _set_rules(self, sock: zmq.Socket, envelope: list[bytes], msg: m.SetRules) -> None:
        """Store the keys an operator set (a None value unsets one); answer the rules now in force."""
        q = self._queue(sock, envelope, msg.QName)
        if q is None:
            return
        try:
            explicit = update_rules(q.explicit_rules, msg.Rules, q.thresholds)
        except ConfigError as exc:
            self._send(sock, envelope, Result.BAD_REQUEST, f"rules of {q.name!r} unchanged: {exc}")
            return
        self.session.zk.set(self.paths.rules(q.name), dumps(explicit))
        self._dirty = True
        log.info("queue %s: rules set by the operator now %s", q.name, explicit)
        self._send(sock, envelope, Result.OK, "rules set", Rules=effective_rules(explicit, q.thresholds), Explicit=explicit)

    def _set_thresholds(self, sock: zmq.Socket, envelope: list[bytes], msg: m.SetThresholds) -> None:
        if msg.Evidence and len(dumps(msg.Evidence)) > MAX_EVIDENCE:
            self._send(sock, envelope, Result.BAD_REQUEST, f"evidence of {len(dumps(msg.Evidence))} bytes: at most "
                                                           f"{MAX_EVIDENCE} are kept")
            return
        self._set_document(sock, envelope, msg.QName, "Thresholds",
                           lambda q: {**q.thresholds, **check_thresholds(msg.Thresholds)}, self.paths.thresholds,
                           beside=(self.paths.tuning, {"thresholds": msg.Thresholds, "evidence": msg.Evidence,
                                                       "time": time.time()}) if msg.Evidence else None)

    def _set_document(self, sock: zmq.Socket, envelope: list[bytes], name: str, field: str,
                      make: Callable[[QueueView], dict[str, Any]], path: Callable[[str], str],
                      beside: tuple[Callable[[str], str], dict[str, Any]] | None = None) -> None:
        """Check and store a queue's rules or thresholds (and ``beside``, a document at another path, in the
        same transaction); a bad value changes nothing."""
        q = self._queue(sock, envelope, name)
        if q is None:
            return
        try:
            value = make(q)
        except ConfigError as exc:
            self._send(sock, envelope, Result.BAD_REQUEST, f"{field.lower()} of {q.name!r} unchanged: {exc}")
            return
        if beside is None:
            self.session.zk.set(path(q.name), dumps(value))
        else:
            other = beside[0](q.name)
            zk = self.session.zk
            t = zk.transaction()
            t.set_data(path(q.name), dumps(value))
            if zk.exists(other):
                t.set_data(other, dumps(beside[1]))
            else:
                t.create(other, dumps(beside[1]))
            results = t.commit()
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise failed[0]
        self._dirty = True
        log.info("queue %s: %s now %s", q.name, field.lower(), value)
        self._send(sock, envelope, Result.OK, f"{field.lower()} set", **{field: value})
