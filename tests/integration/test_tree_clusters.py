"""A tree of seven real clusters (a root, two branches, four leaves): each its own ZooKeeper namespace, GCM and host
manager, each site's host in a network namespace of its own behind ``tc tbf`` on one bridge (the emulated hosts'
machinery), the links placed by the children's GCMs and run by their host managers; no link or interest
configured anywhere but each cluster's parent.

* with no interest anywhere, the root's queue takes records and no other site's interface carries more than
  heartbeats (``ip -s link``);
* a subscriber joining at a leaf costs one interest advertisement per link on its path, none elsewhere; one at the
  root, one per link below it;
* a leaf's subscriber hears the root, its branch and itself, never a sibling or a cousin; the root's hears every
  cluster; each record once;
* a record for a named cluster (``l3/orders``) sent at the root reaches that cluster alone.
"""

from __future__ import annotations


import pytest

import client
from roqcli.embedded import EmbeddedCluster
from roqcli.emulation import Emulation, HostBudget
from roqcli.zkserver import ZooKeeperServer
from tests.integration.sites import Listener, Tree, interface_bytes, publish_paced
from tests.integration.zkhelp import wait_until

PARENTS = {"b1": "root", "b2": "root", "l1": "b1", "l2": "b1", "l3": "b2", "l4": "b2"}
NAMES = ("root", "b1", "b2", "l1", "l2", "l3", "l4")
HOSTS = {name: f"127.0.0.{41 + i}" for i, name in enumerate(NAMES)}  # each site's host, by the name it goes by
RATE = "200mbit"
PER_SITE = 200


@pytest.fixture
def tree(tmp_path):
    """The seven clusters, started root first, each with its durable queue ``orders`` (linked to its parent's)."""
    emulation = Emulation({HOSTS[name]: HostBudget(bandwidth=RATE) for name in NAMES}).start()
    zookeeper = None
    clusters: dict[str, EmbeddedCluster] = {}
    try:
        zookeeper = ZooKeeperServer(address=emulation.gateway, port=0,
                                    log_path=str(tmp_path / "zookeeper.log")).start(60)
        for name in NAMES:
            args = ["--cluster-name", name]
            if name in PARENTS:
                args += ["--cluster-role", "branch" if name.startswith("b") else "leaf", "--parent-zk",
                         zookeeper.hosts, "--parent-root", f"/tree-{PARENTS[name]}"]
            cluster = EmbeddedCluster(hosts=1, first_host=HOSTS[name], zk=zookeeper.hosts, root=f"/tree-{name}",
                                      emulation=emulation, gcm_args=args, log_dir=str(tmp_path / name))
            clusters[name] = cluster
            cluster.start(60)
            cluster.manager.create("orders", exchanges=1)
            cluster.manager.set_rules("orders", {"durability": "interval",
                                                 **({"link": "parent"} if name in PARENTS else {})})
        yield emulation, clusters
    finally:
        for cluster in reversed(list(clusters.values())):
            cluster.stop()
        if zookeeper is not None:
            zookeeper.stop()
        emulation.stop()


def test_seven_real_clusters_carry_only_what_is_wanted_never_sideways_each_once_and_route_by_name(tree):
    emulation, clusters = tree
    veth = {name: emulation.interface(HOSTS[name]) for name in NAMES}
    conns: dict[str, client.Connection] = {}
    try:
        # every child's link placed, welcomed, and hooked to its queue: each parent lists its children
        def linked() -> bool:
            return all(sorted(c["Name"] for c in clusters[parent].manager.federation()["Children"]) == sorted(
                child for child, p in PARENTS.items() if p == parent) for parent in ("root", "b1", "b2"))
        wait_until(linked, 120, "every child's link welcomed by its parent")
        conns = {name: clusters[name].connect("orders") for name in NAMES}
        wait_until(lambda: all(any(x.way == "up" for x in conns[PARENTS[c]].status().links or []) for c in PARENTS),
                   90, "every link carrying into its parent's queue")
        view = Tree(conns, PER_SITE)
        pubs, adverts, reads, publish = view.pubs, view.adverts, view.reads, view.publish

        # demand: nobody wants anything; the root's queue takes about 2 MB/s and no other site's interface carries
        # more than heartbeats (hellos, interest, the monitors' answers, this test's own status calls)
        before = {name: interface_bytes(veth[name]) for name in NAMES}
        sent, took = publish_paced(pubs["root"], b"root.a", b"x" * 1000, 2000, 2.0)
        moved = {name: interface_bytes(veth[name]) - before[name] for name in NAMES}
        print(f"no interest: the root took {sent * 1000 / took / 1e6:.1f} MB/s for {took:.1f} s; bytes through each "
              f"site's interface meanwhile: {moved}")
        assert moved["root"] >= sent * 1000  # (the records went through the root's interface)
        for name in NAMES[1:]:
            assert moved[name] < 100_000 * took, (name, moved[name])  # heartbeats: under 100 kB/s
        assert adverts() == dict.fromkeys(NAMES, 0)

        # a subscriber at l1: one advertisement on each link of its path (at l1 and at b1), none anywhere else
        leaf = Listener(conns["l1"], b"")
        wait_until(reads("root", "b1", "down", [""]), 60, "l1's interest at the root")
        also = Listener(conns["l1"], b"root.")  # within what is wanted already: nothing more is told
        assert adverts() == {**dict.fromkeys(NAMES, 0), "l1": 1, "b1": 1}
        # a subscriber at the root: to every child, then to theirs (one per link below the root)
        top = Listener(conns["root"], b"")
        wait_until(lambda: all(reads(x, x, "up", [""])() for x in ("l1", "l2", "l3", "l4")), 60,
                   "the root's interest at every leaf")
        assert adverts() == {**dict.fromkeys(NAMES, 0), "root": 2, "b1": 3, "b2": 2, "l1": 1}

        publish("c")
        top.until({f"{name}.c".encode(): PER_SITE for name in NAMES}, "the root to hear every cluster", 90)
        publish("fence", ["b1"], 1)  # after l2's records went through b1: l1 hears the fence, never them
        leaf.until({b"b1.fence": 1, b"root.c": PER_SITE, b"b1.c": PER_SITE, b"l1.c": PER_SITE}, "l1 to hear the fence")

        # a record for a named cluster: sent at the root to l3's queue, heard at l3 alone, under its own key
        at_l3 = Listener(conns["l3"], b"")
        with clusters["root"].connect("l3/orders") as to_l3:
            named = to_l3.publisher()
            for i in range(PER_SITE):
                named.send(b"for-l3", b"%d" % i)
            named.flush(30)
        at_l3.until({b"for-l3": PER_SITE}, "l3 to hear what the root sent it by name", 90)
        publish("end", ["root"], 1)  # behind the named records on the root's queue: every way down has had them
        leaf.until({b"root.end": 1}, "l1 to hear the root's last record")
        top.until({b"root.end": 1}, "the root's own subscriber to hear its last record")
        for listener in (leaf, also, top, at_l3):
            listener.take()
        assert leaf.keys == {b"root.c": PER_SITE, b"b1.c": PER_SITE, b"l1.c": PER_SITE, b"b1.fence": 1,
                             b"root.end": 1}, leaf.keys
        assert also.keys == {b"root.c": PER_SITE, b"root.end": 1}, also.keys
        assert top.keys == {**{f"{name}.c".encode(): PER_SITE for name in NAMES}, b"b1.fence": 1, b"root.end": 1}, \
            top.keys
        assert at_l3.keys == {b"for-l3": PER_SITE, b"root.end": 1}, at_l3.keys  # (it wants every key from its start)
        assert leaf.twice == also.twice == top.twice == at_l3.twice == 0
    finally:
        for conn in conns.values():
            conn.close()
