"""CURVE key pairs: written with safe modes, refused when unsafe, and good for a real CURVE handshake."""

from __future__ import annotations

import os
import stat

import pytest
import zmq

from roq.errors import ConfigError
from roq.security.keys import load_credentials, load_public, load_secret, new_keypair


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_pair_has_a_public_file_for_anyone_and_a_secret_file_for_its_owner(tmp_path):
    pair = new_keypair(str(tmp_path / "keys"), "server")
    assert (mode(pair.public_path), mode(pair.secret_path), mode(str(tmp_path / "keys"))) == (0o644, 0o600, 0o700)
    assert load_public(pair.public_path) == pair.public and len(pair.secret or b"") == 40
    assert load_secret(pair.secret_path) == pair
    with pytest.raises(ConfigError, match="exists in .* already"):
        new_keypair(str(tmp_path / "keys"), "server")
    assert new_keypair(str(tmp_path / "keys"), "server", overwrite=True).public != pair.public
    for bad in ("", "../x", "-x", "a b", "x" * 65, "x\n"):
        with pytest.raises(ConfigError, match="a key's name"):
            new_keypair(str(tmp_path / "keys"), bad)


def test_an_unsafe_or_wrong_key_file_is_refused_with_the_fix(tmp_path):
    pair = new_keypair(str(tmp_path), "client")
    os.chmod(pair.secret_path, 0o640)
    with pytest.raises(ConfigError, match=r"may be read by others \(mode 640\).*chmod 600"):
        load_secret(pair.secret_path)
    os.chmod(pair.secret_path, 0o600)
    with pytest.raises(ConfigError, match="holds no secret key"):
        os.chmod(pair.public_path, 0o600)
        load_secret(pair.public_path)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_secret(str(tmp_path / "missing.key_secret"))
    garbage = tmp_path / "garbage.key_secret"
    garbage.write_text("not a certificate\n")
    os.chmod(garbage, 0o600)
    with pytest.raises(ConfigError, match="no CURVE public key|cannot be read"):
        load_secret(str(garbage))


def test_the_keys_make_a_curve_handshake(tmp_path):
    server, client = new_keypair(str(tmp_path), "server"), new_keypair(str(tmp_path), "client")
    ctx = zmq.Context()
    try:
        rep = ctx.socket(zmq.REP)
        rep.curve_server, rep.curve_secretkey, rep.curve_publickey = True, server.secret, server.public
        port = rep.bind_to_random_port("tcp://127.0.0.1")
        req = ctx.socket(zmq.REQ)
        req.curve_serverkey, req.curve_publickey, req.curve_secretkey = server.public, client.public, client.secret
        req.connect(f"tcp://127.0.0.1:{port}")
        req.send(b"ping")
        assert rep.poll(5000) and rep.recv() == b"ping"
    finally:
        ctx.destroy(linger=0)


def test_credentials_are_one_secret_key_beside_the_cluster_key_and_anything_else_is_a_clear_error(tmp_path):
    import shutil

    from roq.security.keys import load_credentials

    cluster = new_keypair(str(tmp_path / "cluster"), "cluster")
    mine = tmp_path / "mine"
    pair = new_keypair(str(mine), "alice")
    with pytest.raises(ConfigError, match="no cluster.key"):
        load_credentials(str(mine))
    shutil.copy(cluster.public_path, mine / "cluster.key")
    server, got = load_credentials(str(mine))
    assert server == cluster.public and got.secret == pair.secret
    assert load_credentials(pair.secret_path)[1].public == pair.public  # the secret key file itself
    new_keypair(str(mine), "bob")
    with pytest.raises(ConfigError, match="exactly one secret key.*found 2"):
        load_credentials(str(mine))
    os.chmod(pair.secret_path, 0o640)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_credentials(pair.secret_path)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_credentials(str(tmp_path / "missing"))


def test_a_clusters_keys_are_made_once_with_safe_modes_and_a_client_is_admitted_and_revoked(tmp_path):
    from roq.security.keys import ClusterKeys

    cluster = ClusterKeys(str(tmp_path / "cluster"))
    made = cluster.ensure()
    assert made == [cluster.secret_key, cluster.keyring, cluster.tokens, cluster.zk_auth] and cluster.ensure() == []
    assert oct(os.stat(cluster.zk_auth).st_mode & 0o777) == "0o600"
    assert oct(os.stat(cluster.directory).st_mode & 0o777) == "0o700"
    assert oct(os.stat(cluster.secret_key).st_mode & 0o777) == "0o600"
    path = cluster.client("alice")
    assert cluster.client("alice") == path  # once
    server, mine = load_credentials(path)
    assert server == load_public(cluster.public_key) and mine.secret is not None
    assert os.path.exists(os.path.join(cluster.keyring, "alice.key"))
    token = open(os.path.join(path, "alice.token")).read()
    assert token == open(os.path.join(cluster.tokens, "alice.token")).read() and len(token.strip()) >= 32
    assert oct(os.stat(os.path.join(path, "alice.token")).st_mode & 0o777) == "0o600"
    assert cluster.revoke("alice") and not cluster.revoke("alice")
    assert not os.path.exists(os.path.join(cluster.tokens, "alice.token"))
    assert os.path.exists(os.path.join(path, "alice.key_secret"))  # the credentials stay
    os.chmod(cluster.secret_key, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        cluster.ensure()
