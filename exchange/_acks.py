"""What an exchange owes its publishers: one cumulative acknowledgement each.

Each publisher's connection is owed the highest seq the exchange forwarded of what came on it (with a
journal: the highest the journal acknowledged of its publisher, sent to the connection its latest batch came on,
:meth:`Acks.via`). Acknowledgements go out at once when the forward loop has read everything waiting, when a
batch asks for it (``FLAG_ACK_NOW``, a marker), when the journal answered, or when :data:`MAX_PENDING_ACKS`
publishers are owed one (the table is keyed by an identity a peer chooses: bounded); while more batches wait to
be read, they are coalesced and go out ``ack_interval`` after the data that made them due.
They are sent without blocking: a publisher gone, or whose pipe is full, resends or fails over.

While the forward loop reads no publisher (it holds a batch for a subscriber that reads slowly, or the journal is
behind), the acknowledgements stop advancing, yet the exchange is alive. Every :data:`REMIND_S` it says so to
the publishers it acknowledged last (:data:`MAX_PENDING_ACKS` of them at most) by sending each its latest
acknowledgement again (:meth:`Acks.remind`): a publisher tells a slow exchange from a dead one that way, and
does not fail over from one that holds it back (:mod:`client._sender`).

A link relays many publishers on one connection (:data:`roq.wire.batch.FLAG_RELAYED`): what a relayed
publisher is owed is kept under ``(connection, publisher)`` (:func:`owed_to`) and goes out as an
acknowledgement that names it (:func:`roq.wire.batch.encode_relayed_ack`).
"""

from __future__ import annotations

from typing import Iterable

import zmq

from roq.wire import batch
from roq.errors import ProtocolError
from roq.sockets import send_frames

__all__ = ["Acks", "MAX_PENDING_ACKS", "REMIND_S", "owed_to"]

#: Publishers owed an acknowledgement at most; beyond, acknowledgements go out at once.
MAX_PENDING_ACKS = 1024
#: Publishers whose connection is remembered for the journal's acknowledgements, at most.
MAX_ROUTES = 16384
#: While the forward loop reads no publisher, how often the publishers acknowledged last hear it is alive, seconds.
REMIND_S = 0.5


Owed = bytes | tuple[bytes, bytes]  # a connection, or a connection and the relayed publisher on it


def owed_to(conn: bytes, h: batch.Header) -> Owed:
    """Where the acknowledgement of a batch that came on ``conn`` is owed: the connection, or for a relayed
    publisher the connection and that publisher."""
    return (conn, h.publisher) if h.flags & batch.FLAG_RELAYED else conn


class Acks:
    """The acknowledgements owed on ``frontend`` (the ROUTER publishers send to), sent within ``interval``."""

    def __init__(self, frontend: zmq.Socket, interval: float, limit: int = MAX_PENDING_ACKS) -> None:
        self.frontend = frontend
        self.interval = interval
        self.limit = limit
        self.owed: dict[Owed, int] = {}  # a publisher's connection (routing id) -> highest seq to acknowledge
        self.due = float("inf")  # when what is owed goes out
        self._routes: dict[bytes, Owed] = {}  # publisher id -> the connection its latest batch came on
        self.given: dict[Owed, int] = {}  # acknowledged since exchange._delivery last took them
        self.latest: dict[Owed, int] = {}  # the last acknowledgement of the connections acknowledged last

    def via(self, publisher: bytes, conn: Owed) -> None:
        """``publisher``'s latest batch came on ``conn``: what :meth:`relay` owes it goes there (the oldest
        publisher is forgotten beyond :data:`MAX_ROUTES`)."""
        routes = self._routes
        if publisher not in routes and len(routes) >= MAX_ROUTES:
            del routes[next(iter(routes))]
        routes[publisher] = conn

    def relay(self, pairs: Iterable[tuple[bytes, int]]) -> None:
        """Owe each publisher of ``pairs`` (publisher id, seq) its seq, on the connection its latest batch came
        on (one never heard of is skipped: it resends)."""
        routes, owed = self._routes, self.owed
        for publisher, seq in pairs:
            conn = routes.get(publisher)
            if conn is not None:
                owed[conn] = seq

    def take_given(self) -> dict[Owed, int]:
        """What was acknowledged since the last call: each connection (or relayed publisher) and its highest seq."""
        given, self.given = self.given, {}
        return given

    def schedule(self, urgent: bool, since: float) -> None:
        """What is owed goes out now if ``urgent`` or the table is full, else ``interval`` after ``since``."""
        if self.owed:
            if urgent or len(self.owed) >= self.limit:
                self.send()
            elif self.due == float("inf"):
                self.due = since + self.interval

    def send(self) -> None:
        """Acknowledge every publisher owed one, without blocking."""
        self._send(self.owed)
        self.given.update(self.owed)
        latest = self.latest
        for ident, seq in self.owed.items():
            latest.pop(ident, None)  # the most recent last
            latest[ident] = seq
        while len(latest) > self.limit:
            del latest[next(iter(latest))]
        self.owed.clear()
        self.due = float("inf")

    def remind(self) -> None:
        """Send the publishers acknowledged last their latest acknowledgement again: the exchange is alive,
        and holds them back (nothing new is acknowledged)."""
        self._send(self.latest)

    def _send(self, acks: dict[Owed, int]) -> None:
        frontend = self.frontend
        for ident, seq in acks.items():
            try:
                if isinstance(ident, tuple):  # a relayed publisher's
                    send_frames(frontend, (ident[0], batch.encode_relayed_ack(ident[1], seq)), zmq.NOBLOCK)
                else:
                    send_frames(frontend, (ident, batch.encode_ack(seq)), zmq.NOBLOCK)
            except (zmq.ZMQError, ProtocolError):  # peer gone or its pipe full: it resends or fails over
                pass
