"""Publish/subscribe through real exchange and monitor processes, clients in this process."""

from __future__ import annotations

import time

import pytest

import client
from simulation.audit import compare


def drain(sub, expected: int, timeout: float = 15.0) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        msg = sub.recv(timeout=0.2)
        if msg is not None:
            got.append(msg)
    return got


def quiet(sub, wait: float = 0.5) -> list:
    """Whatever else arrives within ``wait`` seconds (expected: nothing)."""
    extra = []
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        msg = sub.recv(timeout=0.05)
        if msg is not None:
            extra.append(msg)
    return extra


def test_prefix_filtering_with_several_publishers_and_subscribers(make_cluster):
    cluster = make_cluster(address="127.0.0.12", exchanges=2)
    keys = [b"orders.eu", b"orders.us", b"stock.eu"]
    with client.connect(cluster.monitor_endpoint) as conn:
        subs = {p: conn.subscriber(prefix=p) for p in (b"", b"orders.", b"orders.eu", b"none")}
        pubs = [conn.publisher() for _ in range(3)]
        assert {p.stats()["exchange"] for p in pubs} == {"x1", "x2"}  # spread over both exchanges
        sent = []
        for i in range(3000):
            pub = pubs[i % 3]
            key = keys[(i // 7) % 3]
            payload = f"{i}".encode()
            pub.send(key, payload)
            sent.append((pub.name, key, payload))
        for pub in pubs:
            pub.flush()
        for prefix, sub in subs.items():
            want = [s for s in sent if s[1].startswith(prefix)]
            got = drain(sub, len(want))
            got += quiet(sub, 0.3)
            assert sorted((m.publisher, m.key, m.payload) for m in got) == sorted(want), prefix
            for name in {p.name for p in pubs}:
                seqs = [m.seq for m in got if m.publisher == name]
                assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
            stats = sub.stats()
            assert (stats.received, stats.gaps, stats.duplicates) == (len(want), 0, 0)
        assert subs[b""].stats().latency["count"] > 0


def test_the_batch_api_moves_every_record_once_in_order_beside_the_per_record_api(cluster):
    with client.connect(cluster.monitor_endpoint) as conn:
        many, one = conn.subscriber(prefix=b"b."), conn.subscriber(prefix=b"b.")
        pub = conn.publisher()
        sent = []
        for i in range(40):  # keys change between calls; calls of up to 5,000 records fill several batches
            key = b"b.%d" % (i % 3)
            payloads = [b"%d.%d" % (i, j) for j in range(i * 125)]
            pub.send_many(key, payloads)
            pub.send(key, b"one %d" % i)
            sent += [(key, p) for p in payloads] + [(key, b"one %d" % i)]
        pub.flush()
        batches, deadline = [], time.monotonic() + 15
        while sum(map(len, batches)) < len(sent) and time.monotonic() < deadline:
            batches += many.recv_many(max_records=7000, timeout=0.2)
        assert [(b.key, p) for b in batches for p in b.payloads] == sent
        seqs = [s for b in batches for s in range(b.first_seq, b.last_seq + 1)]
        assert seqs == list(range(1, len(sent) + 1))
        assert {b.publisher for b in batches} == {pub.name} and max(map(len, batches)) > 1
        assert [(m.key, m.payload) for m in drain(one, len(sent))] == sent  # the same, record by record
        assert many.recv_many(timeout=0.3) == [] and quiet(one, 0.1) == []
        assert (many.stats().received, many.stats().gaps, one.stats().received) == (len(sent), 0, len(sent))


def test_late_subscriber_sees_only_what_is_published_after_it_joined(cluster):
    with client.connect(cluster.monitor_endpoint) as conn:
        early = conn.subscriber()
        pub = conn.publisher()
        for i in range(500):
            pub.send(b"k", b"before %d" % i)
        pub.flush()
        assert len(drain(early, 500)) == 500
        late = conn.subscriber()
        for i in range(500):
            pub.send(b"k", b"after %d" % i)
        pub.flush()
        got = drain(late, 500) + quiet(late, 0.3)
        assert [m.payload for m in got] == [b"after %d" % i for i in range(500)]
        assert [m.payload for m in drain(early, 500)] == [b"after %d" % i for i in range(500)]
        assert late.stats().gaps == 0


def test_a_slow_subscriber_counts_its_gaps_instead_of_hiding_them(make_cluster, loads):
    cluster = make_cluster(exchanges=1, exchange_args=["--backend-hwm", "100"])
    m = cluster.monitor_endpoint
    fast = loads.start("subscribe", m, "--idle-exit", "3")
    # the slow one stalls for 3 s after 1,000 records: 24 MB arrive meanwhile (in batches of about 40
    # records, as the publisher is paced), far more than the exchange's queue (100 batches), its own
    # (20) and the kernel's buffers hold; then it reads on and meets the hole
    slow = loads.start("subscribe", m, "--pause-at", "1000", "--pause-for", "3", "--idle-exit", "3", "--rcvhwm", "20")
    pub = loads.report(loads.start("publish", m, "--rate", "8000", "--duration", "7", "--size", "1000"))
    sent = {pub["publisher"]: pub["keys"]}
    fast = loads.report(fast)
    assert compare(fast["audit"], sent) == {
        "expected": pub["sent"], "received": pub["sent"], "lost": 0, "dropped": 0, "undelivered": 0, "duplicated": 0,
        "reordered": 0}
    assert fast["stats"]["gaps"] == 0
    slow = loads.report(slow)
    holes = slow["audit"]["totals"]
    assert 1000 < slow["received"] < pub["sent"]
    assert slow["stats"]["gaps"] > 0
    assert slow["stats"]["lost"] == holes["lost"] > 0  # the client's count agrees with the audit's
    assert holes["duplicated"] == holes["reordered"] == 0


def test_send_validates_its_arguments(cluster):
    with client.connect(cluster.monitor_endpoint) as conn:
        pub = conn.publisher()
        with pytest.raises(TypeError):
            pub.send("text", b"x")
        with pytest.raises(client.ProtocolError):
            pub.send(b"k", b"x" * (5 << 20))
        pub.send(bytearray(b"k"), memoryview(b"fine"))
        pub.close()
        with pytest.raises(client.ClosedError):
            pub.send(b"k", b"late")


def test_buffer_full_policy_raise(cluster):
    with client.connect(cluster.monitor_endpoint) as conn:
        pub = conn.publisher(full_policy="raise", buffer_bytes=1 << 16, batch_bytes=1 << 12)
        with pytest.raises(client.BufferFullError):
            for _ in range(10_000):
                pub.send(b"k", b"x" * 100)


def test_connect_errors_are_clear():
    with pytest.raises(client.ConfigError):
        client.connect("127.0.0.1:5500")
    started = time.monotonic()
    with pytest.raises(client.BrokerConnectionError, match="did not answer"):
        client.connect("tcp://127.0.0.1:9", timeout=0.5)
    assert time.monotonic() - started < 3
