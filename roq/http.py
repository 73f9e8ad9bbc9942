"""HTTP/1.1 inside a process's poll loop: the server of the management API, the metrics and the health checks.

Every RoQ process runs one ``zmq.Poller`` loop; an HTTP server must live in it, not in a thread or a second
event loop beside it. The protocol is h11's, which is sans-I/O (it parses and frames, and never touches a
socket); this module owns the sockets: a listening socket and its connections, non-blocking, registered in
the process's poller by :meth:`HttpServer.sync` and served by :meth:`HttpServer.ready` with the poll's events.

What a process serves is one *handler*: ``handler(request, later) -> HttpResponse | None``. It answers now,
or returns None and answers later through ``later.respond(response)`` (a request that waits for the cluster),
or returns an :class:`EventStream` that the process feeds (server-sent events; a ``HEAD`` of it is answered
its headers and never opens). The server keeps its own boundary, as :class:`roq.server.Dispatcher` does for
ZeroMQ: a malformed request gets 400 and its connection is closed, a body over ``max_body`` 413 without being
read, a body that does not decode 400 (:meth:`HttpRequest.json`), a handler that raises 500; each is counted
in the process's drop counter and the loop goes on.

Slow and greedy clients cannot hold it (see docs/http.md, "Bounded"):

* a request's head must be whole ``head_timeout`` after its first byte (or after the answer before it, for a
  pipelined one), and its body must keep up ``min_body_rate``; bytes trickling in do not extend either: 408,
  and the connection is closed;
* connections are bounded in all (``max_connections``) and per client address (``max_per_address``); one over
  either goes to a small *reserve* (``reserve``) where only the health checks (``health_paths``) are answered
  (anything else 503), its head due within ``reserve_timeout``; a newcomer to a full reserve evicts the oldest
  of those that have sent part of a request (a health check sends its head at once), else the oldest;
* pipelined requests are answered one after another by a loop, in order, and their answers written at once;
  a turn of the loop reads :data:`READ_BYTES` of a connection, so that its requests take turns with everyone
  else's; a connection's input is not read further while its answers wait to be written
  (:data:`PAUSE_OUTPUT`) or, while a request waits for its answer, once :data:`PIPELINE_BYTES` more came;
* a client that closed its side (end of file) is answered, and its socket is no longer polled for input;
* a connection idle for ``idle_timeout`` is closed; a client that stops reading is cut off once
  ``max_output`` bytes wait for it.
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import json
import logging
import socket
import time
import traceback
import urllib.parse
from typing import Any, Callable, Iterable

import h11
import zmq

from roq.errors import BrokerConnectionError, ConfigError
from roq.runtime import DropCounter

__all__ = ["HttpRequest", "HttpResponse", "EventStream", "Later", "HttpServer", "Handler", "STATUS_TEXT"]

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 16 << 10  # request line and headers, at most
MAX_JSON_DEPTH = 64  # nesting of a JSON body, at most: deeper would only make work for whoever walks it
READ_BYTES = 4 << 10  # a connection's read each turn: a turn answers some 110 small pipelined requests at most
BACKLOG = 1024  # connections the kernel holds until accepted: past it a client's SYN is dropped, retried after 1 s
PIPELINE_BYTES = 64 << 10  # read while a request waits for its answer, at most: the rest waits in the kernel
PAUSE_OUTPUT = 256 << 10  # answers waiting to be written past which a connection's next requests wait
LINGER_S = 2.0  # after a refusal, what the client still sends is read and dropped this long before closing...
LINGER_BYTES = 64 << 20  # ...or up to this much: closing at once would reset the connection, and the client
#                          would lose the answer it was sent
SERVER = "roq"

# HttpServer's defaults (see its Args)
MAX_BODY = 1 << 20
MAX_CONNECTIONS = 128
MAX_PER_ADDRESS = 32
RESERVE = 16
HEAD_TIMEOUT = 10.0
RESERVE_TIMEOUT = 1.0
MIN_BODY_RATE = 4096
IDLE_TIMEOUT = 60.0
MAX_OUTPUT = 16 << 20
HEALTH_PATHS = ("/healthz", "/readyz")

STATUS_TEXT = {200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 301: "Moved Permanently",
               307: "Temporary Redirect", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
               404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
               413: "Content Too Large", 415: "Unsupported Media Type", 500: "Internal Server Error",
               503: "Service Unavailable", 504: "Gateway Timeout"}


@dataclasses.dataclass(frozen=True)
class HttpRequest:
    """One request: ``path`` percent-decoded, without the query; ``query`` its parameters (the last of a
    repeated name wins); ``headers`` with lower-case names."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    peer: str

    def json(self) -> Any:
        """The body as JSON (None when there is none).

        Raises:
            ConfigError: the body is not UTF-8, not JSON, or nested deeper than :data:`MAX_JSON_DEPTH` (the
                caller answers 400).
        """
        if not self.body:
            return None
        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"the body is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        try:
            document = json.loads(text)
        except RecursionError:
            raise ConfigError(f"the body's JSON is nested deeper than {MAX_JSON_DEPTH} levels") from None
        except ValueError as exc:
            raise ConfigError(f"the body is not JSON: {str(exc)[:200]}") from None
        if _depth_over(document, MAX_JSON_DEPTH):
            raise ConfigError(f"the body's JSON is nested deeper than {MAX_JSON_DEPTH} levels")
        return document


def _depth_over(document: Any, limit: int) -> bool:
    """Whether ``document`` nests lists and objects deeper than ``limit`` (walked without recursion)."""
    todo = [(document, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return True
            todo.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


@dataclasses.dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, status: int, document: Any, headers: Iterable[tuple[str, str]] = ()) -> HttpResponse:
        return cls(status, json.dumps(document, indent=1, default=str).encode() + b"\n",
                   "application/json", tuple(headers))

    @classmethod
    def text(cls, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> HttpResponse:
        return cls(status, text.encode("utf-8"), content_type)

    def with_headers(self, *headers: tuple[str, str]) -> HttpResponse:
        return dataclasses.replace(self, headers=self.headers + headers)

    @classmethod
    def error(cls, status: int, message: str, **fields: Any) -> HttpResponse:
        """The JSON body of every error: ``{"error": message, "status": status, ...}``."""
        return cls.json(status, {"error": message, "status": status, **fields})


class EventStream:
    """A response that stays open: server-sent events (``text/event-stream``) pushed by the process.

    The handler returns one; the process keeps it and calls :meth:`send` as events happen. :attr:`closed`
    turns True once the client went away (the process then forgets it).
    """

    def __init__(self, retry_ms: int = 2000) -> None:
        self._out: list[bytes] = [f"retry: {retry_ms}\n\n".encode()]
        self.closed = False
        self._conn: _Connection | None = None

    def send(self, data: Any, event: str = "", id: str = "") -> None:
        """Send one event (``data`` as JSON) unless the client is gone."""
        if self.closed:
            return
        lines = [f"event: {event}"] if event else []
        if id:
            lines.append(f"id: {id}")
        lines.append("data: " + json.dumps(data, default=str, separators=(",", ":")))
        self._out.append(("\n".join(lines) + "\n\n").encode())
        if self._conn is not None:
            self._conn.flush_stream(self)

    def comment(self, text: str = "") -> None:
        """A comment line: keeps idle proxies from closing the stream."""
        if not self.closed:
            self._out.append(f": {text}\n\n".encode())
            if self._conn is not None:
                self._conn.flush_stream(self)

    def close(self) -> None:
        """End the stream: its connection is closed."""
        self.closed = True
        if self._conn is not None:
            self._conn.close()

    def take(self) -> list[bytes]:
        out, self._out = self._out, []
        return out


class Later:
    """The promise of an answer: :meth:`respond` sends it (nothing happens if the client went away)."""

    def __init__(self, conn: _Connection, cycle: int) -> None:
        self._conn = conn
        self._cycle = cycle

    @property
    def gone(self) -> bool:
        return self._conn.closed or self._conn.cycle != self._cycle

    def respond(self, response: HttpResponse) -> None:
        if not self.gone:
            self._conn.respond(response)


Handler = Callable[[HttpRequest, Later], "HttpResponse | EventStream | None"]


class _Connection:
    """One client connection: its socket, h11's state, the bytes waiting to go out, and when the request being
    read must be whole."""

    def __init__(self, server: HttpServer, sock: socket.socket, peer: str, now: float, *, reserved: bool) -> None:
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
        server = self.server
        if self.waiting or self.stream is not None or self.closing:
            return float("inf")
        if self.head is not None:
            return self.body_from + server.head_timeout + len(self.body) / server.min_body_rate
        if self.reserved:
            return self.accepted + server.reserve_timeout
        return self.started + server.head_timeout if self.started else float("inf")

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
        max_body = self.server.max_body
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
        )
        self.waiting = True
        self.fed = 0
        self.server.requests += 1
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
              and now - self.active > self.server.idle_timeout):
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
            self.out += self.h11.send(h11.Response(status_code=status, headers=headers,
                                                   reason=STATUS_TEXT.get(status, "")))
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
            stream.closed = True
            self._answer(200, headers, b"")
            return
        self.waiting = False
        self.stream = stream
        stream._conn = self
        self.server.streams += 1
        self.out += self.h11.send(h11.Response(status_code=200, headers=headers, reason=b"OK"))  # no length: chunked
        self.flush_stream(stream)

    def flush_stream(self, stream: EventStream) -> None:
        if self.closed:
            stream.closed = True
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
        if len(self.out) > self.server.max_output:
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
            self.stream.closed = True
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


class HttpServer:
    """An HTTP/1.1 server driven by the process's poll loop.

    Args:
        handler: answers every request (see the module).
        where: names the process in log lines (``gcm gcm-1a2b3c http``).
        drops: counts refused requests per reason.
        max_body: larger request bodies are refused with 413, unread.
        max_connections: open connections at most, in all (besides the reserve).
        max_per_address: open connections of one client address at most (besides the reserve); at most
            ``max_connections``.
        reserve: connections over either cap, at most: only requests of ``health_paths`` are answered on them
            (then they are closed), anything else 503.
        health_paths: what the reserve answers (``GET`` and ``HEAD``).
        head_timeout: a request's head must be whole this long after its first byte (or after the answer
            before it), and its body this long after its head plus a second per ``min_body_rate`` bytes; else
            408, and the connection is closed.
        reserve_timeout: a request on a reserved connection must be whole this long after it was accepted.
        min_body_rate: bytes per second a request's body must keep up (see ``head_timeout``).
        idle_timeout: a connection with no request for this long is closed (not a stream, nor one waiting
            for its answer).
        max_output: bytes waiting for a client that does not read, at most.

    Call :meth:`bind`, then in each turn of the loop :meth:`sync` (before polling), :meth:`ready` (with the
    poll's events) and :meth:`expire`, and :meth:`close` at the end.

    Raises:
        ConfigError: a limit is not positive.
    """

    def __init__(self, handler: Handler, *, where: str, drops: DropCounter, max_body: int = MAX_BODY,
                 max_connections: int = MAX_CONNECTIONS, max_per_address: int = MAX_PER_ADDRESS,
                 reserve: int = RESERVE, health_paths: Iterable[str] = HEALTH_PATHS,
                 head_timeout: float = HEAD_TIMEOUT, reserve_timeout: float = RESERVE_TIMEOUT,
                 min_body_rate: float = MIN_BODY_RATE, idle_timeout: float = IDLE_TIMEOUT,
                 max_output: int = MAX_OUTPUT) -> None:
        if min(max_body, max_connections, max_per_address, reserve, head_timeout, reserve_timeout, min_body_rate,
               idle_timeout, max_output) <= 0:
            raise ConfigError("every limit of the HTTP server must be positive")
        self.handler = handler
        self.where = where
        self.drops = drops
        self.max_body = max_body
        self.max_connections = max_connections
        self.max_per_address = min(max_per_address, max_connections)
        self.reserve = reserve
        self.health_paths = frozenset(health_paths)
        self.head_timeout = head_timeout
        self.reserve_timeout = reserve_timeout
        self.min_body_rate = min_body_rate
        self.idle_timeout = idle_timeout
        self.max_output = max_output
        self.over_caps = (f"too many connections (at most {max_connections}, {self.max_per_address} per address); "
                          f"over them only {', '.join(sorted(self.health_paths))} are answered; retry")
        self.listener: socket.socket | None = None
        self.url = ""
        self.requests = 0
        self.streams = 0
        self.failures = 0
        self._conns: dict[int, _Connection] = {}
        self._counted = 0  # connections open, not reserved
        self._per_address: dict[str, int] = {}  # address -> its connections open, not reserved
        self._reserved: dict[int, _Connection] = {}
        self._registered: dict[int, int] = {}  # fd -> the flags it is registered with
        self._next_trace = 0.0

    def bind(self, address: str, port: int) -> str:
        """Listen on ``address:port`` (port 0: any free one); the server's base URL.

        Raises:
            ConfigError: ``address`` is not an IP address.
            BrokerConnectionError: it cannot be bound.
        """
        try:
            ip = ipaddress.ip_address(address)
        except ValueError as exc:
            raise ConfigError(f"HTTP address must be an IP address, got {address!r}") from exc
        sock = socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            sock.listen(BACKLOG)
        except OSError as exc:
            sock.close()
            raise BrokerConnectionError(f"cannot listen for HTTP on {address}:{port}: {exc.strerror or exc}") from exc
        sock.setblocking(False)
        self.listener = sock
        host = f"[{address}]" if ip.version == 6 else address
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        return self.url

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1] if self.listener is not None else 0

    @property
    def connections(self) -> int:
        """Connections open, the reserve's included."""
        return len(self._conns)

    def sync(self, poller: zmq.Poller) -> None:
        """Register in ``poller`` what must be watched now (and unregister what is gone or waits)."""
        wanted: dict[int, int] = {}
        if self.listener is not None:
            wanted[self.listener.fileno()] = zmq.POLLIN
        for fd, conn in self._conns.items():
            flags = (zmq.POLLIN if conn.wants_input else 0) | (zmq.POLLOUT if conn.out else 0)
            if flags:
                wanted[fd] = flags
        for fd in [fd for fd in self._registered if wanted.get(fd) != self._registered[fd]]:
            poller.unregister(fd)
            del self._registered[fd]
        for fd, flags in wanted.items():
            if fd not in self._registered:
                poller.register(fd, flags)
                self._registered[fd] = flags

    def ready(self, events: dict[Any, int], now: float | None = None) -> None:
        """Serve what the poll found ready (``events``: the poll's results as a dict; other keys are ignored).
        Connections are read before new ones are accepted: a reserved connection's request is served before
        newcomers could evict it."""
        now = time.monotonic() if now is None else now
        for fd, conn in list(self._conns.items()):
            flags = events.get(fd, 0)
            if not flags or conn.closed:
                continue
            if flags & zmq.POLLOUT:
                conn.write()
            if flags & (zmq.POLLIN | zmq.POLLERR) and not conn.closed:
                conn.readable(now)
        listener = self.listener
        if listener is not None and listener.fileno() in events:
            self._accept(now)

    def expire(self, now: float | None = None) -> None:
        """Refuse requests that are late (408), close connections that lingered or idled long enough."""
        now = time.monotonic() if now is None else now
        for conn in list(self._conns.values()):
            if not conn.closed:
                conn.expire(now)

    def close(self) -> None:
        for conn in list(self._conns.values()):
            conn.close()
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    def answer(self, request: HttpRequest, later: Later, reserved: bool) -> HttpResponse | EventStream | None:
        """The handler's answer to ``request``; on a reserved connection a health check's only."""
        if reserved and (request.method not in ("GET", "HEAD") or request.path not in self.health_paths):
            self.drops.drop("HTTP connection refused", f"{request.peer}: over the caps, {request.path[:100]}")
            return HttpResponse.error(503, self.over_caps).with_headers(("retry-after", "1"))
        try:
            return self.handler(request, later)
        except Exception as exc:  # a bug: one request's, not the process's
            self.failed(request, exc)
            return HttpResponse.error(500, f"internal error ({type(exc).__name__}); the request was not carried out")

    def failed(self, request: HttpRequest, exc: BaseException) -> None:
        self.failures += 1
        self.drops.drop("internal error", f"{request.method} {request.path[:100]}: {type(exc).__name__}")
        if time.monotonic() >= self._next_trace:
            self._next_trace = time.monotonic() + 10.0
            log.error("%s: %s %s failed:\n%s", self.where, request.method, request.path[:200],
                      "".join(traceback.format_exception(exc)))

    def forget(self, conn: _Connection) -> None:
        """A connection closed: its slot is free."""
        if self._conns.pop(conn.fd, None) is None:
            return
        if conn.reserved:
            del self._reserved[conn.fd]
            return
        self._counted -= 1
        left = self._per_address[conn.address] - 1
        if left:
            self._per_address[conn.address] = left
        else:
            del self._per_address[conn.address]

    def _accept(self, now: float) -> None:
        assert self.listener is not None
        for _ in range(max(1, self.reserve // 2)):  # a reserved connection lives at least this turn's arrivals
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.drops.drop("HTTP accept failed", str(exc))
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            address = addr[0]
            reserved = (self._counted >= self.max_connections
                        or self._per_address.get(address, 0) >= self.max_per_address)
            if reserved and len(self._reserved) >= self.reserve:
                victim = min(self._reserved.values(), key=lambda c: c.evictable)
                self.drops.drop("HTTP connection refused", f"{victim.peer}: evicted from the full reserve")
                victim.close()
            conn = _Connection(self, sock, f"{address}:{addr[1]}", now, reserved=reserved)
            self._conns[conn.fd] = conn
            if reserved:
                self._reserved[conn.fd] = conn
            else:
                self._counted += 1
                self._per_address[address] = self._per_address.get(address, 0) + 1
