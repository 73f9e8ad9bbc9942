"""A journal's reads port: the ROUTER its readers (replaying and durable subscribers) fetch from.

Every request goes through a :class:`~roq.server.RouterServer` (a bad one is answered BAD_REQUEST and counted):
:class:`~roq.wire.control.Fetch` is answered with :class:`~roq.wire.control.Fetched` and the entries' frames, now or once
there is something to read (:class:`~exchange.journal._reads.Reads`); :class:`~roq.wire.control.Commit` and
:class:`~roq.wire.control.Position` with a :class:`~roq.wire.control.Reply`. With CURVE a reader needs the permission to
subscribe to the queue under its prefix (the rules the monitor sent, :class:`~exchange._admission.Admission`),
and none is served before the rules are known.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import zmq

from exchange._admission import Admission
from exchange._control import MAX_CONTROL_BYTES
from exchange.journal._reads import Positions, Reads
from exchange.journal._store import Store
from roq.wire import control
from roq.wire.control import Reply
from roq.security.curve import Curve
from roq.errors import ForbiddenError, JournalError, ProtocolError, UnavailableError
from roq.runtime import DropCounter
from roq.server import Dispatcher, Request, RouterServer
from roq.security.zap import CLUSTER
from roq.sockets import bind, send_frames

log = logging.getLogger(__name__)

__all__ = ["ReadPort"]


class ReadPort:
    """The reads ROUTER of a journal and what answers it.

    Args:
        context: where the socket is made.
        store: the journal.
        directory: where the positions file is.
        drops: counts what is refused.
        curve: with CURVE, the socket serves with the cluster's key and ``admission`` decides.
        admission: who may read (with CURVE).
        on_replica: a leading journal's: a follower replica fetched from an offset (it holds everything before),
            called with its id, that offset, the epoch it promised and the time; None: this journal has no
            followers (a replica's fetch is answered all the same, and counts for nothing).
        on_promise: a replica's: a candidate asks it to promise an epoch; returns the answer's data (raises
            ConflictError when it promised that epoch or a newer one, UnavailableError when it is a learner); None:
            not a replica (refused).
        on_commit: a replicated journal's: a durable subscriber commits a position (name, offset, the request to
            answer once it is on a majority); None: kept here, answered at once.
    """

    def __init__(self, context: zmq.Context, store: Store, directory: str, drops: DropCounter,
                 curve: Curve | None = None, admission: Admission | None = None,
                 on_replica: Callable[[str, int, int, float], None] | None = None,
                 on_promise: Callable[[int], dict[str, Any]] | None = None,
                 on_commit: Callable[[str, int, Request], Reply | None] | None = None) -> None:
        self.reads = Reads(store)
        self.on_replica = on_replica
        self.on_promise = on_promise
        self.on_commit = on_commit
        self.positions = Positions(directory)
        self.admission = admission
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_CONTROL_BYTES)  # as every server of the control plane
        self.socket.setsockopt(zmq.SNDHWM, 64)  # answers of up to a few MiB each
        if curve is not None:
            curve.serve(self.socket, "reads")
        self.endpoint = ""
        dispatcher = Dispatcher("journal reads", {control.Fetch: self._on_fetch, control.Commit: self._on_commit,
                                                  control.Position: self._on_position,
                                                  control.Verify: self._on_verify,
                                                  control.Promise: self._on_promise}, drops)
        self.server = RouterServer(self.socket, dispatcher, keyring=curve.keyring if curve is not None else None)
        self._now = 0.0

    def bind(self, address: str, port: int) -> None:
        """Raises: BrokerConnectionError: the address cannot be bound."""
        self.endpoint = bind(self.socket, address, port)

    def readable(self, now: float) -> None:
        self._now = now
        self.server.readable()

    def written(self) -> None:
        """Answer the fetches waiting at the end: more is written."""
        self._send(self.reads.written())

    def epochs(self, epoch: int, history: list[list[int]]) -> None:
        """The epoch this journal leads (or a follower, promised) and its log's epochs: named in every answer to a
        replica."""
        self.reads.epochs(epoch, history)

    def members(self, replicas: list[str]) -> None:
        """The replicas a leader counts: named in every answer to a replica."""
        self.reads.replica_set(replicas)

    def commit(self, end: int) -> None:
        """A replicated journal's commit end moved to ``end``: answer the readers waiting for it."""
        self.reads.commit(end)
        self.written()

    def expire(self, now: float) -> None:
        self._send(self.reads.expire(now))

    def close(self) -> None:
        self.socket.close()

    # ------------------------------------------------------------------ requests

    def _check(self, request: Request, prefix: bytes) -> None:
        admission, principal = self.admission, request.principal
        if admission is None or principal is None:
            return
        if not admission.known:
            raise ForbiddenError("the journal has not been told the permissions yet; retry")
        if not admission.may_subscribe(principal, prefix):
            raise ForbiddenError(f"{principal} may not subscribe to this queue under {prefix[:40]!r}")

    def _on_fetch(self, msg: control.Fetch, request: Request) -> Reply | None:
        for prefix in msg.prefixes[:control.MAX_PREFIXES] if msg.filtered else [msg.prefix]:
            self._check(request, prefix)
        if msg.replica:
            if request.principal is not None and request.principal != CLUSTER:
                raise ForbiddenError(f"{request.principal} may not fetch as a replica: only the cluster's processes")
            if self.on_replica is not None and msg.offset >= 0:
                self.on_replica(msg.replica, msg.offset, msg.epoch, self._now)
        if msg.release:  # its fetch waiting at the end is answered first: this one asks for other keys
            self._send([(request.identity, frames) for frames in self.reads.release(request.identity)])
        frames = self.reads.fetch(request.identity, msg, self._now)  # ProtocolError: answered BAD_REQUEST
        if frames is not None:
            self._send([(request.identity, frames)])
        return None

    def _on_promise(self, msg: control.Promise, request: Request) -> Reply:
        if request.principal is not None and request.principal != CLUSTER:
            raise ForbiddenError(f"{request.principal} may not ask a replica's promise: only the cluster's processes")
        if self.on_promise is None:
            raise UnavailableError("this journal is not a replica of a replicated journal")
        if msg.epoch < 1:
            raise ProtocolError(f"an epoch is 1 or more, got {msg.epoch}")
        return Reply(comment=f"promised epoch {msg.epoch} to {msg.candidate[:64]}", data=self.on_promise(msg.epoch))

    def _on_commit(self, msg: control.Commit, request: Request) -> Reply | None:
        self._check(request, b"")
        if self.on_commit is not None:
            return self.on_commit(msg.name, msg.offset, request)
        try:
            self.positions.commit(msg.name, msg.offset)  # ProtocolError: answered BAD_REQUEST
        except JournalError as exc:
            raise UnavailableError(str(exc)) from exc
        return Reply(comment="committed", data={"offset": msg.offset})

    def _on_position(self, msg: control.Position, request: Request) -> Reply:
        self._check(request, b"")
        return Reply(data={"offset": self.positions.get(msg.name)})

    def _on_verify(self, msg: control.Verify, request: Request) -> Reply:
        self._check(request, b"")
        store = self.reads.store
        problems = list(store.verify())
        return Reply(comment="sound" if not problems else f"{len(problems)} problem(s)",
                     data={"problems": problems[:100], "segments": len(store.segments),
                           "first_offset": store.first_offset, "end_offset": store.end_offset,
                           "size_bytes": store.size_bytes})

    def _send(self, answers: list[tuple[bytes, list[bytes]]]) -> None:
        for identity, frames in answers:
            try:
                send_frames(self.socket, [identity, *frames], zmq.NOBLOCK)
            except zmq.ZMQError:  # the reader is gone, or reads nothing: it fetches again
                pass
