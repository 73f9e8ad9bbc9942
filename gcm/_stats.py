"""Queue stats (2013): a queue's topology and rules, with its monitor's own status asked for on the spot.

Each ask is a DEALER connected to the queue's monitor that sends it a :class:`~roq.control.Status`; the
GCM's loop polls the DEALERs beside its own sockets and answers the request when the monitor replies, or
with the topology alone when it cannot ask (no monitor, :data:`MAX_ASKS` asks out already, an endpoint that
is not one), when the monitor is silent for :data:`ANSWER_TIMEOUT`, or when it answers anything but a
reply (a monitor may answer garbage).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import zmq

from gcm._view import QueueView
from roq import control
from roq import management as m
from roq.control import Reply
from roq.curve import Curve
from roq.server import Request
from roq.sockets import check_endpoint

__all__ = ["StatsAsks", "stats_reply", "MAX_ASKS", "ANSWER_TIMEOUT"]

log = logging.getLogger("gcm")

MAX_ASKS = 100  # monitors asked at once; beyond, stats answer with the topology only
ANSWER_TIMEOUT = 1.0  # seconds a monitor has to answer
MAX_STATUS_BYTES = 4 << 20  # a larger answer drops the connection (and the stats come without it)


def stats_reply(q: QueueView, status: dict[str, Any] | None) -> Reply:
    """The answer to a stats request: the topology, and the monitor's status when it gave one."""
    data: dict[str, Any] = {"Queue": q.summary().document(), "Rules": dict(q.rules)}
    if status is None:
        return Reply(request=m.QueueStats.CMD, comment="the monitor did not answer; topology only", data=data)
    return Reply(request=m.QueueStats.CMD, data={**data, "Monitor": status})


@dataclasses.dataclass
class _Ask:
    request: Request
    queue: QueueView
    deadline: float


class StatsAsks:
    """The stats requests waiting for their monitor (bounded: :data:`MAX_ASKS`).

    Args:
        ctx: the context the DEALERs are made in (the loop's thread owns them).
        curve: the GCM's CURVE (it asks the monitors as the cluster), or None for plaintext.
    """

    def __init__(self, ctx: zmq.Context, *, limit: int = MAX_ASKS, timeout: float = ANSWER_TIMEOUT,
                 curve: Curve | None = None) -> None:
        self._ctx = ctx
        self._curve = curve
        self.limit = limit
        self.timeout = timeout
        self._asks: dict[zmq.Socket, _Ask] = {}

    def __len__(self) -> int:
        return len(self._asks)

    def sockets(self) -> set[zmq.Socket]:
        """The DEALERs to poll."""
        return set(self._asks)

    def ask(self, q: QueueView, request: Request, now: float) -> Reply | None:
        """Ask ``q``'s monitor for its status; the reply now when it cannot be asked, else None (answered
        later)."""
        if q.monitor is None or len(self._asks) >= self.limit:
            return stats_reply(q, None)
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_STATUS_BYTES)
        if self._curve is not None:
            self._curve.connect(sock)
        try:
            sock.connect(check_endpoint(q.monitor.endpoint))
            sock.send(control.encode(control.Status()), zmq.NOBLOCK)
        except Exception as exc:  # a bad endpoint in the monitor's node (ConfigError, ZMQError): topology only
            log.debug("queue %s: cannot ask its monitor at %r: %s", q.name, q.monitor.endpoint[:80], exc)
            sock.close()
            return stats_reply(q, None)
        self._asks[sock] = _Ask(request, q, now + self.timeout)
        return None

    def readable(self, sock: zmq.Socket) -> None:
        """The monitor behind ``sock`` answered: answer its request."""
        ask = self._asks.pop(sock, None)
        if ask is None:
            return
        status = None
        try:
            reply = control.decode(sock.recv(zmq.NOBLOCK))
            if isinstance(reply, Reply) and reply.ok:
                status = dict(reply.data)
            else:
                log.debug("queue %s: its monitor answered %s to a status request", ask.queue.name, type(reply).__name__)
        except Exception as exc:  # garbage, or nothing after all: the topology alone
            log.debug("queue %s: its monitor's status unreadable: %s", ask.queue.name, str(exc)[:200])
        finally:
            sock.close()
        ask.request.answer(stats_reply(ask.queue, status))

    def expire(self, now: float) -> None:
        """Answer the asks whose monitor stayed silent past their deadline."""
        for sock, ask in [(s, a) for s, a in self._asks.items() if now >= a.deadline]:
            del self._asks[sock]
            sock.close()
            ask.request.answer(stats_reply(ask.queue, None))

    def close(self) -> None:
        for sock in self._asks:
            sock.close()
        self._asks.clear()
