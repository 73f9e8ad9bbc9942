"""exchange: one exchange's loop in a thread between stand-in monitors: its reports, the host manager's command,
the monitor's orders (loopback sockets and a pipe)."""

from __future__ import annotations

import os
import threading
import time

import pytest
import zmq

from exchange import Exchange
from roq.wire import batch, control, pipe
from roq.config import ExchangeConfig
from roq.wire.ready import ExchangeReady
from tests.unit.standins import monitor_routers


def next_of(sock: zmq.Socket, kind: type, timeout: float = 5.0):
    """The next message of ``kind`` on a stand-in monitor (ROUTER) and its sender's identity."""
    deadline = time.monotonic() + timeout
    while sock.poll(max(1, int((deadline - time.monotonic()) * 1000))):
        ident, body = sock.recv_multipart()
        msg = control.decode(body)
        if isinstance(msg, kind):
            return ident, msg
    raise AssertionError(f"no {kind.__name__} within {timeout}s")


def beat_saying(sock: zmq.Socket, journal: str, timeout: float = 5.0) -> bytes:
    """Wait for a heartbeat that says the exchange feeds ``journal``; its sender's identity."""
    deadline = time.monotonic() + timeout
    while True:
        ident, beat = next_of(sock, control.Heartbeat, max(0.1, deadline - time.monotonic()))
        if beat.journal == journal:
            return ident
        assert time.monotonic() < deadline, f"heartbeats say journal {beat.journal!r}, not {journal!r}"


@pytest.fixture
def running():
    ctx = zmq.Context()
    (old, old_end), (new, new_end) = monitor_routers(ctx)
    r, w = os.pipe()
    config = ExchangeConfig(monitor=old_end, exchange_id="xu", heartbeat_interval=0.05, kpi_period=0.1,
                            ack_interval=0.0, commands=True)
    x = Exchange(config, context=ctx, commands_fd=r)
    x.start()
    thread = threading.Thread(target=x.serve, daemon=True)
    thread.start()
    yield x, thread, (old, old_end), (new, new_end), w
    for monitor in (old, new):  # a test that failed midway: stop it the way its monitor would
        if thread.is_alive() and monitor.poll(500):
            monitor.send_multipart([monitor.recv_multipart()[0], control.encode(control.Shutdown("teardown"))])
            thread.join(5)
    x.close()
    for s in (old, new):
        s.close()
    os.close(r)
    os.close(w)
    ctx.term()


def test_it_reports_follows_its_monitor_when_told_and_stops_when_told(running):
    x, thread, (old, _), (new, new_end), w = running
    assert x.ready_info() == ExchangeReady(pid=os.getpid(), id="xu", frontend=x.frontend_endpoint,
                                           backend=x.backend_endpoint)
    ident, beat = next_of(old, control.Heartbeat)
    assert (beat.exchange, beat.frontend, beat.pid, beat.draining) == ("xu", x.frontend_endpoint, os.getpid(), False)
    next_of(old, control.ExchangeKpi)

    os.write(w, b"\x00garbage first\xff")
    assert pipe.send(w, control.Retarget(monitor=new_end))
    ident, beat = next_of(new, control.Heartbeat)
    assert beat.exchange == "xu"

    new.send_multipart([ident, control.encode(control.KpiPeriod(1e9))])  # out of range: dropped
    new.send_multipart([ident, control.encode(control.Shutdown("test over"))])
    thread.join(5)
    assert not thread.is_alive()
    assert x.drops.by_reason.get("bad request") == 1 and x.drops.by_reason.get("garbage on the command pipe") == 1


def _clients(ctx: zmq.Context, x: Exchange, me: bytes) -> tuple[zmq.Socket, zmq.Socket]:
    """A publisher (id ``me``) and a subscriber to keys "k..." at ``x``, the subscription live."""
    pub, sub = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
    pub.setsockopt(zmq.ROUTING_ID, me)
    # no routing id of its own, as the client library: a second connection that presented the first one's id
    # while the exchange had not seen the first one go would be parked, and never hear its beacon
    for s in (pub, sub):
        s.setsockopt(zmq.LINGER, 0)
    sub.connect(x.backend_endpoint)
    sub.send_multipart(batch.pack_subscription(b"s" * 16, b"k"))
    pub.connect(x.frontend_endpoint)
    welcome = sub.recv_multipart() if sub.poll(5000) else [b""]  # the subscription is live
    assert welcome[0] == batch.CONTROL_TOPIC and welcome[2] == b"xu"
    return pub, sub


def _data(sub: zmq.Socket) -> list[bytes]:
    got = [batch.CONTROL_TOPIC]
    while got[0] == batch.CONTROL_TOPIC:  # past the beacons
        assert sub.poll(5000)
        got = sub.recv_multipart()
    return got


def test_it_reads_nobody_until_its_monitor_says_whether_the_queue_is_durable_then_forwards_and_acknowledges(running):
    x, thread, (old, _), _, _ = running
    ctx = zmq.Context()
    me = os.urandom(16)
    try:
        ident, beat = next_of(old, control.Heartbeat)
        assert beat.journal == "?"
        sub = ctx.socket(zmq.DEALER)
        sub.setsockopt(zmq.LINGER, 0)
        sub.connect(x.backend_endpoint)
        sub.send_multipart(batch.pack_subscription(b"s" * 16, b"k"))
        assert not sub.poll(300)  # not served yet
        sub.close()
        old.send_multipart([ident, control.encode(control.Journaling())])
        beat_saying(old, "none")
        pub, sub = _clients(ctx, x, me)
        frames = [b"k.1", batch.pack_header(batch.DATA, me, 1, 1), batch.encode_body([b"hello"])]
        pub.send_multipart(frames)
        assert _data(sub) == frames
        assert pub.poll(5000) and batch.decode_ack(pub.recv()) == 1
        ident, kpi = next_of(old, control.ExchangeKpi)
        while kpi.records_in == 0:
            ident, kpi = next_of(old, control.ExchangeKpi)
        assert kpi.records_in == 1 and kpi.publishers == [control.PublisherRate(me.hex(), 1, len(frames[2]))]
        old.send_multipart([ident, control.encode(control.Shutdown("test over"))])
        thread.join(5)
        assert not thread.is_alive()
        pub.close()
        sub.close()
    finally:
        ctx.destroy(linger=0)


def test_with_a_journal_a_publisher_is_acknowledged_only_with_what_the_journal_acknowledged(running):
    """A stand-in journal: every batch reaches it before the subscriber; the publisher's acknowledgement waits
    for the journal's; a new incarnation gets every batch it has not acknowledged again."""
    x, thread, (old, _), _, _ = running
    ctx = zmq.Context()
    me = os.urandom(16)
    journal = ctx.socket(zmq.ROUTER)
    journal.setsockopt(zmq.LINGER, 0)
    port = journal.bind_to_random_port("tcp://127.0.0.1")
    try:
        ident, _ = next_of(old, control.Heartbeat)
        old.send_multipart([ident, control.encode(control.Journaling(f"tcp://127.0.0.1:{port}", "always"))])
        pub, sub = _clients(ctx, x, me)
        sent = []
        for seq in (1, 2, 3):
            frames = [b"k.1", batch.pack_header(batch.DATA, me, seq, 1), batch.encode_body([b"r%d" % seq])]
            pub.send_multipart(frames)
            sent.append(frames)
            assert journal.poll(5000)
            source, *got = journal.recv_multipart()
            assert got == frames and source[:1] == b"\0"  # the journal's ROUTER named the connection
            assert _data(sub) == frames
        assert not pub.poll(200)  # the exchange does not acknowledge by itself
        journal.send_multipart([source, batch.encode_journal_ack(7, [(me, 2)])])
        assert pub.poll(5000) and batch.decode_ack(pub.recv()) == 2
        ident = beat_saying(old, f"always tcp://127.0.0.1:{port}")
        journal.send_multipart([source, batch.encode_journal_ack(8, [(me, 2)])])  # started again: seq 3 resent
        assert journal.poll(5000)
        assert journal.recv_multipart()[1:] == sent[2]
        journal.send_multipart([source, batch.encode_journal_ack(8, [(me, 3)])])
        assert pub.poll(5000) and batch.decode_ack(pub.recv()) == 3
        journal.send_multipart([source, b"garbage"])
        deadline = time.monotonic() + 5
        while not x.drops.by_reason.get("bad journal acknowledgement") and time.monotonic() < deadline:
            time.sleep(0.01)  # (the exchange's thread counts it)
        assert x.drops.by_reason.get("bad journal acknowledgement") == 1
        old.send_multipart([ident, control.encode(control.Shutdown("test over"))])
        thread.join(5)
        assert not thread.is_alive()
        pub.close()
        sub.close()
    finally:
        ctx.destroy(linger=0)


def test_with_a_secret_key_it_serves_curve_and_refuses_an_unsafe_key_file(tmp_path):
    from roq.security import keys
    from roq.errors import ConfigError

    pair = keys.new_keypair(str(tmp_path / "secrets"), "server")
    ring = tmp_path / "ring"
    ring.mkdir()
    with pytest.raises(ConfigError, match="go together"):
        ExchangeConfig(monitor="tcp://127.0.0.1:1", secret_key=pair.secret_path)
    ctx = zmq.Context()
    try:
        config = ExchangeConfig(monitor="tcp://127.0.0.1:1", secret_key=pair.secret_path, keyring=str(ring))
        x = Exchange(config, context=ctx)
        x.start()
        assert x.forwarder.frontend.curve_server and x.forwarder.backend.curve_server and x.curve is not None
        x.close()
        os.chmod(pair.secret_path, 0o644)
        with pytest.raises(ConfigError, match="chmod 600"):
            Exchange(config, context=ctx)
    finally:
        ctx.term()


def test_waiting_for_a_journal_to_be_named_is_not_busy_time(running):
    """A durable queue with no journal known yet: the exchange reads no publisher and waits for its monitor;
    its KPIs say it is idle, not saturated (a monitor would scale out on a busy exchange)."""
    x, thread, (old, _), _, _ = running
    ctx = zmq.Context()
    try:
        ident, _ = next_of(old, control.Heartbeat)
        old.send_multipart([ident, control.encode(control.Journaling(durability="always"))])
        beat_saying(old, "always")
        pub, _sub = _clients(ctx, x, os.urandom(16))
        pub.send_multipart([b"k", batch.pack_header(batch.DATA, pub.getsockopt(zmq.ROUTING_ID), 1, 1),
                            batch.encode_body([b"waiting"])])
        kpis = []
        while len(kpis) < 5:  # half a second of KPI periods
            kpis.append(next_of(old, control.ExchangeKpi)[1])
        assert max(k.busy for k in kpis[1:]) < 0.5, [k.busy for k in kpis]
        assert sum(k.records_in for k in kpis) == 0
    finally:
        ctx.destroy(linger=0)
