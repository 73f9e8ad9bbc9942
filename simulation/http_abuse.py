"""Slow, greedy and odd clients of an HTTP server, and the health checks timed beside them.

What the GCM's HTTP server is held to under abuse (``tests/integration/test_http_abuse.py`` asserts what it
answers, :mod:`simulation.bench_abuse` measures how fast and at what CPU): a slowloris (:class:`Slowloris`),
readers of the live stream that never read (:class:`Readers`), a ``HEAD`` of the stream held open
(:func:`hold_head`), pipelined health checks (:func:`pipelined_health_checks`), a client that half-closes
(:func:`half_closed_request`), a dashboard's feed (:class:`Feed`), and the health checks themselves
(:class:`Prober`), made from a process of their own, ``python -m simulation.http_abuse --port PORT``, so that
the threads of whoever abuses the server do not slow what is measured.

Every client is a socket on loopback from a source address it is given (in 127.0.0.0/8), so that the server's
caps per address can be aimed at; every one is closed by whoever made it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
from typing import ClassVar, NamedTuple

from roq.process import Child, spawn
from roq.runtime import ExitCode, StopFlag, announce_ready
from roq.wire.ready import Ready, register

__all__ = ["Answer", "Feed", "Prober", "Readers", "Slowloris", "connect", "half_closed_request", "hold_head",
           "pipelined_health_checks", "probe", "main"]

#: A request's head that never ends: a slowloris sends it a byte at a time.
SLOW_HEAD = b"GET /api/v1/cluster HTTP/1.1\r\nhost: x\r\nx-slow: " + b"a" * 4000
HEALTH_PATHS = ("/healthz", "/readyz")


def connect(port: int, source: str, timeout: float = 10.0) -> socket.socket:
    """A connection to 127.0.0.1:``port`` from ``source``.

    Raises:
        OSError: it could not be made within ``timeout``.
    """
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))


class _Client(threading.Thread):
    """A client of its own thread, running until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._stopping = threading.Event()

    def _close(self) -> None:
        """What is left to close once the thread ended (or never began)."""

    def stop(self, timeout: float = 10.0) -> None:
        """End the thread and close what it holds (also when it was never started).

        Raises:
            RuntimeError: the thread still ran after ``timeout``.
        """
        self._stopping.set()
        if self.ident is not None:
            self.join(timeout)
        self._close()
        if self.is_alive():
            raise RuntimeError(f"the {self.name} still ran {timeout:g} s after it was stopped")


class Slowloris(_Client):
    """``n`` connections from ``source``, each sending a request's head a byte a second (spread over the second),
    each connecting again at its next byte once the server closed it.

    Attributes:
        connects: connections made so far.
        closed: of them, those the server closed (after a 408 or a 503, or without a word).
        bytes: bytes sent.
    """

    def __init__(self, port: int, n: int, source: str) -> None:
        super().__init__("slowloris")
        self.port, self.n, self.source = port, n, source
        self.connects = self.closed = self.bytes = 0
        self._socks: list[socket.socket | None] = [None] * n
        self._sent = [0] * n

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        due = [time.monotonic() + i / self.n for i in range(self.n)]
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                for i in range(self.n):
                    if due[i] <= now:
                        self._tick(i, sel)
                        due[i] = max(due[i] + 1.0, now)
                for key, _ in sel.select(timeout=0.01):
                    self._read(key.data, sel)
        finally:
            for i in range(self.n):
                self._drop(i, sel)
            sel.close()

    def _tick(self, i: int, sel: selectors.BaseSelector) -> None:
        sock = self._socks[i]
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.bind((self.source, 0))
            sock.connect_ex(("127.0.0.1", self.port))
            self._socks[i], self._sent[i] = sock, 0
            sel.register(sock, selectors.EVENT_READ, i)
            self.connects += 1
            return
        try:
            sent = sock.send(SLOW_HEAD[self._sent[i] % len(SLOW_HEAD):][:1])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(i, sel)
            return
        self._sent[i] += sent
        self.bytes += sent

    def _read(self, i: int, sel: selectors.BaseSelector) -> None:
        sock = self._socks[i]
        assert sock is not None
        try:
            if sock.recv(65536):
                return  # a 408 or a 503: its end of file follows
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self.closed += 1
        self._drop(i, sel)

    def _drop(self, i: int, sel: selectors.BaseSelector) -> None:
        sock = self._socks[i]
        if sock is not None:
            sel.unregister(sock)
            sock.close()
            self._socks[i] = None



class Readers:
    """``n`` connections from ``source``, each asking for the live stream (``GET /api/v1/stream``) and never
    reading what it is sent. Close them with :meth:`close` (or as a context manager).

    Raises:
        OSError: a connection could not be made (those made are closed).
    """

    def __init__(self, port: int, n: int, source: str) -> None:
        self.socks: list[socket.socket] = []
        try:
            for _ in range(n):
                self.socks.append(connect(port, source))
            for s in self.socks:
                s.sendall(b"GET /api/v1/stream HTTP/1.1\r\nhost: x\r\n\r\n")
        except BaseException:
            self.close()
            raise

    def streaming(self) -> int:
        """How many were answered a stream (the others were refused, or not answered yet). Reads nothing."""
        return sum(b"text/event-stream" in _peek(s) for s in self.socks)

    def close(self) -> None:
        for s in self.socks:
            s.close()

    def __enter__(self) -> Readers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _peek(sock: socket.socket) -> bytes:
    """What waits on ``sock``, unread; b"" if the server reset it (a refused connection it closed with our
    request unread)."""
    try:
        return sock.recv(4096, socket.MSG_PEEK)
    except ConnectionResetError:
        return b""


def hold_head(port: int, source: str) -> tuple[socket.socket, bytes]:
    """``HEAD /api/v1/stream`` from ``source``: the connection, left open, and the headers it was answered.

    Raises:
        OSError: the connection failed, or was closed before the headers' end.
    """
    sock = connect(port, source)
    try:
        sock.sendall(b"HEAD /api/v1/stream HTTP/1.1\r\nhost: x\r\n\r\n")
        headers = b""
        while b"\r\n\r\n" not in headers:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed before the end of the headers: {headers!r}")
            headers += chunk
    except BaseException:
        sock.close()
        raise
    return sock, headers


def half_closed_request(port: int, source: str, path: str) -> bytes:
    """``GET path`` from ``source``, the client's side closed at once after it; everything the server sent
    until it closed its side.

    Raises:
        OSError: the connection failed or timed out.
    """
    with connect(port, source) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        sock.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    return got


def pipelined_health_checks(port: int, source: str, n: int) -> int:
    """``n`` requests of ``/healthz`` sent at once on one connection from ``source``; how many were answered 200
    before the server closed it.

    Raises:
        OSError: the connection failed or stalled for 30 s.
    """
    with connect(port, source, timeout=30.0) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n" * n)
        count, tail = 0, b""
        while count < n:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            count += (tail + chunk).count(b"HTTP/1.1 200 OK")
            tail = chunk[-14:]  # an answer's first line cut between two reads is counted once
    return count


class Feed(_Client):
    """A dashboard's feed (``GET /api/v1/stream``) from ``source``, read until stopped.

    Attributes:
        states: when each ``state`` event came (``time.monotonic()``).

    Raises:
        OSError: the connection could not be made.
    """

    def __init__(self, port: int, source: str) -> None:
        super().__init__("feed")
        self.states: list[float] = []
        self._sock = connect(port, source)
        self._sock.settimeout(0.5)

    def run(self) -> None:
        try:
            self._sock.sendall(b"GET /api/v1/stream HTTP/1.1\r\nhost: x\r\n\r\n")
            while not self._stopping.is_set():
                try:
                    chunk = self._sock.recv(1 << 20)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                self.states += [time.monotonic()] * chunk.count(b"event: state")
        except OSError:
            return

    def _close(self) -> None:
        self._sock.close()


class Answer(NamedTuple):
    """One health check: its path, its HTTP status (0: not HTTP, -1: no answer), the seconds from connecting to
    the whole answer, and when it began (``time.monotonic()``, the machine's clock: the same in every process)."""

    path: str
    status: int
    seconds: float
    began: float


def probe(port: int, source: str, every: float, timeout: float, stopped: StopFlag) -> list[Answer]:
    """``/healthz`` and ``/readyz`` in turn from ``source``, each on a connection of its own, every ``every``
    seconds until ``stopped``; what each was answered. A check not answered within ``timeout`` (each connect
    and read) is an answer of status -1."""
    answers: list[Answer] = []
    while not stopped():
        path = HEALTH_PATHS[len(answers) % 2]
        started = time.monotonic()
        try:
            with connect(port, source, timeout=timeout) as s:
                s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
                got = b""
                while chunk := s.recv(65536):
                    got += chunk
            status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.1 ") else 0
        except OSError:
            status = -1
        answers.append(Answer(path, status, time.monotonic() - started, started))
        time.sleep(every)
    return answers


@register
@dataclasses.dataclass(frozen=True)
class ProberReady(Ready):
    """A prober's ready line: it probes from now on."""

    ROLE: ClassVar[str] = "prober"


class Prober:
    """:func:`probe` in a child process (``python -m simulation.http_abuse``), probing once this returns; it
    dies with this process, and is stopped by its pid (:meth:`stop`).

    Raises:
        RoQError: it did not start probing within 30 s (it is stopped).
    """

    def __init__(self, port: int, source: str, *, every: float = 0.25, timeout: float = 5.0) -> None:
        self.answers: list[Answer] = []
        self._child: Child = spawn("prober", "simulation.http_abuse", [
            "--port", str(port), "--source", source, "--every", str(every), "--timeout", str(timeout)])
        try:
            self._child.wait_ready(30.0)
        except BaseException:
            self._child.kill()
            raise

    @property
    def pid(self) -> int:
        return self._child.pid

    def alive(self) -> bool:
        return self._child.alive()

    def stop(self, timeout: float = 30.0) -> list[Answer]:
        """Stop probing (SIGTERM to its pid); what it measured, also in :attr:`answers`. Idempotent.

        Raises:
            RoQError: it did not end within ``timeout`` (it is killed).
            RuntimeError: it ended without its answers.
        """
        if self._child.returncode is not None:
            return self.answers
        self._child.signal(signal.SIGTERM)
        try:
            out = self._child.communicate(timeout)
        except BaseException:
            self._child.kill()
            raise
        try:
            self.answers = [Answer(*a) for a in json.loads(out.strip().splitlines()[-1])]
        except (IndexError, ValueError, TypeError) as exc:
            raise RuntimeError(f"the prober (pid {self.pid}) exited with {self._child.returncode} without its "
                               f"answers: {out[-500:]!r}") from exc
        return self.answers

    def __enter__(self) -> Prober:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._child.returncode is None:
            self._child.stop()


def main(argv: list[str] | None = None) -> int:
    """The prober's process: probes until SIGTERM, then prints its answers as one line of JSON, each
    ``[path, status, seconds, began]``."""
    p = argparse.ArgumentParser(prog="python -m simulation.http_abuse", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True, help="the HTTP server's port on 127.0.0.1")
    p.add_argument("--source", default="127.0.0.1", help="the address it connects from (default 127.0.0.1)")
    p.add_argument("--every", type=float, default=0.25, help="seconds between two health checks (default 0.25)")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds a health check may take to connect, and each read (default 5)")
    args = p.parse_args(argv)
    stopped = StopFlag()
    announce_ready(ProberReady(pid=os.getpid()))
    answers = probe(args.port, args.source, args.every, args.timeout, stopped)
    sys.stdout.write(json.dumps(answers) + "\n")
    sys.stdout.flush()
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
