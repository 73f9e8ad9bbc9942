"""A child cluster's GCM places the link of a queue whose rules say ``link = "parent"``, its host manager runs it and
starts it again when it is killed: two real clusters with CURVE on every socket (each its own keys, ZooKeeper root,
GCM and host manager, on its own loopback address; the link speaks as the cluster in its own and with the key the
parent admitted in the parent), records both ways on demand, each once, across a SIGKILL of the link."""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import time
import urllib.request

import psutil

from tests.integration.zkhelp import wait_until


PER_SIDE = 2000


def _link_pid(cluster) -> int:
    """The pid of the link process the cluster's host manager runs (0: none)."""
    for manager in cluster.hostmanagers.values():
        for child in psutil.Process(manager.pid).children(recursive=True):  # (under its prefork server)
            try:
                if "client.link" in child.cmdline():
                    return child.pid
            except psutil.NoSuchProcess:
                continue
    return 0



def _received(sub, counts: collections.Counter, seen: set, dup: list) -> None:
    for batch in sub.recv_many(timeout=0.05):
        for i, payload in enumerate(batch.payloads):
            mark = (batch.key, payload)
            if mark in seen:
                dup.append(mark)
            seen.add(mark)
            counts[batch.key] += 1


def test_a_childs_gcm_places_the_link_its_host_manager_restarts_it_and_records_cross_both_ways_once(
        make_embedded, tmp_path):
    hq = make_embedded(hosts=1, first_host="127.0.0.31", secure=True, gcm_args=["--cluster-name", "hq"])
    hq.manager.create("orders", exchanges=1)
    hq.manager.set_rules("orders", {"durability": "always"})
    # the parent admits the store's key, and lets it open a link, publish into orders, read it, and ask its monitor
    # where its journal is
    creds = hq.keys.client("store-1")
    for grant in (("link",), ("publish", "orders"), ("subscribe", "orders"), ("manage", "orders")):
        hq.manager.grant("store-1", *grant)
    store = make_embedded(hosts=1, first_host="127.0.0.32", secure=True, gcm_args=[
        "--cluster-name", "store-1", "--cluster-role", "leaf", "--parent-zk", hq.zk, "--parent-root", hq.root,
        "--parent-credentials", creds])
    store.manager.create("orders", exchanges=1)
    assert store.manager.set_rules("orders", {"durability": "always", "link": "parent"})["link"] == "parent"
    # the child's GCM placed the link, its host manager started it, and it said hello to the parent
    wait_until(lambda: [c["Name"] for c in hq.manager.federation()["Children"]] == ["store-1"], 60,
          "the link's hello at the parent")
    placed = [e for e in store.manager.events("orders", 200) if e["kind"] == "link_placed"]
    assert [e["host"] for e in placed] == ["127.0.0.32"], placed
    # and the parent's queue has it among its events: the child's link carries into it
    ups = wait_until(lambda: [e for e in hq.manager.events("orders", 200) if e["kind"] == "link_up"], 30,
                "the link_up event at the parent")
    assert [e["child"] for e in ups] == ["store-1"]
    first_pid = _link_pid(store)
    assert first_pid

    with hq.connect("orders") as at_hq, store.connect("orders") as at_store:
        up = at_hq.subscriber(b"s.")  # at the parent: what the store publishes
        down = at_store.subscriber(b"h.")  # at the store: what the parent publishes
        pub_store, pub_hq = at_store.publisher(), at_hq.publisher()
        counts: collections.Counter = collections.Counter()
        seen: set = set()
        dup: list = []

        def cross(key: bytes, pub, sub) -> None:
            """Publish probes until one crosses (the interest went the other way first)."""
            before = counts[key]
            deadline = time.monotonic() + 60
            while counts[key] == before:
                assert time.monotonic() < deadline, f"nothing of {key!r} crossed"
                pub.send(key, b"probe-%f" % time.monotonic())
                pub.flush(10)
                _received(sub, counts, seen, dup)

        cross(b"s.probe", pub_store, up)
        cross(b"h.probe", pub_hq, down)

        # both ways under load, the link SIGKILLed half-way: its host manager starts it again, and every record
        # crosses once
        for i in range(PER_SIDE):
            pub_store.send(b"s.k", b"%d" % i)
            pub_hq.send(b"h.k", b"%d" % i)
            if i == PER_SIDE // 2:
                pub_store.flush(10)
                pub_hq.flush(10)
                os.kill(first_pid, signal.SIGKILL)
            _received(up, counts, seen, dup)
            _received(down, counts, seen, dup)
        pub_store.flush(30)
        pub_hq.flush(30)
        deadline = time.monotonic() + 90
        while counts[b"s.k"] < PER_SIDE or counts[b"h.k"] < PER_SIDE:
            assert time.monotonic() < deadline, f"crossed: {dict(counts)}"
            _received(up, counts, seen, dup)
            _received(down, counts, seen, dup)
        second_pid = wait_until(lambda: _link_pid(store), 30, "the link started again")
        assert second_pid != first_pid
        assert (counts[b"s.k"], counts[b"h.k"], dup) == (PER_SIDE, PER_SIDE, [])

    # the parent shows its child and what its link carried: /api/v1/federation (admin), and the live feed the
    # dashboard draws its tree from (test_dashboard.py draws one in a real browser)
    with open(hq.api_token_file) as f:
        token = f.read().strip()
    ask = urllib.request.Request(hq.http_url() + "/api/v1/federation", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(ask, timeout=10) as answer:
        tree = json.loads(answer.read())
    assert (tree["name"], tree["role"], [c["name"] for c in tree["children"]]) == ("hq", "root", ["store-1"])
    links = tree["children"][0]["links"]  # up and down, counted since the link's incarnation started
    assert len(links) == 2 and all(x["records"] > 0 for x in links), links
    with socket.create_connection(("127.0.0.1", int(hq.http_url().rsplit(":", 1)[1])), timeout=10) as feed:
        feed.sendall(b"GET /api/v1/stream HTTP/1.1\r\nhost: x\r\n\r\n")
        got = b""
        while b"\n\n" not in got.partition(b"event: state")[2]:
            got += feed.recv(65536)
    state = json.loads(got.partition(b"event: state")[2].partition(b"data: ")[2].partition(b"\n")[0])
    assert state["federation"]["children"][0]["name"] == "store-1"
    assert "key" not in state["federation"]["children"][0]  # anyone may read the feed: no keys, no endpoints

    # the queue no longer linked: the GCM takes the link away, and the host manager stops it
    store.manager.set_rules("orders", {"link": None})
    wait_until(lambda: not _link_pid(store), 30, "the link stopped")
    assert [e["kind"] for e in store.manager.events("orders", 200) if e["kind"].startswith("link_")][-1] == \
        "link_removed"
