"""CURVE at the exchanges, end to end: real exchange and monitor processes serving with the cluster's key, clients
with keys of the keyring, a stranger with none."""

from __future__ import annotations

import os

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


def test_a_key_of_the_keyring_publishes_and_subscribes_and_a_stranger_hears_nothing(make_cluster, secured):
    exchange_args, curve = secured
    cluster = make_cluster(exchanges=1, exchange_args=exchange_args)
    alice = client.connect(cluster.monitor_endpoint, publisher_config=client.PublisherConfig(curve=curve("alice")),
                           subscriber_config=client.SubscriberConfig(curve=curve("alice")))
    stranger = client.connect(cluster.monitor_endpoint,
                              subscriber_config=client.SubscriberConfig(curve=curve("stranger"), connect_timeout=2.0))
    try:
        sub = alice.subscriber(b"k")
        with pytest.raises(RoQError, match="refused this subscriber.s key at the CURVE handshake"):
            stranger.subscriber(b"")
        pub = alice.publisher()
        for i in range(2000):
            pub.send(b"k.%d" % (i % 3), b"%d" % i)
        pub.flush(10)
        got = []
        while len(got) < 2000:
            msg = sub.recv(timeout=5)
            assert msg is not None, f"{len(got)} of 2000 arrived"
            got.append(int(msg.payload))
        assert got == list(range(2000)) and sub.stats().gaps == 0
    finally:
        alice.close()
        stranger.close()
    log = open(os.path.join(cluster.log_dir, "exchange-x1.log")).read()
    assert "CURVE on, 1 keys may connect" in log and "refused: unknown key" in log
