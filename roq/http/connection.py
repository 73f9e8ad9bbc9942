"""One client connection of the HTTP server: h11's state, the request being read and when it is due, the
bytes waiting to go out; from its first byte to its close (see :mod:`roq.http` for the rules it keeps)."""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
import urllib.parse
from typing import Iterable, Protocol

import h11

from roq.http.messages import STATUS_TEXT, EventStream, HttpRequest, HttpResponse, Later
from roq.runtime import DropCounter

__all__ = ["Connection", "Limits", "Server"]

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 16 << 10  # request line and headers, at most
READ_BYTES = 4 << 10  # a connection's read each turn: a turn answers some 110 small pipelined requests at most
PIPELINE_BYTES = 64 << 10  # read while a request waits for its answer, at most: the rest waits in the kernel
PAUSE_OUTPUT = 256 << 10  # answers waiting to be written past which a connection's next requests wait
LINGER_S = 2.0  # after a refusal, what the client still sends is read and dropped this long before closing...
LINGER_BYTES = 64 << 20  # ...or up to this much: closing at once would reset the connection, and the client
#                          would lose the answer it was sent
SERVER = "roq"


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a connection may take (the server's settings of the same names: see :class:`roq.http.HttpServer`)."""

    max_body: int
    head_timeout: float
    reserve_timeout: float
    min_body_rate: float
    idle_timeout: float
    max_output: int


class Server(Protocol):
    """What a connection needs of its server."""

    where: str
    drops: DropCounter
    limits: Limits
    over_caps: str  # why a reserved connection is refused

    def answer(self, request: HttpRequest, later: Later, reserved: bool) -> HttpResponse | EventStream | None: ...

    def forget(self, conn: Connection) -> None: ...


class Connection:
    """One client connection: its socket, h11's state, the bytes waiting to go out, and when the request being
    read must be whole."""

    def __init__(self, server: Server, sock: socket.socket, peer: str, now: float, *, reserved: bool) -> None:
        self.server = server
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.address = peer.rpartition(":")[0]
        self.reserved = reserved  # over the caps: only a health check is answered, and then it is closed
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.out = bytearray()
        self.accepted = now
        self.active = now
        self.started = 0.0  # when the request being read began (its first byte, or the answer before it)
        self.fed = 0  # bytes read since the last request was dispatched
        self.received = 0
        self.cycle = 0  # requests answered on this connection
        self.head: h11.Request | None = None
        self.body = bytearray()
        self.body_from = 0.0  # when the head was whole
        self.waiting = False  # a request is being answered later
        self.stream: EventStream | None = None
        self.closing = False  # close once everything is written
        self.eof = False  # the client closed its side: nothing more to read
        self.lingering = 0.0  # once written: until when what the client sends is dropped (0: not lingering)
        self.discarded = 0
        self.closed = False
        self._serving = False  # in the loop of :meth:`_events` (an answer given inside it does not enter again)

    @property
    def wants_input(self) -> bool:
        """Whether the socket is polled for input: not after end of file; while a request waits for its answer
        only up to :data:`PIPELINE_BYTES`, and not while answers wait to be written."""
        if self.closed or self.eof:
            return False
        if self.stream is not None or self.closing:
            return True  # read and dropped; its end of file closes the connection
        if len(self.out) >= PAUSE_OUTPUT:
            return False
        return not self.waiting or self.fed < PIPELINE_BYTES

    def deadline(self) -> float:
        """When the request being read must be whole (infinite: none is being read)."""
        limits = self.server.limits
        if self.waiting or self.stream is not None or self.closing:
            return float("inf")
        if self.head is not None:
            return self.body_from + limits.head_timeout + len(self.body) / limits.min_body_rate
        if self.reserved:
            return self.accepted + limits.reserve_timeout
        return self.started + limits.head_timeout if self.started else float("inf")

    @property
    def evictable(self) -> tuple[int, float]:
        """A reserved connection's rank for eviction, lowest first: those that sent part of a request (or were
        answered), the oldest first; then those that sent nothing yet."""
        return (0 if self.received or self.closing else 1, self.accepted)

    # ------------------------------------------------------------------ input

    def readable(self, now: float) -> None:
        try:
            data = self.sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        self.active = now
        self.received += len(data)
        if not data:
            self.eof = True
        if self.stream is not None or self.closing:
            self.discarded += len(data)
            if not data or self.discarded > LINGER_BYTES:
                self.close()
            return  # what a stream's client sends is not read, nor what follows a refusal
        if not self.started and not self.waiting:
            self.started = now
        self.fed += len(data)
        try:
            self.h11.receive_data(data)
        except RuntimeError:  # more data after end of file: h11 refuses it
            self.close()
            return
        self._events()

    def _events(self) -> None:
        """Take h11's events and answer each request whole, one after another: a loop, so that a thousand
        pipelined requests are a thousand turns of it, not a thousand calls deep."""
        if self._serving:
            return
        self._serving = True
        try:
            while (not self.closed and not self.waiting and self.stream is None and not self.closing
                   and len(self.out) < PAUSE_OUTPUT):
                if not self._event():
                    break
        except h11.RemoteProtocolError as exc:
            self.server.drops.drop("malformed HTTP request", f"{self.peer}: {exc}"[:200])
            self._refuse(exc.error_status_hint or 400, f"malformed HTTP request: {exc}")
        finally:
            self._serving = False
        self.write()  # the answers of the loop at once: a send each was most of a pipelined request's cost

    def _event(self) -> bool:
        """Take one event; whether to go on."""
        max_body = self.server.limits.max_body
        event = self.h11.next_event()
        if event is h11.NEED_DATA or event is h11.PAUSED:
            return False
        if isinstance(event, h11.ConnectionClosed):
            self.closing = True  # what waits to be written is written first
            self.write()
            return False
        if isinstance(event, h11.Request):
            self.head, self.body, self.body_from = event, bytearray(), time.monotonic()
            length = _header(event.headers, b"content-length")
            if length and length.isdigit() and int(length) > max_body:
                self.server.drops.drop("HTTP body too large", f"{self.peer}: {length} bytes")
                self._refuse(413, f"the body of {int(length)} bytes is over the {max_body} byte limit")
        elif isinstance(event, h11.Data):
            self.body += event.data
            if len(self.body) > max_body:
                self.server.drops.drop("HTTP body too large", f"{self.peer}: over {max_body} bytes")
                self._refuse(413, f"the body is over the {max_body} byte limit")
        elif isinstance(event, h11.EndOfMessage):
            self._dispatch()
        return True

    def _dispatch(self) -> None:
        head = self.head
        assert head is not None
        target = head.target.decode("latin-1")
        path, _, query = target.partition("?")
        request = HttpRequest(
            method=head.method.decode("ascii", "replace").upper(),
            path=urllib.parse.unquote(path),
            query=dict(urllib.parse.parse_qsl(query, keep_blank_values=True)),
            headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers},
            body=bytes(self.body),
            peer=self.peer,
            target=target,
        )
        self.waiting = True
        self.fed = 0
        self.respond(self.server.answer(request, Later(self, self.cycle), self.reserved))

    def expire(self, now: float) -> None:
        """Refuse the request being read if it is late (408), or close the connection if it lingered or idled
        long enough."""
        if self.lingering:
            if now >= self.lingering:
                self.close()
        elif now >= self.deadline():
            self._late()
        elif (not self.waiting and self.stream is None and not self.reserved
              and now - self.active > self.server.limits.idle_timeout):
            self.close()

    def _late(self) -> None:
        if self.reserved and self.head is None:
            self.server.drops.drop("HTTP connection refused", f"{self.peer}: over the caps, no request in time")
            self._refuse(503, self.server.over_caps)
            return
        what = "head" if self.head is None else "body"
        self.server.drops.drop("HTTP request too slow", f"{self.peer}: its {what} was not whole in time")
        self._refuse(408, f"the request's {what} did not arrive in time; the connection is closed")

    # ------------------------------------------------------------------ output

    def respond(self, answer: HttpResponse | EventStream | None) -> None:
        """Send ``answer`` to the request that waits for it (None: it waits on)."""
        if answer is None or self.closed or not self.waiting:
            return
        if isinstance(answer, EventStream):
            self._start_stream(answer)
            return
        headers = [("content-type", answer.content_type), ("content-length", str(len(answer.body))),
                   ("server", SERVER), ("cache-control", "no-store"), *answer.headers]
        self._answer(answer.status, headers, answer.body)

    def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        """Send a whole response (no body to a HEAD), then go on to the next request, or close."""
        self.waiting = False
        if (self.h11.their_state is not h11.DONE or self.reserved
                or (self.eof and not self.h11.trailing_data[0])):
            headers.append(("connection", "close"))  # refused before its body was read, over the caps, or the last
        try:
            response = h11.Response(status_code=status, headers=headers, reason=STATUS_TEXT.get(status, ""))
        except h11.LocalProtocolError as exc:  # a handler's bug (a header no HTTP may carry): the client hears so
            log.error("%s: a response to %s could not be sent (%s); answered 500", self.server.where, self.peer, exc)
            body = b'{"error": "internal error (a response that HTTP cannot carry)", "status": 500}\n'
            response = h11.Response(status_code=500, reason=STATUS_TEXT[500], headers=[
                ("content-type", "application/json"), ("content-length", str(len(body))), ("connection", "close")])
        try:
            self.out += self.h11.send(response)
            if body and (self.head is None or self.head.method != b"HEAD"):
                self.out += self.h11.send(h11.Data(data=body))
            self.out += self.h11.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            log.warning("%s: cannot answer %s: %s", self.server.where, self.peer, exc)
            self.close()
            return
        self.head, self.body = None, bytearray()
        if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is not h11.DONE:
            self.closing = True
        else:
            self.h11.start_next_cycle()
            self.cycle += 1
            # a request already begun in h11's buffer (pipelined) is due from now; none: the connection idles
            self.started = time.monotonic() if self.h11.trailing_data[0] else 0.0
        if not self._serving:  # else the loop goes on, and writes when it ends
            self._events()  # a pipelined request may wait in h11's buffer

    def _start_stream(self, stream: EventStream) -> None:
        headers = [("content-type", "text/event-stream"), ("cache-control", "no-store"), ("server", SERVER),
                   ("x-accel-buffering", "no")]
        if self.head is not None and self.head.method == b"HEAD":  # its headers, and it ends there
            stream.gone()
            self._answer(200, headers, b"")
            return
        self.waiting = False
        self.stream = stream
        stream.attach(self)
        self.out += self.h11.send(h11.Response(status_code=200, headers=headers, reason=b"OK"))  # no length: chunked
        self.flush_stream(stream)

    def flush_stream(self, stream: EventStream) -> None:
        if self.closed:
            stream.gone()
            return
        try:
            for chunk in stream.take():
                self.out += self.h11.send(h11.Data(data=chunk))
        except h11.LocalProtocolError as exc:
            log.warning("%s: the stream to %s broke: %s", self.server.where, self.peer, exc)
            self.close()
            return
        self.write()

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` and close: what follows on the connection cannot be trusted (the request was not
        read whole, so :meth:`_answer` says ``connection: close``)."""
        if self.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            self.close()
            return
        self.waiting, self.head = True, None
        self.respond(HttpResponse.error(status, message))

    def write(self) -> None:
        """Write what waits, as far as the socket takes it now; cut off a client that stopped reading."""
        if self.closed:
            return
        paused = len(self.out) >= PAUSE_OUTPUT
        while self.out and not self.closed:
            try:
                sent = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.close()
                return
            del self.out[:sent]
        if len(self.out) > self.server.limits.max_output:
            self.server.drops.drop("HTTP client not reading", f"{self.peer}: {len(self.out)} bytes waiting")
            self.close()
        elif self.closing and not self.out:
            self.linger()
        elif paused and len(self.out) < PAUSE_OUTPUT:
            self._events()  # the requests that waited for the client to read

    def linger(self) -> None:
        """Everything is written: end our side, and drop what the client still sends until it closes its side
        or :data:`LINGER_S` passes (see :meth:`HttpServer.expire`)."""
        if self.lingering or self.closed:
            return
        if self.eof:  # it closed its side already
            self.close()
            return
        self.lingering = time.monotonic() + LINGER_S
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.stream is not None:
            self.stream.gone()
        self.server.forget(self)
        try:
            self.sock.close()
        except OSError:
            pass


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1").strip()
    return None
