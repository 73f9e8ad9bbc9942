"""A tree of four clusters' durable queues (a root, a branch, two leaves, each on its own loopback address) joined by
three link processes that carry records both ways on demand: interest reaches a parent only from below and a
child only from above, records go up from where they were published and down from where they arrived, never
sideways to a sibling, each once; every interest message is counted where it is sent."""

from __future__ import annotations

import collections

import client
from roq.process import spawn
from tests.integration.sites import DurableQueue, Listener, Tree, stop_tree
from tests.integration.zkhelp import wait_until

PER_SITE = 300
ADDRESSES = {"root": "127.0.0.20", "branch": "127.0.0.19", "leaf-1": "127.0.0.18", "leaf-2": "127.0.0.28"}
PARENTS = {"branch": "root", "leaf-1": "branch", "leaf-2": "branch"}


def test_a_tree_carries_records_up_and_down_on_demand_never_sideways_each_once(tmp_path):
    sites = {name: DurableQueue(address, str(tmp_path / name), exchanges=1) for name, address in ADDRESSES.items()}
    conns = {name: client.connect(site.monitor) for name, site in sites.items()}
    links = []
    try:
        for child, parent in PARENTS.items():
            links.append(spawn("link", "client.link", [
                "--name", child, "--cluster", child, "--role", "branch" if child == "branch" else "leaf",
                "--source", sites[child].monitor, "--target", sites[parent].monitor, "--on-demand", "--down"]))
        for link in links:
            link.wait_ready(60)
        view = Tree(conns, PER_SITE)
        pubs, adverts, reads, publish = view.pubs, view.adverts, view.reads, view.publish

        # nobody wants anything: what is published stays where it was published (and never crosses later: a link
        # that comes to want something reads on from its journal's end)
        publish("a")
        assert adverts() == {"root": 0, "branch": 0, "leaf-1": 0, "leaf-2": 0}

        # a subscriber at leaf-1: its interest climbs its path (one message at leaf-1, one at the branch) and
        # reaches the root as the link that reads the root's queue down; nobody else is told anything
        leaf = Listener(conns["leaf-1"], b"")
        wait_until(reads("root", "branch", "down", [""]), 30, "leaf-1's interest at the root")
        also = Listener(conns["leaf-1"], b"root.")  # a second one, within what is wanted: nothing more is told
        assert adverts() == {"root": 0, "branch": 1, "leaf-1": 1, "leaf-2": 0}
        publish("b")
        # what the root and the branch publish comes down to leaf-1; leaf-2's stays home (nobody above wants it)
        leaf.until({b"root.b": PER_SITE, b"branch.b": PER_SITE, b"leaf-1.b": PER_SITE}, "leaf-1 to hear phase b")
        also.until({b"root.b": PER_SITE}, "the second subscriber at leaf-1")
        assert adverts() == {"root": 0, "branch": 1, "leaf-1": 1, "leaf-2": 0}

        # a subscriber at the root: its interest goes down to every child (one message at the root, one to each
        # leaf's link at the branch)
        top = Listener(conns["root"], b"")
        wait_until(lambda: all(reads(leaf_, leaf_, "up", [""])() for leaf_ in ("leaf-1", "leaf-2")), 30,
                   "the root's interest at both leaves")
        assert adverts() == {"root": 1, "branch": 3, "leaf-1": 1, "leaf-2": 0}
        publish("c")
        top.until({f"{name}.c".encode(): PER_SITE for name in ADDRESSES}, "the root to hear every cluster")
        # leaf-2's records are in the branch's journal now, before this fence: leaf-1 hears the fence, and never
        # leaf-2's records that went up through the branch beside it
        publish("fence", ["branch"], 1)
        leaf.until({b"branch.fence": 1, b"root.c": PER_SITE, b"leaf-1.c": PER_SITE}, "leaf-1 to hear the fence")
        top.until({b"branch.fence": 1}, "the root to hear the fence")
        for listener in (leaf, also, top):
            listener.take()
        assert leaf.keys == {k: PER_SITE for k in (b"root.b", b"branch.b", b"leaf-1.b", b"root.c", b"branch.c",
                                                   b"leaf-1.c")} | {b"branch.fence": 1}
        assert also.keys == {b"root.b": PER_SITE, b"root.c": PER_SITE}
        assert top.keys == {f"{name}.c".encode(): PER_SITE for name in ADDRESSES} | {b"branch.fence": 1}

        # the root's subscriber leaves: the root's and the leaves' links up are told so, one message each
        top.sub.close()
        wait_until(lambda: all(reads(leaf_, leaf_, "up", [])() for leaf_ in ("leaf-1", "leaf-2")), 30,
                   "the withdrawal at both leaves")
        assert adverts() == {"root": 2, "branch": 5, "leaf-1": 1, "leaf-2": 0}
    finally:
        stop_tree(links, conns, sites)
    # each journal: its own records and exactly those that some subscriber beyond it wanted, each once
    own = {name: {f"{name}.{p}".encode(): PER_SITE for p in "abc"} for name in ADDRESSES}
    own["branch"][b"branch.fence"] = 1
    crossed = {
        "root": {b"branch.c": PER_SITE, b"leaf-1.c": PER_SITE, b"leaf-2.c": PER_SITE, b"branch.fence": 1},
        "branch": {b"root.b": PER_SITE, b"root.c": PER_SITE, b"leaf-1.c": PER_SITE, b"leaf-2.c": PER_SITE},
        "leaf-1": {b"root.b": PER_SITE, b"branch.b": PER_SITE, b"root.c": PER_SITE, b"branch.c": PER_SITE,
                   b"branch.fence": 1},
        "leaf-2": {},
    }
    for name, site in sites.items():
        records = collections.Counter()
        for key, count in site.records_by_key().items():
            records[key] += count
        assert records == own[name] | crossed[name], name
        for publisher, seqs in site.journaled().items():
            assert seqs == sorted(set(seqs)), f"{name}: a publisher's records twice or out of order"
