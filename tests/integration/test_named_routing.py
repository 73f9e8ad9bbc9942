"""Records for a named cluster's queue (``store-2/orders``), routed down the tree by the names each child announced:
four real clusters (a root, a branch, two stores; each its own ZooKeeper root, GCM and host manager on its own
loopback address), the links placed by the children's GCMs, and no per-store configuration anywhere. Only the
named cluster hears them, each once and in order; the links off their way carry none."""

from __future__ import annotations

import collections

import pytest

from roq.errors import ConfigError, NotFoundError
from tests.integration.zkhelp import wait_until

PER_SENDER = 300


def _cluster(make_embedded, name: str, host: str, parent=None, role: str = "leaf"):
    args = ["--cluster-name", name]
    if parent is not None:
        args += ["--cluster-role", role, "--parent-zk", parent.zk, "--parent-root", parent.root]
    cluster = make_embedded(hosts=1, first_host=host, gcm_args=args)
    cluster.manager.create("orders", exchanges=1)
    cluster.manager.set_rules("orders", {"durability": "always", **({"link": "parent"} if parent is not None else {})})
    return cluster


def test_a_record_for_a_named_cluster_reaches_its_subscribers_alone_once_and_in_order(make_embedded):
    hq = _cluster(make_embedded, "hq", "127.0.0.24")
    eu = _cluster(make_embedded, "eu", "127.0.0.25", hq, role="branch")
    s1 = _cluster(make_embedded, "store-1", "127.0.0.26", eu)
    s2 = _cluster(make_embedded, "store-2", "127.0.0.27", eu)
    clusters = {"hq": hq, "eu": eu, "store-1": s1, "store-2": s2}

    # the stores' names climb to the root through the branch's link: nobody configured them there
    def below_hq():
        children = hq.manager.federation()["Children"]
        return children and children[0]["Name"] == "eu" and children[0]["Below"] == ["store-1", "store-2"]
    wait_until(below_hq, 90, "the stores' names at the root")
    with pytest.raises(NotFoundError, match="no cluster named 'store-9' in the tree of hq"):
        hq.connect("store-9/orders")

    conns = {name: c.connect("orders") for name, c in clusters.items()}
    try:
        subs = {name: conn.subscriber(b"") for name, conn in conns.items()}
        heard: dict[str, collections.Counter] = {name: collections.Counter() for name in clusters}
        order: dict[str, dict[bytes, list[int]]] = {name: collections.defaultdict(list) for name in clusters}

        def take() -> None:
            for name, sub in subs.items():
                for b in sub.recv_many(timeout=0.02):
                    heard[name][b.key] += len(b.payloads)
                    order[name][b.key] += [int(p) for p in b.payloads]

        # from the root down two links, from a store to its sibling through the branch, from a store up to the root
        # (subscribers everywhere want every key: interest would carry plain records anywhere, addresses decide here)
        senders = {"hq": ("store-2", b"h."), "store-1": ("store-2", b"s1."), "store-2": ("hq", b"s2.")}
        with hq.connect("store-2/orders") as to_s2, s1.connect("store-2/orders") as sibling, \
                s2.connect("hq/orders") as up:
            with pytest.raises(ConfigError, match="subscribe at store-2"):
                to_s2.subscriber(b"")
            pubs = {"hq": to_s2.publisher(), "store-1": sibling.publisher(), "store-2": up.publisher()}
            for i in range(PER_SENDER):
                for name, pub in pubs.items():
                    pub.send(senders[name][1] + b"k%d" % (i % 3), b"%d" % i)
            for pub in pubs.values():
                pub.flush(30)

            want = {"store-2": {b"h.k0", b"h.k1", b"h.k2", b"s1.k0", b"s1.k1", b"s1.k2"}, "hq": {b"s2.k0", b"s2.k1", b"s2.k2"}}

            def arrived() -> bool:
                take()
                return all(sum(heard[name][k] for k in keys) >= PER_SENDER * len(keys) // 3 for name, keys in want.items())
            wait_until(arrived, 90, "the addressed records at their clusters")
            for _ in range(5):  # (what one on the way might have been handed wrongly, it was handed before: drained)
                take()

        # each named cluster heard exactly its records, once, in each sender's order, under their own keys
        for name, keys in want.items():
            assert set(heard[name]) == keys, (name, heard[name])
            for key in keys:
                assert order[name][key] == list(range(int(key[-1:]), PER_SENDER, 3)), (name, key)
        assert not heard["eu"] and not heard["store-1"], (heard["eu"], heard["store-1"])

        # the links off their way carried none of them: store-1's way down nothing, store-2's way up only its own
        monitors = {name: conn.monitor for name, conn in conns.items()}

        def crossings(child: str) -> dict[str, int]:
            [entry] = [c for c in eu.manager.federation()["Children"] if c["Name"] == child]
            return {("down" if x["Target"] == monitors[child] else "up"): x["Records"] for x in entry["Links"]}
        wait_until(lambda: crossings("store-1") == {"up": PER_SENDER, "down": 0}, 30,
                   "store-1's link: its own records up, nothing down")
        wait_until(lambda: crossings("store-2") == {"up": PER_SENDER, "down": 2 * PER_SENDER}, 30,
                   "store-2's link: its own records up, the root's and its sibling's down")
    finally:  # (a failure leaves no client behind: its sockets would hold the test's exit)
        for conn in conns.values():
            conn.close()
