"""A client's conversation channel with its queue's monitor: one DEALER, following the monitor's moves.

Publishers (from their sender thread) and subscribers (from ``recv``) talk to the monitor the same way: a
DEALER whose routing id is the client's id, messages sent without ever blocking (a full queue drops the
message: every one of them is repeated or superseded by the next hello), and what arrives decoded and
checked, a malformed frame logged and dropped.
"""

from __future__ import annotations

import logging
from typing import Iterator

import zmq

from client._locator import MonitorLocator
from roq.wire import control
from roq.config import CurveClient
from roq.errors import ProtocolError

log = logging.getLogger(__name__)

#: Milliseconds a closing channel keeps trying to deliver its goodbye.
LINGER_MS = 200


class MonitorChannel:
    """The DEALER to a queue's monitor. Made, used and closed by one thread (pyzmq sockets stay in theirs).

    Args:
        context: the ZeroMQ context.
        locator: where the monitor is (followed through ZooKeeper or fixed).
        who: how log lines name the client.
        curve: the client's CURVE keys (None: plaintext).

    Attributes:
        socket: the DEALER, for the owner's poller.
        endpoint: the monitor endpoint the socket is connected to.
        dropped: malformed messages dropped.
    """

    def __init__(self, context: zmq.Context, locator: MonitorLocator, who: str,
                 curve: CurveClient | None = None) -> None:
        self._locator = locator
        self._who = who
        self.endpoint = locator.endpoint
        self.dropped = 0
        self.socket = context.socket(zmq.DEALER)  # no routing id of its own: the monitor's ROUTER gives one
        if curve is not None:
            curve.apply(self.socket)
        self.socket.setsockopt(zmq.LINGER, LINGER_MS)
        self.socket.connect(self.endpoint)

    def follow(self) -> bool:
        """Reconnect to the monitor's endpoint if it moved to another host; True if it did (say hello)."""
        if self._locator.endpoint == self.endpoint:
            return False
        self.endpoint = self._locator.retarget(self.socket, self.endpoint)
        return True

    def send(self, msg: control.Message) -> None:
        """Send ``msg`` unless the socket's queue is full (then it is dropped: the next hello repeats it)."""
        try:
            self.socket.send(control.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            pass

    def receive(self) -> Iterator[control.Message]:
        """Every message waiting now, decoded; malformed ones are logged, counted and skipped."""
        recv = self.socket.recv_multipart
        while True:
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                if len(frames) != 1:
                    raise ProtocolError(f"{len(frames)} frames")
                msg = control.decode(frames[0])
            except ProtocolError as exc:
                self.dropped += 1
                if self.dropped <= 10 or self.dropped % 1000 == 0:
                    log.warning("%s: dropped a malformed message from the monitor: %s (%d in all)",
                                self._who, exc, self.dropped)
                continue
            yield msg

    def close(self) -> None:
        """Close the socket (what was sent last still goes out for :data:`LINGER_MS`)."""
        self.socket.close()
