"""gcm's queue stats: the monitor asked on the spot over a real DEALER (loopback), its status decoded and given,
or the topology alone when it is silent, absent, unreachable, or answers garbage or a malformed status (logged,
at most every LOG_INTERVAL); never more asks than the bound."""

from __future__ import annotations

import time

import pytest
import zmq

import logging

from gcm._stats import StatsAsks, StatsReply, stats_reply
from gcm._view import QueueView
from roq.wire.control import Reply, Status, decode, encode
from roq.wire.documents import MonitorDoc, QueueDoc
from roq.server import Request
from roq.wire.shape import to_document
from tests.unit.standins import queue_status

STATUS = to_document(queue_status(exchanges=[{"id": "x1", "records_per_s": 12.5}], publishers=[{"id": "p1"}]))


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
    sock.send_multipart([*_asked(sock), encode(Reply(data=STATUS))])
    _answer_when_readable(asks)
    (reply,) = peer.replies
    assert reply.ok and reply.request == 2013 and reply.data["Monitor"] == STATUS
    assert isinstance(reply, StatsReply) and reply.status.exchanges[0].records_per_s == 12.5  # decoded once, here
    assert reply.data["Queue"]["Name"] == "q" and "cooldown_s" in reply.data["Rules"] and len(asks) == 0
    assert decode(encode(reply)).data == reply.data  # on the wire, a plain reply


MALFORMED = {
    "a field missing": {k: v for k, v in STATUS.items() if k != "totals"},
    "a number as text": {**STATUS, "pid": "1"},
    "a bool for a number": {**STATUS, "exchanges": [{**STATUS["exchanges"][0], "busy": True}]},
    "an event without its kind": {**STATUS, "events": [{"seq": 1, "time": 1.0, "text": "?"}]},
    "a list that is not one": {**STATUS, "publishers": {"p1": 1}},
}


@pytest.mark.parametrize("garbage", [b"", b"\xff" * 40, encode(Status()), encode(Reply(result=1105, comment="busy")),
                                     *(encode(Reply(data=doc)) for doc in MALFORMED.values())],
                         ids=["empty", "not BSON", "a request", "a refusal", *MALFORMED])
def test_a_monitor_answering_garbage_gives_the_topology_alone(monitor, asks, garbage):
    sock, endpoint = monitor
    peer = Peer()
    asks.ask(_queue(endpoint), Request(peer, (b"id",)), time.monotonic())
    sock.send_multipart([*_asked(sock), garbage])
    _answer_when_readable(asks)
    (reply,) = peer.replies
    assert reply.ok and "Monitor" not in reply.data and reply.comment == "the monitor did not answer; topology only"


def test_malformed_statuses_are_logged_at_most_once_per_interval_and_the_asks_go_on(monitor, asks, caplog):
    sock, endpoint = monitor
    answers = []
    with caplog.at_level(logging.WARNING, logger="gcm"):
        for doc in [*MALFORMED.values(), STATUS]:
            assert asks.ask_status(_queue(endpoint), answers.append, time.monotonic())
            sock.send_multipart([*_asked(sock), encode(Reply(data=doc))])
            _answer_when_readable(asks)
    assert answers[:-1] == [None] * len(MALFORMED) and answers[-1].exchanges[0].id == "x1"
    assert asks.unreadable == len(MALFORMED)
    [line] = [r.getMessage() for r in caplog.records]
    assert "queue q: its monitor answered no status" in line and "lacks field 'totals'" in line


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
