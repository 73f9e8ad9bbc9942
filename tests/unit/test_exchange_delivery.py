"""exchange delivery marks: a publisher is told its records were delivered once every subscriber that reads took
them, not when the exchange handed them on (real sockets on loopback, a real forwarder)."""

from __future__ import annotations

import logging
import os
import time

import pytest
import zmq

from exchange._forwarder import Forwarder
from roq.config import ExchangeConfig
from roq.runtime import DropCounter
from roq.wire import batch

log = logging.getLogger("test")
HOLD = 5.0  # longer than any test here takes between two ticks; the hold itself is ticked with explicit times


@pytest.fixture
def rig():
    ctx = zmq.Context()
    config = ExchangeConfig(monitor="tcp://127.0.0.1:1", ack_interval=0.0, delivery_hold=HOLD)
    fwd = Forwarder(ctx, config, DropCounter(log, "test"))
    fwd.bind("127.0.0.1", 0, 0)
    pub = ctx.socket(zmq.DEALER)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(fwd.frontend_endpoint)
    sockets = [pub]

    def subscriber(small: bool = False) -> tuple[zmq.Socket, bytes]:
        sub = ctx.socket(zmq.DEALER)
        sub.setsockopt(zmq.LINGER, 0)
        if small:  # a pipe that fills after a few batches
            sub.setsockopt(zmq.RCVHWM, 1)
            sub.setsockopt(zmq.RCVBUF, 4096)
        ident = os.urandom(16)
        sub.connect(fwd.backend_endpoint)
        sub.send_multipart(batch.pack_subscription(ident, b""))
        deadline = time.monotonic() + 5.0
        while not sub.poll(10):
            assert time.monotonic() < deadline, "the subscription never reached the forwarder"
            fwd.subscriptions.readable()
        assert batch.parse_header(sub.recv_multipart()[1]).kind == batch.BEACON
        sockets.append(sub)
        return sub, ident

    yield fwd, pub, subscriber
    for s in sockets:
        s.close()
    fwd.close()
    ctx.term()


def publish(fwd: Forwarder, pub: zmq.Socket, me: bytes, first: int) -> None:
    """One batch of one record, forwarded and acknowledged."""
    pub.send_multipart([b"k", batch.pack_header(batch.DATA, me, first, 1), batch.encode_body([b"x"])])
    deadline = time.monotonic() + 5.0
    while not pub.poll(10):
        assert time.monotonic() < deadline, "no acknowledgement"
        fwd.forward()
    assert batch.decode_ack(pub.recv()) == first


def report(fwd: Forwarder, sub: zmq.Socket, ident: bytes, mark: int) -> None:
    """``sub`` reports it took ``mark``, and the forwarder has read it."""
    sub.send_multipart(batch.pack_progress(ident, 2, mark=mark))
    table = next(s for s in fwd.subscribers.all if s.id == ident)
    deadline = time.monotonic() + 5.0
    while table.mark < mark:
        assert time.monotonic() < deadline, "the report never reached the forwarder"
        fwd.backend.poll(10)
        fwd.subscriptions.readable()


def told(pub: zmq.Socket, timeout_ms: int = 0) -> int | None:
    """The delivered seq the publisher was told, if any."""
    if not pub.poll(timeout_ms):
        return None
    return batch.decode_delivered(pub.recv())


def marks(sub: zmq.Socket) -> list[int]:
    """What the subscriber reads: a batch's first seq, a mark as its negative."""
    out = []
    while sub.poll(100):
        h = batch.parse_header(sub.recv_multipart()[1])
        out.append(-h.first_seq if h.kind == batch.DELIVERY_MARK else h.first_seq)
    return out


def test_delivered_only_once_every_subscriber_that_reads_took_the_mark(rig):
    fwd, pub, subscriber = rig
    me = os.urandom(16)
    fast, fast_id = subscriber()
    slow, slow_id = subscriber()
    publish(fwd, pub, me, 1)
    fwd.delivery.tick(time.monotonic())
    assert marks(fast) == [1, -1] and marks(slow) == [1, -1]  # the mark comes after the batch, on the same pipe
    assert told(pub, 100) is None  # handed on, not taken: not delivered
    report(fwd, fast, fast_id, 1)
    fwd.delivery.tick(time.monotonic())
    assert told(pub, 100) is None  # the other one has not said it took it
    publish(fwd, pub, me, 2)  # a second batch and its mark
    fwd.delivery.tick(time.monotonic())
    report(fwd, slow, slow_id, 1)
    report(fwd, fast, fast_id, 2)
    fwd.delivery.tick(time.monotonic())
    assert told(pub, 1000) == 1  # both took mark 1; only one took mark 2
    report(fwd, slow, slow_id, 2)
    fwd.delivery.tick(time.monotonic())
    assert told(pub, 1000) == 2 and not fwd.delivery.marks


def test_a_subscriber_that_leaves_a_mark_untaken_for_the_hold_is_not_waited_for(rig, caplog):
    fwd, pub, subscriber = rig
    me = os.urandom(16)
    sub, sub_id = subscriber()  # reports nothing
    publish(fwd, pub, me, 1)
    sent = time.monotonic()
    fwd.delivery.tick(sent)
    fwd.delivery.tick(sent + HOLD / 2)
    assert told(pub, 100) is None and fwd.delivery.unwaited == 0
    with caplog.at_level(logging.WARNING, logger="exchange._delivery"):
        fwd.delivery.tick(sent + HOLD)  # what it costs publishers: the hold, once
    assert told(pub, 1000) == 1
    assert fwd.delivery.unwaited == 1 and f"subscriber {sub_id.hex()[:8]} left a delivery mark untaken" in caplog.text
    publish(fwd, pub, me, 2)
    fwd.delivery.tick(time.monotonic())
    assert told(pub, 1000) == 2  # given up on: not waited for again until it takes a mark
    assert fwd.delivery.unwaited == 1  # said once
    report(fwd, sub, sub_id, 2)  # it takes the newest mark: waited for again, and said again when it stops
    assert not next(s for s in fwd.subscribers.all if s.id == sub_id).unwaited


def test_a_subscriber_that_reads_further_behind_than_the_hold_but_takes_marks_is_waited_for(rig):
    fwd, pub, subscriber = rig
    me = os.urandom(16)
    sub, sub_id = subscriber()
    publish(fwd, pub, me, 1)
    fwd.delivery.tick(time.monotonic() - 2 * HOLD)  # mark 1, sent long ago...
    report(fwd, sub, sub_id, 1)  # ...and taken now
    fwd.delivery.tick(time.monotonic())
    assert told(pub, 1000) == 1
    publish(fwd, pub, me, 2)
    fwd.delivery.tick(time.monotonic() - HOLD - 1)  # mark 2, sent longer ago than the hold...
    fwd.delivery.tick(time.monotonic())  # ...behind mark 1, taken just now
    assert told(pub, 100) is None  # it reads, however far behind: a killed exchange would lose what it has not read
    fwd.delivery.tick(time.monotonic() + HOLD)  # no new mark for the hold either: it stopped
    assert told(pub, 1000) == 2


def test_with_no_subscriber_and_for_one_that_came_after_the_mark_nothing_waits(rig):
    fwd, pub, subscriber = rig
    me = os.urandom(16)
    publish(fwd, pub, me, 1)
    fwd.delivery.tick(time.monotonic())
    assert told(pub, 1000) == 1  # nobody to take it
    publish(fwd, pub, me, 2)
    fwd.delivery.tick(time.monotonic())  # mark 2, sent to nobody...
    assert told(pub, 1000) == 2
    late, late_id = subscriber()  # ...and a subscriber after it: it waits only for marks sent to it
    publish(fwd, pub, me, 3)
    fwd.delivery.tick(time.monotonic())
    assert marks(late) == [3, -3] and told(pub, 100) is None
    report(fwd, late, late_id, 3)
    fwd.delivery.tick(time.monotonic())
    assert told(pub, 1000) == 3
    assert fwd.delivery.due == float("inf")  # nothing acknowledged, no mark waits: the loop does not wake for it


def test_a_mark_owed_to_a_subscriber_with_a_full_pipe_goes_right_after_the_batch_held_for_it(rig):
    """A subscriber reading steadily at its pipe's limit is sent every mark: one made while a batch is held for it
    goes out right after that batch (the loop fills what room it makes with held batches first, so at every tick
    the pipe was full, it took no mark, and after the hold it was no longer waited for)."""
    fwd, pub, subscriber = rig
    me = os.urandom(16)
    sub, sub_id = subscriber(small=True)
    body = batch.encode_body([b"x" * 65536])
    seq, deadline = 0, time.monotonic() + 10.0
    while fwd.held is None:  # fill its pipe and socket buffers until a batch is held for it
        assert time.monotonic() < deadline, "the subscriber's pipe never filled"
        seq += 1
        pub.send_multipart([b"k", batch.pack_header(batch.DATA, me, seq, 1), body])
        while not pub.poll(1) and fwd.held is None:
            fwd.forward()
        if fwd.held is None:
            assert batch.decode_ack(pub.recv()) == seq
    table = next(s for s in fwd.subscribers.all if s.id == sub_id)
    fwd.delivery.tick(time.monotonic())  # a mark for what was acknowledged (all but the held batch): owed
    assert table.mark_owed
    got: list[int] = []
    while fwd.held is not None:  # it reads (and says so); the forward loop tries the held batch again as it has room
        assert time.monotonic() < deadline + 10.0, "the held batch never went out"
        taken = 0
        while sub.poll(10):
            h = batch.parse_header(sub.recv_multipart()[1])
            got.append(-h.first_seq if h.kind == batch.DELIVERY_MARK else h.first_seq)
            taken += 1
        sub.send_multipart(batch.pack_progress(sub_id, taken))
        fwd.subscriptions.readable()
        fwd.retry(time.monotonic())
    got += marks(sub)
    assert got == [*range(1, seq), seq, -1]  # the mark after the held batch (on a durable queue it may cover it)
    assert not table.mark_owed
    report(fwd, sub, sub_id, 1)
    fwd.delivery.tick(time.monotonic())
    assert told(pub, 1000) == seq - 1  # delivered: it took the mark


def test_an_owed_mark_goes_at_the_next_tick_when_no_batch_comes(rig):
    fwd, pub, subscriber = rig
    me = os.urandom(16)
    sub, sub_id = subscriber()
    publish(fwd, pub, me, 1)
    fwd.delivery.tick(time.monotonic())
    assert marks(sub) == [1, -1]
    table = next(s for s in fwd.subscribers.all if s.id == sub_id)
    table.mark_owed = True  # as if its pipe had been full for mark 1 (the test above fills one for real)
    fwd.delivery.tick(time.monotonic())  # nothing new acknowledged: no new mark, the owed one goes
    assert marks(sub) == [-1] and not table.mark_owed
    report(fwd, sub, sub_id, 1)
    fwd.delivery.tick(time.monotonic())
    assert told(pub, 1000) == 1
