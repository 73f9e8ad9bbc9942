"""Queue stats (2013): a queue's topology and rules, with its monitor's own status asked for on the spot.

Each ask is a DEALER connected to the queue's monitor that sends it a :class:`~roq.wire.control.Status`; the
GCM's loop polls the DEALERs beside its own sockets and answers when the monitor replies, or without a
status when it cannot ask (no monitor, :data:`MAX_ASKS` asks out already, an endpoint that is not one), when
the monitor is silent for :data:`ANSWER_TIMEOUT`, or when it answers anything but a reply holding a status (a
monitor may answer garbage). The answer is decoded here, once (:func:`roq.wire.status.decode`): a malformed status
is logged (at most every :data:`LOG_INTERVAL` seconds) and read as none. A stats request is answered with the
topology and the status (:class:`StatsReply`); the census takes the status itself.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import zmq

from gcm._view import QueueView
from roq.wire import control
from roq.wire import management as m
from roq.wire.control import Reply
from roq.security.curve import Curve
from roq.errors import ProtocolError
from roq.runtime import LogLimit
from roq.server import Request
from roq.wire.shape import to_document
from roq.sockets import check_endpoint
from roq.wire.status import QueueStatus, decode

__all__ = ["StatsAsks", "StatsReply", "stats_reply", "MAX_ASKS", "ANSWER_TIMEOUT", "LOG_INTERVAL"]

log = logging.getLogger("gcm")

MAX_ASKS = 100  # monitors asked at once; beyond, stats answer with the topology only
ANSWER_TIMEOUT = 1.0  # seconds a monitor has to answer
MAX_STATUS_BYTES = 4 << 20  # a larger answer drops the connection (and the stats come without it)
LOG_INTERVAL = 10.0  # seconds between two lines about monitors that answer something that is not a status

#: what an ask is answered with: the monitor's status, or None (it could not be had)
Answer = Callable[[QueueStatus | None], None]


@dataclasses.dataclass(frozen=True)
class StatsReply(Reply):
    """A stats reply as it goes through the GCM's process: on the wire a :class:`~roq.wire.control.Reply` whose
    ``Monitor`` is the status's document; here, the status itself beside it (for the HTTP API)."""

    status: QueueStatus | None = dataclasses.field(default=None, compare=False, repr=False)


def stats_reply(q: QueueView, status: QueueStatus | None) -> StatsReply:
    """The answer to a stats request: the topology, and the monitor's status when it gave one."""
    data: dict[str, Any] = {"Queue": q.summary().document(), "Rules": dict(q.rules)}
    if status is None:
        return StatsReply(request=m.QueueStats.CMD, comment="the monitor did not answer; topology only", data=data)
    return StatsReply(request=m.QueueStats.CMD, data={**data, "Monitor": to_document(status)}, status=status)


@dataclasses.dataclass
class _Ask:
    answer: Answer
    queue: QueueView
    deadline: float
    endpoint: str = ""  # kept after the answer, for the next ask of the same monitor ("": closed)


class StatsAsks:
    """The stats requests waiting for their monitor (bounded: :data:`MAX_ASKS`).

    Args:
        ctx: the context the DEALERs are made in (the loop's thread owns them).
        curve: the GCM's CURVE (it asks the monitors as the cluster), or None for plaintext.
        keep: how many DEALERs that were answered are kept, one per monitor endpoint, for the next ask of the
            same monitor (the census asks every monitor every period: a new connection each time would cost both
            sides a TCP and ZMTP handshake, and a CURVE key exchange, per queue per period). One that was not
            answered in time, or answered garbage, is closed: a late answer is never read as the next one's.
    """

    def __init__(self, ctx: zmq.Context, *, limit: int = MAX_ASKS, timeout: float = ANSWER_TIMEOUT,
                 curve: Curve | None = None, keep: int = 0) -> None:
        self._ctx = ctx
        self._curve = curve
        self.limit = limit
        self.timeout = timeout
        self.keep = keep
        self._asks: dict[zmq.Socket, _Ask] = {}
        self._kept: dict[str, zmq.Socket] = {}  # monitor endpoint -> an answered DEALER connected to it
        self._unreadable = LogLimit(LOG_INTERVAL)
        self.unreadable = 0  # answers that were not a status (garbage, a malformed status)

    def __len__(self) -> int:
        return len(self._asks)

    def sockets(self) -> set[zmq.Socket]:
        """The DEALERs to poll."""
        return set(self._asks)

    def ask(self, q: QueueView, request: Request, now: float) -> Reply | None:
        """Ask ``q``'s monitor for its status, for a stats request; the reply now when it cannot be asked, else
        None (answered later)."""
        if self.ask_status(q, lambda status: request.answer(stats_reply(q, status)), now):
            return None
        return stats_reply(q, None)

    def ask_status(self, q: QueueView, answer: Answer, now: float) -> bool:
        """Ask ``q``'s monitor for its status, and call ``answer`` with it (None: silent until the deadline, or
        it answered no status); False when it cannot be asked (``answer`` is not called)."""
        if q.monitor is None or len(self._asks) >= self.limit:
            return False
        endpoint = q.monitor.endpoint
        sock = self._kept.pop(endpoint, None)
        if sock is None:
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_STATUS_BYTES)
            if self._curve is not None:
                self._curve.connect(sock)
            try:
                sock.connect(check_endpoint(endpoint))
            except Exception as exc:  # a bad endpoint in the monitor's node (ConfigError, ZMQError): topology only
                log.debug("queue %s: cannot ask its monitor at %r: %s", q.name, endpoint[:80], exc)
                sock.close()
                return False
        try:
            sock.send(control.encode(control.Status()), zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # its pipe is full (the monitor does not read): topology only
            log.debug("queue %s: cannot ask its monitor at %r: %s", q.name, endpoint[:80], exc)
            sock.close()
            return False
        kept = endpoint if len(self._kept) + len(self._asks) < self.keep else ""
        self._asks[sock] = _Ask(answer, q, now + self.timeout, kept)
        return True

    def readable(self, sock: zmq.Socket) -> None:
        """The monitor behind ``sock`` answered: its status, decoded, to whoever asked."""
        ask = self._asks.pop(sock, None)
        if ask is None:
            return
        status = None
        try:
            reply = control.decode(sock.recv(zmq.NOBLOCK))
            if isinstance(reply, Reply) and reply.ok:
                status = decode(reply.data)
            else:
                log.debug("queue %s: its monitor answered %s to a status request", ask.queue.name, type(reply).__name__)
        except ProtocolError as exc:  # garbage, or a malformed status: none
            self.unreadable += 1
            if self._unreadable.due():
                log.warning("queue %s: its monitor answered no status (read as unavailable; %d such answers so "
                            "far): %s", ask.queue.name, self.unreadable, str(exc)[:300])
        except Exception as exc:  # nothing after all (a ZMQError): none
            log.debug("queue %s: its monitor's answer could not be read: %s", ask.queue.name, str(exc)[:200])
        finally:
            if status is not None and ask.endpoint and ask.endpoint not in self._kept:
                self._kept[ask.endpoint] = sock  # asked again next time
            else:
                sock.close()
        ask.answer(status)

    def forget(self, endpoints: set[str]) -> None:
        """Close the kept DEALERs to every monitor but those at ``endpoints`` (the running queues' monitors)."""
        for endpoint in [e for e in self._kept if e not in endpoints]:
            self._kept.pop(endpoint).close()

    def expire(self, now: float) -> None:
        """Answer the asks whose monitor stayed silent past their deadline."""
        for sock, ask in [(s, a) for s, a in self._asks.items() if now >= a.deadline]:
            del self._asks[sock]
            sock.close()
            ask.answer(None)

    def close(self) -> None:
        for sock in [*self._asks, *self._kept.values()]:
            sock.close()
        self._asks.clear()
        self._kept.clear()
