"""The management client: queue lifecycle and look-ups through the GCM leader found in ZooKeeper."""

from __future__ import annotations

import builtins  # the class has a method named list
import dataclasses
import logging
import time
from typing import Any

import zmq

from client._leader import GcmLeader
from roq import defaults
from roq.wire import control
from roq.wire import management as m
from roq.config import CurveClient
from roq.wire.control import Message
from roq.errors import BrokerTimeoutError, NotFoundError, UnavailableError, error_for
from roq.federation import split_address
from roq.wire.status import JournalStatus, QueueStatus, of_stats
from roq.zk import Paths, check_queue_name

__all__ = ["QueueManager"]

log = logging.getLogger(__name__)


class QueueManager:
    """Manage the queues of a cluster. It finds the GCM leader in ZooKeeper and follows it when it changes.

    Args:
        zk: ZooKeeper servers, ``host:port[,host:port...]``.
        root: the cluster's ZooKeeper root.
        timeout: default seconds a call may take (changes wait for the processes; see each method).
        credentials: a directory with the client's secret key and the cluster's public key (``cluster.key``),
            for a cluster that serves CURVE (None: plaintext); or the keys themselves, a
            :class:`~roq.config.CurveClient`.

    Every method raises a :class:`~roq.errors.ManagementError` subclass carrying the RESULT code when the
    GCM refuses (:class:`~roq.errors.NotFoundError`, :class:`~roq.errors.BadRequestError`,
    :class:`~roq.errors.UnavailableError`), :class:`~roq.errors.BrokerTimeoutError` when no leader
    answered in time and :class:`~roq.errors.BrokerConnectionError` when ZooKeeper cannot be reached. A
    request the leader answers with ``Retry: true`` (ZooKeeper was briefly unreachable: every request is
    idempotent) or NOT_LEADER (an election is settling) is sent again until the call's deadline
    (:class:`client._leader.GcmLeader`).

    Raises:
        ConfigError: a malformed ZooKeeper address or root, or credentials that cannot be used (missing, or a
            secret key others may read).
    """

    def __init__(self, zk: str, *, root: str = defaults.ROOT, timeout: float = 30.0,
                 credentials: str | CurveClient | None = None) -> None:
        self.paths = Paths(root)
        self.timeout = timeout
        curve = CurveClient.load(credentials) if isinstance(credentials, str) else credentials
        self._curve = curve
        self._gcm = GcmLeader(zk, self.paths, curve)

    # ------------------------------------------------------------------ queues

    def create(self, queue: str, host: str | None = None, *, exchanges: int = 1, timeout: float | None = None) -> dict[str, Any]:
        """Create ``queue`` on ``host`` (None = spread over the hosts with most headroom: N exchanges on N hosts
        when N hosts have room, the monitor beside the first); idempotent.

        With ``exchanges`` above 1 the queue's rules get ``min_exchanges`` = ``exchanges``, so the autoscaler
        keeps what was asked for (lower it with :meth:`set_rules` to let the queue shrink).

        Returns once the queue's monitor and exchanges run: its summary (Name, Host, State, Monitor, Exchanges).
        """
        check_queue_name(queue)
        if host is None:
            return self._call(m.CreateQueueAnywhere(QName=queue, Exchanges=exchanges), timeout)
        return self._call(m.CreateQueue(QName=queue, Host=host, Exchanges=exchanges), timeout)

    def remove(self, queue: str, *, timeout: float | None = None) -> None:
        """Stop every process of ``queue`` and delete it."""
        self._call(m.RemoveQueue(QName=check_queue_name(queue)), timeout)

    def stop(self, queue: str, *, timeout: float | None = None) -> None:
        """Stop the processes of ``queue``; its definition and rules stay."""
        self._call(m.StopQueue(QName=check_queue_name(queue)), timeout)

    def start(self, queue: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Start a stopped queue again; returns its summary once it runs."""
        return self._call(m.StartQueue(QName=check_queue_name(queue)), timeout)

    def add_exchange(self, queue: str, host: str | None = None, *, timeout: float | None = None) -> dict[str, Any]:
        """One more exchange for ``queue`` (on ``host``, or the host with most headroom)."""
        return self._call(m.CreateExchange(QName=check_queue_name(queue), Host=host or ""), timeout)

    def exists(self, queue: str) -> bool:
        return bool(self._call(m.QueueExists(QName=check_queue_name(queue)), None)["Exists"])

    def list(self) -> list[dict[str, Any]]:
        """Every queue: Name, Host, State, Monitor, Exchanges."""
        return list(self._call(m.ListQueues(), None)["Queues"])

    def stats(self, queue: str) -> dict[str, Any]:
        """The queue's topology, rules and its monitor's status (exchanges' loads, publishers, subscribers), as
        documents (``Monitor``: the status's, when the monitor answered; :meth:`status` reads it)."""
        return self._call(m.QueueStats(QName=check_queue_name(queue)), None)

    def status(self, queue: str) -> QueueStatus | None:
        """The queue's monitor's status, asked through the GCM (None: the monitor did not answer).

        Raises:
            NotFoundError: no such queue. ProtocolError: what the GCM gave is not a status.
        """
        return of_stats(self.stats(queue))

    def journal(self, queue: str) -> JournalStatus | None:
        """A durable queue's journal as its monitor last heard it: durability, where it is, its offsets, size,
        bytes not yet synced, syncs, failures (``journal`` "": no journal; None: the monitor did not answer)."""
        status = self.status(queue)
        return status.journal if status is not None else None

    def verify_journal(self, queue: str, timeout: float = 120.0) -> dict[str, Any]:
        """Have the queue's journal read every segment whole: ``{"problems": [...], "segments", ...}``.

        Raises:
            NotFoundError: the queue has no journal (it is not durable, or its journal is not running).
            BrokerTimeoutError: no answer within ``timeout``.
        """
        journal = self.journal(queue)
        if journal is None or journal.durability == "none" or not journal.reads or not journal.alive:
            heard = journal is not None and bool(journal.reads)
            raise NotFoundError(f"queue {queue!r} has no journal running (durability "
                                f"{journal.durability if journal is not None else 'none'}; its journal "
                                f"{'is silent' if heard else 'unknown'})")
        reads = journal.reads
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            if self._curve is not None:
                self._curve.apply(sock)
            sock.connect(reads)
            sock.send(control.encode(control.Verify()))
            if not sock.poll(int(timeout * 1000)):
                raise BrokerTimeoutError(f"the journal at {reads} did not answer within {timeout:.0f}s")
            reply = control.Reply.parse(sock.recv())
        finally:
            sock.close()
            ctx.term()
        if reply.result != control.Result.OK:
            raise error_for(reply.result, reply.comment, reply.data)
        return dict(reply.data)

    def hosts(self) -> builtins.list[dict[str, Any]]:
        """Every live host: address, capacity, exchanges placed on it and its CPU/memory/network KPIs."""
        return list(self._call(m.ListHosts(), None)["Hosts"])

    def set_rules(self, queue: str, rules: dict[str, Any]) -> dict[str, Any]:
        """Set some of the queue's rules (see :data:`roq.rules.RULE_DOCS`); a ``None`` value unsets one.

        Returns:
            Every rule now in force: the defaults, overridden by the tuner's thresholds, overridden by the
            rules an operator set (those alone: :meth:`explicit_rules`).

        Raises:
            BadRequestError: a bad value (the rules in force stay unchanged); NotFoundError: no such queue.
        """
        return dict(self._call(m.SetRules(QName=check_queue_name(queue), Rules=dict(rules)), None)["Rules"])

    def get_rules(self, queue: str) -> dict[str, Any]:
        """Every rule in force for ``queue`` (as :meth:`set_rules` returns them).

        Raises:
            NotFoundError: no such queue.
        """
        return dict(self._call(m.GetRules(QName=check_queue_name(queue)), None)["Rules"])

    def explicit_rules(self, queue: str) -> dict[str, Any]:
        """Only the rules an operator set on ``queue`` (the rest come from thresholds and defaults).

        Raises:
            NotFoundError: no such queue.
        """
        return dict(self._call(m.GetRules(QName=check_queue_name(queue)), None).get("Explicit", {}))

    def set_thresholds(self, queue: str, thresholds: dict[str, float], evidence: dict[str, Any] | None = None) -> dict[str, Any]:
        """Set some thresholds (the queue's rules still win over them); ``evidence`` (what they were derived
        from, plain JSON values) is kept beside them. Returns every threshold stored.

        Raises:
            BadRequestError: a bad threshold, or evidence that is not plain JSON (bytes, a datetime...: the
                message names the field); NotFoundError: no such queue.
        """
        msg = m.SetThresholds(QName=check_queue_name(queue), Thresholds=dict(thresholds), Evidence=dict(evidence or {}))
        return dict(self._call(msg, None)["Thresholds"])

    def get_thresholds(self, queue: str) -> dict[str, Any]:
        return dict(self._call(m.GetThresholds(QName=check_queue_name(queue)), None)["Thresholds"])

    def get_tuning(self, queue: str) -> dict[str, Any]:
        """The evidence stored with the thresholds last set with some: {thresholds, evidence, time}, or {}."""
        return dict(self._call(m.GetThresholds(QName=check_queue_name(queue)), None).get("Tuning") or {})

    def scale_out(self, queue: str, exchanges: int, reason: str = "") -> dict[str, Any]:
        """Have ``exchanges`` exchanges placed for ``queue``, the missing ones on the hosts with most headroom.

        Idempotent: asking again for the same total adds nothing. Returns once the placement is stored (the
        processes start right after): ``Placed`` [{Exchange, Host}] (empty if as many were placed already) and
        ``Exchanges``, how many are placed now: fewer than asked when only some fitted.

        Raises:
            BadRequestError: beyond the queue's ``max_exchanges``; NotFoundError: no such queue;
            UnavailableError: the queue is not running, or no host can take an exchange (the message says
            why for each host).
        """
        request = m.ScaleOut(QName=check_queue_name(queue), Exchanges=int(exchanges), Reason=reason)
        return self._call(request, None)

    def remove_exchange(self, queue: str, exchange: str, reason: str = "") -> dict[str, Any]:
        """Take exchange slot ``exchange`` (``x3``, or an incarnation name ``x3-1a2b``) out of ``queue``.

        Its host manager stops the process (an exchange drains first: see the monitor). Idempotent: a slot
        already gone answers as removed. Returns ``Exchange``, ``Exchanges`` (how many are left) and, when it
        was removed now, ``Host``.

        Raises:
            BadRequestError: it would leave fewer than the queue's ``min_exchanges``; NotFoundError: no such
            queue; UnavailableError: the queue is being removed.
        """
        request = m.RemoveExchange(QName=check_queue_name(queue), Exchange=exchange, Reason=reason)
        return self._call(request, None)

    def events(self, queue: str, limit: int = 200) -> builtins.list[dict[str, Any]]:
        """The queue's most recent topology events of its monitor and the GCM, oldest first.

        Each is a document with ``seq``, ``time`` (seconds since the epoch), ``source`` (``monitor`` or
        ``gcm``), ``kind``, ``text`` (a sentence with the numbers) and fields of its kind.

        Raises:
            BadRequestError: ``limit`` is not between 1 and 1000; NotFoundError: no such queue.
        """
        return list(self._call(m.GetEvents(QName=check_queue_name(queue), Limit=int(limit)), None)["Events"])

    def counters(self, queue: str) -> dict[str, Any]:
        """The counters the queue's monitor keeps (moves, scale-outs, failovers...; ``{}`` before it wrote any).

        Raises:
            NotFoundError: no such queue.
        """
        return dict(self._call(m.GetEvents(QName=check_queue_name(queue), Limit=1), None)["Counters"])

    # ------------------------------------------------------------------ the tree of clusters

    def federation(self) -> dict[str, Any]:
        """This cluster's place in its tree of clusters: ``Name`` ("" when it is in none), ``Role``, ``Path``
        (its parent first, the root last), ``Children`` (each linked child: ``Name``, ``Key``, ``Incarnation``,
        the clusters ``Below`` it) and ``Refusals`` (links refused, by reason). Needs ``admin``."""
        return self._call(m.FederationStatus(), None)

    # ------------------------------------------------------------------ permissions

    def acl(self) -> dict[str, Any]:
        """The cluster's permissions: ``Rules`` (each a document: principal, permission, queues, allow,
        prefixes) and ``Enforced`` (false while no rule was ever set: every key of the keyring may do anything).
        Needs ``admin``."""
        return self._call(m.GetAcl(), None)

    def grant(self, principal: str, permission: str, queues: str = "*", *, allow: bool = True,
              prefixes: tuple[str, ...] = ()) -> dict[str, Any]:
        """Add a rule: ``principal`` (a key's name, or ``*``) may (``allow``) or may not ``permission``
        (``publish``, ``subscribe`` (optionally only under ``prefixes``), ``manage``, ``admin``) the queues
        matching ``queues``; in force within a second everywhere. Idempotent; needs ``admin``; returns ``Rules``.

        Raises:
            BadRequestError: a malformed rule (the comment names the field); ForbiddenError: not an admin.
        """
        return self._call(m.Grant(Rule=_rule(principal, permission, queues, allow, prefixes)), None)

    def revoke(self, principal: str, permission: str, queues: str = "*", *, allow: bool = True,
               prefixes: tuple[str, ...] = ()) -> dict[str, Any]:
        """Take out the rule equal to these fields (see :meth:`grant`); a revoked publisher's batches and a
        revoked subscriber's feed stop within a second. Returns ``Rules``.

        Raises:
            NotFoundError: no such rule; ForbiddenError: not an admin.
        """
        return self._call(m.Revoke(Rule=_rule(principal, permission, queues, allow, prefixes)), None)

    def audit(self, limit: int = 100) -> builtins.list[dict[str, Any]]:
        """The audit trail: the latest ``limit`` (1-1000) management actions, oldest first, each with ``time``,
        ``principal``, ``via``, ``action``, ``queue``, ``detail``, ``result`` and ``comment``. Needs ``admin``."""
        return list(self._call(m.GetAudit(Limit=int(limit)), None)["Entries"])

    def lookup(self, queue: str, *, timeout: float = 10.0) -> str:
        """The endpoint of ``queue``'s monitor (waits while the queue is starting)."""
        return self.route(queue, timeout=timeout)[0]

    def route(self, address: str, *, timeout: float = 10.0) -> tuple[str, str]:
        """Where records for ``address`` go: a queue's name, or a cluster of the tree and its queue
        (``store-417/orders``). The endpoint of the monitor of this cluster's queue of that name, and the cluster
        the records are addressed to ("" when it is this one); waits while the queue is starting.

        Raises:
            ConfigError: a malformed address.
            BadRequestError: a cluster's queue asked of a cluster in no tree.
            NotFoundError: no such queue here, or (at the root) no such cluster in the tree.
        """
        cluster, queue = split_address(address)
        msg = m.Lookup(QName=check_queue_name(queue), Cluster=cluster or "")
        deadline = time.monotonic() + timeout
        unavailable: UnavailableError | None = None
        while True:
            try:
                data = self._call(msg, deadline - time.monotonic(), port="lookup")
                return str(data["Monitor"]), str(data.get("To", ""))
            except UnavailableError as exc:  # starting, or its monitor restarting
                if time.monotonic() + 0.1 >= deadline:
                    raise
                unavailable = exc
                time.sleep(0.1)
            except BrokerTimeoutError:
                if unavailable is None:
                    raise
                raise unavailable from None  # what the GCM said; the last ask only ran out of the time left

    def leader(self, timeout: float = 10.0) -> dict[str, Any]:
        """The leader's published endpoints (id, pid, lookup, management, broadcast, http).

        Raises:
            BrokerTimeoutError: no leader registered within ``timeout``.
            BrokerConnectionError: ZooKeeper cannot be reached.
        """
        return dataclasses.asdict(self._gcm.find(time.monotonic() + timeout, "management")[0])

    def close(self) -> None:
        """Close the ZooKeeper session and the sockets."""
        self._gcm.close()

    def __enter__(self) -> QueueManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, request: Message, timeout: float | None, *, port: str = "management") -> dict[str, Any]:
        """Send ``request`` to the leader (at most ``timeout`` seconds, default :attr:`timeout`); the data of
        its reply."""
        return self._gcm.call(request, self.timeout if timeout is None else timeout, port)


def _rule(principal: str, permission: str, queues: str, allow: bool, prefixes: tuple[str, ...]) -> dict[str, Any]:
    return {"principal": principal, "permission": permission, "queues": queues, "allow": allow,
            "prefixes": list(prefixes)}
