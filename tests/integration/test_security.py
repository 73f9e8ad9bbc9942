"""CURVE at the exchanges, end to end: real exchange and monitor processes serving with the cluster's key, clients
with keys of the keyring, a stranger with none."""

from __future__ import annotations

import glob
import os
import shutil
import time

import pytest

import client
from roq.security import keys
from roq.config import CurveClient
from roq.errors import BrokerConnectionError, RoQError


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


def _answers(manager) -> bool:
    """Whether the GCM answers ``manager`` (False: its key was refused or removed)."""
    try:
        return bool(manager.lookup("orders", timeout=2))
    except (BrokerConnectionError, client.ForbiddenError, client.BrokerTimeoutError):
        return False


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
    cluster = make_cluster(exchanges=1, exchange_args=exchange_args, monitor_args=exchange_args, curve=curve("alice"))
    alice = client.connect(cluster.monitor_endpoint, credentials=credentials("alice", tmp_path))
    try:
        sub = alice.subscriber(b"k")
        for config in ({"subscriber_config": client.SubscriberConfig(curve=curve("stranger"))},
                       {"publisher_config": client.PublisherConfig(curve=curve("stranger"))}):
            with pytest.raises(BrokerConnectionError, match="monitor .* refused this client.s key at the CURVE handshake"):
                client.connect(cluster.monitor_endpoint, **config)
        with pytest.raises(BrokerConnectionError, match="did not answer"):  # no CURVE at all: no handshake
            client.connect(cluster.monitor_endpoint, timeout=1.0)
        assert exchanged(alice.publisher(), sub, 2000, keys=3) == list(range(2000)) and sub.stats().gaps == 0
    finally:
        alice.close()
    log = open(os.path.join(cluster.log_dir, "monitor.log")).read()
    assert "refused: unknown key" in log and "bad connection" in log  # the plaintext one failed the handshake
    log = open(os.path.join(cluster.log_dir, "exchange-x1.log")).read()
    assert "CURVE on, 2 keys may connect" in log  # alice's and the cluster's


def test_garbage_and_strange_keys_at_a_curve_exchange_kill_nothing_and_lose_nothing(make_cluster, secured):
    import random

    import psutil
    import zmq

    from simulation import fuzz

    exchange_args, curve = secured
    cluster = make_cluster(exchanges=1, exchange_args=exchange_args, monitor_args=exchange_args, curve=curve("alice"))
    pid = cluster.exchanges["x1"].pid
    where = cluster.status().exchanges[0]
    targets = [fuzz.Target("frontend", where.frontend, "frontend"),
               fuzz.Target("backend", where.backend, "backend")]
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
            sock.connect(where.frontend if i % 4 < 2 else where.backend)
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


def test_a_secure_cluster_serves_its_keys_and_refuses_strangers_everywhere(make_embedded, tmp_path, kz, zookeeper):
    """CURVE on every socket of a whole cluster (GCM, host managers, monitors, exchanges): the admin's
    credentials create a queue and move records through it; a stranger (no key, or a key the keyring does not
    hold) gets a clear error from the GCM's management and look-up ports and from the monitor, and the refusals
    are counted; a key taken out of the keyring stops opening connections, nothing restarted."""
    import zmq

    from roq.wire import control
    from roq.errors import ForbiddenError

    cluster = make_embedded(hosts=1, secure=True)
    cluster.manager.create("orders")
    conn = cluster.connect("orders")
    try:
        sub = conn.subscriber(b"")
        assert exchanged(conn.publisher(), sub, 1000) == list(range(1000))
        monitor = conn.monitor
    finally:
        conn.close()
    elsewhere = keys.ClusterKeys(str(tmp_path / "elsewhere"))  # another cluster: its keys are strangers here
    elsewhere.ensure()
    mallory = str(tmp_path / "mallory")  # a key of her own, and this cluster's public key
    keys.new_keypair(mallory, "mallory")
    shutil.copy(cluster.keys.public_key, os.path.join(mallory, keys.CLUSTER_KEY))
    refused = "refused this client's key at the CURVE handshake"
    for credentials, error, match in ((mallory, BrokerConnectionError, refused),
                                      (elsewhere.client("eve"), client.BrokerTimeoutError, "no CURVE handshake"),
                                      (None, client.BrokerTimeoutError, "did not answer")):
        with client.QueueManager(cluster.zk, root=cluster.root, credentials=credentials, timeout=1) as manager:
            with pytest.raises(error, match=match):
                manager.remove("orders")
            with pytest.raises(error, match=match):
                manager.lookup("orders", timeout=1)
    with pytest.raises(BrokerConnectionError, match=refused):
        client.connect(monitor, credentials=mallory, timeout=3)
    with pytest.raises(BrokerConnectionError, match="no CURVE handshake"):
        client.connect(monitor, credentials=elsewhere.client("eve"), timeout=1)
    # a key of the keyring may not speak for an exchange
    bob = cluster.keys.client("bob")
    cluster.manager.grant("bob", "publish", "orders")

    def admitted() -> bool:  # once the monitor has read its keyring again (every 0.25 s)
        try:
            client.connect(monitor, credentials=bob, timeout=1).close()
        except BrokerConnectionError:
            return False
        return True

    cluster.wait_for(admitted, 10, "bob's key admitted by the monitor")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        CurveClient.load(bob).apply(sock)
        sock.connect(monitor)
        sock.send(control.encode(control.ExchangeBye(exchange="x1")))
        assert sock.poll(5000), "no answer to a forged exchange's message"
        with pytest.raises(ForbiddenError, match="for the cluster's own processes"):
            control.Reply.parse(sock.recv()).raise_for()
    finally:
        sock.close()
        ctx.term()
    # revoked: bob's key out of the keyring opens no more connections (nothing restarted)
    with client.QueueManager(cluster.zk, root=cluster.root, credentials=bob, timeout=3) as manager:
        assert manager.lookup("orders")
        assert cluster.keys.revoke("bob")
        # refused at the handshake, or (a connection made just before the keyring was read again) told so
        with pytest.raises((BrokerConnectionError, ForbiddenError), match="refused this client.s key|was removed"):
            cluster.wait_for(lambda: manager.lookup("orders", timeout=3) and False, 5, "bob refused")
    assert cluster.manager.list()[0]["Name"] == "orders"  # the admin's requests still go through
    # a key that expires stops working then, its connections included, nothing restarted
    zoe = cluster.keys.client("zoe", expires=time.time() + 3)
    cluster.manager.grant("zoe", "publish", "orders")
    with client.QueueManager(cluster.zk, root=cluster.root, credentials=zoe, timeout=3) as manager:
        cluster.wait_for(lambda: _answers(manager), 5, "zoe's key admitted")
        cluster.wait_for(lambda: not _answers(manager), 10, "zoe's key refused once expired")
        with pytest.raises((BrokerConnectionError, ForbiddenError), match="refused this client.s key|was removed"):
            manager.lookup("orders", timeout=3)
    # ZooKeeper: anyone may read the topology, only the cluster's identity may change it
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    root = cluster.root
    assert kz.get(f"{root}/queues/orders")[0]
    wrong = KazooClient(hosts=zookeeper.hosts, auth_data=[("digest", "roq:not-the-password-at-all")])
    wrong.start(timeout=10)
    try:
        for zk in (kz, wrong):
            for write in (lambda: zk.set(f"{root}/queues/orders", b"{}"), lambda: zk.set(f"{root}/acl", b"{}"),
                          lambda: zk.create(f"{root}/queues/evil", b"{}"),
                          lambda: zk.delete(f"{root}/queues/orders", recursive=True)):
                with pytest.raises(NoAuthError):
                    write()
    finally:
        wrong.stop()
        wrong.close()
    assert [q["Name"] for q in cluster.manager.list()] == ["orders"]
    # and ZooKeeper's own audit log records each refused write (who, what, where, failure): the two strangers'
    def refused_there(operation: str, znode: str) -> int:
        lines = open(zookeeper.log_path, errors="replace").read().splitlines()
        return sum(f"operation={operation}\t" in line and f"znode={znode}\t" in line and "result=failure" in line
                   for line in lines)

    cluster.wait_for(lambda: refused_there("setData", f"{root}/acl") == 2
                     and refused_there("create", f"{root}/queues/evil") == 2, 10, "ZooKeeper's audit of the refusals")
    gcm_log = open(os.path.join(cluster.log_dir, "gcm1.log")).read()
    assert "refused: unknown key" in gcm_log and "bad connection" in gcm_log  # a wrong server key, no CURVE


def _publish_timed(conn, key: bytes, stop, errors: list, counts: list, flush_s: float = 20) -> None:
    """Publish records ``b"I T"`` (number, wall-clock time sent) under ``key`` at about 20,000 a second
    until ``stop`` is set (then flush) or the publisher fails (its error appended to ``errors``)."""
    try:
        pub = conn.publisher()
        i = 0
        while not stop.is_set():
            for _ in range(100):
                pub.send(key, b"%d %.6f" % (i, time.time()))
                i += 1
            counts[0] = i
            time.sleep(0.005)
        pub.flush(flush_s)
    except RoQError as exc:
        errors.append(exc)


def _read_timed(sub, got: list, stop, errors: list) -> None:
    """Append ``(key, number, time sent)`` of every record ``sub`` receives until ``stop`` or an error."""
    try:
        while not stop.is_set():
            for b in sub.recv_many(timeout=0.2):
                for p in b.payloads:
                    i, t = p.split()
                    got.append((b.key, int(i), float(t)))
    except RoQError as exc:
        errors.append(exc)


def test_permissions_refuse_strangers_and_a_revocation_stops_a_publisher_and_a_subscriber_within_a_second(
        make_embedded):
    """A key of the keyring without permissions is refused everything (clear errors, counted); under load, a
    revoked publisher has nothing delivered that it sent a second after the revocation, a revoked subscriber
    receives nothing published a second after its revocation, and a publisher still allowed loses nothing."""
    import threading

    from roq.errors import ForbiddenError

    cluster = make_embedded(hosts=1, secure=True)
    admin = cluster.manager
    admin.create("orders")
    creds = {name: cluster.keys.client(name) for name in ("alice", "bob", "carol", "dave", "erin")}
    admin.grant("erin", "publish", "orders")
    admin.grant("erin", "subscribe", "orders")
    admin.grant("alice", "publish", "orders")
    admin.grant("dave", "publish", "orders")
    admin.grant("bob", "subscribe", "orders")
    assert {r["principal"] for r in admin.acl()["Rules"]} == {"admin", "alice", "bob", "dave", "erin"}

    def admitted() -> bool:  # every process reads the keyring again within 0.25 s
        try:
            with client.QueueManager(cluster.zk, root=cluster.root, credentials=creds["bob"], timeout=2) as m:
                return bool(m.lookup("orders", timeout=2))
        except (BrokerConnectionError, client.BrokerTimeoutError):
            return False

    cluster.wait_for(admitted, 10, "the new keys admitted")
    # carol's key is in the keyring, but she may do nothing
    with client.QueueManager(cluster.zk, root=cluster.root, credentials=creds["carol"], timeout=5) as carol:
        for call in (lambda: carol.create("mine"), lambda: carol.remove("orders"), lambda: carol.lookup("orders"),
                     lambda: carol.set_rules("orders", {"min_exchanges": 2}), carol.list, carol.acl,
                     lambda: carol.grant("carol", "admin")):
            with pytest.raises(ForbiddenError, match="carol may not|default deny"):
                call()
    with pytest.raises(ForbiddenError):
        client.connect(zk=cluster.zk, queue="orders", root=cluster.root, credentials=creds["carol"])
    stranger = client.connect(admin.lookup("orders"), credentials=creds["carol"], timeout=5)
    try:
        with pytest.raises(ForbiddenError, match="carol may not subscribe"):
            stranger.subscriber(b"")
        with pytest.raises(ForbiddenError, match="carol may not publish"):
            stranger.publisher()
    finally:
        stranger.close()

    conns = {name: client.connect(zk=cluster.zk, queue="orders", root=cluster.root, credentials=creds[name])
             for name in ("alice", "bob", "dave", "erin")}
    conns["admin"] = cluster.connect("orders")
    stop_pub, stop_read = threading.Event(), threading.Event()
    errors: dict[str, list] = {name: [] for name in conns}
    got: dict[str, list] = {"admin": [], "bob": [], "erin": []}
    counts = {"alice": [0], "dave": [0], "erin": [0]}
    # erin's key will be taken out of the keyring while her connections stand: they must stop working too
    threads = [threading.Thread(target=_read_timed, args=(conns[n].subscriber(b""), got[n], stop_read, errors[n]))
               for n in ("admin", "bob", "erin")]
    threads += [threading.Thread(target=_publish_timed, args=(conns[n], n.encode(), stop_pub, errors[n], counts[n],
                                                              1 if n == "erin" else 20))
                for n in ("alice", "dave", "erin")]
    try:
        for t in threads:
            t.start()
        cluster.wait_for(lambda: sum(k == b"alice" for k, _, _ in got["bob"][-5000:]) > 1000, 30, "alice's records flow")
        revoked_alice = time.time()
        admin.revoke("alice", "publish", "orders")
        cluster.wait_for(lambda: errors["alice"], 15, "alice's publisher told it may not publish")
        revoked_bob = time.time()
        admin.revoke("bob", "subscribe", "orders")
        assert cluster.keys.revoke("erin")  # her key: out of the keyring, nothing restarted
        cluster.wait_for(lambda: errors["bob"], 15, "bob's subscriber told it may not subscribe")
        cluster.wait_for(lambda: time.time() > revoked_bob + 2, 5, "dave publishing on after both revocations")
    finally:
        stop_pub.set()
        for t in threads[3:]:
            t.join(30)
        sent_dave = counts["dave"][0]
        cluster.wait_for(lambda: sum(k == b"dave" for k, _, _ in got["admin"]) >= sent_dave, 30,
                         "every record of dave's at the admin's subscriber")
        stop_read.set()
        for t in threads[:3]:
            t.join(10)
        for conn in conns.values():
            conn.close()
    assert isinstance(errors["alice"][0], ForbiddenError) and "alice may not publish" in str(errors["alice"][0])
    assert isinstance(errors["bob"][0], ForbiddenError) and "bob may not subscribe" in str(errors["bob"][0])
    late_alice = [t for k, _, t in got["admin"] if k == b"alice" and t > revoked_alice + 1.0]
    late_bob = [t for _, _, t in got["bob"] if t > revoked_bob + 1.0]
    late_erin = [t for _, _, t in got["erin"] if t > revoked_bob + 1.0]  # she received
    late_from_erin = [t for k, _, t in got["admin"] if k == b"erin" and t > revoked_bob + 1.0]  # she sent
    dave = [i for k, i, _ in got["admin"] if k == b"dave"]
    alice = sum(k == b"alice" for k, _, _ in got["admin"])
    print(f"alice: {alice:,} records delivered, the last sent {max(t for k, _, t in got['admin'] if k == b'alice') - revoked_alice:+.3f} s "
          f"from her revocation; bob: {len(got['bob']):,} received, the last sent "
          f"{max(t for _, _, t in got['bob']) - revoked_bob:+.3f} s from his; dave: {len(dave):,} of {sent_dave:,}; "
          f"erin (key removed): the last she got was sent {max(t for _, _, t in got['erin']) - revoked_bob:+.3f} s, "
          f"the last of hers delivered "
          f"{max((t for k, _, t in got['admin'] if k == b'erin'), default=0) - revoked_bob:+.3f} s from the removal")
    assert not late_alice, f"{len(late_alice)} of alice's records sent over a second after her revocation delivered"
    assert not late_bob, f"bob received {len(late_bob)} records published over a second after his revocation"
    assert got["erin"] and not late_erin and not late_from_erin, (len(got["erin"]), late_erin[:3], late_from_erin[:3])
    assert any("key of erin was removed" in str(e) for e in errors["erin"]), errors["erin"]  # she is told
    assert dave == list(range(sent_dave)) and not errors["dave"] and not errors["admin"]
    logs = "".join(open(p).read() for p in glob.glob(os.path.join(cluster.log_dir, "**", "*.log"), recursive=True))
    assert "refused: no permission" in logs and "refused: may not publish" in logs


def test_the_http_api_of_a_secure_cluster_acts_for_the_principal_of_its_bearer_token(make_embedded, kz):
    """Every API call is made as the principal of its bearer token (the administrator's, or a client's from
    ``api_tokens``), or as ``anonymous`` without one, and the permissions decide; a token removed stops
    working; the dashboard's stream, the metrics and the health checks stay open."""
    from tests.integration.httpapi import Api

    cluster = make_embedded(hosts=1, secure=True)
    cluster.manager.create("orders")
    cluster.manager.create("billing")
    alice = open(os.path.join(cluster.keys.client("alice"), "alice.token")).read().strip()
    cluster.manager.grant("alice", "manage", "orders")
    api = Api(cluster.http_url(), cluster.api_token)
    assert api.call("GET", "/api/v1/queues").status == 200  # the administrator
    anonymous = api.call("GET", "/api/v1/queues", token="", check=False)
    assert anonymous.status == 403 and "anonymous may not admin" in anonymous.json["error"], anonymous

    def alice_in() -> bool:  # the token directory is read again within a second
        return api.call("GET", "/api/v1/queues/orders/rules", token=alice, check=False).status == 200

    cluster.wait_for(alice_in, 10, "alice's token known")
    assert api.call("PUT", "/api/v1/queues/orders/rules", {"max_exchanges": 3}, token=alice).status == 200
    for method, path in (("GET", "/api/v1/queues/billing"), ("DELETE", "/api/v1/queues/billing"),
                         ("GET", "/api/v1/hosts"), ("POST", "/api/v1/queues/billing/stop")):
        refused = api.call(method, path, token=alice, check=False)
        assert refused.status == 403 and "alice may not" in refused.json["error"], (method, path, refused)
    # clients' ids (a queue's publishers, subscribers, events): a token's, to a principal that manages the queue;
    # not anonymous's, even where everyone may manage
    cluster.manager.grant("*", "manage", "billing")
    assert api.call("GET", "/api/v1/queues/billing/rules", token="").status == 200  # everyone manages billing
    for queue in ("orders", "billing"):
        assert api.call("GET", f"/api/v1/queues/{queue}/events", token="", check=False).status == 401
        assert api.call("GET", f"/api/v1/queues/{queue}/events", token=alice).status == 200
    cluster.manager.revoke("*", "manage", "billing")
    cluster.wait_for(lambda: api.call("GET", "/api/v1/queues/billing/events", token=alice, check=False).status == 403,
                     10, "alice refused billing's events once the rule is revoked")
    wrong = api.call("GET", "/api/v1/queues", token="x" * 40, check=False)
    assert wrong.status == 401
    assert cluster.keys.revoke("alice")
    cluster.wait_for(lambda: api.call("GET", "/api/v1/queues/orders/rules", token=alice, check=False).status == 401,
                     10, "alice's token refused once removed")
    for path in ("/healthz", "/readyz", "/metrics"):
        assert api.call("GET", path, token="", check=False).status == 200, path
    assert [q["Name"] for q in cluster.manager.list()] == ["billing", "orders"]
    # the audit trail: who did what through which port, and how it ended; kept in ZooKeeper
    trail = api.call("GET", "/api/v1/audit?limit=1000").json["entries"]
    seen = {(e["principal"], e["via"], e["action"], e["queue"], e["result"]) for e in trail}
    assert {("admin", "management", "Grant", "", "OK"), ("alice", "http", "SetRules", "orders", "OK"),
            ("anonymous", "http", "ListQueues", "", "FORBIDDEN"),
            ("alice", "http", "RemoveQueue", "billing", "FORBIDDEN")} <= seen, seen
    assert api.call("GET", "/api/v1/audit", token="", check=False).status == 403
    from roq.wire.documents import AuditDoc

    where = f"{cluster.root}/audit"
    cluster.wait_for(lambda: kz.exists(where) and len(AuditDoc.decode(kz.get(where)[0]).entries) >= len(trail), 10,
                     "the trail written to ZooKeeper")


def test_a_grant_past_a_bound_of_the_rules_is_refused_before_zookeeper_sees_it(make_embedded, kz):
    """Rules that would make ``/acl`` too long for ZooKeeper (1 MiB a node; past it ZooKeeper drops the writer)
    are refused with BAD_REQUEST naming the bound; the GCM keeps its ZooKeeper session, the rules in force
    stay as they were, and a grant within the bounds still goes through."""
    from roq.security.acl import MAX_PREFIX
    from roq.wire.documents import AclDoc

    cluster = make_embedded(hosts=1, secure=True)
    manager = cluster.manager
    acl_path, leader = f"{cluster.root}/acl", f"{cluster.root}/gcm/leader"
    session = kz.exists(leader).ephemeralOwner
    before = manager.acl()["Rules"]
    too_long = f"at most {MAX_PREFIX} bytes \\(MAX_PREFIX\\), got {MAX_PREFIX + 1}"
    with pytest.raises(client.BadRequestError, match=too_long):
        manager.grant("reader", "subscribe", "q", prefixes=("k" * (MAX_PREFIX + 1),))
    # 64 prefixes of control bytes, each byte a 6-byte JSON escape: 384 KiB a rule; three would pass 1 MiB
    heavy = tuple("\x01" * (MAX_PREFIX - 2) + f"{i:02}" for i in range(64))
    granted = []
    with pytest.raises(client.BadRequestError, match=f"over its bound of {AclDoc.MAX_BYTES} \\(MAX_BYTES"):
        for n in range(3):
            manager.grant(f"reader{n}", "subscribe", "q", prefixes=heavy)
            granted.append(n)
    assert granted == [0]
    data, stat = kz.get(acl_path)
    in_force = manager.acl()["Rules"]
    assert len(data) <= AclDoc.MAX_BYTES and [r.principal for r in AclDoc.decode(data).rules] == [
        r["principal"] for r in in_force]
    assert in_force[:len(before)] == before and [r["principal"] for r in in_force[len(before):]] == ["reader0"]
    # still the leader, on the same session: its next write goes through, and nothing else changed meanwhile
    assert manager.grant("reader", "subscribe", "q", prefixes=("eu.",))["Rules"][-1]["principal"] == "reader"
    assert kz.exists(leader).ephemeralOwner == session
    assert kz.exists(acl_path).version == stat.version + 1
    gcm_log = open(os.path.join(cluster.log_dir, "gcm1.log")).read()
    assert "lost its ZooKeeper session" not in gcm_log and "Connection dropped" not in gcm_log
