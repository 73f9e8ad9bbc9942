"""The HTTP server in a poll loop, over real loopback sockets: answers, keep-alive, pipelining, answers given
later, event streams, and every kind of garbage refused without stopping the server."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
from typing import Any

import pytest

from roq.errors import ConfigError
from roq.http import EventStream, HttpRequest, HttpResponse, HttpServer, Later
from roq.loop import Loop as RoqLoop
from roq.runtime import DropCounter


class Loop:
    """An HttpServer served by its own poll loop in a thread, as a process would."""

    def __init__(self, **options: Any) -> None:
        self.later: list[Later] = []
        self.streams: list[EventStream] = []
        self.drops = DropCounter(logging.getLogger("test"), "test http")
        self.server = HttpServer(self.handle, where="test http", drops=self.drops, **options)
        self.url = self.server.bind("127.0.0.1", 0)
        self.port = self.server.port
        self.calls: list[tuple[str, Any]] = []
        self.polled = 0  # events the poll returned, all told
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def handle(self, request: HttpRequest, later: Later) -> HttpResponse | EventStream | None:
        if request.path == "/later":
            self.later.append(later)
            return None
        if request.path == "/stream":
            stream = EventStream()
            self.streams.append(stream)
            return stream
        if request.path == "/boom":
            raise RuntimeError("a bug")
        if request.path.startswith("/echo-header"):  # a handler that puts the decoded path in a header: a bug
            return HttpResponse.json(200, {}).with_headers(("x-path", request.path))
        return HttpResponse.json(200, {"method": request.method, "path": request.path, "query": request.query,
                                       "body": request.body.decode(), "type": request.headers.get("content-type")})

    def call(self, fn: Any, *args: Any) -> None:
        """Run ``fn`` in the loop's thread (what a process does when the cluster answers)."""
        self.calls.append((fn, args))

    def _run(self) -> None:
        loop = RoqLoop("test http", self.drops, idle=0.01)
        self.server.attach(loop)
        loop.after_turn(self._calls, "calls")
        while not self._stop:
            loop.turn()
            self.polled += loop.ready

    def _calls(self, now: float) -> None:
        while self.calls:
            fn, args = self.calls.pop(0)
            fn(*args)

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.server.close()


@pytest.fixture
def loop():
    lp = Loop(max_body=1000, max_connections=4, idle_timeout=0.5)
    yield lp
    lp.close()


def raw(port: int, data: bytes, *, read_until_close: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        out = b""
        while read_until_close:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def wait_until(cond: Any, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_requests_are_answered_on_one_kept_alive_connection(loop):
    conn = http.client.HTTPConnection("127.0.0.1", loop.port, timeout=5)
    conn.request("GET", "/api/v1/queues%20x?limit=5&kind=a")
    r = conn.getresponse()
    doc = json.loads(r.read())
    assert r.status == 200 and r.getheader("content-type") == "application/json"
    assert doc["path"] == "/api/v1/queues x" and doc["query"] == {"limit": "5", "kind": "a"}
    conn.request("PUT", "/r", body=b'{"a": 1}', headers={"content-type": "application/json"})
    doc = json.loads(conn.getresponse().read())
    assert (doc["method"], doc["body"], doc["type"]) == ("PUT", '{"a": 1}', "application/json")
    assert loop.server.connections == 1
    conn.close()


def test_pipelined_requests_are_answered_in_order():
    lp = Loop()
    try:
        out = raw(lp.port, b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        assert out.count(b"HTTP/1.1 200 OK") == 2 and out.index(b'"/a"') < out.index(b'"/b"')
    finally:
        lp.close()


@pytest.mark.parametrize("garbage", [
    b"\x00\x01\x02 garbage\r\n\r\n",
    b"GET /\r\n\r\n",  # HTTP/0.9
    b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
    b"GET / HTTP/1.1\r\n" + b"x-long: " + b"a" * 20000 + b"\r\n\r\n",  # headers over the limit
    b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: -5\r\n\r\n",
])
def test_garbage_gets_400_and_the_server_goes_on(loop, garbage):
    out = raw(loop.port, garbage)
    assert out.startswith(b"HTTP/1.1 4") and b'"error"' in out
    assert loop.drops.by_reason.get("malformed HTTP request", 0) >= 1
    conn = http.client.HTTPConnection("127.0.0.1", loop.port, timeout=5)
    conn.request("GET", "/still")
    assert conn.getresponse().status == 200


def test_an_oversized_body_is_refused_unread_with_413(loop):
    out = raw(loop.port, b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n" + b"a" * 100)
    assert out.startswith(b"HTTP/1.1 413") and b"over the 1000 byte limit" in out
    chunked = b"POST /x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n" + b"400\r\n" + b"a" * 1024 + b"\r\n0\r\n\r\n"
    assert raw(loop.port, chunked).startswith(b"HTTP/1.1 413")
    assert loop.drops.by_reason["HTTP body too large"] == 2


def test_a_handler_that_raises_answers_500_and_the_next_request_is_served(loop):
    conn = http.client.HTTPConnection("127.0.0.1", loop.port, timeout=5)
    conn.request("GET", "/boom")
    r = conn.getresponse()
    assert r.status == 500 and "RuntimeError" in json.loads(r.read())["error"]
    conn.request("GET", "/ok")
    assert conn.getresponse().status == 200
    assert loop.server.failures == 1


def test_a_response_http_cannot_carry_answers_500_and_the_request_target_comes_as_sent(loop):
    answer = raw(loop.port, b"GET /echo-header/%00%0d%0ax HTTP/1.1\r\nhost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 500 ") and b"cannot carry" in answer
    conn = http.client.HTTPConnection("127.0.0.1", loop.port, timeout=5)
    conn.request("GET", "/echo-header/ok")
    assert conn.getresponse().status == 200


def test_an_answer_given_later_reaches_its_client_and_one_for_a_gone_client_is_dropped(loop):
    conn = http.client.HTTPConnection("127.0.0.1", loop.port, timeout=5)
    conn.request("GET", "/later")
    wait_until(lambda: len(loop.later) == 1)
    loop.call(loop.later[0].respond, HttpResponse.json(201, {"done": True}))
    r = conn.getresponse()
    assert (r.status, json.loads(r.read())) == (201, {"done": True})
    s = socket.create_connection(("127.0.0.1", loop.port))
    s.sendall(b"GET /later HTTP/1.1\r\nhost: x\r\n\r\n")
    wait_until(lambda: len(loop.later) == 2)
    s.close()
    loop.call(loop.later[1].respond, HttpResponse.json(200, {}))  # nobody to answer: nothing happens
    conn.request("GET", "/ok")
    assert conn.getresponse().status == 200


def test_idle_connections_are_closed_and_the_connection_cap_answers_503(loop):
    idle = socket.create_connection(("127.0.0.1", loop.port), timeout=5)
    assert idle.recv(10) == b""  # closed by the server after idle_timeout (0.5 s)
    held = [socket.create_connection(("127.0.0.1", loop.port)) for _ in range(4)]
    wait_until(lambda: loop.server.connections == 4)
    out = raw(loop.port, b"")
    assert out.startswith(b"HTTP/1.1 503") and b"too many connections" in out
    for s in held:
        s.close()


def test_an_event_stream_sends_events_as_they_happen_until_its_client_leaves(loop):
    s = socket.create_connection(("127.0.0.1", loop.port), timeout=5)
    s.sendall(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
    wait_until(lambda: len(loop.streams) == 1)
    stream = loop.streams[0]
    loop.call(stream.send, {"n": 1}, "relocated", "7")
    got = b""
    while b'{"n":1}' not in got:
        got += s.recv(4096)
    assert b"content-type: text/event-stream" in got and b"event: relocated\nid: 7\ndata: {\"n\":1}\n\n" in got
    time.sleep(0.8)  # longer than idle_timeout: a stream is not idle
    loop.call(stream.send, {"n": 2})
    while b'{"n":2}' not in got:
        got += s.recv(4096)
    s.close()
    loop.call(stream.send, {"n": 3})  # the client left
    wait_until(lambda: stream.closed)


# ---------------------------------------------------------------------- slow, greedy and odd clients


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


def read_until(s: socket.socket, marker: bytes, got: bytes = b"") -> bytes:
    while marker not in got:
        chunk = s.recv(65536)
        assert chunk, f"closed before {marker!r}: {got[-300:]!r}"
        got += chunk
    return got


def trickle_until_answered(s: socket.socket, data: bytes, every: float, limit: float) -> tuple[bytes, float]:
    """Send ``data`` a byte each ``every`` seconds until the server answers; (the answer, seconds it took)."""
    s.settimeout(every)
    started = time.monotonic()
    for byte in data:
        assert time.monotonic() - started < limit, "no answer while bytes trickled in"
        try:
            s.send(bytes([byte]))
        except OSError:
            break
        try:
            answer = s.recv(65536)
        except TimeoutError:
            continue
        return answer, time.monotonic() - started
    raise AssertionError("every byte was sent and nothing came back")


def test_a_head_that_trickles_in_gets_408_at_its_deadline_however_often_bytes_come():
    lp = Loop(head_timeout=0.5, idle_timeout=30)
    try:
        with connect(lp.port) as s:
            answer, took = trickle_until_answered(s, b"GET /x HTTP/1.1\r\nx-slow: " + b"a" * 1000, 0.05, 5)
        assert answer.startswith(b"HTTP/1.1 408") and b"head did not arrive in time" in answer
        assert 0.4 < took < 2.0  # the deadline, not a byte's arrival, decided
        assert lp.drops.by_reason["HTTP request too slow"] == 1
    finally:
        lp.close()


def test_a_body_slower_than_the_minimum_rate_gets_408():
    lp = Loop(head_timeout=0.3, min_body_rate=100, idle_timeout=30)
    try:
        with connect(lp.port) as s:
            s.sendall(b"PUT /x HTTP/1.1\r\nhost: x\r\ncontent-length: 900\r\n\r\n")
            answer, took = trickle_until_answered(s, b"a" * 900, 0.05, 5)  # 20 bytes/s
        assert answer.startswith(b"HTTP/1.1 408") and b"body did not arrive in time" in answer
        assert took < 2.0
    finally:
        lp.close()


def test_one_address_cannot_take_every_slot_and_health_checks_are_answered_over_the_caps():
    lp = Loop(max_connections=8, max_per_address=4, reserve=2, head_timeout=30, reserve_timeout=5)
    held: list[socket.socket] = []
    try:
        for _ in range(12):  # a slowloris from 127.0.0.1: 4 slots, the reserve, then evicting each other
            s = connect(lp.port)
            s.sendall(b"GET /x HTTP/1.1\r\n")
            held.append(s)
            wait_until(lambda: lp.server.connections == min(len(held), 6)
                       and lp.drops.by_reason.get("HTTP connection refused", 0) == max(0, len(held) - 6))
        with connect(lp.port) as s:  # the same address: a health check is answered, then closed
            s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            out = read_until(s, b'"/healthz"')
            assert out.startswith(b"HTTP/1.1 200") and b"connection: close" in out.lower()
        with connect(lp.port) as s:  # anything else is not
            s.sendall(b"GET /api HTTP/1.1\r\nhost: x\r\n\r\n")
            assert read_until(s, b"\r\n\r\n").startswith(b"HTTP/1.1 503")
        conn = http.client.HTTPConnection("127.0.0.1", lp.port, timeout=5, source_address=("127.0.0.2", 0))
        conn.request("GET", "/api")  # another address has slots left
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        for s in held:
            s.close()
        lp.close()


def test_a_head_of_an_event_stream_is_its_headers_and_the_connection_goes_on(loop):
    with connect(loop.port) as s:
        s.sendall(b"HEAD /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        got = read_until(s, b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 200") and b"content-type: text/event-stream" in got
        wait_until(lambda: len(loop.streams) == 1)
        stream = loop.streams[0]
        assert stream.closed
        loop.call(stream.send, {"n": 1})  # nobody listens: nothing is sent, nothing raises
        s.sendall(b"GET /after HTTP/1.1\r\nhost: x\r\n\r\n")
        got = read_until(s, b'"/after"', got)
        assert b"retry:" not in got and b'{"n":1}' not in got


def test_two_thousand_pipelined_requests_are_answered_in_order_without_recursion():
    lp = Loop()
    try:
        with connect(lp.port) as s:
            s.sendall(b"".join(b"GET /%d HTTP/1.1\r\nhost: x\r\n\r\n" % i for i in range(2000)))
            got = read_until(s, b'"/1999"')
        assert got.count(b"HTTP/1.1 200 OK") == 2000 and got.index(b'"/0"') < got.index(b'"/1000"')
        assert lp.server.failures == 0 and lp._thread.is_alive()
    finally:
        lp.close()


def test_a_client_that_pipelines_and_does_not_read_is_not_read_further():
    lp = Loop()
    n = 5000  # answers of 4 KB: 20 MB, more than the kernel's buffers take
    try:
        with connect(lp.port) as s:
            s.settimeout(30)  # the sender blocks as long as the server waits for the reader
            sender = threading.Thread(target=s.sendall, daemon=True,
                                      args=((b"GET /" + b"p" * 4000 + b" HTTP/1.1\r\nhost: x\r\n\r\n") * n,))
            sender.start()
            seen = []

            def settled() -> bool:  # answered requests stopped growing: the server waits for the client
                seen.append(lp.server.requests)
                time.sleep(0.05)
                return len(seen) > 3 and seen[-1] == seen[-4]

            wait_until(settled, 10)
            [conn] = lp.server._conns.values()
            assert lp.server.requests < n and len(conn.out) < 512 << 10  # paused, its answers bounded
            answered, tail = 0, b""
            while answered < n:  # the client reads: everything is answered
                chunk = s.recv(1 << 20)
                assert chunk, f"closed after {answered} answers"
                answered += (tail + chunk).count(b"HTTP/1.1 200")
                tail = chunk[-11:]  # a marker cut in two is counted once, with the next chunk
            sender.join(5)
    finally:
        lp.close()


def test_a_half_closed_client_is_answered_and_its_socket_no_longer_polled():
    lp = Loop()
    try:
        with connect(lp.port) as s:
            s.sendall(b"GET /later HTTP/1.1\r\nhost: x\r\n\r\n")
            s.shutdown(socket.SHUT_WR)
            wait_until(lambda: len(lp.later) == 1)
            before, started = lp.polled, time.monotonic()
            while time.monotonic() - started < 0.3:  # a window to count in, not a wait for something
                time.sleep(0.05)
            assert lp.polled - before < 10, f"{lp.polled - before} events in 0.3 s: the server spins"
            lp.call(lp.later[0].respond, HttpResponse.json(200, {"late": True}))
            got = read_until(s, b'"late": true')
            assert got.startswith(b"HTTP/1.1 200") and s.recv(100) == b""  # answered, then closed
        wait_until(lambda: lp.server.connections == 0)
    finally:
        lp.close()


@pytest.mark.parametrize("body, reason", [
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64"),
    (b"[" * 65 + b"]" * 65, "nested deeper than 64"),
    (b'{"a": "\xff\xfe"}', "not UTF-8"),
    (b"{not json", "not JSON"),
])
def test_a_body_that_does_not_decode_is_a_config_error_never_a_recursion_error(body, reason):
    request = HttpRequest("PUT", "/x", {}, {}, body, "127.0.0.1:1", "/x")
    with pytest.raises(ConfigError, match=reason):
        request.json()


def test_json_as_deep_as_allowed_decodes():
    assert HttpRequest("PUT", "/x", {}, {}, b"[" * 64 + b"]" * 64, "p", "/x").json() == eval("[" * 64 + "]" * 64)
