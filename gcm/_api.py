"""The GCM's management API: each request type to its read or its decision on the current view.

Requests arrive through a :class:`~roq.server.Dispatcher` per port (the look-up port serves only
:class:`~roq.wire.management.Lookup`; the management port every request, look-ups too), which decodes and checks
them and turns whatever a handler raises into the reply. A standby refuses everything with NOT_LEADER naming
the leader's endpoint for the port asked. The leader answers reads from its view (:mod:`gcm._reads`) and
hands each decision (:mod:`gcm._lifecycle`, :mod:`gcm._scaling`, :mod:`gcm._journals`, :mod:`gcm._rules`,
:mod:`gcm._acl`) to the :class:`Shell`, which commits its outcome and answers now or once the cluster reaches the
state waited for.
With CURVE, the leader first checks that the request's principal may send it (:func:`gcm._acl.check`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol

from gcm import _acl, _journals, _lifecycle, _reads, _rules, _scaling
from gcm._audit import AuditTrail, entry
from gcm._federation import Federation
from gcm._outcome import Outcome
from gcm._view import QueueView, View
from roq.wire import management as m
from roq.wire.control import Message, Reply
from roq.wire.control.links import LinkHello
from roq.wire.documents import GcmDoc
from roq.errors import ManagementError, NotLeaderError, Result
from roq.zk import Paths
from roq.server import Handler, Request

__all__ = ["Api", "Shell", "DECISIONS", "READS"]

Decision = Callable[[View, Any, float], Outcome]

#: request type -> its decision, ``(view, request, now) -> Outcome`` (``now``: wall clock)
DECISIONS: dict[type[Message], Decision] = {
    m.CreateQueue: _lifecycle.create,
    m.CreateQueueAnywhere: _lifecycle.create,
    m.StopQueue: _lifecycle.stop,
    m.StartQueue: _lifecycle.start,
    m.RemoveQueue: _lifecycle.remove,
    m.CreateExchange: _lifecycle.create_exchange,
    m.ScaleOut: _scaling.scale_out,
    m.RemoveExchange: _scaling.remove_exchange,
    m.ReplaceReplica: _journals.replace_replica,
    m.AdmitReplica: _journals.admit_replica,
    m.SetRules: _rules.set_rules,
    m.SetThresholds: _rules.set_thresholds,
    m.Grant: _acl.grant,
    m.Revoke: _acl.revoke,
}

#: request type -> its answer from the view alone
READS: dict[type[Message], Callable[[View, Any], Reply]] = {
    m.Lookup: _reads.lookup,
    m.QueueExists: _reads.exists,
    m.ListQueues: _reads.list_queues,
    m.ListHosts: _reads.list_hosts,
    m.GetRules: _reads.get_rules,
    m.GetAcl: _acl.get_acl,
}


class Shell(Protocol):
    """What the API needs of the process around it (the :class:`~gcm.Gcm`, or a test's stand-in)."""

    view: View
    federation: Federation

    @property
    def leading(self) -> bool: ...

    @property
    def leader(self) -> GcmDoc | None: ...

    def apply(self, decide: Callable[[View], Outcome], request: Request, cmd: int) -> Reply | None:
        """Carry out ``decide(view)``'s outcome; the reply to send now, or None when it comes later."""

    def read(self, path: str, decode: Callable[[bytes], Any]) -> Any:
        """The document at ``path`` (None: no node)."""

    def ask_stats(self, queue: QueueView, request: Request) -> Reply | None:
        """Ask the queue's monitor for its status; the reply now, or None when it comes later."""


class Api:
    """The handlers of the GCM's two request ports.

    Args:
        shell: the process around the API.
        clock: wall-clock time, for what the decisions store (creation, removal, evidence times).
        audit: where the management actions are recorded (default: in memory only).
    """

    def __init__(self, shell: Shell, *, clock: Callable[[], float] = time.time, audit: AuditTrail | None = None) -> None:
        self.shell = shell
        self.clock = clock
        self.audit = audit if audit is not None else AuditTrail(None, Paths())

    def handlers(self, port: str) -> dict[type[Message], Handler]:
        """The handlers of ``port`` ("lookup" or "management")."""
        if port == "lookup":
            return {m.Lookup: self._led(port, self._lookup)}
        table: dict[type[Message], Handler] = {t: self._read(read) for t, read in READS.items()}
        table[m.GetThresholds] = lambda msg, _: _reads.get_thresholds(self.shell.view, msg, self.shell.read)
        table[m.GetEvents] = lambda msg, _: _reads.get_events(self.shell.view, msg, self.shell.read)
        table[m.QueueStats] = lambda msg, request: self.shell.ask_stats(self.shell.view.queue(msg.QName), request)
        table[m.GetAudit] = lambda msg, _: Reply(data={"Entries": self.audit.latest(msg.Limit)})
        table[m.FederationStatus] = lambda msg, _: Reply(data=self.shell.federation.status(time.monotonic()))
        table[LinkHello] = lambda msg, request: self.shell.federation.hello(msg, request.principal, time.monotonic())
        table.update({t: self._decision(decide) for t, decide in DECISIONS.items()})
        return {t: self._led(port, handler) for t, handler in table.items()}

    def not_leader(self, port: str) -> NotLeaderError:
        """The refusal of a standby, naming the leader's endpoint for ``port``."""
        leader = self.shell.leader
        if leader is None:
            return NotLeaderError("not the leader; no leader elected yet", data={"Leader": "", "LeaderId": ""})
        where = leader.endpoint(port)
        return NotLeaderError(f"not the leader; the leader is {leader.id} at {where}",
                              data={"Leader": where, "LeaderId": leader.id})

    def _led(self, port: str, handler: Handler) -> Handler:
        """``handler`` on the leader alone, for a sender with the permission it needs (:func:`gcm._acl.check`)."""
        def handle(msg: Any, request: Request) -> Reply | None:
            if not self.shell.leading:
                raise self.not_leader(port)
            try:
                _acl.check(self.shell.view, msg, request.principal)
                reply = handler(msg, request)
            except ManagementError as exc:
                self._record(msg, request, port, exc.code, str(exc))
                raise
            self._record(msg, request, port, None if reply is None else reply.result, "" if reply is None else reply.comment)
            return reply

        return handle

    def _record(self, msg: Message, request: Request, via: str, code: int | None, comment: str) -> None:
        """Put a change, a refusal for want of permission or a child cluster's link refused, in the audit trail."""
        if type(msg) in DECISIONS or code == Result.FORBIDDEN or (type(msg) is LinkHello and code == Result.CONFLICT):
            self.audit.record(entry(msg, request.principal, via, code, comment, self.clock()))

    def _lookup(self, msg: m.Lookup, request: Request) -> Reply:
        """Where the queue's monitor is; for a named cluster's queue, this cluster's queue that its records enter,
        and where they go (:meth:`gcm._federation.Federation.route`)."""
        reply = _reads.lookup(self.shell.view, msg)
        if msg.Cluster:
            reply.data["To"] = self.shell.federation.route(msg.Cluster, msg.QName)
        return reply

    def _read(self, read: Callable[[View, Any], Reply]) -> Handler:
        return lambda msg, _: read(self.shell.view, msg)

    def _decision(self, decide: Decision) -> Handler:
        return lambda msg, request: self.shell.apply(lambda view: decide(view, msg, self.clock()), request, msg.CMD)
