"""Garbage at every socket of the exchange and the monitor: counted, answered, and harmless."""

from __future__ import annotations

import os
import socket
import time

import bson
import zmq

from roq.wire import batch, control
from simulation.audit import compare

IDENTITY = b"garbage-sender!!"  # 16 bytes, like a publisher id
ZMTP_BAD_MECHANISM = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"GARBAGE".ljust(20, b"\x00") + b"\x00" * 32


def raw_garbage(endpoint: str) -> int:
    """Open TCP connections that send things that are not ZeroMQ.

    Returns how many must fail the ZeroMQ handshake: random bytes may also pass for a legacy
    ZMTP/1.0 peer and arrive as a (malformed, also counted) message, so only the greeting with an
    unknown security mechanism is certain.
    """
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    for payload in (os.urandom(300), ZMTP_BAD_MECHANISM, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 5):
        with socket.create_connection((host, int(port)), timeout=2) as conn:
            conn.sendall(payload)
            time.sleep(0.05)
    return 1


def header(kind=batch.DATA, publisher=IDENTITY, first=1, count=1, version=batch.VERSION):
    return batch.HEADER.pack(version, kind, 0, count, publisher, 0, first, 0, 0)


def bad_batches() -> list[list[bytes]]:
    good_body = batch.encode_body([b"x"])
    return [
        [b"only one frame"],
        [b"k", b"two frames"],
        [b"k", b"short header", good_body],
        [b"k", header(version=9), good_body],
        [b"k", header(publisher=b"someone-else-!!!"), good_body],
        [b"k", header(count=5), b"abc"],
        [b"k", header(count=0), b""],
        [b"k", header(), b"x" * 100_000],  # over the exchange's 64 KB bound
        [batch.CONTROL_TOPIC, header(kind=batch.MARKER, count=0), b"a marker has no body"],
        [b"k", header(kind=batch.BEACON), good_body],
        [b"k", header(kind=77), good_body],
        [b"k", header(), good_body, b"extra", b"frames"],
        [b"k", header(first=2**64 - 1, count=2), batch.encode_body([b"x", b"y"])],  # seq beyond 64 bits
    ]


def bad_requests() -> list[tuple[list[bytes], int | None]]:
    """(frames, expected RESULT of the reply or None when no reply is due)."""
    R = control.Result
    return [
        ([os.urandom(50)], R.BAD_REQUEST),
        ([b""], R.BAD_REQUEST),
        ([bson.encode({"QName": "q"})], R.BAD_REQUEST),
        ([bson.encode({"CMD": 4242})], R.UNKNOWN_COMMAND),
        ([bson.encode({"CMD": 5, "exchange": 7, "frontend": "", "backend": "", "pid": 1})], R.BAD_REQUEST),
        ([bson.encode({"CMD": 2, "publisher": ["not", "text"]})], R.BAD_REQUEST),
        ([control.encode(control.Shutdown("not yours"))], R.UNKNOWN_COMMAND),
        ([b"a", b"b", b"c"], None),
    ]


def test_garbage_everywhere_while_traffic_flows(make_cluster, loads):
    cluster = make_cluster(exchanges=1, exchange_args=["--max-batch-bytes", "65536", "--kpi-period", "0.5"])
    m = cluster.monitor_endpoint
    sub = loads.start("subscribe", m, "--idle-exit", "4")
    pub = loads.start("publish", m, "--rate", "2000", "--duration", "60", "--keys", "good")
    x = cluster.wait_for(lambda s: s.exchanges[0].records_per_s > 500, 10, "traffic").exchanges[0]

    handshakes = raw_garbage(x.frontend) + raw_garbage(x.backend)
    monitor_handshakes = raw_garbage(m)

    ctx = zmq.Context()
    sockets = []

    def socket_of(kind, endpoint):
        sock = ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sockets.append(sock)
        if kind == zmq.DEALER:
            sock.setsockopt(zmq.ROUTING_ID, IDENTITY)
        sock.connect(endpoint)
        return sock

    try:
        dealer = socket_of(zmq.DEALER, x.frontend)
        frames = bad_batches()
        for f in frames:
            dealer.send_multipart(f)
        socket_of(zmq.XSUB, x.backend).send(b"\x07 not a subscription")

        admin = socket_of(zmq.DEALER, m)
        for request, result in bad_requests():
            admin.send_multipart(request)
            if result is not None:
                assert admin.poll(5000), f"no reply to {request!r:.60}"
                reply = control.decode(admin.recv())
                assert isinstance(reply, control.Reply) and reply.result == result, (request, reply)
                assert reply.comment
        # beyond the monitor's message bound: ZeroMQ drops the connection
        socket_of(zmq.DEALER, m).send(b"\x00" * (2 << 20))

        def counted(s):
            print("exchange dropped", s.exchanges[0].dropped, "monitor dropped", s.count("dropped_messages"))
            return (s.exchanges[0].dropped >= len(frames) + handshakes
                    and s.count("dropped_messages") >= len(bad_requests()) + monitor_handshakes)

        cluster.wait_for(counted, 10, "every bad input counted", interval=0.5)
    finally:
        for sock in sockets:
            sock.close()
        ctx.term()

    assert cluster.monitor.alive() and all(c.alive() for c in cluster.exchanges.values())
    assert cluster.status().exchanges[0].records_per_s > 500  # still carrying the good traffic
    report = loads.report(pub, stop=True)
    audit = compare(loads.report(sub)["audit"], {report["publisher"]: report["keys"]})
    assert audit["expected"] > 1000
    assert (audit["lost"], audit["duplicated"], audit["reordered"]) == (0, 0, 0), audit
