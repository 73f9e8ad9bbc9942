"""HTTP/1.1 inside a process's poll loop: the server of the management API, the metrics and the health checks.

Every RoQ process runs one ``zmq.Poller`` loop; an HTTP server must live in it, not in a thread or a second
event loop beside it. The protocol is h11's, which is sans-I/O (it parses and frames, and never touches a
socket); this module owns the sockets: a listening socket and its connections, non-blocking, registered in
the process's poller by :meth:`HttpServer.sync` and served by :meth:`HttpServer.ready` with the poll's events.

What a process serves is one *handler*: ``handler(request, later) -> HttpResponse | None``. It answers now,
or returns None and answers later through ``later.respond(response)`` (a request that waits for the cluster),
or returns an :class:`EventStream` that the process feeds (server-sent events). The server keeps its own
boundary, as :class:`roq.server.Dispatcher` does for ZeroMQ: a malformed request gets 400 and its connection
is closed, a body over ``max_body`` 413 without being read, a body that does not decode 400
(:meth:`HttpRequest.json`), a handler that raises 500; each is counted in the
process's drop counter and the loop goes on. Connections are bounded in number (the next one gets 503) and
closed after ``idle_timeout`` without a request; a client that stops reading is cut off once ``max_output``
bytes wait for it.
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
READ_BYTES = 64 << 10
LINGER_S = 2.0  # after a refusal, what the client still sends is read and dropped this long before closing...
LINGER_BYTES = 64 << 20  # ...or up to this much: closing at once would reset the connection, and the client
#                          would lose the answer it was sent
SERVER = "roq"

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
    """One client connection: its socket, h11's state, the bytes waiting to go out."""

    def __init__(self, server: HttpServer, sock: socket.socket, peer: str, now: float) -> None:
        self.server = server
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.out = bytearray()
        self.active = now
        self.cycle = 0  # requests answered on this connection
        self.head: h11.Request | None = None
        self.body = bytearray()
        self.waiting = False  # a request is being answered later
        self.stream: EventStream | None = None
        self.closing = False  # close once everything is written
        self.lingering = 0.0  # once written: until when what the client sends is dropped (0: not lingering)
        self.discarded = 0
        self.closed = False

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
        if self.stream is not None or self.closing:
            self.discarded += len(data)
            if not data or self.discarded > LINGER_BYTES:
                self.close()
            return  # what a stream's client sends is not read, nor what follows a refusal
        try:
            self.h11.receive_data(data)
            if self.waiting and len(self.h11.trailing_data[0]) > self.server.max_body + MAX_HEADER_BYTES:
                self.server.drops.drop("HTTP input too large", f"{self.peer}: pipelined while waiting")
                self.close()
                return
            self._events()
        except h11.RemoteProtocolError as exc:
            self.server.drops.drop("malformed HTTP request", f"{self.peer}: {exc}"[:200])
            self._refuse(exc.error_status_hint or 400, f"malformed HTTP request: {exc}")

    def _events(self) -> None:
        max_body = self.server.max_body
        while not self.closed and not self.waiting and self.stream is None and not self.closing:
            event = self.h11.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.ConnectionClosed):
                self.close()
                return
            if isinstance(event, h11.Request):
                self.head, self.body = event, bytearray()
                length = _header(event.headers, b"content-length")
                if length and length.isdigit() and int(length) > max_body:
                    self.server.drops.drop("HTTP body too large", f"{self.peer}: {length} bytes")
                    self._refuse(413, f"the body of {int(length)} bytes is over the {max_body} byte limit")
                    return
            elif isinstance(event, h11.Data):
                self.body += event.data
                if len(self.body) > max_body:
                    self.server.drops.drop("HTTP body too large", f"{self.peer}: over {max_body} bytes")
                    self._refuse(413, f"the body is over the {max_body} byte limit")
                    return
            elif isinstance(event, h11.EndOfMessage):
                self._dispatch()

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
        self.server.requests += 1
        try:
            answer = self.server.handler(request, Later(self, self.cycle))
        except Exception as exc:  # a bug: one request's, not the process's
            self.server.failed(request, exc)
            answer = HttpResponse.error(500, f"internal error ({type(exc).__name__}); the request was not carried out")
        if isinstance(answer, EventStream):
            self._start_stream(answer)
        elif answer is not None:
            self.respond(answer)

    # ------------------------------------------------------------------ output

    def respond(self, response: HttpResponse) -> None:
        if self.closed or not self.waiting:
            return
        self.waiting = False
        headers = [("content-type", response.content_type), ("content-length", str(len(response.body))),
                   ("server", SERVER), ("cache-control", "no-store"), *response.headers]
        if self.h11.their_state is not h11.DONE:  # refused before its body was read: the rest is not read
            headers.append(("connection", "close"))
        try:
            self.out += self.h11.send(h11.Response(status_code=response.status, headers=headers,
                                                   reason=STATUS_TEXT.get(response.status, "")))
            if self.head is None or self.head.method != b"HEAD":
                self.out += self.h11.send(h11.Data(data=response.body))
            self.out += self.h11.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            log.warning("%s: cannot answer %s: %s", self.server.where, self.peer, exc)
            self.close()
            return
        self.head, self.body = None, bytearray()
        self.write()
        if self.closed:
            return
        if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is not h11.DONE:
            self.closing = True
        else:
            self.h11.start_next_cycle()
            self.cycle += 1
            self._events()  # a pipelined request may wait in h11's buffer
        if self.closing and not self.out:
            self.linger()

    def _start_stream(self, stream: EventStream) -> None:
        self.waiting = False
        self.stream = stream
        stream._conn = self
        self.server.streams += 1
        headers = [("content-type", "text/event-stream"), ("cache-control", "no-store"), ("server", SERVER),
                   ("x-accel-buffering", "no")]
        self.out += self.h11.send(h11.Response(status_code=200, headers=headers, reason=b"OK"))  # no length: chunked
        self.flush_stream(stream)

    def flush_stream(self, stream: EventStream) -> None:
        if self.closed:
            stream.closed = True
            return
        for chunk in stream.take():
            self.out += self.h11.send(h11.Data(data=chunk))
        self.write()

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` and close: what follows on the connection cannot be trusted (the request was not
        read whole, so :meth:`respond` says ``connection: close``)."""
        if self.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            self.close()
            return
        self.waiting, self.head = True, None
        self.respond(HttpResponse.error(status, message))

    def write(self) -> None:
        """Write what waits, as far as the socket takes it now; cut off a client that stopped reading."""
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

    def linger(self) -> None:
        """Everything is written: end our side, and drop what the client still sends until it closes its side
        or :data:`LINGER_S` passes (see :meth:`HttpServer.expire`)."""
        if self.lingering or self.closed:
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
        max_connections: open connections at most; the next one is answered 503 and closed.
        idle_timeout: a connection with no request for this long is closed (not a stream, nor one waiting
            for its answer).
        max_output: bytes waiting for a client that does not read, at most.

    Call :meth:`bind`, then in each turn of the loop :meth:`sync` (before polling) and :meth:`ready` (with the
    poll's events), and :meth:`close` at the end.
    """

    def __init__(self, handler: Handler, *, where: str, drops: DropCounter, max_body: int = 1 << 20,
                 max_connections: int = 128, idle_timeout: float = 60.0, max_output: int = 16 << 20) -> None:
        self.handler = handler
        self.where = where
        self.drops = drops
        self.max_body = max_body
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.max_output = max_output
        self.listener: socket.socket | None = None
        self.url = ""
        self.requests = 0
        self.streams = 0
        self.failures = 0
        self._conns: dict[int, _Connection] = {}
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
            sock.listen(128)
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
        return len(self._conns)

    def sync(self, poller: zmq.Poller) -> None:
        """Register in ``poller`` what must be watched now (and unregister what is gone)."""
        wanted: dict[int, int] = {}
        if self.listener is not None:
            wanted[self.listener.fileno()] = zmq.POLLIN
        for fd, conn in list(self._conns.items()):
            if conn.closed:
                del self._conns[fd]
                continue
            wanted[fd] = zmq.POLLIN | (zmq.POLLOUT if conn.out else 0)
        for fd in [fd for fd in self._registered if wanted.get(fd) != self._registered[fd]]:
            poller.unregister(fd)
            del self._registered[fd]
        for fd, flags in wanted.items():
            if fd not in self._registered:
                poller.register(fd, flags)
                self._registered[fd] = flags

    def ready(self, events: dict[Any, int], now: float | None = None) -> None:
        """Serve what the poll found ready (``events``: the poll's results as a dict; other keys are ignored)."""
        now = time.monotonic() if now is None else now
        listener = self.listener
        if listener is not None and listener.fileno() in events:
            self._accept(now)
        for fd, conn in list(self._conns.items()):
            flags = events.get(fd, 0)
            if not flags or conn.closed:
                continue
            if flags & zmq.POLLOUT:
                conn.write()
            if flags & (zmq.POLLIN | zmq.POLLERR):
                conn.readable(now)

    def expire(self, now: float | None = None) -> None:
        """Close connections idle for ``idle_timeout`` (a stream or a request being answered is not idle)."""
        now = time.monotonic() if now is None else now
        for conn in list(self._conns.values()):
            if conn.closed:
                continue
            if conn.lingering:
                if now >= conn.lingering:
                    conn.close()
            elif not conn.waiting and conn.stream is None and now - conn.active > self.idle_timeout:
                conn.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    def failed(self, request: HttpRequest, exc: BaseException) -> None:
        self.failures += 1
        self.drops.drop("internal error", f"{request.method} {request.path[:100]}: {type(exc).__name__}")
        if time.monotonic() >= self._next_trace:
            self._next_trace = time.monotonic() + 10.0
            log.error("%s: %s %s failed:\n%s", self.where, request.method, request.path[:200],
                      "".join(traceback.format_exception(exc)))

    def _accept(self, now: float) -> None:
        assert self.listener is not None
        for _ in range(64):
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
            peer = f"{addr[0]}:{addr[1]}"
            if len(self._conns) >= self.max_connections:
                self.drops.drop("HTTP connection refused", f"{peer}: {len(self._conns)} connections open")
                body = HttpResponse.error(503, f"too many connections ({self.max_connections}); retry").body
                try:
                    sock.send(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                              b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                except OSError:
                    pass
                sock.close()
                continue
            conn = _Connection(self, sock, peer, now)
            self._conns[conn.fd] = conn
