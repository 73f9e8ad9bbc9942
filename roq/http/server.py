"""The HTTP server: its listening socket, which connections it takes (in all, per address, the reserve), their
registrations in the process's loop, their deadlines (see :mod:`roq.http`)."""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import time
import traceback
from typing import Iterable

import zmq

from roq.errors import BrokerConnectionError, ConfigError
from roq.http.connection import Connection, Limits
from roq.http.messages import EventStream, Handler, HttpRequest, HttpResponse, Later
from roq.loop import Loop
from roq.runtime import TRACE_INTERVAL, DropCounter, LogLimit

__all__ = ["HttpServer", "MAX_BODY", "MAX_CONNECTIONS", "MAX_PER_ADDRESS", "RESERVE", "HEAD_TIMEOUT",
           "RESERVE_TIMEOUT", "MIN_BODY_RATE", "IDLE_TIMEOUT", "MAX_OUTPUT", "HEALTH_PATHS", "BACKLOG"]

log = logging.getLogger(__name__)

BACKLOG = 1024  # connections the kernel holds until accepted: past it a client's SYN is dropped, retried after 1 s

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


class HttpServer:
    """An HTTP/1.1 server driven by the process's poll loop.

    Args:
        handler: answers every request (see :mod:`roq.http`).
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

    Call :meth:`bind`, then :meth:`attach` it to the process's :class:`~roq.loop.Loop`, and :meth:`close` it
    at the end.

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
        self.limits = Limits(max_body=max_body, head_timeout=head_timeout, reserve_timeout=reserve_timeout,
                             min_body_rate=min_body_rate, idle_timeout=idle_timeout, max_output=max_output)
        self.max_connections = max_connections
        self.max_per_address = min(max_per_address, max_connections)
        self.reserve = reserve
        self.health_paths = frozenset(health_paths)
        self.over_caps = (f"too many connections (at most {max_connections}, {self.max_per_address} per address); "
                          f"over them only {', '.join(sorted(self.health_paths))} are answered; retry")
        self.listener: socket.socket | None = None
        self.url = ""
        self.requests = 0
        self.streams = 0
        self.failures = 0
        self._conns: dict[int, Connection] = {}
        self._counted = 0  # connections open, not reserved
        self._per_address: dict[str, int] = {}  # address -> its connections open, not reserved
        self._reserved: dict[int, Connection] = {}
        self._registered: dict[int, int] = {}  # fd -> the flags it is registered with
        self._traces = LogLimit(TRACE_INTERVAL)

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

    def attach(self, loop: Loop) -> None:
        """Serve in ``loop``: before each poll its sockets are brought in step with the connections (the
        listener registered late: connections are read before new ones are accepted, so a reserved
        connection's request is served before newcomers could evict it); after each turn the deadlines."""
        loop.before_poll(lambda: self._sync(loop), f"{self.where}: its connections")
        loop.after_turn(self.expire, f"{self.where}: deadlines")

    def _sync(self, loop: Loop) -> None:
        """Register in ``loop`` what must be watched now (and remove what is gone; pause what waits)."""
        wanted: dict[int, int] = {}
        for fd, conn in self._conns.items():
            wanted[fd] = (zmq.POLLIN if conn.wants_input else 0) | (zmq.POLLOUT if conn.out else 0)
        for fd in [fd for fd in self._registered if fd not in wanted]:
            loop.remove(fd)
            del self._registered[fd]
        for fd, flags in wanted.items():
            if fd not in self._registered:
                loop.add(fd, lambda ready, fd=fd: self._ready(fd, ready, time.monotonic()), f"{self.where}",
                         flags=flags, with_flags=True)
            elif self._registered[fd] != flags:
                loop.want(fd, flags)
            self._registered[fd] = flags
        listener = self.listener
        if listener is not None and not loop.has(listener.fileno()):
            loop.add(listener.fileno(), lambda: self._accept(time.monotonic()), f"{self.where}: accepting", late=True)

    def _ready(self, fd: int, flags: int, now: float) -> None:
        conn = self._conns.get(fd)
        if conn is None or conn.closed:
            return
        if flags & zmq.POLLOUT:
            conn.write()
        if flags & (zmq.POLLIN | zmq.POLLERR) and not conn.closed:
            conn.readable(now)

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
        self.requests += 1
        try:
            answer = self.handler(request, later)
        except Exception as exc:  # a bug: one request's, not the process's
            self.failed(request, exc)
            return HttpResponse.error(500, f"internal error ({type(exc).__name__}); the request was not carried out")
        if isinstance(answer, EventStream) and request.method != "HEAD":
            self.streams += 1
        return answer

    def failed(self, request: HttpRequest, exc: BaseException) -> None:
        self.failures += 1
        self.drops.drop("internal error", f"{request.method} {request.path[:100]}: {type(exc).__name__}")
        if self._traces.due():
            log.error("%s: %s %s failed:\n%s", self.where, request.method, request.path[:200],
                      "".join(traceback.format_exception(exc)))

    def forget(self, conn: Connection) -> None:
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
            conn = Connection(self, sock, f"{address}:{addr[1]}", now, reserved=reserved)
            self._conns[conn.fd] = conn
            if reserved:
                self._reserved[conn.fd] = conn
            else:
                self._counted += 1
                self._per_address[address] = self._per_address.get(address, 0) + 1
