"""The control path of an exchange: its link to the queue's monitor and its host manager's command pipe.

Both carry control messages (:mod:`roq.wire.control`) and both run them through a
:class:`~roq.server.Dispatcher`: what does not decode, or is not a command taken on that input, is counted
and dropped, never answered (neither the monitor nor the host manager waits for an answer, and answering
garbage could start an exchange of errors).

* :class:`MonitorLink`: a DEALER connected to the monitor: heartbeats and KPIs out, the monitor's
  ``Shutdown``, ``KpiPeriod`` and ``Reply`` in. It follows the monitor when it moves (:meth:`retarget`).
* :class:`CommandPipe`: the host manager's commands (``Retarget``) as BSON documents on standard input
  (:mod:`roq.wire.pipe`); garbage is skipped and counted, the end of the stream is only noted.
"""

from __future__ import annotations

import logging
import time

import zmq

from roq.wire import control
from roq.security.curve import Curve
from roq.errors import ProtocolError
from roq.loop import Loop
from roq.wire.pipe import MAX_FRAME, PipeReader
from roq.runtime import DropCounter
from roq.server import Dispatcher, Request

log = logging.getLogger(__name__)

__all__ = ["MonitorLink", "CommandPipe", "MAX_CONTROL_BYTES", "CONTROL_HWM"]

#: longest message taken from the monitor
MAX_CONTROL_BYTES = 1 << 20
#: messages of the monitor held unread at most
CONTROL_HWM = 100
#: most messages read per wake-up, so that the forward loop is never starved
BURST = 64

_NO_ENVELOPE = Request(None, ())


class MonitorLink:
    """The exchange's DEALER to its queue's monitor.

    Args:
        context: the ZeroMQ context to make the socket in.
        endpoint: the monitor's control endpoint.
        dispatcher: handles what the monitor sends.
        curve: the process's CURVE (it connects as the cluster), or None for plaintext.
    """

    def __init__(self, context: zmq.Context, endpoint: str, dispatcher: Dispatcher, curve: Curve | None = None) -> None:
        self.endpoint = endpoint
        self.dispatcher = dispatcher
        self.socket = context.socket(zmq.DEALER)
        if curve is not None:
            curve.connect(self.socket)
        self.socket.setsockopt(zmq.LINGER, 1000)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_CONTROL_BYTES)
        self.socket.setsockopt(zmq.RCVHWM, CONTROL_HWM)

    def connect(self) -> None:
        self.socket.connect(self.endpoint)

    def retarget(self, endpoint: str) -> bool:
        """Talk to the monitor at ``endpoint`` from now on; False if it is already there.

        Raises:
            zmq.ZMQError: ZeroMQ refused the endpoint (then nothing changed).
        """
        if endpoint == self.endpoint:
            return False
        self.socket.connect(endpoint)
        try:
            self.socket.disconnect(self.endpoint)
        except zmq.ZMQError:  # never connected there, or already gone
            pass
        self.endpoint = endpoint
        return True

    def send(self, msg: control.Message) -> None:
        """Send ``msg`` to the monitor, best effort (a monitor unreachable for long misses reports)."""
        try:
            self.socket.send(control.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            pass
        except ProtocolError as exc:  # pragma: no cover - our own messages always encode
            log.error("cannot encode %s: %s", type(msg).__name__, exc)

    def readable(self) -> None:
        """Handle what the monitor sent (up to a burst)."""
        drops = self.dispatcher.drops
        for _ in range(BURST):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 1:
                drops.drop("bad control message", f"{len(frames)} frames from the monitor")
                continue
            self.dispatcher.dispatch(frames[0], _NO_ENVELOPE)  # nothing is answered on this link

    def close(self) -> None:
        self.socket.close()


class CommandPipe:
    """The host manager's commands on a pipe (the exchange's standard input).

    Args:
        fd: the read end of the pipe.
        dispatcher: handles the commands.
        drops: counts the garbage skipped.
    """

    def __init__(self, fd: int, dispatcher: Dispatcher, drops: DropCounter) -> None:
        self.dispatcher = dispatcher
        self._reader = PipeReader(fd, limit=MAX_FRAME,
                                  on_garbage=lambda n: drops.drop("garbage on the command pipe", f"{n} bytes"))
        self.fd = fd

    @property
    def closed(self) -> bool:
        """The host manager closed its end: no command will come any more."""
        return self._reader.closed

    def attach(self, loop: Loop, every: float) -> None:
        """Serve in ``loop``: read the commands as they come (no more once the host manager closed its end: its
        death signal follows), and give up a partial frame every ``every`` seconds."""

        def readable() -> None:
            self.readable(time.monotonic())
            if self.closed:
                loop.remove(self.fd)

        loop.add(self.fd, readable, "the host manager's commands")
        loop.every(every, lambda now: None if self.closed else self.expire(now), "the commands' partial frames")

    def readable(self, now: float) -> None:
        self._handle(self._reader.read(now))

    def expire(self, now: float) -> None:
        """Give up a partial frame that waited too long (call it from a timer)."""
        self._handle(self._reader.expire(now))

    def _handle(self, frames: list[bytes]) -> None:
        for frame in frames:
            self.dispatcher.dispatch(frame, _NO_ENVELOPE)
