"""The GCM's HTTP server under slow, greedy and odd clients, all at once, on a real cluster (ZooKeeper, a GCM, a
host manager): a slowloris of 200 connections from 127.0.0.1, 64 readers of the live stream that never read,
a ``HEAD`` of the stream held open, 2,000 pipelined health checks on one connection and a client that
half-closes. Throughout, the health checks (also from 127.0.0.1) answer 200 within a second, an authorised
client creates a queue, a new dashboard feed gets a state each census round, the GCM's process stays under 20%
of a core, and its log has no traceback.

Every client is a socket on loopback, closed at the end; the health checks are made from a child process (stopped
at the end), so that this process's threads do not slow what they measure. The GCM's CPU is its process's own.
Each address has its role: 127.0.0.1 the slowloris and the health checks, 127.0.0.2 the readers (one address:
its share of the connections gets a stream, the others are refused), the others one client each.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import select
import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from roq.http import MAX_PER_ADDRESS
from roq.process import die_with_parent
from tests.integration.zkhelp import wait_until

WINDOW_S = 12.0  # how long the abuse is measured
HEALTH_S = 1.0  # a health check's answer, at most (the figure)
CPU_RATIO = 0.20  # of a core, the GCM's process over the window (the figure)
ROOT = Path(__file__).resolve().parents[2]
SLOW_HEAD = b"GET /api/v1/cluster HTTP/1.1\r\nhost: x\r\nx-slow: " + b"a" * 4000


def connect(port: int, source: str, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))


class Slowloris(threading.Thread):
    """``n`` connections from ``source``, each sending a request's head a byte a second (spread over the second),
    each connecting again at its next byte once the server closed it."""

    def __init__(self, port: int, n: int, source: str) -> None:
        super().__init__(daemon=True)
        self.port, self.n, self.source = port, n, source
        self.stopping = threading.Event()
        self.connects = self.closed = self.bytes = 0
        self._socks: list[socket.socket | None] = [None] * n
        self._sent = [0] * n

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        start = time.monotonic()
        due = [start + i / self.n for i in range(self.n)]
        try:
            while not self.stopping.is_set():
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

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        assert not self.is_alive()


def probe(port: int, source: str, every: float) -> None:
    """``/healthz`` and ``/readyz`` in turn from ``source``, each on a connection of its own, every ``every``
    seconds until stdin closes; then print the answers as JSON: [path, status, seconds from connecting to the
    whole answer]. Run in a process of its own, so that this test's threads do not slow what it measures."""
    answers: list[tuple[str, int, float]] = []
    paths = ("/healthz", "/readyz")
    while not select.select([sys.stdin], [], [], every)[0]:
        path = paths[len(answers) % 2]
        started = time.monotonic()
        try:
            with connect(port, source, timeout=5.0) as s:
                s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
                got = b""
                while chunk := s.recv(65536):
                    got += chunk
            status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.1 ") else 0
        except OSError:
            status = -1
        answers.append((path, status, time.monotonic() - started))
    print(json.dumps(answers))


class Prober:
    """:func:`probe` in a child process."""

    def __init__(self, port: int, source: str, every: float = 0.25) -> None:
        self.answers: list[tuple[str, int, float]] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from tests.integration.test_http_abuse import probe; probe({port}, {source!r}, {every})"],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=functools.partial(die_with_parent, os.getpid()))

    def stop(self) -> None:
        """Stop probing; :attr:`answers` are what it measured."""
        if self.proc.returncode is not None:
            return
        try:
            out, _ = self.proc.communicate(b"", timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        self.answers = [tuple(a) for a in json.loads(out)]


class Feed(threading.Thread):
    """A dashboard's feed (``GET /api/v1/stream``) from ``source``: when each ``state`` came."""

    def __init__(self, port: int, source: str) -> None:
        super().__init__(daemon=True)
        self.states: list[float] = []
        self.stopping = threading.Event()
        self.sock = connect(port, source)
        self.sock.settimeout(0.5)

    def run(self) -> None:
        self.sock.sendall(b"GET /api/v1/stream HTTP/1.1\r\nhost: x\r\n\r\n")
        while not self.stopping.is_set():
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                return
            self.states += [time.monotonic()] * chunk.count(b"event: state")

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.sock.close()
        assert not self.is_alive()


def pipelined_health_checks(port: int, source: str, n: int, answered: list[int]) -> None:
    with connect(port, source, timeout=30.0) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n" * n)
        count, tail = 0, b""
        while count < n:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            count += (tail + chunk).count(b"HTTP/1.1 200 OK")
            tail = chunk[-14:]
        answered.append(count)


def _peek(sock: socket.socket) -> bytes:
    """What waits on ``sock``, unread; b"" if the server reset it (a refused connection it closed with our
    request unread)."""
    try:
        return sock.recv(4096, socket.MSG_PEEK)
    except ConnectionResetError:
        return b""


def test_slow_pipelined_half_closed_and_head_clients_do_not_hold_the_gcm(make_embedded, tmp_path):
    cluster = make_embedded(hosts=1, log_dir=str(tmp_path / "cluster"))
    port = int(cluster.http_url().rsplit(":", 1)[1])
    gcm = psutil.Process(cluster.gcms["gcm1"].pid)
    token = cluster.api_token
    slowloris = Slowloris(port, 200, "127.0.0.1")
    prober: Prober | None = None
    readers = [connect(port, "127.0.0.2") for _ in range(64)]
    held: list[socket.socket] = []
    feed: Feed | None = None
    try:
        for r in readers:  # they never read what they are sent
            r.sendall(b"GET /api/v1/stream HTTP/1.1\r\nhost: x\r\n\r\n")
        head = connect(port, "127.0.0.6")
        held.append(head)
        head.sendall(b"HEAD /api/v1/stream HTTP/1.1\r\nhost: x\r\n\r\n")
        headers = b""
        while b"\r\n\r\n" not in headers:
            headers += head.recv(65536)
        assert headers.startswith(b"HTTP/1.1 200") and b"text/event-stream" in headers and headers.endswith(b"\r\n\r\n")
        slowloris.start()
        prober = Prober(port, "127.0.0.1")  # it starts probing while the slowloris grows
        wait_until(lambda: slowloris.connects >= 200 and slowloris.closed > 0, 30, "the slowloris at full strength")

        # the window: everything above goes on while the rest is done and measured
        cpu_before, started = gcm.cpu_times(), time.monotonic()
        feed = Feed(port, "127.0.0.3")
        feed.start()
        answered: list[int] = []
        pipeliner = threading.Thread(target=pipelined_health_checks, args=(port, "127.0.0.5", 2000, answered),
                                     daemon=True)
        pipeliner.start()
        api = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=("127.0.0.4", 0))
        api.request("POST", "/api/v1/queues", body=json.dumps({"name": "abuse"}),
                    headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
        created = api.getresponse()
        assert created.status == 201 and json.loads(created.read())["state"] == "running"
        api.close()
        with connect(port, "127.0.0.7") as half:  # its request waits for the queue's monitor; it ends its side
            half.sendall(b"GET /api/v1/queues/abuse HTTP/1.1\r\nhost: x\r\n\r\n")
            half.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := half.recv(65536):
                got += chunk
            assert got.startswith(b"HTTP/1.1 200") and b'"name": "abuse"' in got  # answered, then closed
        pipeliner.join(30)
        assert answered == [2000]
        while time.monotonic() - started < WINDOW_S:  # the window's length: what is measured goes on meanwhile
            assert slowloris.is_alive() and prober.proc.poll() is None and feed.is_alive()
            time.sleep(0.2)
        cpu_after, elapsed = gcm.cpu_times(), time.monotonic() - started
        for thread in (feed, prober, slowloris):
            thread.stop()

        cpu = (cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system) / elapsed
        latencies = [t for _, _, t in prober.answers]
        print(f"GCM CPU {cpu:.1%} of a core over {elapsed:.1f} s; {len(latencies)} health checks, "
              f"slowest {max(latencies):.3f} s, median {sorted(latencies)[len(latencies) // 2]:.3f} s; "
              f"slowloris: {slowloris.connects} connections, {slowloris.closed} closed by the GCM, "
              f"{slowloris.bytes} bytes; feed states {len(feed.states)}")
        assert len(prober.answers) >= 10  # on a loaded machine fewer than one each 0.25 s, but enough to judge
        assert all(status == 200 and took < HEALTH_S for _, status, took in prober.answers), prober.answers
        gaps = [b - a for a, b in zip(feed.states, feed.states[1:])]
        assert len(feed.states) >= WINDOW_S - 3 and max(gaps) < 2.5, gaps
        assert cpu < CPU_RATIO, f"the GCM used {cpu:.1%} of a core"
        # the readers: one address's share of the connections got a stream, the others were refused
        streaming = sum(b"text/event-stream" in _peek(r) for r in readers)
        assert 1 <= streaming <= MAX_PER_ADDRESS, streaming
        head.setblocking(False)
        with pytest.raises(BlockingIOError):  # the HEAD was answered its headers alone, and its connection is open
            head.recv(100)
    finally:
        for thread in (slowloris, feed):
            if thread is not None and thread.is_alive():
                thread.stop()
        if prober is not None:
            prober.stop()
        if feed is not None:
            feed.sock.close()
        for s in readers + held:
            s.close()
    log = (Path(tmp_path) / "cluster" / "gcm1.log").read_text(errors="replace")
    assert "Traceback" not in log
