"""What an exchange owes its publishers: one acknowledgement per connection, and per relayed publisher on a
link's connection, also when the journal's acknowledgements are relayed to them (real sockets on loopback)."""

from __future__ import annotations

import os

import zmq

from exchange._acks import Acks, owed_to
from roq.wire import batch


def test_a_journals_acknowledgements_reach_each_publisher_on_its_connection_relayed_ones_by_name():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    conn = os.urandom(16)
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.ROUTING_ID, conn)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    try:
        dealer.send(b"hello")  # the ROUTER knows the connection once something came on it
        assert router.poll(5000) and router.recv_multipart()[0] == conn
        acks = Acks(router, interval=0.0)
        mine, relayed = os.urandom(16), os.urandom(16)
        plain = batch.parse_header(batch.pack_header(batch.DATA, mine, 1, 1))
        across = batch.parse_header(batch.pack_header(batch.DATA, relayed, 1, 1, flags=batch.FLAG_RELAYED))
        assert owed_to(conn, plain) == conn and owed_to(conn, across) == (conn, relayed)
        acks.via(mine, owed_to(conn, plain))
        acks.via(relayed, owed_to(conn, across))
        acks.relay([(mine, 5), (relayed, 9), (os.urandom(16), 3)])  # the last: never heard of, skipped
        acks.send()
        frames = []
        while dealer.poll(2000) and len(frames) < 2:
            frames.append(dealer.recv())
        assert sorted(frames, key=len) == [batch.encode_ack(5), batch.encode_relayed_ack(relayed, 9)]
        assert acks.owed == {}
    finally:
        dealer.close(0)
        router.close(0)
        ctx.term()


def test_publishers_held_back_hear_their_latest_acknowledgement_again_from_the_last_ones_acknowledged():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealers = []
    try:
        for _ in range(3):
            d = ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.ROUTING_ID, os.urandom(16))
            d.connect(f"tcp://127.0.0.1:{port}")
            d.send(b"hello")
            assert router.poll(5000)
            router.recv_multipart()
            dealers.append(d)
        acks = Acks(router, interval=0.0, limit=2)  # remembers the last two connections acknowledged
        ids = [d.getsockopt(zmq.ROUTING_ID) for d in dealers]
        for seq, ident in enumerate(ids, start=1):
            acks.owed[ident] = 10 * seq
            acks.send()
        for d, seq in zip(dealers, (10, 20, 30)):
            assert d.poll(2000) and d.recv() == batch.encode_ack(seq)
        acks.remind()
        assert dealers[0].poll(300) == 0  # the oldest is forgotten
        for d, seq in zip(dealers[1:], (20, 30)):
            assert d.poll(2000) and d.recv() == batch.encode_ack(seq)
        assert acks.owed == {} and acks.latest == {ids[1]: 20, ids[2]: 30}
    finally:
        for d in dealers:
            d.close(0)
        router.close(0)
        ctx.term()
