"""A real Subscriber against a scripted monitor and exchange on inproc sockets: what it delivers, what it drops."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

import client
from roq.wire import batch, control
PUB = b"p" * 16


class Backend:
    """An exchange's backend (a ROUTER) scripted by the test: it sends what it is given to every subscriber
    whose subscription it has read."""

    def __init__(self, ctx: zmq.Context, endpoint: str) -> None:
        self.socket = ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(endpoint)
        self.subscribers: list[bytes] = []
        self.progress: list[int] = []  # the messages each progress report said were read since the last one

    def send_multipart(self, frames: list[bytes]) -> None:
        self.read()
        for ident in self.subscribers:
            self.socket.send_multipart([ident, *frames])

    def read(self) -> None:
        """Take in the subscriptions and progress reports sent so far."""
        while self.socket.poll(0):
            ident, *subscription = self.socket.recv_multipart()  # (the ROUTER's id for the connection)
            progress = batch.progress_of(subscription)
            if progress is not None:
                self.progress.append(progress[1])
                continue
            assert batch.check_subscription(subscription)[1] == b""
            if ident not in self.subscribers:
                self.subscribers.append(ident)

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def peers():
    """A monitor (ROUTER) and an exchange's backend on inproc sockets, scripted by the test."""
    ctx = zmq.Context()
    monitor = ctx.socket(zmq.ROUTER)
    monitor.setsockopt(zmq.LINGER, 0)
    monitor.setsockopt(zmq.RCVTIMEO, 5000)
    monitor.bind("inproc://monitor")
    backend = Backend(ctx, "inproc://x1")
    yield ctx, monitor, backend
    monitor.close()
    backend.close()
    ctx.term()


def join(ctx, monitor, backend, **options):
    """A subscriber that joined exchange x1: the monitor listed it and its beacon was heard."""
    box = {}
    config = client.SubscriberConfig(**{"connect_timeout": 5.0, **options})
    joining = threading.Thread(target=lambda: box.setdefault("sub", client.Subscriber(
        context=ctx, monitor="inproc://monitor", prefix=b"", config=config)))
    joining.start()
    ident, body = monitor.recv_multipart()
    hello = control.decode(body)
    assert isinstance(hello, control.SubscriberHello) and hello.confirmed == []
    monitor.send_multipart([ident, control.encode(control.Exchanges(
        exchanges=[control.ExchangeInfo(exchange="x1", backend="inproc://x1")], lost=[]))])
    deadline = time.monotonic() + 5
    while joining.is_alive() and time.monotonic() < deadline:  # beacons until its subscription is live
        backend.send_multipart([batch.CONTROL_TOPIC, batch.pack_header(batch.BEACON, b"x" * 16, 1, 0), b"x1"])
        joining.join(0.02)
    assert "sub" in box, "the subscriber did not join"
    return box["sub"]


def data(first, payloads, key=b"k", epoch=0):
    header = batch.pack_header(batch.DATA, PUB, first, len(payloads), epoch=epoch, timestamp_ns=time.time_ns())
    return [key, header, batch.encode_body(payloads)]


def receive(sub, count):
    got, deadline = [], time.monotonic() + 5
    while len(got) < count and time.monotonic() < deadline:
        msg = sub.recv(timeout=0.1)
        if msg is not None:
            got.append(msg)
    return got


def test_malformed_frames_are_dropped_and_counted_and_good_ones_still_delivered(peers):
    ctx, monitor, backend = peers
    sub = join(ctx, monitor, backend)
    try:
        assert sub.stats().exchanges == 1
        good = batch.pack_header(batch.DATA, PUB, 9, 1)
        garbage = [
            [b"k", good],  # two frames
            [b"k", good[:-1], batch.encode_body([b"x"])],  # a short header
            [b"k", batch.HEADER.pack(2, batch.DATA, 0, 1, PUB, 0, 9, 0, 0), batch.encode_body([b"x"])],  # version 2
            [b"k", batch.HEADER.pack(1, 9, 0, 1, PUB, 0, 9, 0, 0), batch.encode_body([b"x"])],  # kind 9
            [b"k", batch.HEADER.pack(1, batch.DATA, 0, 0, PUB, 0, 9, 0, 0), b""],  # no records
            [b"k", batch.HEADER.pack(1, batch.DATA, 0, 1, PUB, 0, 0, 0, 0), batch.encode_body([b"x"])],  # seq 0
            [b"k", good, batch.encode_body([b"x"])[:-1]],  # a body shorter than its lengths say
            [batch.CONTROL_TOPIC, batch.HEADER.pack(1, batch.MARKER, 0, 1, PUB, 0, 9, 0, 0), b""],  # marker with records
            [batch.CONTROL_TOPIC, batch.pack_header(batch.BEACON, b"y" * 16, 1, 0), b"x2"],  # another's beacon
        ]
        backend.send_multipart(data(1, [b"a", b"b"]))
        for frames in garbage:
            backend.send_multipart(frames)
        backend.send_multipart(data(3, [b"c"]))
        got = receive(sub, 3)
        assert [(m.key, m.payload, m.publisher, m.seq) for m in got] == [
            (b"k", b"a", PUB.hex(), 1), (b"k", b"b", PUB.hex(), 2), (b"k", b"c", PUB.hex(), 3)]
        stats = sub.stats()
        assert (stats.dropped, stats.received, stats.gaps, stats.duplicates) == (len(garbage), 3, 0, 0)
    finally:
        sub.close()


def test_a_prepared_move_is_ready_once_the_target_is_heard(peers):
    ctx, monitor, backend = peers
    sub = join(ctx, monitor, backend)
    target = Backend(ctx, "inproc://x2")
    try:
        ident = None
        monitor.setsockopt(zmq.RCVTIMEO, 100)
        while ident is None:  # the hello that followed the beacon tells us its identity
            sub.recv(timeout=0.05)
            try:
                ident = monitor.recv_multipart()[0]
            except zmq.Again:
                pass
        monitor.send_multipart([ident, control.encode(control.Prepare(
            relocation=7, publisher=PUB.hex(), source="x1", target="x2", target_backend="inproc://x2"))])
        ready, deadline = None, time.monotonic() + 5
        while ready is None and time.monotonic() < deadline:
            target.send_multipart([batch.CONTROL_TOPIC, batch.pack_header(batch.BEACON, b"y" * 16, 1, 0), b"x2"])
            sub.recv(timeout=0.02)
            try:
                msg = control.decode(monitor.recv_multipart(zmq.NOBLOCK)[1])
            except zmq.Again:
                continue
            if isinstance(msg, control.Ready):
                ready = msg
        assert ready is not None and (ready.subscriber, ready.relocation) == (sub.name, 7)
        assert sub.stats().exchanges == 2
    finally:
        sub.close()
        target.close()


def test_recv_many_returns_batches_in_order_split_at_max_records_and_mixes_with_recv(peers):
    ctx, monitor, backend = peers
    sub = join(ctx, monitor, backend)
    try:
        assert sub.recv_many(timeout=0.05) == []
        backend.send_multipart(data(1, [b"a", b"b", b"c"]))
        backend.send_multipart(data(4, [b"d", b"e"], key=b"j"))
        backend.send_multipart(data(6, [b"f"]))
        assert receive(sub, 1)[0].payload == b"a"  # recv takes the first record of the first batch
        got = []
        deadline = time.monotonic() + 5
        while sum(map(len, got)) < 5 and time.monotonic() < deadline:
            got += sub.recv_many(max_records=3, timeout=0.1)
        assert [(b.key, b.payloads, b.publisher, b.first_seq, b.last_seq) for b in got] == [
            (b"k", [b"b", b"c"], PUB.hex(), 2, 3),  # the rest of the batch recv began
            (b"j", [b"d", b"e"], PUB.hex(), 4, 5), (b"k", [b"f"], PUB.hex(), 6, 6)]
        assert [m.seq for b in got for m in b] == [2, 3, 4, 5, 6]  # a batch iterates as messages
        backend.send_multipart(data(7, [b"g", b"h", b"i"]))
        first = []
        while not first and time.monotonic() < deadline:
            first = sub.recv_many(max_records=2, timeout=0.1)
        assert [(b.payloads, b.first_seq) for b in first] == [([b"g", b"h"], 7)]
        assert [(m.payload, m.seq) for m in receive(sub, 1)] == [(b"i", 9)]  # what recv_many left, recv takes
        assert sub.stats().received == 9
        with pytest.raises(ValueError):
            sub.recv_many(max_records=0)
    finally:
        sub.close()
    with pytest.raises(client.ClosedError):
        sub.recv_many()


def test_a_subscriber_reports_progress_while_the_application_takes_batches_or_waits_for_them(peers):
    ctx, monitor, backend = peers
    sub = join(ctx, monitor, backend)
    try:
        backend.read()
        assert backend.progress == []  # joining hands nothing to the application
        for first in range(1, 301, 3):
            backend.send_multipart(data(first, [b"a", b"b", b"c"]))
        started = time.monotonic()
        assert len(receive(sub, 300)) == 300  # 100 batches taken: at most one report per interval
        took = time.monotonic() - started
        backend.read()  # (inproc: what was sent is there)
        assert 1 <= len(backend.progress) <= 2 + took / client._feeds.PROGRESS_INTERVAL
        reports = len(backend.progress)
        assert sub.recv(timeout=0.3) is None  # waiting with nothing to take is keeping up: reported
        backend.read()
        assert len(backend.progress) > reports
        assert sum(backend.progress) >= 100  # by now every message read from the socket was counted
        reports = len(backend.progress)
        backend.read()
        assert len(backend.progress) == reports  # no thread: nothing is sent between the application's calls
    finally:
        sub.close()
