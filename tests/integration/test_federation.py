"""A child cluster's link says hello to its parent cluster's GCM: welcomed, shown in the parent's status,
refused with both ends named when it cannot be (real processes: the parent's ZooKeeper, GCM and host; the
child's durable queue; the link process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import client
from roq.process import spawn
from roq.errors import Result
from roq.runtime import ExitCode
from tests.integration.zkhelp import wait_until
from tests.integration.sites import DurableQueue


def _link(*args: str) -> list[str]:
    return ["--name", "up", *args]


def test_a_childs_link_is_welcomed_carries_while_welcomed_and_a_cycle_or_a_stale_incarnation_is_refused(
        make_embedded, tmp_path):
    hq = make_embedded(hosts=1, gcm_args=["--cluster-name", "hq"])
    store = DurableQueue("127.0.0.16", str(tmp_path / "store"), exchanges=1)
    hq.manager.create("orders", exchanges=1)
    target = hq.manager.lookup("orders")
    parent = ["--parent-zk", hq.zk, "--parent-root", hq.root]
    args = _link("--source", store.monitor, "--target", target, "--prefix", "eu.", "--cluster", "store-1", *parent)
    first = spawn("link", "client.link", args)
    second = None
    conn_here = client.connect(store.monitor)
    conn_hq = client.connect(target)
    try:
        assert first.wait_ready(60).name == "up"
        status = hq.manager.federation()
        assert (status["Name"], status["Role"], status["Path"]) == ("hq", "root", [])
        assert [(c["Name"], c["Below"]) for c in status["Children"]] == [("store-1", [])]
        shown = subprocess.run([sys.executable, "-m", "roqcli", "federation", "status", "--zk", hq.zk,
                                "--root", hq.root], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and "hq (root), the root; 1 child(ren)" in shown.stdout, shown.stderr
        assert "store-1" in shown.stdout

        # while welcomed, what the parent wants crosses
        sub = conn_hq.subscriber(b"")
        pub = conn_here.publisher()
        deadline = time.monotonic() + 30
        got: list[bytes] = []
        i = 0
        while b"eu-ready" not in got:
            assert time.monotonic() < deadline, f"nothing crossed: {got[:5]}"
            pub.send(b"eu.x", b"eu-ready")
            pub.send(b"us.x", b"us-%d" % i)
            i += 1
            pub.flush(10)
            got += [p for b in sub.recv_many(timeout=0.2) for p in b.payloads]
        assert not any(p.startswith(b"us-") for p in got)

        # what the link carried, in the parent's status, in roq federation links and in its metrics
        deadline = time.monotonic() + 30
        while not any(x["Records"] >= i for c in hq.manager.federation()["Children"] for x in c["Links"]):
            assert time.monotonic() < deadline, hq.manager.federation()["Children"]
            time.sleep(0.2)
        crossing = hq.manager.federation()["Children"][0]["Links"][0]
        assert crossing["Target"] == target and crossing["Carrying"] == ["eu."] and crossing["Bytes"] > 0
        shown = subprocess.run([sys.executable, "-m", "roqcli", "federation", "links", "--zk", hq.zk,
                                "--root", hq.root], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and "store-1: hello" in shown.stdout and "carries 'eu.'" in shown.stdout, \
            shown.stdout + shown.stderr
        with urllib.request.urlopen(hq.http_url() + "/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        assert f'roq_link_records_sent_total{{child="store-1",target="{target}"}}' in metrics

        # a cluster named as the parent itself would close a cycle: refused, the link exits naming both ends
        cycle = subprocess.run([sys.executable, "-m", "client.link", *_link(
            "--source", store.monitor, "--target", target, "--cluster", "hq", "--connect-timeout", "20", *parent)],
            capture_output=True, text=True, timeout=60)
        assert cycle.returncode == ExitCode.CONFIG, cycle.stderr
        assert "refused" in cycle.stderr and "(cycle)" in cycle.stderr and "hq" in cycle.stderr, cycle.stderr
        refused = [e for e in hq.manager.audit() if e["action"] == "LinkHello"]  # and in the audit trail
        assert [(e["result"], "cycle" in e["comment"], '"cluster": "hq"' in e["detail"]) for e in refused] == [
            ("CONFLICT", True, True)], refused

        # a newer incarnation of store-1's link takes over: the older one is refused as stale and carries nothing
        second = spawn("link", "client.link", args)
        second.wait_ready(60)
        deadline = time.monotonic() + 30
        while hq.manager.federation()["Refusals"].get("stale", 0) < 1:
            assert time.monotonic() < deadline, hq.manager.federation()
            time.sleep(0.2)
        refusals = hq.manager.federation()["Refusals"]
        assert refusals.get("cycle") == 1, refusals
        assert [c["Name"] for c in hq.manager.federation()["Children"]] == ["store-1"]
    finally:
        conn_here.close()
        conn_hq.close()
        for link in (first, second):
            if link is not None:
                link.stop()
        store.stop()


def test_a_link_whose_key_may_not_publish_into_the_parents_queue_is_refused_said_and_carries_once_granted(
        make_embedded, tmp_path):
    """A secure parent: the child's link may open (``link``) but its key may not publish into ``orders``: the
    queue's monitor refuses it, and the parent's status says so, naming why; once granted, it carries."""
    hq = make_embedded(hosts=1, secure=True, gcm_args=["--cluster-name", "hq"])
    admin = hq.manager
    admin.create("orders", exchanges=1)
    creds = hq.keys.client("store-1")
    admin.grant("store-1", "link")
    target = admin.lookup("orders")
    store = DurableQueue("127.0.0.16", str(tmp_path / "store"), exchanges=1)
    link = spawn("link", "client.link", _link("--source", store.monitor, "--target", target, "--cluster", "store-1",
                                              "--parent-zk", hq.zk, "--parent-root", hq.root,
                                              "--target-credentials", creds))
    conn = client.connect(store.monitor)
    try:
        link.wait_ready(60)

        def crossing() -> dict:
            children = admin.federation()["Children"]
            return children[0]["Links"][0] if children and children[0]["Links"] else {}

        deadline = time.monotonic() + 30
        while "publish" not in crossing().get("Refused", ""):
            assert time.monotonic() < deadline, crossing()
            time.sleep(0.2)
        shown = subprocess.run([sys.executable, "-m", "roqcli", "federation", "links", "--zk", hq.zk, "--root",
                                hq.root, "--credentials", hq.credentials], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and "REFUSED there" in shown.stdout, shown.stdout + shown.stderr
        # counted once however many hellos say it, an event of the queue, and in the audit trail
        assert admin.federation()["Refusals"] == {"forbidden": 1}
        refused = wait_until(lambda: [e for e in admin.audit() if e["action"] == "LinkCarry"], 30,
                             "the refusal in the audit trail")
        assert [(e["result"], e["queue"], e["principal"], "publish" in e["comment"]) for e in refused] == [
            ("FORBIDDEN", "orders", "store-1", True)], refused
        assert [e["child"] for e in admin.events("orders", 200) if e["kind"] == "link_refused"] == ["store-1"]
        admin.grant("store-1", "publish", "orders")
        pub = conn.publisher()
        deadline = time.monotonic() + 30
        while crossing().get("Refused") or not crossing().get("Records"):
            assert time.monotonic() < deadline, crossing()
            pub.send(b"eu.x", b"x")
            pub.flush(10)
            time.sleep(0.2)
    finally:
        link.stop()
        conn.close()
        store.stop()


def test_a_compressing_link_carries_each_record_both_ways_once_in_a_fraction_of_the_bytes(make_embedded, tmp_path):
    """``--compress``: up, the batches go compressed into the parent's exchanges (which take them back); down, the
    parent's journal answers the link's fetches compressed. Every record arrives once, as it was sent, and what
    crossed to the parent's host, as the parent's status shows it, is a fraction of the payloads' bytes."""
    hq = make_embedded(hosts=1, gcm_args=["--cluster-name", "hq"])
    hq.manager.create("orders", exchanges=1)
    hq.manager.set_rules("orders", {"durability": "interval"})
    target = hq.manager.lookup("orders")
    store = DurableQueue("127.0.0.29", str(tmp_path / "store"), exchanges=1)
    link = spawn("link", "client.link", _link("--source", store.monitor, "--target", target, "--cluster", "store-1",
                                              "--parent-zk", hq.zk, "--parent-root", hq.root, "--down", "--compress"))
    conns = {"store": client.connect(store.monitor), "hq": client.connect(target)}
    per_side = 3000

    def record(side: str, i: int) -> bytes:  # JSON-like text, as orders are: it compresses
        return b'{"side": "%s", "n": %d, "store": "store-%d", "sku": "SKU-%06d", "qty": %d, "note": "restock"}' % (
            side.encode(), i, i % 40, i * 7 % 1000, i % 9)

    try:
        link.wait_ready(60)
        subs = {side: conn.subscriber(b"") for side, conn in conns.items()}
        heard: dict[str, list[bytes]] = {side: [] for side in conns}

        def crossings() -> dict[str, dict]:
            children = hq.manager.federation()["Children"]
            return {x["Target"]: x for x in children[0]["Links"]} if children else {}

        wait_until(lambda: len(crossings()) == 2, 60, "both crossings in the parent's status")
        pubs = {side: conn.publisher() for side, conn in conns.items()}
        key = {"store": b"eu.up", "hq": b"hq.down"}
        for i in range(per_side):
            for side, pub in pubs.items():
                pub.send(key[side], record(side, i))
        for pub in pubs.values():
            pub.flush(30)

        def arrived() -> bool:
            for side, sub in subs.items():
                heard[side] += [p for b in sub.recv_many(timeout=0.05) for p in b.payloads]
            return all(len(h) >= 2 * per_side for h in heard.values())
        wait_until(arrived, 60, "every record on both sides")
        for side in conns:  # its own and the other side's, each once and as sent
            assert sorted(heard[side]) == sorted(record(s, i) for s in conns for i in range(per_side)), side

        payload = sum(len(record("store", i)) for i in range(per_side))
        wait_until(lambda: all(x["Records"] >= per_side for x in crossings().values()), 30, "the links' figures")
        up, down = crossings()[target], crossings()[store.monitor]
        assert up["Compressed"] and down["Compressed"]
        # up: what went into the parent's exchanges; down: what the parent's journal answered
        assert 0 < up["Bytes"] < payload / 3, (up, payload)
        assert 0 < down["BytesRead"] < payload / 3, (down, payload)
    finally:
        for conn in conns.values():
            conn.close()
        link.stop()
        store.stop()


def test_a_thousand_fast_reconnects_of_childrens_links_raise_no_false_refusal(make_embedded):
    """Each hello from a new connection, as a link that reconnects sends it: the same link again (its process kept
    its incarnation), the same link restarted (a newer incarnation), and a second link of the same child (another
    queue, with its own incarnations) in between. Every one is welcomed and the parent counts no refusal; an older
    incarnation than one admitted is still refused as stale."""
    import zmq

    from roq.wire.control import Reply, encode
    from roq.wire.control.links import ClusterName, LinkHello
    from roq.wire.ready import GcmReady

    hq = make_embedded(hosts=1, gcm_args=["--cluster-name", "hq"])
    [gcm] = hq.gcms.values()
    endpoint = gcm.ready_as(GcmReady).management
    ctx = zmq.Context()

    def hello(link: str, incarnation: int) -> Reply:
        sock = ctx.socket(zmq.DEALER)  # a new connection each time: a reconnect
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        try:
            sock.send(encode(LinkHello("store-1", "leaf", incarnation, [ClusterName("store-1", "")], [], link=link)))
            assert sock.poll(10_000), "no answer to a hello"
            return Reply.parse(sock.recv())
        finally:
            sock.close()

    try:
        refused = []
        incarnation = 1_000
        for i in range(1_000):
            if i % 3 == 1:
                incarnation += 1  # the link's process started again
            link = "store-1@orders" if i % 5 else "store-1@stock"
            reply = hello(link, incarnation if link.endswith("orders") else 7)
            if reply.result != Result.OK:
                refused.append((i, reply.result, reply.comment))
        assert not refused, refused[:5]
        status = hq.manager.federation()
        assert status["Refusals"] == {} and [c["Name"] for c in status["Children"]] == ["store-1"], status
        stale = hello("store-1@orders", incarnation - 1)
        assert stale.result != Result.OK and "stale" in json.dumps(stale.data), stale
        assert hq.manager.federation()["Refusals"] == {"stale": 1}
    finally:
        ctx.destroy(linger=0)


def test_a_child_whose_key_the_parent_does_not_know_is_refused_clearly_counted_and_audited(make_embedded, tmp_path):
    """A secure parent whose keyring does not admit the child's key: the handshake fails before any hello. The link
    stops at its start naming the refusal and both ends; the parent counts it (``unknown_key``) and its audit trail
    has it, once for a burst of retries."""
    hq = make_embedded(hosts=1, secure=True, gcm_args=["--cluster-name", "hq"])
    hq.manager.create("orders", exchanges=1)
    creds = hq.keys.client("stranger")
    assert hq.keys.revoke("stranger")  # (its credentials stay; the parent no longer knows its key)
    store = DurableQueue("127.0.0.30", str(tmp_path / "store"), exchanges=1)
    try:
        refused = subprocess.run([sys.executable, "-m", "client.link", *_link(
            "--source", store.monitor, "--target", hq.manager.lookup("orders"), "--cluster", "store-1",
            "--parent-zk", hq.zk, "--parent-root", hq.root, "--target-credentials", creds, "--connect-timeout", "20")],
            capture_output=True, text=True, timeout=60)
        assert refused.returncode == ExitCode.CONFIG, refused.stderr[-2000:]
        assert "(unknown_key)" in refused.stderr and "refused the key" in refused.stderr, refused.stderr[-2000:]
        assert hq.manager.federation()["Refusals"].get("unknown_key", 0) >= 1
        entries = wait_until(lambda: [e for e in hq.manager.audit() if e["action"] == "Connect"], 30,
                             "the refused key in the audit trail")
        key = open(os.path.join(creds, "stranger.key")).read()
        assert [(e["result"], "unknown key" in e["comment"]) for e in entries] == [("FORBIDDEN", True)], entries
        assert json.loads(entries[0]["detail"])["key"] in key
    finally:
        store.stop()
