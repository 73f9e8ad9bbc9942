"""gcm's queue stats: the monitor asked on the spot over a real DEALER (loopback), its answer given, or the
topology alone when it is silent, absent, unreachable, or answers garbage; never more asks than the bound."""

from __future__ import annotations

import time

import pytest
import zmq

from gcm._stats import StatsAsks, stats_reply
from gcm._view import QueueView
from roq.control import Reply, Status, decode, encode
from roq.documents import MonitorDoc, QueueDoc
from roq.server import Request


class Peer:
    """Where the stats request came from: what it was answered."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []

    def send(self, envelope, reply) -> bool:
        self.replies.append(reply)
        return True


@pytest.fixture
def monitor():
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    yield sock, f"tcp://127.0.0.1:{port}"
    sock.close()
    ctx.destroy(linger=0)


@pytest.fixture
def asks():
    ctx = zmq.Context()
    stats = StatsAsks(ctx, limit=2, timeout=0.5)
    yield stats
    stats.close()
    ctx.destroy(linger=0)


def _queue(endpoint: str | None) -> QueueView:
    monitor = MonitorDoc(endpoint=endpoint, host="h") if endpoint is not None else None
    return QueueView("q", QueueDoc(host="h", placement={"x1": "h"}), monitor=monitor)


def _asked(monitor_sock: zmq.Socket) -> list[bytes]:
    assert monitor_sock.poll(5000), "the monitor was not asked"
    identity, body = monitor_sock.recv_multipart()
    assert isinstance(decode(body), Status)
    return [identity]


def _answer_when_readable(asks: StatsAsks, deadline: float = 5.0) -> None:
    poller = zmq.Poller()
    for sock in asks.sockets():
        poller.register(sock, zmq.POLLIN)
    end = time.monotonic() + deadline
    while asks.sockets() and time.monotonic() < end:
        for sock, _ in poller.poll(100):
            asks.readable(sock)


def test_the_monitors_status_is_given_beside_the_topology(monitor, asks):
    sock, endpoint = monitor
    peer = Peer()
    assert asks.ask(_queue(endpoint), Request(peer, (b"id",)), time.monotonic()) is None
    sock.send_multipart([*_asked(sock), encode(Reply(data={"Exchanges": 1, "Publishers": []}))])
    _answer_when_readable(asks)
    (reply,) = peer.replies
    assert reply.ok and reply.request == 2013 and reply.data["Monitor"] == {"Exchanges": 1, "Publishers": []}
    assert reply.data["Queue"]["Name"] == "q" and "cooldown_s" in reply.data["Rules"] and len(asks) == 0


@pytest.mark.parametrize("garbage", [b"", b"\xff" * 40, encode(Status()), encode(Reply(result=1105, comment="busy"))])
def test_a_monitor_answering_garbage_gives_the_topology_alone(monitor, asks, garbage):
    sock, endpoint = monitor
    peer = Peer()
    asks.ask(_queue(endpoint), Request(peer, (b"id",)), time.monotonic())
    sock.send_multipart([*_asked(sock), garbage])
    _answer_when_readable(asks)
    (reply,) = peer.replies
    assert reply.ok and "Monitor" not in reply.data and reply.comment == "the monitor did not answer; topology only"


def test_a_silent_monitor_is_given_up_at_the_deadline(monitor, asks):
    sock, endpoint = monitor
    peer = Peer()
    now = time.monotonic()
    asks.ask(_queue(endpoint), Request(peer, (b"id",)), now)
    asks.expire(now + 0.4)
    assert peer.replies == []
    asks.expire(now + 0.5)
    assert [r.comment for r in peer.replies] == ["the monitor did not answer; topology only"] and len(asks) == 0


@pytest.mark.parametrize("endpoint", [None, "", "not an endpoint", "tcp://h:99999", "ipc:///tmp/x"])
def test_without_a_monitor_to_ask_the_topology_comes_at_once(asks, endpoint):
    reply = asks.ask(_queue(endpoint), Request(Peer(), ()), time.monotonic())
    assert reply is not None and reply.ok and "Monitor" not in reply.data and len(asks) == 0


def test_asks_are_bounded(monitor, asks):
    _, endpoint = monitor
    peers = [Peer() for _ in range(3)]
    answers = [asks.ask(_queue(endpoint), Request(p, ()), time.monotonic()) for p in peers]
    assert answers[:2] == [None, None] and answers[2] is not None and len(asks) == 2


def test_the_stats_reply_is_the_topology_and_rules():
    reply = stats_reply(_queue("tcp://h:1"), None)
    assert reply.data["Queue"]["Monitor"] == "tcp://h:1" and reply.data["Rules"]["min_exchanges"] == 1
