"""CURVE at the exchanges, end to end: real exchange and monitor processes serving with the cluster's key, clients
with keys of the keyring, a stranger with none."""

from __future__ import annotations

import os
import shutil

import pytest

import client
from roq import keys
from roq.config import CurveClient
from roq.errors import RoQError


@pytest.fixture
def secured(tmp_path):
    """Keys: the cluster's server pair, alice's (in the keyring), a stranger's (not)."""
    secrets, ring = tmp_path / "secrets", tmp_path / "ring"
    pairs = {name: keys.new_keypair(str(secrets), name) for name in ("cluster", "alice", "stranger")}
    ring.mkdir()
    os.link(pairs["alice"].public_path, ring / "alice.key")

    def curve(name: str) -> CurveClient:
        return CurveClient(pairs["cluster"].public.decode(), pairs[name].public.decode(), pairs[name].secret.decode())

    return ["--secret-key", pairs["cluster"].secret_path, "--keyring", str(ring)], curve


def credentials(name: str, tmp_path) -> str:
    """A client's credentials directory: its own secret key and the cluster's public key."""
    secrets, mine = tmp_path / "secrets", tmp_path / f"credentials-{name}"
    mine.mkdir(mode=0o700)
    shutil.copy(secrets / f"{name}.key_secret", mine / f"{name}.key_secret")
    shutil.copy(secrets / "cluster.key", mine / "cluster.key")
    return str(mine)


def exchanged(pub, sub, n: int, keys: int = 1) -> list[int]:
    """Publish ``n`` numbered records over ``keys`` keys "k.I", flush; the numbers ``sub`` received, in order."""
    for i in range(n):
        pub.send(b"k.%d" % (i % keys), b"%d" % i)
    pub.flush(10)
    got: list[int] = []
    while len(got) < n:
        msg = sub.recv(timeout=5)
        assert msg is not None, f"{len(got)} of {n} arrived"
        got.append(int(msg.payload))
    return got


def test_a_key_of_the_keyring_publishes_and_subscribes_and_a_stranger_hears_nothing(make_cluster, secured, tmp_path):
    exchange_args, curve = secured
    cluster = make_cluster(exchanges=1, exchange_args=exchange_args)
    alice = client.connect(cluster.monitor_endpoint, credentials=credentials("alice", tmp_path))
    stranger = client.connect(cluster.monitor_endpoint,
                              subscriber_config=client.SubscriberConfig(curve=curve("stranger"), connect_timeout=2.0))
    try:
        sub = alice.subscriber(b"k")
        with pytest.raises(RoQError, match="refused this subscriber.s key at the CURVE handshake"):
            stranger.subscriber(b"")
        stranger_pub = client.connect(cluster.monitor_endpoint,
                                      publisher_config=client.PublisherConfig(curve=curve("stranger")))
        try:
            with pytest.raises(RoQError, match="refused this publisher.s key at the CURVE handshake"):
                pub = stranger_pub.publisher()
                pub.send(b"k", b"let me in")
                pub.flush(5)
        finally:
            stranger_pub.close()
        assert exchanged(alice.publisher(), sub, 2000, keys=3) == list(range(2000)) and sub.stats().gaps == 0
    finally:
        alice.close()
        stranger.close()
    log = open(os.path.join(cluster.log_dir, "exchange-x1.log")).read()
    assert "CURVE on, 1 keys may connect" in log and "refused: unknown key" in log


def test_garbage_and_strange_keys_at_a_curve_exchange_kill_nothing_and_lose_nothing(make_cluster, secured):
    import random

    import psutil
    import zmq

    from simulation import fuzz

    exchange_args, curve = secured
    cluster = make_cluster(exchanges=1, exchange_args=exchange_args)
    pid = cluster.exchanges["x1"].pid
    where = cluster.status()["exchanges"][0]
    targets = [fuzz.Target("frontend", where["frontend"], "frontend"),
               fuzz.Target("backend", where["backend"], "backend")]
    tally = fuzz.sweep(targets, "default")
    for seed in range(5):
        tally.counts.update({k: tally.counts.get(k, 0) + v
                             for k, v in fuzz.fuzz_round(targets, seed, "default").counts.items()})
    # CURVE handshakes with keys the keyring does not hold, and with a wrong server key, each sending garbage
    rng = random.Random(7)
    ctx = zmq.Context()
    strangers = []
    try:
        for i in range(20):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            public, secret = zmq.curve_keypair()
            mine = curve("alice")
            sock.curve_serverkey = mine.server_key.encode() if i % 2 else zmq.curve_keypair()[0]
            sock.curve_publickey, sock.curve_secretkey = public, secret
            sock.connect(where["frontend"] if i % 4 < 2 else where["backend"])
            sock.send_multipart([rng.randbytes(rng.choice((1, 52, 300))) for _ in range(rng.randint(1, 4))],
                                zmq.NOBLOCK)
            strangers.append(sock)
        alice = client.connect(cluster.monitor_endpoint,
                               publisher_config=client.PublisherConfig(curve=curve("alice")),
                               subscriber_config=client.SubscriberConfig(curve=curve("alice")))
        try:
            sub = alice.subscriber(b"")
            assert exchanged(alice.publisher(), sub, 1000) == list(range(1000))
        finally:
            alice.close()
    finally:
        for sock in strangers:
            sock.close()
        ctx.term()
    assert psutil.pid_exists(pid) and cluster.exchanges["x1"].pid == pid  # the same process, serving
    print(f"sent {tally.total:,} pieces of garbage and 20 strangers' handshakes")
    log = open(os.path.join(cluster.log_dir, "exchange-x1.log")).read()
    assert log.count("refused: unknown key") >= 1  # counted (the log line is rate-limited)
