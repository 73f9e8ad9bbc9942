"""roq.security.zap: ZAP answered from the process's own loop: real CURVE handshakes over loopback, keys from a keyring
directory, routing ids bound to their key, refusals counted and failing the handshake on the client's side."""

from __future__ import annotations

import logging
import os
import time

import pytest
import zmq
import zmq.utils.monitor

from roq.security import keys, zap
from roq.errors import ConfigError, ProtocolError
from roq.runtime import DropCounter

log = logging.getLogger("test")


@pytest.fixture
def ring(tmp_path):
    """A keyring directory with alice's public key, the server's pair, and a stranger's pair elsewhere."""
    secrets, ring_dir = tmp_path / "secrets", tmp_path / "ring"
    server = keys.new_keypair(str(secrets), "server")
    alice = keys.new_keypair(str(secrets), "alice")
    stranger = keys.new_keypair(str(secrets), "stranger")
    ring_dir.mkdir()
    os.link(alice.public_path, ring_dir / "alice.key")
    return {"dir": str(ring_dir), "server": server, "alice": alice, "stranger": stranger}


class Rig:
    """A CURVE ROUTER (ZAP domain "frontend") and the ZAP server of its context, run by :meth:`turn`."""

    def __init__(self, ring: dict) -> None:
        self.ctx = zmq.Context()
        self.drops = DropCounter(log, "test")
        self.keyring = zap.Keyring(ring["dir"])
        self.zap = zap.ZapServer(self.ctx, zap.Authenticator(self.keyring), self.drops)
        self.zap.start()
        self.server = self.ctx.socket(zmq.ROUTER)
        self.server.setsockopt(zmq.LINGER, 0)
        self.server.curve_server = True
        self.server.curve_secretkey = ring["server"].secret
        self.server.setsockopt(zmq.ZAP_DOMAIN, b"frontend")
        self.endpoint = f"tcp://127.0.0.1:{self.server.bind_to_random_port('tcp://127.0.0.1')}"
        self.server_public = ring["server"].public
        self.clients: list[zmq.Socket] = []

    def client(self, pair: keys.KeyPair, identity: bytes | None = None) -> tuple[zmq.Socket, zmq.Socket]:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.curve_serverkey = self.server_public
        sock.curve_publickey, sock.curve_secretkey = pair.public, pair.secret
        sock.setsockopt(zmq.ROUTING_ID, identity if identity is not None else zap.identity_for(pair.public))
        events = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
        sock.connect(self.endpoint)
        self.clients += [sock, events]
        return sock, events

    def outcome(self, events: zmq.Socket, timeout: float = 5.0) -> dict:
        """Run the loop until the client's handshake succeeded or failed; its monitor event."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.zap.socket.poll(10):
                self.zap.readable()
            if events.poll(0):
                return zmq.utils.monitor.recv_monitor_message(events)
        raise AssertionError("the handshake neither succeeded nor failed")

    def close(self) -> None:
        for sock in self.clients + [self.server]:
            sock.close()
        self.zap.close()
        self.ctx.term()


@pytest.fixture
def rig(ring):
    made = Rig(ring)
    yield made
    made.close()


def test_a_known_key_connects_and_its_messages_carry_its_principal(rig, ring):
    client, events = rig.client(ring["alice"])
    assert rig.outcome(events)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED
    client.send(b"hello")
    assert rig.server.poll(5000)
    ident, body = rig.server.recv_multipart(copy=False)
    assert body.bytes == b"hello" and body.get("User-Id") == "alice"
    assert rig.keyring.owns("alice", ident.bytes) and not rig.keyring.owns("nobody", ident.bytes)
    assert rig.zap.accepted == 1 and rig.zap.refused == {}


def test_an_id_borrowed_from_another_key_is_told_from_the_principal_of_the_message(rig, ring):
    # alice's own key, presenting an id that is not hers (a publisher's id read from a status, say)
    client, events = rig.client(ring["alice"], identity=zap.identity_for(ring["stranger"].public))
    assert rig.outcome(events)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED
    client.send(b"I am someone else")
    assert rig.server.poll(5000)
    ident, body = rig.server.recv_multipart(copy=False)
    assert body.get("User-Id") == "alice" and not rig.keyring.owns("alice", ident.bytes)


def test_a_stranger_is_refused_at_the_handshake_and_counted(rig, ring):
    client, events = rig.client(ring["stranger"])
    failed = rig.outcome(events)
    assert failed["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH and failed["value"] == 400
    try:  # refused, the client may have no connection to queue it on at all
        client.send(b"let me in", zmq.NOBLOCK)
    except zmq.Again:
        pass
    assert not rig.server.poll(300)
    assert rig.zap.refused == {"unknown key": 1} and rig.drops.by_reason == {"refused: unknown key": 1}


def test_a_key_removed_from_the_keyring_stops_connecting_without_a_restart(rig, ring):
    assert rig.outcome(rig.client(ring["alice"])[1])["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED
    os.remove(os.path.join(ring["dir"], "alice.key"))
    assert rig.keyring.refresh() and rig.keyring.principal(ring["alice"].public) is None
    assert not rig.keyring.refresh()  # unchanged since: not read again
    assert rig.outcome(rig.client(ring["alice"])[1])["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
    os.link(ring["stranger"].public_path, os.path.join(ring["dir"], "carol.key"))
    rig.keyring.refresh()
    assert rig.keyring.principal(ring["stranger"].public) == "carol"


def test_garbage_on_the_zap_endpoint_is_counted_and_the_server_goes_on(rig, ring):
    peer = rig.ctx.socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(zap.ZAP_ENDPOINT)
    rig.clients.append(peer)
    for frames in ([b"x"], [b"", b"2.0", b"1", b"", b"", b"", b"CURVE", b"k" * 32], [b"", b"1.0", b"7", b"\xff",
                                                                                       b"", b"", b"CURVE", b""]):
        peer.send_multipart(frames)
    deadline = time.monotonic() + 5
    while rig.drops.by_reason.get("bad ZAP request", 0) < 3:
        assert time.monotonic() < deadline
        if rig.zap.socket.poll(10):
            rig.zap.readable()
    answers = []
    while peer.poll(200):
        answers.append(peer.recv_multipart())
    assert [a[3] for a in answers] == [b"500", b"500"]  # the two with a request id are answered
    assert rig.outcome(rig.client(ring["alice"])[1])["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED


def test_other_mechanisms_and_bad_credentials_are_refused():
    auth = zap.Authenticator(zap.Keyring(keys=[("alice", b"a" * 40)]))
    base = dict(envelope=(b"r", b""), request_id=b"1", domain="", address="127.0.0.1", identity=b"")
    assert auth.decide(zap.ZapRequest(mechanism="NULL", credentials=(), **base)).reason == "mechanism NULL refused"
    assert auth.decide(zap.ZapRequest(mechanism="CURVE", credentials=(b"short",), **base)).reason == \
        "bad CURVE credentials"
    with pytest.raises(ProtocolError):
        zap.ZapRequest.parse([b"r", b"", b"1.0", b"1"])


def test_an_identity_belongs_to_one_key_and_a_second_zap_handler_is_refused(ring):
    alice = zmq.utils.z85.decode(ring["alice"].public)
    mine = zap.identity_for(ring["alice"].public)
    assert len(mine) == 16 and zap.owns(alice, mine) and zap.owns(alice, zap.identity_for(alice))
    assert mine != zap.identity_for(ring["alice"].public)  # many ids per key: one per publisher or subscriber
    assert not zap.owns(zmq.utils.z85.decode(ring["stranger"].public), mine)
    ctx = zmq.Context()
    first = zap.ZapServer(ctx, zap.Authenticator(zap.Keyring()), DropCounter(log, "test"))
    second = zap.ZapServer(ctx, zap.Authenticator(zap.Keyring()), DropCounter(log, "test"))
    try:
        first.start()
        with pytest.raises(ConfigError, match="ZAP handler already"):
            second.start()
    finally:
        first.close()
        second.close()
        ctx.term()


def test_an_unreadable_keyring_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read"):
        zap.Keyring(str(tmp_path / "missing"))
    (tmp_path / "broken.key").write_text("not a certificate")
    ring = zap.Keyring(str(tmp_path))
    assert len(ring) == 0 and ring.skipped and ring.skipped[0].startswith("broken.key")


def test_a_key_added_to_the_keyring_is_admitted_at_its_first_handshake(tmp_path):
    """An unknown key makes the authenticator read the directory again (at most every RECHECK_S): a client made
    just now need not wait for the next periodic read."""
    now = [0.0]
    ring = zap.Keyring(str(tmp_path))
    auth = zap.Authenticator(ring, clock=lambda: now[0])
    pair = keys.new_keypair(str(tmp_path / "secrets"), "alice")
    base = dict(envelope=(b"r", b""), request_id=b"1", domain="roq", address="127.0.0.1", identity=b"",
                mechanism="CURVE", credentials=(zmq.utils.z85.decode(pair.public),))
    assert auth.decide(zap.ZapRequest(**base)).reason == "unknown key"
    os.link(pair.public_path, tmp_path / "alice.key")
    assert auth.decide(zap.ZapRequest(**base)).reason == "unknown key"  # looked again too soon
    now[0] += zap.RECHECK_S
    assert auth.decide(zap.ZapRequest(**base)) == zap.Decision(200, "", "alice")


def test_an_expired_key_is_one_removed_without_the_directory_changing(tmp_path):
    now = [1_000_000.0]
    ring_dir = tmp_path / "ring"
    ring_dir.mkdir()
    pair = keys.new_keypair(str(tmp_path / "secrets"), "alice", expires=1_000_010.0)
    assert keys.expiry(pair.public_path) == 1_000_010.0 and keys.expiry(pair.secret_path) == 1_000_010.0
    os.link(pair.public_path, ring_dir / "alice.key")
    ring = zap.Keyring(str(ring_dir), clock=lambda: now[0])
    alice_id = zap.identity_for(pair.public)
    assert ring.principal(pair.public) == "alice" and ring.has("alice") and not ring.refresh()
    now[0] = 1_000_010.0
    assert ring.refresh()  # the directory did not change: its expiry did it
    assert ring.principal(pair.public) is None and not ring.has("alice") and ring.removed("alice", alice_id)
    assert ring.skipped == ["alice.key: expired"]
    (tmp_path / "bad.key").write_text('metadata\n    expires = "soon"\ncurve\n    public-key = "x"\n')
    with pytest.raises(ConfigError, match="not a time"):
        keys.expiry(str(tmp_path / "bad.key"))
