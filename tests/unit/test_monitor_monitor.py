"""The monitor's shell on real sockets (loopback, any free port): garbage of every kind is answered or
dropped and counted, the core's decisions go out on the ROUTER, and the loop serves on."""

from __future__ import annotations

import os
import socket
import threading

import bson
import pytest
import zmq

from monitor import Monitor
from monitor._operators import MAX_STATUS_BYTES
from roq.wire import control
from roq.config import MonitorConfig
from roq.wire.control import Result
from roq.wire.status import decode


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
    assert status.ok and decode(status.data).count("dropped_messages") >= refusals
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
    status = decode(ask(dealer(ctx, node.endpoint), control.Status()).data)
    assert [e["kind"] for e in status.events] == ["exchange_joined"]
    assert status.events[0]["origin"] == "monitor" and status.events[0]["queue"] == "fuzz"


def test_a_req_peer_is_answered_in_its_envelope(monitor):
    node, ctx, _ = monitor
    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(node.endpoint)
    reply = ask(req, control.Ping())
    assert reply.data == {"queue": "fuzz"}
    req.close()


def test_with_curve_a_message_naming_another_keys_id_is_refused_and_changes_nothing(tmp_path):
    """An identity is its key: bob (a key of the keyring, every permission: no rules are set) cannot say hello,
    panic, report a move, confirm or say goodbye for alice's publisher or subscriber; each is answered FORBIDDEN,
    counted as forged, and alice's entries stay as they were."""
    from roq.security import keys, zap
    cluster = keys.ClusterKeys(str(tmp_path / "keys"))
    cluster.ensure()
    creds = {name: keys.load_credentials(cluster.client(name)) for name in ("alice", "bob")}
    ctx = zmq.Context()
    node = Monitor(MonitorConfig(address="127.0.0.1", port=0, queue="q", secret_key=cluster.secret_key,
                                 keyring=cluster.keyring), context=ctx)
    node.start()
    wakeup = Wakeup()
    loop = threading.Thread(target=node.serve, args=(wakeup,), daemon=True)
    loop.start()

    def connect(pair: keys.KeyPair | None) -> zmq.Socket:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        server = keys.load_secret(cluster.secret_key)
        sock.curve_serverkey = server.public
        sock.curve_publickey, sock.curve_secretkey = (pair or server).public, (pair or server).secret
        sock.connect(node.endpoint)
        return sock

    try:
        exchange = connect(None)  # the cluster's key
        exchange.send(control.encode(control.Heartbeat("x1", "tcp://127.0.0.1:7000", "tcp://127.0.0.1:8000", 1)))
        alice, bob = connect(creds["alice"][1]), connect(creds["bob"][1])
        pub_id = zap.identity_for(creds["alice"][1].public).hex()
        sub_id = zap.identity_for(creds["alice"][1].public).hex()
        alice.send(control.encode(control.SubscriberHello(sub_id, b"", [])))
        assert alice.poll(5000) and isinstance(control.decode(alice.recv()), control.Exchanges)
        alice.send(control.encode(control.PublisherHello(pub_id)))
        assert alice.poll(5000)
        assigned = control.decode(alice.recv())
        assert isinstance(assigned, control.Relocate) and assigned.exchange == "x1"
        before = ask(connect(None), control.Status()).data
        for msg in (control.Panic(pub_id, "x1", "forged"), control.PublisherBye(pub_id),
                    control.PublisherHello(pub_id), control.Moved(pub_id, "x1", 1, 1),
                    control.SubscriberBye(sub_id), control.Ready(sub_id, 1),
                    control.SubscriberHello(sub_id, b"other", [])):
            reply = ask(bob, msg)
            assert reply.result == Result.FORBIDDEN and "not bob's" in reply.comment, msg
        after = ask(connect(None), control.Status()).data
        assert after["publishers"] == before["publishers"] and after["subscribers"] == before["subscribers"]
        counters = {k: v for k, v in after["counters"].items() if k != "dropped_messages"}
        assert counters == {k: v for k, v in before["counters"].items() if k != "dropped_messages"}
        assert after["events"] == before["events"] and not alice.poll(200)  # no move, no list for alice
        assert node.drops.by_reason.get("forged id") == 7
        mine = zap.identity_for(creds["bob"][1].public).hex()  # bob's own id is his to use
        bob.send(control.encode(control.PublisherHello(mine)))
        assert bob.poll(5000) and isinstance(control.decode(bob.recv()), control.Relocate)
    finally:
        wakeup.stop()
        loop.join(10)
        node.close()
        wakeup.close()
        ctx.destroy(linger=0)
        assert not loop.is_alive()
