"""The monitor's shell on real sockets (loopback, any free port): garbage of every kind is answered or
dropped and counted, the core's decisions go out on the ROUTER, and the loop serves on."""

from __future__ import annotations

import os
import socket
import threading

import bson
import pytest
import zmq

from monitor import MAX_STATUS_BYTES, Monitor
from roq import control
from roq.config import MonitorConfig
from roq.control import Result


class Wakeup:
    """What the loop polls to stop (a SignalWakeup without the signals)."""

    def __init__(self) -> None:
        self._r, self._w = socket.socketpair()

    @property
    def fd(self) -> int:
        return self._r.fileno()

    def consume(self) -> bool:
        self._r.recv(64)
        return True

    def stop(self) -> None:
        self._w.send(b"x")

    def close(self) -> None:
        self._r.close()
        self._w.close()


@pytest.fixture
def monitor():
    ctx = zmq.Context()
    node = Monitor(MonitorConfig(address="127.0.0.1", port=0, queue="fuzz"), context=ctx)
    node.start()
    wakeup = Wakeup()
    loop = threading.Thread(target=node.serve, args=(wakeup,), daemon=True)
    loop.start()
    try:
        yield node, ctx, loop
    finally:
        wakeup.stop()
        loop.join(10)
        assert not loop.is_alive()
        node.close()
        wakeup.close()
        ctx.destroy(linger=0)


def dealer(ctx: zmq.Context, endpoint: str, identity: bytes | None = None) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if identity:
        sock.setsockopt(zmq.ROUTING_ID, identity)
    sock.connect(endpoint)
    return sock


def ask(sock: zmq.Socket, msg: control.Message) -> control.Reply:
    sock.send(control.encode(msg))
    assert sock.poll(5000), f"no answer to {msg}"
    reply = control.decode(sock.recv())
    assert isinstance(reply, control.Reply)
    return reply


def documents() -> list[bytes]:
    """Every message the monitor serves, each field replaced by every wrong value; and worse."""
    samples = [
        control.Heartbeat("x1", "tcp://127.0.0.1:7000", "tcp://127.0.0.1:8000", 1),
        control.ExchangeBye("x1"),
        control.ExchangeKpi("x1", 1.0, 10, 10, 10, 10, [control.PublisherRate("p1", 10, 10)], 1.0, 1, 0.1, 0),
        control.PublisherHello("p1", "x1", 1),
        control.Moved("p1", "x1", 1, 1),
        control.Panic("p1", "x1", "why"),
        control.PublisherBye("p1"),
        control.SubscriberHello("s1", b"", ["x1"]),
        control.Ready("s1", 1),
        control.SubscriberBye("s1"),
        control.ForceRelocate("p1", "x1"),
    ]
    wrong = [bson.Code("x"), bson.Code("x", {"a": 1}), 1.5, 2**63 - 1, -1, "y" * 200_000, [["deep"] * 3] * 3,
             {"a": {"b": {"c": {}}}}, None, True, b"\xff" * 10, bson.Regex("x"), bson.ObjectId(), bson.MinKey()]
    out = []
    for sample in samples:
        doc = sample.document()
        for field in doc:
            if field != "CMD":
                out += [bson.encode({**doc, field: value}) for value in wrong]
    nested: dict = {}
    for _ in range(80):
        nested = {"n": nested}
    out += [bson.encode({"CMD": 30, "subscriber": "s", "prefix": b"", "confirmed": [], "x": nested}),
            bson.encode({"CMD": 2, "publisher": "p" * 900_000}),
            bson.encode({"CMD": 30, "subscriber": "s2", "prefix": b"k" * 500_000, "confirmed": ["x"] * 30_000}),
            os.urandom(1000), b"", b"\x05\x00\x00\x00\x00", bson.encode({"CMD": 9000, "RESULT": 0})]
    assert all(len(body) < 1 << 20 for body in out)  # larger ones make ZeroMQ drop the connection
    return out


def test_garbage_of_every_kind_is_refused_counted_and_harmless(monitor):
    node, ctx, loop = monitor
    fuzz = dealer(ctx, node.endpoint, b"fuzzer")
    admin = dealer(ctx, node.endpoint)
    frames = documents()
    for body in frames:
        fuzz.send(body)
    fuzz.send_multipart([b"two", b"frames"])
    answers = refusals = 0
    while fuzz.poll(1000):
        answer = control.decode(fuzz.recv())  # some garbage is valid enough to be a peer's: it gets a peer's answer
        answers += 1
        if isinstance(answer, control.Reply):
            assert answer.result != Result.FAIL, answer
            refusals += answer.result in (Result.BAD_REQUEST, Result.UNKNOWN_COMMAND)
    print(f"{len(frames)} frames sent, {answers} answers, {refusals} refusals")
    assert refusals > len(frames) // 2  # the others were valid enough: no answer is due
    assert loop.is_alive()
    assert ask(admin, control.Ping()).comment == "pong"
    status = ask(admin, control.Status())
    assert status.ok and status.data["counters"]["dropped_messages"] >= refusals
    assert len(bson.encode(status.document())) < MAX_STATUS_BYTES
    assert node.failures == 0


def test_the_cores_decisions_go_out_on_the_router(monitor):
    node, ctx, _ = monitor
    exchange = dealer(ctx, node.endpoint, b"x1-id")
    subscriber = dealer(ctx, node.endpoint, b"s1-id")
    publisher = dealer(ctx, node.endpoint, b"p1-id")
    subscriber.send(control.encode(control.SubscriberHello("s1", b"", [])))
    exchange.send(control.encode(control.Heartbeat("x1", "tcp://127.0.0.1:7000", "tcp://127.0.0.1:8000", 1)))
    assert subscriber.poll(5000)
    listed = control.decode(subscriber.recv())
    assert isinstance(listed, control.Exchanges) and [x.exchange for x in listed.exchanges] == ["x1"]
    publisher.send(control.encode(control.PublisherHello("p1")))
    assert publisher.poll(5000)
    assigned = control.decode(publisher.recv())
    assert isinstance(assigned, control.Relocate) and (assigned.exchange, assigned.reason) == ("x1", "assign")
    status = ask(dealer(ctx, node.endpoint), control.Status())
    assert [e["kind"] for e in status.data["events"]] == ["exchange_joined"]
    assert status.data["events"][0]["origin"] == "monitor" and status.data["events"][0]["queue"] == "fuzz"


def test_a_req_peer_is_answered_in_its_envelope(monitor):
    node, ctx, _ = monitor
    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(node.endpoint)
    reply = ask(req, control.Ping())
    assert reply.data == {"queue": "fuzz"}
    req.close()
