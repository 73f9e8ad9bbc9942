"""A real Publisher against scripted peers on inproc sockets: exact orderings of events, on purpose.

The scripted exchanges never acknowledge unless told to, so each test ends with :func:`stop`, which closes
the publisher without waiting for acknowledgements that will never come.
"""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext

import pytest
import zmq

import client
from roq.wire import batch, control
from roq.config import PublisherConfig


@pytest.fixture
def peers():
    ctx = zmq.Context()
    socks = {}
    for name in ("monitor", "A", "B"):
        s = ctx.socket(zmq.ROUTER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, 5000)
        s.bind(f"inproc://{name}")
        socks[name] = s
    yield ctx, socks
    for s in socks.values():
        s.close()
    ctx.term()


def start(ctx, socks):
    """A publisher assigned to exchange A; returns it and the monitor-side identity."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("pub", client.Publisher(
        context=ctx, monitor="inproc://monitor", config=PublisherConfig(linger=0.0))))
    t.start()
    ident, body = socks["monitor"].recv_multipart()
    hello = control.decode(body)
    assert isinstance(hello, control.PublisherHello) and hello.exchange == ""
    relocate(socks, ident, hello.publisher, "A", "assign")
    t.join(5)
    return box["pub"], ident


def relocate(socks, ident, publisher, exchange, reason, relocation=0):
    socks["monitor"].send_multipart([ident, control.encode(control.Relocate(
        publisher=publisher, exchange=exchange, frontend=f"inproc://{exchange}", reason=reason, relocation=relocation))])


def stop(pub):
    """Close ``pub`` at once: what the scripted exchanges did not acknowledge stays unacknowledged."""
    with pytest.raises(client.BrokerTimeoutError) if pub.stats()["acked"] < pub.stats()["sent"] else nullcontext():
        pub.close(timeout=0.2)
    with pytest.raises(client.ClosedError):
        pub.send(b"k", b"late")


def receive_batch(sock):
    ident, key, header, body = sock.recv_multipart()
    return ident, key, batch.parse_header(header), body


def test_failover_and_an_ack_in_the_same_poll_round_do_not_kill_the_sender(peers):
    ctx, socks = peers
    pub, ident = start(ctx, socks)
    pub.send(b"k", b"one")
    pident, _, h, _ = receive_batch(socks["A"])
    # white-box: holding the outbox's lock keeps the sender out of its poll while both messages arrive
    with pub._outbox._lock:
        time.sleep(0.1)
        socks["A"].send_multipart([pident, batch.encode_ack(h.first_seq)])
        relocate(socks, ident, pub.name, "B", "failover", relocation=7)
        time.sleep(0.05)
    _, _, resent, body = receive_batch(socks["B"])
    assert (resent.first_seq, resent.epoch, resent.flags & batch.FLAG_RETRANSMIT) == (1, 1, batch.FLAG_RETRANSMIT)
    pub.send(b"k", b"two")
    _, _, h2, _ = receive_batch(socks["B"])
    assert (h2.first_seq, h2.epoch) == (2, 1)  # the sender survived the round
    assert pub.stats()["failovers"] == 1 and pub.stats()["exchange"] == "B"
    stop(pub)


def test_failover_onto_the_current_exchange_ends_the_epoch_with_a_marker(peers):
    ctx, socks = peers
    pub, ident = start(ctx, socks)
    pub.send(b"k", b"one")
    pident, _, h, _ = receive_batch(socks["A"])
    relocate(socks, ident, pub.name, "A", "failover", relocation=3)
    _, key, marker, _ = receive_batch(socks["A"])
    assert key == batch.CONTROL_TOPIC and (marker.kind, marker.epoch, marker.first_seq) == (batch.MARKER, 0, 2)
    _, _, resent, _ = receive_batch(socks["A"])  # the window again, on the same connection, next epoch
    assert (resent.kind, resent.first_seq, resent.epoch) == (batch.DATA, 1, 1)
    stop(pub)


def moved_report(socks):
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        msg = control.decode(socks["monitor"].recv_multipart()[1])
        if isinstance(msg, control.Moved):
            return msg
    raise AssertionError("no Moved report")


def test_a_planned_move_holds_new_batches_while_the_old_exchange_owes_acks(peers):
    ctx, socks = peers
    pub, ident = start(ctx, socks)
    pub.send(b"k", b"one")
    pident, _, h, _ = receive_batch(socks["A"])
    relocate(socks, ident, pub.name, "B", "relocate", relocation=5)
    _, key, marker, _ = receive_batch(socks["A"])
    assert key == batch.CONTROL_TOPIC and (marker.kind, marker.epoch, marker.first_seq) == (batch.MARKER, 0, 2)
    pub.send(b"k", b"two")
    assert not socks["B"].poll(200)  # held: seq 1 is not acknowledged by A yet
    socks["A"].send_multipart([pident, batch.encode_ack(1)])
    _, _, h2, _ = receive_batch(socks["B"])
    assert (h2.first_seq, h2.epoch) == (2, 1)
    moved = moved_report(socks)
    assert (moved.exchange, moved.relocation, moved.epoch) == ("B", 5, 1)
    stop(pub)


def test_a_planned_move_switches_at_once_when_everything_is_acknowledged(peers):
    ctx, socks = peers
    pub, ident = start(ctx, socks)
    pub.send(b"k", b"one")
    pident, _, h, _ = receive_batch(socks["A"])
    socks["A"].send_multipart([pident, batch.encode_ack(1)])
    pub.flush(5)
    relocate(socks, ident, pub.name, "B", "relocate", relocation=6)
    assert moved_report(socks).exchange == "B"
    _, _, marker, _ = receive_batch(socks["A"])
    assert marker.kind == batch.MARKER
    pub.send(b"k", b"two")
    _, _, h2, _ = receive_batch(socks["B"])
    assert (h2.first_seq, h2.epoch) == (2, 1)
    stop(pub)
