"""ZeroMQ helpers shared by the processes: binding, endpoints, and counting bad connections."""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections.abc import Sequence

import zmq
from zmq.utils.monitor import recv_monitor_message

from roq.errors import BrokerConnectionError, ConfigError
from roq.runtime import DropCounter

__all__ = ["bind", "check_endpoint", "poll_ms", "send_frames", "HandshakeWatch", "RefusalWatch", "PLAINTEXT_HINT"]

#: what a client without CURVE keys adds to "did not answer"
PLAINTEXT_HINT = " (a cluster that serves CURVE answers only clients with credentials)"
_FAILED = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH


def bind(sock: zmq.Socket, address: str, port: int) -> str:
    """Bind ``sock`` to ``tcp://address:port`` (port 0 = any free port) and return the real endpoint.

    Raises:
        BrokerConnectionError: the address cannot be bound (in use, not local...).
    """
    try:
        ipaddress.ip_address(address)
    except ValueError as exc:
        raise ConfigError(f"bind address must be an IP address, got {address!r}") from exc
    where = f"tcp://{address}:{port if port else '*'}"
    try:
        sock.bind(where)
    except zmq.ZMQError as exc:
        raise BrokerConnectionError(f"cannot bind {where}: {exc}") from exc
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


_MORE = int(zmq.SNDMORE)


def send_frames(sock: zmq.Socket, frames: Sequence[bytes], flags: int = 0) -> None:
    """Send ``frames`` as one message, as ``sock.send_multipart(frames, flags)`` does, at a sixth of its cost.

    pyzmq's ``send_multipart`` adds ``SNDMORE`` to the flags as enums for every frame: about 12 us for three frames
    against 2 us here (pyzmq 27), a tenth of what a batch costs an exchange. ZeroMQ takes a message whole or, at its
    first frame, not at all: ``zmq.Again`` (a full pipe with ``NOBLOCK``) and ``EHOSTUNREACH`` (a ROUTER's unknown
    peer with ``ROUTER_MANDATORY``) come from the first ``send`` before anything is queued.

    Raises:
        zmq.ZMQError: as ``send_multipart``.
    """
    send = sock.send
    flags = int(flags)
    more = _MORE | flags
    for frame in frames[:-1]:
        send(frame, more)
    send(frames[-1], flags)


def poll_ms(seconds: float | None) -> int:
    """A ``zmq_poll`` timeout in whole milliseconds, rounded up (-1 = wait forever).

    pyzmq truncates a float timeout, so a deadline 0.4 ms away would become 0: a busy loop until the
    deadline. Waking up to a millisecond late is harmless for every timer we keep.
    """
    if seconds is None:
        return -1
    return max(0, math.ceil(seconds * 1000))


def check_endpoint(endpoint: str) -> str:
    """Validate a ``tcp://host:port`` endpoint given by a user.

    Raises:
        ConfigError: not of that form.
    """
    if not isinstance(endpoint, str) or not endpoint.startswith("tcp://"):
        raise ConfigError(f"endpoint must look like tcp://HOST:PORT, got {endpoint!r}")
    host, sep, port = endpoint[len("tcp://") :].rpartition(":")
    if not sep or not host or not port.isdigit() or len(port) > 5 or not 0 < int(port) < 65536:
        raise ConfigError(f"endpoint must look like tcp://HOST:PORT, got {endpoint!r}")
    return endpoint


class HandshakeWatch:
    """Counts peers that connect to a bound socket and fail the ZeroMQ handshake (garbage bytes).

    Register :attr:`socket` in the poller and call :meth:`handle` when it is readable.
    """

    def __init__(self, sock: zmq.Socket, name: str, drops: DropCounter) -> None:
        self._watched = sock
        self.socket = sock.get_monitor_socket(_FAILED)
        self._name = name
        self._drops = drops

    def handle(self) -> None:
        while True:
            try:
                event = recv_monitor_message(self.socket, zmq.NOBLOCK)
            except zmq.Again:
                return
            except (zmq.ZMQError, ValueError, IndexError) as exc:  # pragma: no cover - context ending
                logging.getLogger(__name__).debug("monitor socket: %s", exc)
                return
            self._drops.drop("bad connection", f"{self._name}: ZeroMQ handshake failed (event {event['event']})")

    def close(self) -> None:
        if not self._watched.closed:
            self._watched.disable_monitor()
        self.socket.close(linger=0)


class RefusalWatch:
    """Tells a CURVE client that a server refused its key at the handshake (ZAP's status, e.g. 400), and
    whether any handshake of it succeeded (none, for a server key that is not the server's: the server
    cannot read the client's hello and says nothing).

    Register :attr:`socket` in the poller and call :meth:`refused` when it is readable; :meth:`close` before
    the watched socket is closed. With ``connection``, it also follows the connection: :attr:`down` once it
    dropped (the peer's process died, or closed it) and until it is made again.
    """

    def __init__(self, sock: zmq.Socket, *, connection: bool = False) -> None:
        self._watched = sock
        events = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED
        if connection:
            events |= zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED
        self.socket = sock.get_monitor_socket(events)
        self.handshaken = False
        self.down = False

    def refused(self) -> int | None:
        """The status of the first refusal waiting (every waiting event is read), or None."""
        status = None
        while True:
            try:
                event = recv_monitor_message(self.socket, zmq.NOBLOCK)
            except zmq.Again:
                return status
            kind = event["event"]
            if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.handshaken = True
            elif kind == zmq.EVENT_CONNECTED:
                self.down = False
            elif kind == zmq.EVENT_DISCONNECTED:
                self.down = True
            elif status is None:
                status = event["value"]

    @staticmethod
    def describe(exchange: str, who: str, status: int, server: str = "exchange") -> str:
        return (f"{server} {exchange} refused this {who}'s key at the CURVE handshake (ZAP status {status}): the "
                "cluster's keyring does not admit it")

    def wait(self, timeout: float, server: str) -> bool:
        """Wait up to ``timeout`` seconds for the watched socket to have input; True if it has. ``server``
        names the peer in the error.

        Raises:
            BrokerConnectionError: the server refused the key meanwhile (ZAP's status in the message).
        """
        poller = zmq.Poller()
        poller.register(self._watched, zmq.POLLIN)
        poller.register(self.socket, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            events = dict(poller.poll(poll_ms(max(0.0, deadline - time.monotonic()))))
            if self.socket in events:
                status = self.refused()
                if status is not None:
                    raise BrokerConnectionError(f"{server} refused this client's key at the CURVE handshake (ZAP "
                                                f"status {status}): the cluster's keyring does not admit it")
            if self._watched in events:
                return True
            if time.monotonic() >= deadline:
                return False

    def silence(self) -> str:
        """Why a server may not have answered, for the error of a timeout: "" once a handshake succeeded."""
        self.refused()
        return "" if self.handshaken else (" (no CURVE handshake completed: is the cluster's public key the one "
                                           "this cluster serves with?)")

    def close(self) -> None:
        if not self._watched.closed:
            self._watched.disable_monitor()
        self.socket.close(linger=0)
