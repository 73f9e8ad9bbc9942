"""The one shape of a server: envelope, decode, dispatch, one reply type, pending replies, one error boundary.

Every process that answers requests (the GCM, a monitor, a host manager) and every process that takes
commands (an exchange, from its monitor and its host manager) runs its input through a :class:`Dispatcher`:

1. **decode** the frame into a :class:`~roq.wire.control.Message` (a frame over ``max_bytes`` is refused unread);
2. **dispatch** it to the handler registered for its type; a handler takes the message and the
   :class:`Request` (where it came from, for a reply that comes later) and returns a
   :class:`~roq.wire.control.Reply`, or None when there is nothing to answer now;
3. **the boundary**: whatever goes wrong in 1 and 2 becomes a reply and a counted, rate-limited log line,
   never an exception out of the loop. :func:`reply_for` is the one mapping: a
   :class:`~roq.errors.ManagementError` answers with its own code, comment and data; a bad frame, field or
   value (:class:`~roq.errors.ProtocolError`, :class:`~roq.errors.ConfigError`) BAD_REQUEST; an unknown
   command UNKNOWN_COMMAND; ZooKeeper and ZeroMQ failures UNAVAILABLE (retry); anything else FAIL, logged
   with its traceback: a bug, but one request's, not the process's.

A :class:`RouterServer` adds the socket side of a bound ROUTER: it reads in bursts, accepts the envelopes of
DEALER (``[id, body]``) and REQ (``[id, "", body]``) peers and answers in kind, and never blocks on a reply.
:class:`PendingReplies` keeps requests that are answered once the process reaches some state (a created
queue running), bounded in number, each with a deadline.
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from typing import Any, Callable, Iterable, Mapping, Protocol

import zmq
from kazoo.exceptions import KazooException

from roq.wire import control
from roq.wire.control import Message, Reply
from roq.errors import (
    ConfigError,
    ManagementError,
    ProtocolError,
    Result,
    UnknownCommandError,
)
from roq.runtime import TRACE_INTERVAL, DropCounter, LogLimit
from roq.security.zap import CLUSTER, KEY_REMOVED, Keyring, recv_from
from roq.sockets import send_frames

__all__ = ["Request", "Replier", "Handler", "Dispatcher", "RouterServer", "PendingReplies", "reply_for", "MAX_PENDING"]

log = logging.getLogger(__name__)

#: most replies one server keeps waiting at once; beyond, a request that would wait is refused (UNAVAILABLE)
MAX_PENDING = 1000


class Replier(Protocol):
    """What answers a request that came in by some way: a :class:`RouterServer`, or the HTTP API's adapter."""

    def send(self, envelope: tuple[bytes, ...], reply: Reply, /) -> object: ...


@dataclasses.dataclass(frozen=True)
class Request:
    """Where a message came from: the server it arrived on, the envelope to answer on (empty when the
    input has no envelope, e.g. a DEALER's or a pipe's) and, on a CURVE socket, the principal of the
    sender's key (None without CURVE: anyone)."""

    server: Replier | None
    envelope: tuple[bytes, ...]
    principal: str | None = None

    @property
    def identity(self) -> bytes:
        """The peer's routing identity (b"" without an envelope)."""
        return self.envelope[0] if self.envelope else b""

    def answer(self, reply: Reply) -> None:
        """Send ``reply`` to the peer now (for a reply that came later than its request)."""
        if self.server is not None:
            self.server.send(self.envelope, reply)


Handler = Callable[[Any, Request], "Reply | None"]


def reply_for(exc: BaseException, request: int = 0) -> Reply:
    """The reply to a request whose decoding or handling raised ``exc`` (the one mapping of errors)."""
    if isinstance(exc, ManagementError):
        return Reply(request=request, result=exc.code, comment=str(exc), data=exc.data)
    if isinstance(exc, UnknownCommandError):
        return Reply(request=request, result=Result.UNKNOWN_COMMAND, comment=str(exc))
    if isinstance(exc, (ProtocolError, ConfigError)):
        return Reply(request=request, result=Result.BAD_REQUEST, comment=str(exc))
    if isinstance(exc, KazooException):
        return Reply(request=request, result=Result.UNAVAILABLE,
                     comment=f"ZooKeeper refused the operation ({type(exc).__name__}); retry", data={"Retry": True})
    if isinstance(exc, zmq.ZMQError):
        return Reply(request=request, result=Result.UNAVAILABLE, comment=f"socket error ({exc}); retry",
                     data={"Retry": True})
    return Reply(request=request, result=Result.FAIL,
                 comment=f"internal error ({type(exc).__name__}); the request was not carried out")


class Dispatcher:
    """Decode, dispatch and answer: the boundary every input of a process goes through.

    Args:
        where: names the process in log lines (``monitor orders``).
        handlers: message type -> handler.
        drops: counts what is dropped or refused, per reason.
        max_bytes: larger frames are refused without being decoded.
        internal: the messages only the cluster's own processes may send (with CURVE: the principal
            :data:`roq.security.zap.CLUSTER`); from anyone else they are refused (FORBIDDEN) and counted.
    """

    def __init__(self, where: str, handlers: Mapping[type[Message], Handler], drops: DropCounter, *,
                 max_bytes: int = 1 << 20, internal: Iterable[type[Message]] = ()) -> None:
        self.where = where
        self.handlers = dict(handlers)
        self.internal = frozenset(internal)
        self.drops = drops
        self.max_bytes = max_bytes
        self.failures = 0  # handler bugs caught at the boundary
        self._traces = LogLimit(TRACE_INTERVAL)

    def dispatch(self, body: bytes, request: Request) -> Reply | None:
        """Handle one frame; the reply to send, if any. Never raises (but SystemExit and KeyboardInterrupt)."""
        if len(body) > self.max_bytes:
            self.drops.drop("oversized message", f"{len(body)} bytes > {self.max_bytes}")
            return Reply(result=Result.BAD_REQUEST,
                         comment=f"message of {len(body)} bytes is over the {self.max_bytes} byte limit")
        try:
            msg = control.decode(body)
        except UnknownCommandError as exc:
            self.drops.drop("unknown command", str(exc))
            return reply_for(exc, getattr(exc, "cmd", 0))
        except Exception as exc:  # ProtocolError, and whatever a broken decoder might raise
            self.drops.drop("malformed message", str(exc)[:200])
            return reply_for(exc if isinstance(exc, ProtocolError) else ProtocolError(str(exc)))
        return self.handle(msg, request)

    def handle(self, msg: Message, request: Request) -> Reply | None:
        """Run the handler of an already decoded message inside the boundary."""
        handler = self.handlers.get(type(msg))
        if handler is None:
            self.drops.drop("command not served here", type(msg).__name__)
            return Reply(request=msg.CMD, result=Result.UNKNOWN_COMMAND,
                         comment=f"{type(msg).__name__} ({msg.CMD}) is not served by {self.where}")
        if request.principal is not None and request.principal != CLUSTER and type(msg) in self.internal:
            self.drops.drop("refused: not a cluster process", f"{type(msg).__name__} from {request.principal}")
            return Reply(request=msg.CMD, result=Result.FORBIDDEN,
                         comment=f"{type(msg).__name__} is for the cluster's own processes, not {request.principal}")
        try:
            reply = handler(msg, request)
        except ManagementError as exc:  # a refusal (no such queue...): an answer, not a drop
            if exc.code == Result.FORBIDDEN:  # but a stranger's attempt is counted
                self.drops.drop("refused: no permission", f"{type(msg).__name__} from {request.principal}: {exc}"[:300])
            return reply_for(exc, msg.CMD)
        except (ProtocolError, ConfigError) as exc:
            self.drops.drop("bad request", f"{type(msg).__name__}: {exc}"[:200])
            return reply_for(exc, msg.CMD)
        except (KazooException, zmq.ZMQError) as exc:
            log.warning("%s: %s failed: %r", self.where, type(msg).__name__, exc)
            return reply_for(exc, msg.CMD)
        except Exception as exc:  # a bug: this request fails, the process serves on
            self.failures += 1
            self.drops.drop("internal error", f"{type(msg).__name__}: {type(exc).__name__}: {exc}"[:300])
            if self._traces.due():
                log.error("%s: handling %s failed:\n%s", self.where, type(msg).__name__, traceback.format_exc())
            return reply_for(exc, msg.CMD)
        if reply is not None and not reply.request:
            reply = dataclasses.replace(reply, request=msg.CMD)
        return reply


class RouterServer:
    """A bound ROUTER socket whose requests go through a :class:`Dispatcher`.

    Args:
        sock: the ROUTER socket (owned by the caller, who binds and closes it).
        dispatcher: decodes, dispatches and answers.
        burst: most messages read per :meth:`readable` call, so one busy peer cannot starve the loop.
        keyring: a CURVE server socket's keyring: every request then carries its sender's principal, and one
            sent with a routing id that is another key's (:meth:`roq.security.zap.Keyring.may_use`) is dropped unanswered
            and counted as ``forged id``.
    """

    def __init__(self, sock: zmq.Socket, dispatcher: Dispatcher, *, burst: int = 512,
                 keyring: Keyring | None = None) -> None:
        self.socket = sock
        self.dispatcher = dispatcher
        self.burst = burst
        self.keyring = keyring
        self.requests = 0

    def readable(self) -> None:
        """Read and answer what is waiting (up to the burst)."""
        drops = self.dispatcher.drops
        keyring = self.keyring
        principal: str | None = None
        for _ in range(self.burst):
            try:
                if keyring is None:
                    frames = self.socket.recv_multipart(zmq.NOBLOCK)
                    refused = ""
                else:
                    frames, principal = recv_from(self.socket, zmq.NOBLOCK)
                    refused = keyring.may_use(principal, frames[0])
            except zmq.Again:
                return
            except zmq.ZMQError as exc:  # pragma: no cover - the context is ending
                log.debug("%s: receive failed: %s", self.dispatcher.where, exc)
                return
            self.requests += 1
            if refused:  # a forgery is not answered (the answer would go to the id's owner); a removed key is told
                drops.drop(refused, f"{principal} sent with the id {frames[0].hex()[:32]}")
                if refused == KEY_REMOVED and len(frames) == 2:
                    self.send((frames[0],), Reply(result=Result.FORBIDDEN,
                                                  comment=f"the key of {principal} was removed from the cluster's "
                                                          "keyring"))
                continue
            # a DEALER sends [body] (the ROUTER adds its identity), a REQ ["", body]: answer in the same envelope
            envelope: tuple[bytes, ...]
            if len(frames) == 2:
                envelope = (frames[0],)
            elif len(frames) == 3 and frames[1] == b"":
                envelope = (frames[0], b"")
            else:
                drops.drop("bad envelope", f"{len(frames) - 1} frames after the identity")
                self.send((frames[0],), Reply(result=Result.BAD_REQUEST,
                                              comment="a request is one frame holding one BSON document"))
                continue
            reply = self.dispatcher.dispatch(frames[-1], Request(self, envelope, principal))
            if reply is not None:
                self.send(envelope, reply)

    def send(self, envelope: tuple[bytes, ...], msg: Message) -> bool:
        """Send ``msg`` to the peer of ``envelope`` without blocking; False if it could not go (the peer is
        gone or not reading: its loss, never ours)."""
        try:
            body = control.encode(msg)
        except ProtocolError as exc:
            log.warning("%s: cannot encode %s: %s", self.dispatcher.where, type(msg).__name__, exc)
            body = control.encode(Reply(request=getattr(msg, "request", 0), result=Result.FAIL,
                                        comment=f"the answer could not be encoded: {exc}"))
        try:
            send_frames(self.socket, [*envelope, body], zmq.NOBLOCK)
            return True
        except zmq.ZMQError as exc:
            log.debug("%s: %s to a peer dropped: %s", self.dispatcher.where, type(msg).__name__, exc)
            return False


@dataclasses.dataclass
class _Pending:
    request: Request
    ready: Callable[[], Reply | None]
    deadline: float
    expired: Callable[[], Reply]


class PendingReplies:
    """Requests answered once a condition holds, or at their deadline. Bounded (:data:`MAX_PENDING`).

    The owner calls :meth:`check` whenever its state may have changed and :meth:`expire` on its timer.
    """

    def __init__(self, limit: int = MAX_PENDING) -> None:
        self.limit = limit
        self._waiting: list[_Pending] = []

    def __len__(self) -> int:
        return len(self._waiting)

    def wait(self, request: Request, ready: Callable[[], Reply | None], deadline: float,
             expired: Callable[[], Reply]) -> Reply | None:
        """Answer with ``ready()`` once it gives a reply (at once if it does now), or with ``expired()`` at
        ``deadline``. Returns the reply to send now, if any (the handler returns it)."""
        reply = ready()
        if reply is not None:
            return reply
        if len(self._waiting) >= self.limit:
            return Reply(result=Result.UNAVAILABLE,
                         comment=f"{len(self._waiting)} requests are waiting already; retry later")
        self._waiting.append(_Pending(request, ready, deadline, expired))
        return None

    def check(self) -> None:
        """Answer every request whose condition holds now."""
        keep = []
        for p in self._waiting:
            reply = self._ready(p)
            if reply is None:
                keep.append(p)
            else:
                p.request.answer(reply)
        self._waiting = keep

    def expire(self, now: float) -> None:
        """Answer the requests whose deadline passed."""
        late = [p for p in self._waiting if now >= p.deadline]
        if late:
            self._waiting = [p for p in self._waiting if now < p.deadline]
            for p in late:
                p.request.answer(p.expired())

    def fail_all(self, reply: Reply) -> None:
        """Answer every waiting request with ``reply`` (e.g. this process stopped leading)."""
        waiting, self._waiting = self._waiting, []
        for p in waiting:
            p.request.answer(reply)

    @staticmethod
    def _ready(p: _Pending) -> Reply | None:
        try:
            return p.ready()
        except Exception as exc:  # a broken condition answers its request, and only its own
            log.exception("a pending reply's condition failed")
            return reply_for(exc)
