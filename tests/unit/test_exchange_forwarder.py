"""exchange forwarder: batches checked by roq.wire.batch, forwarded untouched, acknowledged; bounds in bytes and
tables a flood of identities cannot grow (real sockets on loopback)."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
import zmq

from exchange._forwarder import MIN_PUBLISHER_HWM, PUBLISHER_QUEUE_BYTES, Forwarder
from roq.wire import batch
from roq.config import MIN_SUBSCRIBER_HWM, ExchangeConfig
from roq.security.curve import Curve
from roq.runtime import DropCounter

log = logging.getLogger("test")


def subscribe(ctx: zmq.Context, fwd: Forwarder, prefix: bytes = b"", *, small: bool = False) -> zmq.Socket:
    """A subscriber's DEALER, subscribed to ``prefix`` at ``fwd``: its welcome beacon has arrived and been read.
    ``small``: little room on its side, so that the exchange's pipe fills soon once it stops reading."""
    sub = ctx.socket(zmq.DEALER)
    sub.setsockopt(zmq.ROUTING_ID, os.urandom(16))
    sub.setsockopt(zmq.LINGER, 0)
    if small:
        sub.setsockopt(zmq.RCVHWM, 1)
        sub.setsockopt(zmq.RCVBUF, 4096)
    sub.connect(fwd.backend_endpoint)
    sub.send_multipart(batch.pack_subscription(sub.getsockopt(zmq.ROUTING_ID), prefix))
    deadline = time.monotonic() + 5.0
    while not sub.poll(10):
        assert time.monotonic() < deadline, "the subscription never reached the forwarder"
        fwd.subscriptions.readable()
    welcome = sub.recv_multipart()
    assert welcome[0] == batch.CONTROL_TOPIC and batch.parse_header(welcome[1]).kind == batch.BEACON
    return sub


@pytest.fixture
def rig():
    """A forwarder bound on loopback, a publisher DEALER and a subscriber connected to it."""
    ctx = zmq.Context()
    config = ExchangeConfig(monitor="tcp://127.0.0.1:1", max_batch_bytes=1 << 16, ack_interval=0.0)
    fwd = Forwarder(ctx, config, DropCounter(log, "test"))
    fwd.bind("127.0.0.1", 0, 0)
    me = os.urandom(16)
    pub = ctx.socket(zmq.DEALER)
    pub.setsockopt(zmq.ROUTING_ID, me)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(fwd.frontend_endpoint)
    sub = subscribe(ctx, fwd)
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
        if fwd.frontend.poll(50) or fwd.held is not None:  # a held batch is tried again, as the loop does
            fwd.forward()


def received(fwd: Forwarder, sock: zmq.Socket, n: int) -> list[list[bytes]]:
    """The next ``n`` messages on ``sock``, forwarding while they are not all there."""
    got: list[list[bytes]] = []

    def all_there() -> bool:
        while len(got) < n and sock.poll(0):
            got.append(sock.recv_multipart())
        return len(got) == n

    forward_until(fwd, all_there)
    return got


def test_a_batch_goes_out_untouched_and_is_acknowledged(rig):
    fwd, pub, sub, me = rig
    frames = [b"k.1", header(me, first=1, count=2), batch.encode_body([b"a", b"bb"])]
    pub.send_multipart(frames)
    forward_until(fwd, lambda: fwd.acct.records_in == 2)
    assert sub.poll(2000) and sub.recv_multipart() == frames
    fwd.acks.send()
    assert pub.poll(2000) and batch.decode_ack(pub.recv()) == 2
    assert fwd.acct.publishers == {me: [2, len(frames[2])]} and fwd.acks.owed == {}


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
])
def test_a_bad_batch_is_dropped_under_its_reason_and_not_forwarded(rig, frames, reason):
    fwd, pub, sub, me = rig
    body = batch.encode_body([b"x"])
    frames = {
        "version": [b"k", batch.HEADER.pack(9, batch.DATA, 0, 1, me, 0, 1, 0, 0), body],
        "count": [b"k", header(me, count=5), b"abc"],
        "oversized": [b"k", header(me), b"x" * ((1 << 16) + 1)],
        "beacon": [batch.CONTROL_TOPIC, header(me, kind=batch.BEACON, count=0), b""],
    }.get(frames, frames) if isinstance(frames, str) else frames
    pub.send_multipart(frames)
    forward_until(fwd, lambda: fwd.drops.total == 1)
    assert fwd.drops.by_reason == {reason: 1}
    assert not sub.poll(200) and fwd.acks.owed == {}


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
        assert f"{expected} batches per subscriber" in fwd.describe_bounds()
        fwd.close()
    finally:
        ctx.term()


def test_once_everything_waiting_is_read_the_acknowledgement_goes_out_at_once():
    ctx = zmq.Context()
    config = ExchangeConfig(monitor="tcp://127.0.0.1:1", ack_interval=60.0)  # coalesced, they would wait a minute
    fwd = Forwarder(ctx, config, DropCounter(log, "test"))
    fwd.bind("127.0.0.1", 0, 0)
    pub = ctx.socket(zmq.DEALER)
    pub.setsockopt(zmq.LINGER, 0)
    me = os.urandom(16)
    try:
        pub.connect(fwd.frontend_endpoint)
        pub.send_multipart([b"k", header(me, count=3), batch.encode_body([b"a", b"b", b"c"])])
        forward_until(fwd, lambda: fwd.acct.records_in == 3)
        assert pub.poll(5000), "the publisher waits for an acknowledgement nothing else will come with"
        assert batch.decode_ack(pub.recv()) == 3
        assert fwd.acks.owed == {} and fwd.acks.due == float("inf")
    finally:
        pub.close()
        fwd.close()
        ctx.term()


def test_a_flood_of_identities_grows_neither_the_acks_nor_the_accounting():
    ctx = zmq.Context()
    config = ExchangeConfig(monitor="tcp://127.0.0.1:1", ack_interval=60.0)  # acks would wait a minute
    fwd = Forwarder(ctx, config, DropCounter(log, "test"))
    fwd.acct.max_publishers = 50
    fwd.acks.limit = 40
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
        send = fwd.acks.send

        def sending() -> None:  # the table at its fullest: just before what it owes goes out
            nonlocal biggest
            biggest = max(biggest, len(fwd.acks.owed))
            send()

        fwd.acks.send = sending  # type: ignore[method-assign]
        forward_until(fwd, lambda: fwd.acct.records_in == len(peers), timeout=20)
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
        sub = subscribe(ctx, fwd, small=small)
        made.append(sub)
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
    assert got == sent and (fwd.stalls, fwd.missed) == (0, 0)


@pytest.mark.parametrize("tight", [(0.3, 1000)], indirect=True)
def test_a_subscriber_that_stays_full_is_sent_past_after_the_grace_and_the_others_get_everything(tight):
    # pipes of 1,000 batches, and the keen subscriber (the usual buffers on its side) reads in a thread of its
    # own as fast as batches come. The exchange waits once for the stuck one, for the grace, then sends past
    # it alone: the keen one keeps its back-pressure and gets every batch, in order
    fwd, pub, me, subscriber = tight
    _stuck, keen = subscriber(), subscriber(small=False)  # the stuck one is there, and never reads
    sent = send_batches(pub, me, 1300)  # 78 MB: more than the stuck one's pipe and socket buffers hold
    got: list[int] = []

    def read() -> None:  # the keen socket is handed over to this thread until the test closes it
        deadline = time.monotonic() + 30
        try:
            while len(got) < len(sent) and time.monotonic() < deadline:
                if keen.poll(10):
                    frames = keen.recv_multipart()
                    if frames[0] != batch.CONTROL_TOPIC:
                        got.append(batch.parse_header(frames[1]).first_seq)
        except zmq.ZMQError:  # closed
            pass

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 15
    while fwd.acct.records_in < len(sent) and time.monotonic() < deadline:
        fwd.retry(time.monotonic())
        fwd.forward()
        time.sleep(0.0005)
    assert fwd.acct.records_in == len(sent)  # the stuck subscriber did not stop the exchange
    reader.join()
    keen.close()
    assert got == list(range(1, len(sent) + 1))  # the keen one: everything, once, in order
    # one wait of the grace for the stuck subscriber, then past it without waiting again
    behind = fwd.subscribers.all[0]
    assert fwd.stalls == 1 and fwd.missed == behind.missed > 0 and fwd.held is None
    assert fwd.subscribers.all[1].missed == 0


@pytest.mark.parametrize("tight", [(0.3, 10)], indirect=True)
def test_a_full_pipe_is_waited_for_while_its_subscriber_reports_progress_and_sent_past_once_it_stops(tight):
    fwd, pub, me, subscriber = tight
    sub = subscriber()
    ident = sub.getsockopt(zmq.ROUTING_ID)
    send_batches(pub, me, 300)
    deadline = time.monotonic() + 10
    while fwd.held is None:  # until its pipe and the socket buffers are full
        assert time.monotonic() < deadline, "the pipe never filled"
        turn(fwd, 0.05)
    forwarded = fwd.acct.records_in
    reporting_until = time.monotonic() + 4 * 0.3  # four graces of reports (and no reading)
    while time.monotonic() < reporting_until:
        sub.send_multipart(batch.pack_progress(ident, 1))
        fwd.subscriptions.readable()
        turn(fwd, 0.05)
    assert fwd.held is not None and (fwd.stalls, fwd.missed) == (0, 0)  # still waited for
    # and the publisher held back (the pipe may have taken a few more as ZeroMQ's I/O thread moved batches on into
    # the socket buffers, but never all)
    assert forwarded <= fwd.acct.records_in < 300
    deadline = time.monotonic() + 5
    while fwd.stalls == 0:  # no more reports: sent past once the grace has run from the last one
        assert time.monotonic() < deadline, "never sent past"
        fwd.subscriptions.readable()
        turn(fwd, 0.01)
    assert time.monotonic() - reporting_until >= 0.3 - 0.05
    assert fwd.subscribers.all[0].missed >= 1 and fwd.acct.records_in > forwarded
    sub.send_multipart(batch.pack_progress(os.urandom(16), 1))  # another's id: dropped and counted
    deadline = time.monotonic() + 5
    while not fwd.drops.by_reason.get("bad progress"):
        assert time.monotonic() < deadline, "a forged report was not dropped"
        fwd.subscriptions.readable()
        time.sleep(0.001)


@pytest.mark.parametrize("tight", [(60.0, 10)], indirect=True)
def test_a_turn_after_the_exchange_itself_did_not_run_sends_past_nobody(tight):
    # reports sent while the exchange was stopped may still be on their way in: the turn after the pause waits,
    # the next one decides
    fwd, pub, me, subscriber = tight
    subscriber()
    send_batches(pub, me, 300)
    turn(fwd, 1.0)  # until the pipe and the socket buffers are full
    now = time.monotonic()
    assert not fwd.retry(now) and fwd.stalls == 0  # held, within the grace
    assert not fwd.retry(now + 100.0) and fwd.stalls == 0  # 100 s later: the exchange was not running
    fwd.retry(now + 100.001)
    assert fwd.stalls == 1 and fwd.subscribers.all[0].missed == 1  # a turn later: no report came, sent past


def test_each_subscriber_gets_the_keys_of_its_prefix_and_every_marker(rig):
    fwd, pub, sub, me = rig
    ctx = zmq.Context.instance()
    orders = subscribe(ctx, fwd, b"orders.")
    try:
        frames = [[b"orders.1", header(me, first=1), batch.encode_body([b"a"])],
                  [b"stock.1", header(me, first=2), batch.encode_body([b"b"])],
                  [batch.CONTROL_TOPIC, header(me, kind=batch.MARKER, first=3, count=0), b""]]
        for f in frames:
            pub.send_multipart(f)
        # (a batch a subscriber's pipe could not take yet is held: out before anything is read)
        assert received(fwd, sub, len(frames)) == frames
        forward_until(fwd, lambda: fwd.acks.owed == {} and fwd.acct.records_in == 2 and fwd.held is None
                      and orders.poll(10))
        got = [orders.recv_multipart()]
        while orders.poll(200):
            got.append(orders.recv_multipart())
        assert got == [frames[0], frames[2]]
    finally:
        orders.close()


def test_a_subscriber_that_left_is_forgotten_and_a_repeated_subscription_kept_once(rig):
    fwd, pub, sub, me = rig
    ctx = zmq.Context.instance()
    other = subscribe(ctx, fwd)
    ident = other.getsockopt(zmq.ROUTING_ID)
    other.send_multipart(batch.pack_subscription(ident, b"k"))  # again, another prefix: the latest counts
    deadline = time.monotonic() + 5
    while fwd.subscribers.get(ident).prefix != b"k":
        assert time.monotonic() < deadline
        fwd.subscriptions.readable()
    assert len(fwd.subscribers) == 2
    other.close()
    deadline = time.monotonic() + 5
    while len(fwd.subscribers) == 2:  # a beacon finds its connection gone
        assert time.monotonic() < deadline, "the subscriber that left is still there"
        fwd.subscriptions.beacon()
        time.sleep(0.01)
    assert fwd.subscribers.get(ident) is None


@pytest.mark.parametrize("frames, reason", [
    ([b"x"], "bad subscription"),
    ([batch.CONTROL_TOPIC, b"short", b""], "bad header"),
    ("data kind", "bad subscription"),
    ("not control", "bad subscription"),
])
def test_a_bad_subscription_is_dropped_under_its_reason(rig, frames, reason):
    fwd, pub, sub, me = rig
    ctx = zmq.Context.instance()
    peer = ctx.socket(zmq.DEALER)
    ident = os.urandom(16)
    peer.setsockopt(zmq.ROUTING_ID, ident)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(fwd.backend_endpoint)
    frames = {
        "data kind": [batch.CONTROL_TOPIC, batch.pack_header(batch.DATA, ident, 1, 1), b""],
        "not control": [b"k", batch.pack_header(batch.SUBSCRIBE, ident, 0, 0), b""],
    }.get(frames, frames) if isinstance(frames, str) else frames
    try:
        peer.send_multipart(frames)
        deadline = time.monotonic() + 5
        while fwd.drops.total == 0:
            assert time.monotonic() < deadline
            fwd.subscriptions.readable()
            time.sleep(0.005)
        assert fwd.drops.by_reason == {reason: 1} and len(fwd.subscribers) == 1
        assert not peer.poll(100)  # no welcome beacon
    finally:
        peer.close()


# ---------------------------------------------------------------------- CURVE: who may connect, and as whom


@pytest.fixture
def secure(tmp_path):
    """A forwarder serving CURVE with the ZAP server of its context, alice's and bob's keys in its keyring, a
    stranger's not; ``connect(kind, endpoint, pair, identity=None)`` makes a client socket of a pair."""
    from roq.security import keys, zap
    pairs = {name: keys.new_keypair(str(tmp_path / "secrets"), name) for name in ("server", "alice", "bob", "stranger")}
    ring = tmp_path / "ring"
    ring.mkdir()
    for name in ("alice", "bob"):
        os.link(pairs[name].public_path, ring / f"{name}.key")
    ctx = zmq.Context()
    drops = DropCounter(log, "test")
    curve = Curve(ctx, pairs["server"].secret_path, str(ring), drops)
    server = curve.zap
    server.start()
    config = ExchangeConfig(monitor="tcp://127.0.0.1:1", max_batch_bytes=1 << 16, ack_interval=0.0)
    fwd = Forwarder(ctx, config, drops, curve=curve)
    fwd.bind("127.0.0.1", 0, 0)
    made = []

    def connect(kind: int, endpoint: str, pair, identity: bytes | None = None) -> zmq.Socket:
        """A CURVE client of ``pair`` (routing id ``identity``; b"": none, the ROUTER gives one)."""
        sock = ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.curve_serverkey = pairs["server"].public
        sock.curve_publickey, sock.curve_secretkey = pair.public, pair.secret
        if identity != b"":
            sock.setsockopt(zmq.ROUTING_ID, identity or zap.identity_for(pair.public))
        sock.connect(endpoint)
        made.append(sock)
        return sock

    def turn(until, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, "timed out"
            if server.socket.poll(1):
                server.readable()
            fwd.subscriptions.readable()
            fwd.forward()

    yield fwd, pairs, connect, turn, server
    for sock in made:
        sock.close()
    server.close()
    fwd.close()
    ctx.term()


def test_with_curve_a_key_of_the_keyring_publishes_and_subscribes(secure):
    from roq.security import zap
    fwd, pairs, connect, turn, server = secure
    sub_id = zap.identity_for(pairs["bob"].public)
    sub = connect(zmq.DEALER, fwd.backend_endpoint, pairs["bob"], sub_id)
    sub.send_multipart(batch.pack_subscription(sub_id, b""))
    turn(lambda: sub.poll(0))  # the welcome beacon
    assert sub.recv_multipart()[0] == batch.CONTROL_TOPIC
    me = zap.identity_for(pairs["alice"].public)
    pub = connect(zmq.DEALER, fwd.frontend_endpoint, pairs["alice"], me)
    frames = [b"k", header(me), batch.encode_body([b"sealed"])]
    pub.send_multipart(frames)
    turn(lambda: sub.poll(0))
    assert sub.recv_multipart() == frames and server.accepted == 2 and fwd.drops.total == 0


def test_with_curve_a_stranger_gets_nowhere_and_an_id_borrowed_from_another_key_is_dropped(secure):
    # the forgery: a connection claiming a real publisher's id sends a batch with a huge sequence number; it
    # must not reach the subscriber (which would then take the real publisher's records for duplicates)
    from roq.security import zap
    fwd, pairs, connect, turn, server = secure
    sub_id = zap.identity_for(pairs["bob"].public)
    sub = connect(zmq.DEALER, fwd.backend_endpoint, pairs["bob"], sub_id)
    sub.send_multipart(batch.pack_subscription(sub_id, b""))
    turn(lambda: sub.poll(0))
    sub.recv_multipart()
    alice_id = zap.identity_for(pairs["alice"].public)
    stranger = connect(zmq.DEALER, fwd.frontend_endpoint, pairs["stranger"], alice_id)
    stranger.send_multipart([b"k", header(alice_id, first=10**9), batch.encode_body([b"forged"])], zmq.NOBLOCK)
    turn(lambda: server.refused.get("unknown key") == 1)
    forger = connect(zmq.DEALER, fwd.frontend_endpoint, pairs["bob"], alice_id)  # a key of the keyring, not hers
    forger.send_multipart([b"k", header(alice_id, first=10**9), batch.encode_body([b"forged"])])
    turn(lambda: fwd.drops.by_reason.get("forged id") == 1)
    # bob's id, as a subscriber, from another key: its connection waits unnamed (no handover), gets nothing
    thief = connect(zmq.DEALER, fwd.backend_endpoint, pairs["alice"], sub_id)
    thief.send_multipart(batch.pack_subscription(sub_id, b""))
    alice = connect(zmq.DEALER, fwd.frontend_endpoint, pairs["alice"], b"")  # the real one, as clients connect
    real = [[b"k", header(alice_id, first=i + 1), batch.encode_body([b"real %d" % i])] for i in range(3)]
    for frames in real:
        alice.send_multipart(frames)
    got = []
    turn(lambda: (got.append(sub.recv_multipart()) if sub.poll(0) else None) or len(got) == 3)
    assert got == real and not thief.poll(100)
    assert fwd.drops.by_reason == {"refused: unknown key": 1, "forged id": 1}
    assert fwd.acct.records_in == 3


@pytest.mark.parametrize("tight", [(0.3, 10)], indirect=True)
def test_with_a_journal_a_subscriber_that_stays_full_is_cut_off_told_where_the_journal_has_the_rest_and_comes_back(
        tight):
    """A durable queue's exchange sends past nobody: it cuts a full subscriber off after the grace and tells it,
    behind what its pipe holds, the journal offset from which it missed batches; a subscription that does not
    name the cut is not taken (the cut is told again); one that does brings it back, with its seam marked."""
    from exchange._journaling import JournalFeed

    fwd, pub, me, subscriber = tight
    ctx = zmq.Context.instance()
    journal = ctx.socket(zmq.ROUTER)
    journal.setsockopt(zmq.LINGER, 0)
    port = journal.bind_to_random_port("tcp://127.0.0.1")
    fwd.set_journal(JournalFeed(ctx, f"tcp://127.0.0.1:{port}", "always"))
    stuck = subscriber()
    ident = stuck.getsockopt(zmq.ROUTING_ID)
    send_batches(pub, me, 300)
    journaled = 0  # the stand-in journal: one record a batch, at offset seq - 1

    def journal_turn() -> list[list[bytes]]:
        nonlocal journaled
        other = []
        while journal.poll(0):
            source, *frames = journal.recv_multipart()
            h = batch.parse_header(frames[1])
            if h.kind != batch.DATA:
                other.append(frames)
                continue
            journaled = h.last_seq
            journal.send_multipart([source, batch.encode_journal_ack(1, [(me, h.last_seq)], journaled)])
        fwd.read_journal()
        return other

    deadline = time.monotonic() + 10
    while not fwd.subscriptions.cuts and time.monotonic() < deadline:
        fwd.retry(time.monotonic())
        fwd.forward()
        journal_turn()
        time.sleep(0.0005)
    assert fwd.subscriptions.cuts == 1 and fwd.missed == 0 and not fwd.subscribers.all
    cut = fwd.subscribers.cuts[ident]
    assert -1 <= cut.floor <= journaled  # (-1: held before the journal's first acknowledgement named its end)
    got, h = [], None
    while stuck.poll(500):  # what its pipe holds, then the cut (told once its pipe has room: each beacon tries)
        fwd.subscriptions.beacon()
        frames = stuck.recv_multipart()
        if frames[0] != batch.CONTROL_TOPIC:
            got.append(batch.parse_header(frames[1]).first_seq)
            continue
        h = batch.parse_header(frames[1])
        if h.kind == batch.CUT:
            break
    assert got == list(range(1, len(got) + 1)) and h is not None and h.kind == batch.CUT and frames[2] == b"x"
    # the next one is missed; a floor not known is the journal's start
    assert h.epoch == cut.tag and h.floor == max(cut.floor, 0) and cut.floor <= len(got)

    stuck.send_multipart(batch.pack_subscription(ident, b""))  # not naming the cut: not taken, told again
    deadline = time.monotonic() + 5
    while not stuck.poll(10):
        assert time.monotonic() < deadline, "the cut was not told again"
        fwd.subscriptions.readable()
    again = stuck.recv_multipart()
    assert batch.parse_header(again[1]).kind == batch.CUT and not fwd.subscribers.all

    stuck.send_multipart(batch.pack_subscription(ident, b"", rejoin=cut.tag))
    deadline = time.monotonic() + 5
    seams: list[list[bytes]] = []
    while not seams:
        assert time.monotonic() < deadline, "no seam for the subscriber that came back"
        fwd.subscriptions.readable()
        seams = journal_turn()
    assert [s.ident for s in fwd.subscribers.all] == [ident] and ident not in fwd.subscribers.cuts
    h = batch.parse_header(seams[0][1])
    assert h.kind == batch.SEAM and h.publisher == ident and seams[0][2] == b"x#%d" % cut.tag
    journal.close()


def test_with_curve_an_id_is_its_key_on_a_connection_the_router_named(secure):
    """Clients choose no routing id: the ids their messages name are what is checked. A batch naming another
    key's publisher, or a subscription naming another key's subscriber, is dropped as forged; one's own is
    forwarded and acknowledged on the connection it came on."""
    from roq.security import zap
    fwd, pairs, connect, turn, server = secure
    bob_sub = zap.identity_for(pairs["bob"].public)
    sub = connect(zmq.DEALER, fwd.backend_endpoint, pairs["bob"], b"")
    sub.send_multipart(batch.pack_subscription(bob_sub, b""))
    turn(lambda: sub.poll(0))
    assert sub.recv_multipart()[0] == batch.CONTROL_TOPIC
    alice_id = zap.identity_for(pairs["alice"].public)
    bob = connect(zmq.DEALER, fwd.frontend_endpoint, pairs["bob"], b"")
    bob.send_multipart([b"k", header(alice_id, first=10**9), batch.encode_body([b"forged"])])
    turn(lambda: fwd.drops.by_reason.get("forged id") == 1)
    spy = connect(zmq.DEALER, fwd.backend_endpoint, pairs["alice"], b"")
    spy.send_multipart(batch.pack_subscription(bob_sub, b""))  # bob's subscriber id, from alice's key
    turn(lambda: fwd.drops.by_reason.get("forged id") == 2)
    alice = connect(zmq.DEALER, fwd.frontend_endpoint, pairs["alice"], b"")
    frames = [b"k", header(alice_id, first=1, flags=batch.FLAG_ACK_NOW), batch.encode_body([b"real"])]
    alice.send_multipart(frames)
    turn(lambda: sub.poll(0))
    assert sub.recv_multipart() == frames and not spy.poll(100)
    turn(lambda: alice.poll(0))
    assert batch.decode_ack(alice.recv()) == 1 and not bob.poll(0)
    assert len(fwd.subscribers) == 1 and fwd.drops.total == 2


def test_with_curve_an_impostor_with_a_live_publishers_routing_id_takes_nothing_over(secure):
    """A second connection that presents a live connection's routing id (another key of the keyring) neither
    ends nor takes over the first: there is no handover. The real publisher's batches go on and are acknowledged."""
    from roq.security import zap
    fwd, pairs, connect, turn, server = secure
    bob_sub = zap.identity_for(pairs["bob"].public)
    sub = connect(zmq.DEALER, fwd.backend_endpoint, pairs["bob"], b"")
    sub.send_multipart(batch.pack_subscription(bob_sub, b""))
    turn(lambda: sub.poll(0))
    sub.recv_multipart()
    alice_id = zap.identity_for(pairs["alice"].public)
    alice = connect(zmq.DEALER, fwd.frontend_endpoint, pairs["alice"], alice_id)  # an older client: its own id
    alice.send_multipart([b"k", header(alice_id, first=1, flags=batch.FLAG_ACK_NOW), batch.encode_body([b"1"])])
    turn(lambda: alice.poll(0))
    assert batch.decode_ack(alice.recv()) == 1
    impostor = connect(zmq.DEALER, fwd.frontend_endpoint, pairs["bob"], alice_id)
    for i in range(5):
        impostor.send_multipart([b"k", header(alice_id, first=100 + i), batch.encode_body([b"x"])])
    for seq in (2, 3):
        alice.send_multipart([b"k", header(alice_id, first=seq, flags=batch.FLAG_ACK_NOW),
                              batch.encode_body([b"%d" % seq])])
        turn(lambda: alice.poll(0))
        assert batch.decode_ack(alice.recv()) == seq
    got = []
    turn(lambda: (got.append(sub.recv_multipart()) if sub.poll(0) else None) or len(got) == 3)
    assert [g[2] for g in got] == [batch.encode_body([b"%d" % i]) for i in (1, 2, 3)]
    assert not impostor.poll(100) and fwd.acct.records_in == 3


def test_a_subscriber_that_reconnects_is_served_on_its_new_connection_at_once(rig):
    """The table is keyed by connection: the same subscriber id on a new connection moves there."""
    fwd, pub, sub, me = rig
    ctx = zmq.Context.instance()
    ident = os.urandom(16)
    first = ctx.socket(zmq.DEALER)
    first.setsockopt(zmq.LINGER, 0)
    first.connect(fwd.backend_endpoint)
    first.send_multipart(batch.pack_subscription(ident, b"r"))
    forward_until(fwd, lambda: (fwd.subscriptions.readable() or True) and first.poll(0))
    assert first.recv_multipart()[0] == batch.CONTROL_TOPIC and len(fwd.subscribers) == 2
    second = ctx.socket(zmq.DEALER)  # the same subscriber again, before the first connection is seen closed
    second.setsockopt(zmq.LINGER, 0)
    second.connect(fwd.backend_endpoint)
    second.send_multipart(batch.pack_subscription(ident, b"r"))
    try:
        forward_until(fwd, lambda: (fwd.subscriptions.readable() or True)
                      and second.poll(0) and second.recv_multipart()[0] == batch.CONTROL_TOPIC)
        assert len(fwd.subscribers) == 2  # the rig's and this one, once
        frames = [b"r", header(me), batch.encode_body([b"x"])]
        pub.send_multipart(frames)
        forward_until(fwd, lambda: second.poll(0))
        assert second.recv_multipart() == frames and not first.poll(100)
    finally:
        first.close()
        second.close()


def test_a_link_relaying_many_publishers_on_one_connection_gets_an_acknowledgement_for_each(rig):
    fwd, pub, sub, me = rig
    origins = [os.urandom(16) for _ in range(3)]
    relayed = batch.FLAG_RELAYED
    for i, origin in enumerate(origins):
        pub.send_multipart([b"k", batch.pack_header(batch.DATA, origin, 10 * (i + 1), 2, flags=relayed),
                            batch.encode_body([b"a", b"b"])])
    pub.send_multipart([b"k", header(me, first=1, count=1), batch.encode_body([b"mine"])])  # its own, beside
    got: dict[bytes, int] = {}
    plain: list[int] = []
    deadline = time.monotonic() + 5.0
    while len(got) < 3 or not plain:
        assert time.monotonic() < deadline, (got, plain)
        fwd.forward()
        fwd.acks.send()
        while pub.poll(0):
            frame = pub.recv()
            if frame[1] == batch.RELAYED_ACK_KIND:
                publisher, seq = batch.decode_relayed_ack(frame)
                got[publisher] = seq
            else:
                plain.append(batch.decode_ack(frame))
    assert got == {origin: 10 * (i + 1) + 1 for i, origin in enumerate(origins)} and plain == [1]
    for _ in range(4):  # every batch reached the subscriber untouched, flag and all
        frames = sub.recv_multipart()
        assert frames[0] == b"k"
    assert fwd.acct.records_in == 7
