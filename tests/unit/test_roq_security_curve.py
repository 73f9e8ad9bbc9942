"""roq.security.curve: a cluster process's CURVE, with real handshakes on loopback."""

from __future__ import annotations

import logging
import os
import time

import pytest
import zmq

from roq.security import keys, zap
from roq.security.curve import Curve
from roq.errors import ConfigError
from roq.loop import Loop
from roq.runtime import DropCounter
from roq.server import Dispatcher, RouterServer
from roq.wire import control
@pytest.fixture
def ring(tmp_path):
    cluster = keys.ClusterKeys(str(tmp_path / "keys"))
    cluster.ensure()
    return cluster


def test_no_key_is_plaintext_and_a_key_needs_its_keyring(ring):
    ctx = zmq.Context()
    drops = DropCounter(logging.getLogger("test"), "test")
    try:
        assert Curve.of(ctx, "", "", drops) is None
        with pytest.raises(ConfigError, match="go together"):
            Curve.of(ctx, ring.secret_key, "", drops)
        os.chmod(ring.secret_key, 0o640)
        with pytest.raises(ConfigError, match="chmod 600"):
            Curve.of(ctx, ring.secret_key, ring.keyring, drops)
    finally:
        ctx.term()


def test_the_cluster_talks_as_cluster_a_client_of_the_keyring_as_itself_and_a_removed_key_is_refused(ring):
    """A ROUTER served by the process's CURVE: its peers' requests carry their principals; a client's key taken
    out of the keyring opens no connection once the keyring was read again."""
    ctx = zmq.Context()
    drops = DropCounter(logging.getLogger("test"), "test")
    seen = []

    def ping(msg, request):
        seen.append(request.principal)
        return control.Reply()

    curve = Curve(ctx, ring.secret_key, ring.keyring, drops)
    curve.start()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    curve.serve(sock)
    server = RouterServer(sock, Dispatcher("test", {control.Ping: ping, control.ExchangeBye: ping}, drops,
                                           internal=(control.ExchangeBye,)), keyring=curve.keyring)
    endpoint = sock.bind_to_random_port("tcp://127.0.0.1")
    alice = keys.load_credentials(ring.client("alice"))[1]
    peers = []
    loop = Loop("test", drops, idle=0.01)
    curve.attach(loop)
    loop.add(sock, server.readable, "the server")

    def ask(setup, msg=control.Ping(), identity=None) -> bool:
        peer = ctx.socket(zmq.DEALER)
        peer.setsockopt(zmq.LINGER, 0)
        if identity is not None:
            peer.setsockopt(zmq.ROUTING_ID, identity)
        peers.append(peer)
        setup(peer)
        peer.connect(f"tcp://127.0.0.1:{endpoint}")
        peer.send(control.encode(msg))
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            loop.turn()
            if peer.poll(0):
                return True
        return False

    def as_alice(peer):
        peer.curve_serverkey, peer.curve_publickey, peer.curve_secretkey = curve.public, alice.public, alice.secret

    try:
        deadline = time.monotonic() + 2
        while len(curve.keyring) < 2 and time.monotonic() < deadline:  # alice's key, made after the start
            loop.turn()
        assert ask(curve.connect) and ask(as_alice)
        assert seen == ["cluster", "alice"]
        # an id of alice's own key is hers; one of another key's is a forgery, dropped unanswered
        assert ask(as_alice, identity=zap.identity_for(alice.public)) and seen[-1] == "alice"
        assert not ask(as_alice, identity=zap.identity_for(curve.public)) and drops.by_reason["forged id"] == 1
        # what only the cluster's processes may send
        assert ask(as_alice, control.ExchangeBye(exchange="x1"))
        reply = control.Reply.parse(peers[-1].recv())
        assert reply.result == control.Result.FORBIDDEN and drops.by_reason["refused: not a cluster process"] == 1
        assert ask(curve.connect, control.ExchangeBye(exchange="x1")) and seen[-1] == "cluster"
        assert ring.revoke("alice") and not ring.revoke("alice")
        deadline = time.monotonic() + 2
        while len(curve.keyring) > 1 and time.monotonic() < deadline:  # read again within REFRESH_PERIOD
            loop.turn()
        assert not ask(as_alice) and drops.by_reason.get("refused: unknown key")
    finally:
        for peer in peers:
            peer.close()
        sock.close()
        curve.close()
        ctx.term()
