"""exchange forwarder: batches checked by roq.batch, forwarded untouched, acknowledged; bounds in bytes and
tables a flood of identities cannot grow (real sockets on loopback)."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
import zmq

from exchange import MIN_PUBLISHER_HWM, PUBLISHER_QUEUE_BYTES, Forwarder
from roq import batch
from roq.config import MIN_SUBSCRIBER_HWM, ExchangeConfig
from roq.runtime import DropCounter

log = logging.getLogger("test")


@pytest.fixture
def rig():
    """A forwarder bound on loopback, a publisher DEALER and a subscriber SUB connected to it."""
    ctx = zmq.Context()
    config = ExchangeConfig(monitor="tcp://127.0.0.1:1", max_batch_bytes=1 << 16, ack_interval=0.0)
    fwd = Forwarder(ctx, config, DropCounter(log, "test"))
    fwd.bind("127.0.0.1", 0, 0)
    me = os.urandom(16)
    pub = ctx.socket(zmq.DEALER)
    pub.setsockopt(zmq.ROUTING_ID, me)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    for s in (pub, sub):
        s.setsockopt(zmq.LINGER, 0)
    pub.connect(fwd.frontend_endpoint)
    sub.connect(fwd.backend_endpoint)
    # the subscription travels to the PUB: probe until one arrives, then clear the probes away
    deadline = time.monotonic() + 5.0
    while not sub.poll(10):
        assert time.monotonic() < deadline, "the subscription never reached the forwarder"
        fwd.backend.send_multipart([b"\x00probe", b"", b""])
    while sub.poll(20):
        sub.recv_multipart()
    yield fwd, pub, sub, me
    for s in (pub, sub):
        s.close()
    fwd.close()
    ctx.term()


def header(me: bytes, *, kind: int = batch.DATA, first: int = 1, count: int = 1, flags: int = 0) -> bytes:
    return batch.pack_header(kind, me, first, count, flags=flags)


def forward_until(fwd: Forwarder, done, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        if fwd.frontend.poll(50):
            fwd.forward()


def test_a_batch_goes_out_untouched_and_is_acknowledged(rig):
    fwd, pub, sub, me = rig
    frames = [b"k.1", header(me, first=1, count=2), batch.encode_body([b"a", b"bb"])]
    pub.send_multipart(frames)
    forward_until(fwd, lambda: fwd.acct.records_in == 2)
    assert sub.poll(2000) and sub.recv_multipart() == frames
    fwd.send_acks()
    assert pub.poll(2000) and batch.decode_ack(pub.recv()) == 2
    assert fwd.acct.publishers == {me: [2, len(frames[2])]} and fwd.acks == {}


def test_a_marker_is_acknowledged_at_once_up_to_the_seq_before_it(rig):
    fwd, pub, sub, me = rig
    pub.send_multipart([batch.CONTROL_TOPIC, header(me, kind=batch.MARKER, first=5, count=0), b""])
    forward_until(fwd, lambda: sub.poll(10))
    assert pub.poll(2000) and batch.decode_ack(pub.recv()) == 4


@pytest.mark.parametrize("frames, reason", [
    ([b"k"], "wrong frame count"),
    ([b"k", b"short", b"body"], "bad header"),
    ([b"k", b"HEADER", b"x", b"extra"], "wrong frame count"),
    ("version", "bad header"),
    ("count", "bad batch"),
    ("oversized", "oversized batch"),
    ("beacon", "bad header"),
    ("someone else", "bad header"),
])
def test_a_bad_batch_is_dropped_under_its_reason_and_not_forwarded(rig, frames, reason):
    fwd, pub, sub, me = rig
    body = batch.encode_body([b"x"])
    frames = {
        "version": [b"k", batch.HEADER.pack(9, batch.DATA, 0, 1, me, 0, 1, 0, 0), body],
        "count": [b"k", header(me, count=5), b"abc"],
        "oversized": [b"k", header(me), b"x" * ((1 << 16) + 1)],
        "beacon": [batch.CONTROL_TOPIC, header(me, kind=batch.BEACON, count=0), b""],
        "someone else": [b"k", header(os.urandom(16)), body],
    }.get(frames, frames) if isinstance(frames, str) else frames
    pub.send_multipart(frames)
    forward_until(fwd, lambda: fwd.drops.total == 1)
    assert fwd.drops.by_reason == {reason: 1}
    assert not sub.poll(200) and fwd.acks == {}


@pytest.mark.parametrize("queue_bytes, backend_hwm, expected", [
    (8 << 20, 10_000, MIN_SUBSCRIBER_HWM),  # 7 of the largest batch: too few for ZeroMQ not to drop
    (2 << 30, 10_000, (2 << 30) // ((1 << 20) + batch.MAX_KEY + batch.HEADER_SIZE)),
    (2 << 30, 100, 100),  # the operator's bound in batches, whatever their size
])
def test_the_pipes_are_bounded_in_bytes_of_the_largest_batch(queue_bytes, backend_hwm, expected):
    ctx = zmq.Context()
    try:
        config = ExchangeConfig(monitor="tcp://127.0.0.1:1", max_batch_bytes=1 << 20, subscriber_queue_bytes=queue_bytes,
                                backend_hwm=backend_hwm)
        fwd = Forwarder(ctx, config, DropCounter(log, "test"))
        largest = (1 << 20) + batch.MAX_KEY + batch.HEADER_SIZE
        assert fwd.backend.getsockopt(zmq.SNDHWM) == expected
        assert fwd.frontend.getsockopt(zmq.RCVHWM) == max(MIN_PUBLISHER_HWM, PUBLISHER_QUEUE_BYTES // largest)
        assert f"{expected} batches per subscriber" in fwd.bounds()
        fwd.close()
    finally:
        ctx.term()


def test_a_flood_of_identities_grows_neither_the_acks_nor_the_accounting():
    ctx = zmq.Context()
    config = ExchangeConfig(monitor="tcp://127.0.0.1:1", ack_interval=60.0)  # acks would wait a minute
    fwd = Forwarder(ctx, config, DropCounter(log, "test"))
    fwd.acct.max_publishers = 50
    fwd.max_pending_acks = 40
    fwd.bind("127.0.0.1", 0, 0)
    peers = []
    try:
        for _ in range(300):
            peer = ctx.socket(zmq.DEALER)
            me = os.urandom(16)
            peer.setsockopt(zmq.ROUTING_ID, me)
            peer.setsockopt(zmq.LINGER, 0)
            peer.connect(fwd.frontend_endpoint)
            peer.send_multipart([b"k", header(me), batch.encode_body([b"x"])])
            peers.append(peer)
        biggest = 0

        def seen_all() -> bool:
            nonlocal biggest
            biggest = max(biggest, len(fwd.acks))
            return fwd.acct.records_in == len(peers)

        forward_until(fwd, seen_all, timeout=20)
        assert 0 < biggest < 40 + 256  # at most one burst past the bound before they go out
        assert len(fwd.acct.publishers) == 50
        assert fwd.acct.records_in == len(peers)  # every batch still counted in the totals
    finally:
        for peer in peers:
            peer.close()
        fwd.close()
        ctx.term()


@pytest.fixture
def tight(request):
    """A forwarder with the test's ``subscriber_grace`` and pipes of ``backend_hwm`` batches, a publisher DEALER,
    and a function making subscribers with small receive buffers."""
    grace, hwm = request.param
    ctx = zmq.Context()
    config = ExchangeConfig(monitor="tcp://127.0.0.1:1", max_batch_bytes=1 << 16, ack_interval=0.0, backend_hwm=hwm,
                            subscriber_grace=grace)
    fwd = Forwarder(ctx, config, DropCounter(log, "test"))
    fwd.bind("127.0.0.1", 0, 0)
    me = os.urandom(16)
    pub = ctx.socket(zmq.DEALER)
    pub.setsockopt(zmq.ROUTING_ID, me)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(fwd.frontend_endpoint)
    made = [pub]

    def subscriber(small: bool = True) -> zmq.Socket:
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        if small:  # little room on its side: the exchange's pipe fills soon once it stops reading
            sub.setsockopt(zmq.RCVHWM, 1)
            sub.setsockopt(zmq.RCVBUF, 4096)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(fwd.backend_endpoint)
        made.append(sub)
        deadline = time.monotonic() + 5.0
        while not sub.poll(10):  # the subscription reaches the XPUB: a beacon gets through
            assert time.monotonic() < deadline, "the subscription never reached the forwarder"
            fwd.read_subscriptions()
            fwd.beacon("x", 0, b"b" * 16)
        while sub.poll(20):
            sub.recv_multipart()
        return sub

    yield fwd, pub, me, subscriber
    for s in made:
        s.close()
    fwd.close()
    ctx.term()


def send_batches(pub, me, n: int, size: int = 60_000) -> list[list[bytes]]:
    sent = [[b"k", header(me, first=i + 1), batch.encode_body([b"%06d" % i + b"x" * size])] for i in range(n)]
    for frames in sent:
        pub.send_multipart(frames)
    return sent


def turn(fwd: Forwarder, seconds: float) -> None:
    """Run the forward loop's part for ``seconds``: retry what is held, forward what comes."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fwd.retry(time.monotonic())
        fwd.forward()
        time.sleep(0.001)


@pytest.mark.parametrize("tight", [(60.0, 10)], indirect=True)
def test_a_full_pipe_holds_the_batch_and_the_publishers_until_it_has_room(tight):
    fwd, pub, me, subscriber = tight
    sub = subscriber()
    sent = send_batches(pub, me, 300)  # 18 MB: more than the pipe and the socket buffers hold
    turn(fwd, 1.0)  # until the pipe and the socket buffers are full
    forwarded = fwd.acct.records_in
    turn(fwd, 0.3)  # held, within the grace: nothing more is read from the publisher
    assert fwd.held is not None and fwd.acct.records_in == forwarded < 300
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 300 and time.monotonic() < deadline:  # the subscriber reads: the exchange goes on
        if sub.poll(1):
            got.append(sub.recv_multipart())
        fwd.retry(time.monotonic())
        fwd.forward()
    assert [batch.parse_header(g[1]).first_seq for g in got] == [i + 1 for i in range(len(sent))]
    assert got == sent and (fwd.stalls, fwd.lossy_sends) == (0, 0)


@pytest.mark.parametrize("tight", [(0.3, 1000)], indirect=True)
def test_a_subscriber_that_stays_full_is_sent_past_after_the_grace_and_the_others_get_everything(tight):
    # pipes of 1,000 batches, and the keen subscriber (the usual buffers on its side) reads in a thread of its
    # own as fast as batches come. Until the stuck one's pipe is full, nothing is sent that a pipe cannot take;
    # after the grace the exchange sends past full pipes, and a pipe the exchange has not yet seen read (ZeroMQ
    # tells it every half a pipe) may miss some too: what the dropping backend always did
    fwd, pub, me, subscriber = tight
    stuck, keen = subscriber(), subscriber(small=False)
    sent = send_batches(pub, me, 1300)  # 78 MB: more than the stuck one's pipe and socket buffers hold
    got: list[int] = []

    def read() -> None:  # the keen socket is handed over to this thread until the test closes it
        deadline = time.monotonic() + 30
        try:
            while len(got) < len(sent) and time.monotonic() < deadline:
                if keen.poll(10):
                    got.append(batch.parse_header(keen.recv_multipart()[1]).first_seq)
        except zmq.ZMQError:  # closed
            pass

    reader = threading.Thread(target=read)
    reader.start()
    held_at = 0  # the batch held when the grace ran out (the pipes may fill and empty before)
    deadline = time.monotonic() + 10
    while fwd.acct.records_in < len(sent) and time.monotonic() < deadline:
        fwd.retry(time.monotonic())
        fwd.forward()
        if fwd.held is not None and not fwd.stalls:
            held_at = fwd.held[1].first_seq
        time.sleep(0.0005)
    assert fwd.acct.records_in == len(sent)  # the stuck subscriber did not stop the exchange
    wait_for = time.monotonic() + 5
    while got[-1:] != [len(sent)] and time.monotonic() < wait_for:  # the keen one reads what is under way
        time.sleep(0.01)
    keen.close()  # its reader thread gives up
    reader.join()
    assert held_at > 500 and got[:held_at - 1] == list(range(1, held_at))  # nothing lost before the grace
    assert got == sorted(set(got)) and len(got) > 0.9 * len(sent)
    # one wait of the grace for the stuck subscriber, then past it without waiting again
    assert fwd.stalls == 1 and fwd.lossy_sends > 0 and fwd.held is None
