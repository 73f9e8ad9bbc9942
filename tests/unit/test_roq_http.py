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
import zmq

from roq.errors import ConfigError
from roq.http import EventStream, HttpRequest, HttpResponse, HttpServer, Later
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
        return HttpResponse.json(200, {"method": request.method, "path": request.path, "query": request.query,
                                       "body": request.body.decode(), "type": request.headers.get("content-type")})

    def call(self, fn: Any, *args: Any) -> None:
        """Run ``fn`` in the loop's thread (what a process does when the cluster answers)."""
        self.calls.append((fn, args))

    def _run(self) -> None:
        poller = zmq.Poller()
        while not self._stop:
            self.server.sync(poller)
            events = dict(poller.poll(10))
            self.server.ready(events)
            self.server.expire()
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


@pytest.mark.parametrize("body, reason", [
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64"),
    (b"[" * 65 + b"]" * 65, "nested deeper than 64"),
    (b'{"a": "\xff\xfe"}', "not UTF-8"),
    (b"{not json", "not JSON"),
])
def test_a_body_that_does_not_decode_is_a_config_error_never_a_recursion_error(body, reason):
    request = HttpRequest("PUT", "/x", {}, {}, body, "127.0.0.1:1")
    with pytest.raises(ConfigError, match=reason):
        request.json()


def test_json_as_deep_as_allowed_decodes():
    assert HttpRequest("PUT", "/x", {}, {}, b"[" * 64 + b"]" * 64, "p").json() == eval("[" * 64 + "]" * 64)
