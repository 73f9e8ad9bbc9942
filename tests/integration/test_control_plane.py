"""The control plane end to end: real ZooKeeper, real GCMs, host managers, monitors and exchanges."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest
import zmq
from zkhelp import ask, doc, gone, registered, wait_until

import client
from roq.wire import management as m
from roq.wire.control import Reply, Result, encode
from roq.wire.documents import QueueDoc
from roq.zk import Paths


def runtime_pids(kz, root: str, queue: str) -> list[int]:
    """Pids of the queue's monitor and exchanges, as their host managers registered them."""
    paths = Paths(root)
    pids = []
    if kz.exists(paths.monitor(queue)):
        pids.append(json.loads(kz.get(paths.monitor(queue))[0])["pid"])
    pids += [doc["pid"] for doc in registered(kz, root, queue).values()]
    return pids


def whole(kz, root: str, queue: str) -> bool:
    """The queue's monitor and every exchange slot placed on a live host and registered by that host."""
    paths = Paths(root)
    q = json.loads(kz.get(paths.queue(queue))[0])
    live = set(kz.get_children(paths.hosts))
    monitor = json.loads(kz.get(paths.monitor(queue))[0]) if kz.exists(paths.monitor(queue)) else {}
    running = registered(kz, root, queue)
    return (
        q["host"] in live
        and monitor.get("host") == q["host"]
        and all(h in live and running.get(x, {}).get("host") == h for x, h in q["placement"].items())
    )


def traffic(conn: client.Connection, n: int = 2000) -> int:
    """Publish n records and count what a subscriber that joined first receives."""
    sub = conn.subscriber(prefix=b"k")  # returns once it hears every exchange
    pub = conn.publisher()
    for i in range(n):
        pub.send(b"k.%d" % (i % 7), b"%d" % i)
    pub.flush(10)
    got = set()
    while len(got) < n:
        msg = sub.recv(timeout=3.0)
        if msg is None:
            break
        got.add(int(msg.payload))
    pub.close()
    sub.close()
    return len(got)


def test_queue_lifecycle_on_three_hosts(make_embedded, kz):
    # each host reads its own processes' CPU (the embedded cluster's --cpus), not this busy machine's: a host that
    # read the machine's load as its own over the 90% limit was passed over by the spread at the end
    cluster = make_embedded(hosts=3)
    qm = cluster.manager
    assert {h["Address"] for h in qm.hosts()} == {"127.0.0.11", "127.0.0.12", "127.0.0.13"}

    made = qm.create("orders", "127.0.0.12", exchanges=2)
    assert qm.get_rules("orders")["min_exchanges"] == 2  # the autoscaler keeps what was asked for
    assert made["Host"] == "127.0.0.12" and len(made["Exchanges"]) == 2
    assert all(x["Host"] == "127.0.0.12" for x in made["Exchanges"])
    assert qm.create("orders", "127.0.0.12", exchanges=2)["Monitor"] == made["Monitor"]  # idempotent
    # named hosts here: a queue created anywhere goes to the host with most headroom, which the traffic of the
    # queues before moves (placement: tests/unit/test_gcm_placement.py)
    other = qm.create("audit", "127.0.0.13")
    assert other["Host"] == "127.0.0.13"
    assert qm.exists("orders") and not qm.exists("nothing")
    assert {q["Name"] for q in qm.list()} == {"orders", "audit"}

    with cluster.connect("orders") as conn:
        assert traffic(conn) == 2000
    stats = qm.stats("orders")
    assert stats["Queue"]["Name"] == "orders" and "Monitor" in stats

    pids = runtime_pids(kz, cluster.root, "orders")
    assert len(pids) == 3
    qm.stop("orders")
    wait_until(lambda: all(gone(p) for p in pids), 10, "the stopped queue's processes gone")
    assert runtime_pids(kz, cluster.root, "orders") == []
    with pytest.raises(client.UnavailableError):
        qm.lookup("orders", timeout=3)  # unavailable for the whole of it (its answers come within milliseconds)

    qm.start("orders")
    with cluster.connect("orders") as conn:
        assert traffic(conn, 500) == 500

    pids = runtime_pids(kz, cluster.root, "orders")
    qm.remove("orders")
    wait_until(lambda: all(gone(p) for p in pids), 10, "the removed queue's processes gone")
    paths = Paths(cluster.root)
    assert kz.exists(paths.queue("orders")) is None
    for host in cluster.addresses:
        assert not [a for a in kz.get_children(paths.host_assignments(host)) if a.startswith("orders@")]
    assert not qm.exists("orders")
    with pytest.raises(client.NotFoundError) as err:
        qm.stop("orders")
    assert err.value.code == Result.NOT_FOUND
    assert qm.exists("audit")  # the other queue was left alone

    # created anywhere, N exchanges go to N hosts (the monitor beside the first)
    wide = qm.create("wide", exchanges=3)
    assert sorted(x["Host"] for x in wide["Exchanges"]) == cluster.addresses
    assert wide["Host"] == next(x["Host"] for x in wide["Exchanges"] if x["Id"] == "x1")
    with cluster.connect("wide") as conn:
        assert traffic(conn, 1000) == 1000


def test_host_manager_killed_vanishes_and_leaves_no_orphans(make_embedded, kz):
    cluster = make_embedded(hosts=3, session_timeout=4.0)
    qm = cluster.manager
    qm.create("q", "127.0.0.13", exchanges=2)
    children = runtime_pids(kz, cluster.root, "q")
    assert len(children) == 3

    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(qm.leader()["broadcast"])
    try:
        killed = time.monotonic()
        cluster.kill_host("127.0.0.13")
        wait_until(lambda: all(gone(p) for p in children), 5, "the dead host manager's children stopped")
        while True:
            assert sub.poll(10_000), "no broadcast within 10 s"
            _, hosts = m.parse_broadcast(sub.recv_multipart())
            if "127.0.0.13" not in {h["Address"] for h in hosts}:
                break
        vanished = time.monotonic() - killed
    finally:
        sub.close()
    print(f"host vanished from the broadcast {vanished:.2f}s after kill -9 (session timeout 4s)")
    assert vanished <= 4.0 + 2.0  # the session timeout, plus ZooKeeper's tick granularity and a busy machine


def test_gcm_leader_killed_standby_takes_over(make_embedded):
    cluster = make_embedded(hosts=2, gcms=2, session_timeout=4.0)
    qm = cluster.manager
    qm.create("q", "127.0.0.11")
    first = cluster.leader()
    standby = next(g for g in cluster.gcms if g != first)

    # a standby answers "not leader" and names the leader
    result, comment, data = ask(cluster.gcms[standby].info.management, encode(m.ListQueues()))
    assert result == Result.NOT_LEADER and data["Leader"] == cluster.gcms[first].info.management, comment

    conn = cluster.connect("q")
    sub = conn.subscriber()
    pub = conn.publisher()
    try:
        killed = time.monotonic()
        cluster.kill_gcm(first)
        new = wait_until(lambda: (lead := qm.leader(timeout=10)["id"]) != first and lead, 10, "a new leader")
        took = time.monotonic() - killed
        assert new == standby
        # how soon is benchmark (d)'s figure (make bench-check): here, only that it happened
        print(f"standby {standby} took over {took:.2f}s after the leader's kill -9 (session timeout 4s)")
        # management and look-ups work again, nothing else restarted
        assert qm.create("q2", "127.0.0.12")["Name"] == "q2"
        with cluster.connect("q2") as conn2:
            assert traffic(conn2, 300) == 300
        # the connection made before the fail-over kept working all along
        for i in range(200):
            pub.send(b"k", b"%d" % i)
        pub.flush(10)
        got = {int(msg.payload) for msg in iter(lambda: sub.recv(timeout=3.0), None)}
        assert got == set(range(200))
    finally:
        conn.close()


def test_create_survives_a_leader_crash_halfway(make_embedded, kz):
    cluster = make_embedded(hosts=2, gcms=2, session_timeout=4.0)
    leader = cluster.leader()
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(cluster.gcms[leader].info.management)
    sock.send(encode(m.CreateQueue(QName="half", Host="127.0.0.12", Exchanges=2)))
    # the leader dies as soon as the queue is written, before it can answer
    paths = Paths(cluster.root)
    wait_until(lambda: kz.exists(paths.queue("half")), 10, "the create written to ZooKeeper")
    cluster.kill_gcm(leader)
    sock.close()
    made = cluster.manager.create("half", "127.0.0.12", exchanges=2)  # the client's retry, on the new leader
    assert made["State"] == "running" and len(made["Exchanges"]) == 2
    assert len(runtime_pids(kz, cluster.root, "half")) == 3  # one monitor, two exchanges: nothing twice
    assert sorted(kz.get_children(paths.host_assignments("127.0.0.12"))) == ["half@monitor", "half@x1", "half@x2"]


def test_session_expiry_registers_again(make_embedded, kz):
    cluster = make_embedded(hosts=2, gcms=2, session_timeout=4.0)
    qm = cluster.manager
    qm.create("q", "127.0.0.12")
    first = cluster.leader()
    frozen = [cluster.hostmanagers["127.0.0.12"], cluster.gcms[first]]
    # stopped longer than its session timeout, a process's session expires in ZooKeeper
    for child in frozen:
        child.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: "127.0.0.12" not in {h["Address"] for h in qm.hosts()}, 12, "the frozen host's session expired")
        assert qm.leader()["id"] != first
    finally:
        for child in frozen:
            child.signal(signal.SIGCONT)
    # both come back with new sessions and register again; the topology is whole: if the new leader moved the
    # queue off the host meanwhile (it was unregistered for longer than the host grace), on the other host
    wait_until(lambda: "127.0.0.12" in {h["Address"] for h in qm.hosts()}, 15, "the host registered again")
    wait_until(lambda: (q := qm.list()) and q[0]["Monitor"] and len(q[0]["Exchanges"]) == 1, 15, "the queue whole again")
    wait_until(lambda: whole(kz, cluster.root, "q"), 15, "every slot registered by the live host it is placed on")
    paths = Paths(cluster.root)
    wait_until(lambda: len(kz.get_children(paths.election)) == 2, 15, "the old leader stands again as a standby")
    with cluster.connect("q") as conn:
        assert traffic(conn, 300) == 300


def test_bad_input_on_the_management_and_lookup_ports(make_embedded):
    cluster = make_embedded(hosts=1)
    leader = cluster.gcms[cluster.leader()]
    mgmt, lookup = leader.info.management, leader.info.lookup
    cases = [
        ([b"\x00garbage\xff"], Result.BAD_REQUEST),  # not BSON
        ([doc(CMD=2003, QName=5, Host="127.0.0.11")], Result.BAD_REQUEST),  # wrong type
        ([doc(CMD="2003", QName="x")], Result.BAD_REQUEST),  # CMD not an integer
        ([doc(CMD=2003, Host="127.0.0.11")], Result.BAD_REQUEST),  # missing field
        ([doc(CMD=77777)], Result.UNKNOWN_COMMAND),
        ([doc(CMD=2003, QName="../etc", Host="127.0.0.11")], Result.BAD_REQUEST),  # bad queue name
        ([doc(CMD=2003, QName="q", Host="127.0.0.11", Exchanges=10**6)], Result.BAD_REQUEST),
        ([doc(CMD=2003, QName="q", Host="10.1.2.3")], Result.NOT_FOUND),  # no such host
        ([doc(CMD=2006, QName="nope", Rules={})], Result.NOT_FOUND),
        ([b"a", b"b", b"c"], Result.BAD_REQUEST),  # wrong frame count
        ([doc(CMD=2003, QName="q", Host="x" * (100 << 20))], Result.BAD_REQUEST),  # a 100 MB document
    ]
    for frames, expected in cases:
        result, comment, _ = ask(mgmt, *frames, timeout=30)
        assert result == expected, (frames[0][:40], result, comment)
        assert comment  # every refusal says why
    for frames, expected in [([b"junk"], Result.BAD_REQUEST), ([doc(CMD=2003, QName="q", Host="h")], Result.UNKNOWN_COMMAND),
                             ([doc(CMD=2000, QName="nope")], Result.NOT_FOUND)]:
        result, comment, _ = ask(lookup, *frames)
        assert result == expected, (result, comment)

    # garbage at the TCP level (no ZeroMQ handshake) on both ports
    import socket

    for endpoint in (mgmt, lookup):
        host, port = endpoint[len("tcp://"):].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"\xff" * 64 + b"GET / HTTP/1.0\r\n\r\n")

    # a flood of 10,000 requests, pipelined: every one answered
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.connect(mgmt)
    request = encode(m.QueueExists(QName="q"))
    for _ in range(10_000):
        sock.send(request)
    answered = 0
    while answered < 10_000 and sock.poll(10_000):
        reply = Reply.parse(sock.recv())
        assert reply.result == Result.OK and reply.data["Exists"] is False
        answered += 1
    sock.close()
    assert answered == 10_000

    # and well-formed requests are served as before, by the same process
    assert leader.alive()
    assert cluster.manager.create("q", "127.0.0.11")["State"] == "running"
    result, _, data = ask(lookup, encode(m.Lookup(QName="q")))
    assert result == Result.OK and data["Monitor"].startswith("tcp://127.0.0.11:")


def test_what_peers_send_a_standbys_broadcast_port_does_not_stay(make_embedded):
    """A PUB socket holds what its peers send (subscriptions, any frame) until its owner calls into it; a
    standby never broadcasts, so its loop must tend the socket, or every connection stays in its memory."""
    cluster = make_embedded(hosts=1, gcms=2)
    standby = cluster.gcms[next(g for g in cluster.gcms if g != cluster.leader())]
    process = psutil.Process(standby.pid)
    before = process.memory_info().rss
    ctx = zmq.Context()
    try:
        frame = os.urandom(4000)
        for _ in range(400):  # 64 MB in all, each connection closed once it sent its part
            peer = ctx.socket(zmq.XSUB)
            peer.setsockopt(zmq.LINGER, 1000)
            peer.connect(standby.info.broadcast)
            for _ in range(40):
                peer.send(frame)
            peer.close()
    finally:
        ctx.term()  # every message delivered to the standby (linger), none left on our side
    # the standby has read and dropped it all as it came, and still serves
    result, _comment, _data = ask(standby.info.management, encode(m.ListQueues()))
    assert result == Result.NOT_LEADER
    grown = (process.memory_info().rss - before) >> 20
    print(f"the standby GCM grew by {grown} MB after 64 MB sent to its broadcast port")
    # untended, it keeps all 64 MB (it grew by about 90 MB); tended, it holds what arrives between two turns of its
    # loop (8-28 MB measured, the more the busier the machine): under what was sent, it did not stay
    assert grown < 48


def test_rules_are_checked_and_bad_ones_change_nothing(make_embedded):
    cluster = make_embedded(hosts=1)
    qm = cluster.manager
    qm.create("q", "127.0.0.11")
    rules = qm.set_rules("q", {"max_exchanges": 3, "exchange_records_per_s": 5000})
    assert rules["max_exchanges"] == 3 and rules["exchange_records_per_s"] == 5000.0
    for bad in ({"max_exchanges": -1}, {"min_exchanges": 5}, {"cooldown_s": "ten"}, {"no_such_rule": 1}, {"smoothing": 2}):
        with pytest.raises(client.BadRequestError) as err:
            qm.set_rules("q", bad)
        assert err.value.code == Result.BAD_REQUEST and str(next(iter(bad))) in str(err.value)
    assert qm.get_rules("q") == rules
    assert qm.set_thresholds("q", {"exchange_records_per_s": 4000})["exchange_records_per_s"] == 4000.0
    assert qm.get_thresholds("q") == {"exchange_records_per_s": 4000.0}


def test_an_explicit_placement_cannot_exceed_the_hosts_maximum(make_embedded, kz):
    cluster = make_embedded(hosts=1, max_exchanges=2)
    qm = cluster.manager
    paths = Paths(cluster.root)
    with pytest.raises(client.UnavailableError, match=r"127\.0\.0\.11: has room for 2 of the 3 exchanges asked"):
        qm.create("big", "127.0.0.11", exchanges=3)
    assert kz.exists(paths.queue("big")) is None  # nothing was written
    assert kz.get_children(paths.host_assignments("127.0.0.11")) == []
    assert not qm.exists("big")

    qm.create("fits", "127.0.0.11", exchanges=2)
    with pytest.raises(client.UnavailableError, match=r"127\.0\.0\.11: full \(2/2\)"):
        qm.add_exchange("fits", "127.0.0.11")
    assert QueueDoc.decode(kz.get(paths.queue("fits"))[0]).placement == {"x1": "127.0.0.11", "x2": "127.0.0.11"}
    assert sorted(kz.get_children(paths.host_assignments("127.0.0.11"))) == ["fits@monitor", "fits@x1", "fits@x2"]
    assert [h["AssignedExchanges"] for h in qm.hosts()] == [2]


def test_three_node_ensemble_survives_losing_a_member(tmp_path):
    from roqcli.zkserver import ZooKeeperEnsemble
    from roqcli.embedded import EmbeddedCluster

    with ZooKeeperEnsemble(3, log_dir=str(tmp_path / "zk")) as ensemble:
        assert ensemble.hosts.count(",") == 2
        with EmbeddedCluster(hosts=2, zk=ensemble.hosts, session_timeout=6.0, log_dir=str(tmp_path / "cluster")) as cluster:
            qm = cluster.manager
            qm.create("before", "127.0.0.11")
            leader = next(s for s in ensemble.servers if s.mode() == "leader")
            leader.kill()  # the ZooKeeper leader: the others elect a new one and the clients move over
            made = qm.create("after", "127.0.0.12", timeout=60)
            assert made["State"] == "running"
            assert {q["Name"] for q in qm.list()} == {"before", "after"}
            with cluster.connect("after") as conn:
                assert traffic(conn, 300) == 300


def test_a_crashed_exchange_is_restarted_and_nothing_is_lost(make_embedded, kz):
    cluster = make_embedded(hosts=1)
    cluster.manager.create("q", "127.0.0.11", exchanges=2)

    def exchanges() -> dict[str, dict]:
        return registered(kz, cluster.root, "q")

    with cluster.connect("q") as conn:
        sub = conn.subscriber()
        pub = conn.publisher()
        on = pub.stats()["exchange"]
        victim = next(x for x, d in exchanges().items() if d["name"] == on)
        old = exchanges()[victim]
        for i in range(1000):
            pub.send(b"k", b"%d" % i)
        os.kill(old["pid"], signal.SIGKILL)
        killed = time.monotonic()
        for i in range(1000, 3000):
            pub.send(b"k", b"%d" % i)
        pub.flush(15)
        back = wait_until(lambda: (d := exchanges().get(victim)) and d["pid"] != old["pid"] and d, 10, "the exchange restarted")
        took = time.monotonic() - killed
        print(f"exchange {victim} restarted and registered {took:.2f}s after kill -9 (as {back['name']})")
        assert back["name"] != old["name"]  # a new incarnation: the monitor failed its publishers over
        got = [int(msg.payload) for msg in iter(lambda: sub.recv(timeout=3.0), None)]
        assert sorted(got) == list(range(3000)) and got == sorted(got)
    # how soon it was back is benchmark (d)'s figure (make bench-check), not this test's
