"""A tree of seven clusters (a root, two branches, four leaves), each on an emulated host of its own (a network
namespace joined to the others by a veth pair behind ``tc tbf``), joined by six link processes that carry records
both ways on demand, each in its child's namespace: with no interest anywhere a leaf's link carries nothing while the
root's queue takes 10 MB/s (its host's interface counts heartbeats only); interest climbs each path with one
advertisement per link and never reaches a sibling; records reach every subscriber whose prefix matches, once, never
a sibling's or a cousin's; and a leaf's link taken down and up (``ip link set down/up``) loses and doubles nothing.

It runs in ``make federation`` (about a minute and 27 processes: too heavy beside the rest of ``make test``)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

import client
from roq.process import spawn
from roqcli.emulation import Emulation, HostBudget
from tests.integration.sites import DurableQueue, Listener, Tree, interface_bytes, publish_paced, stop_tree
from tests.integration.zkhelp import wait_until

PARENTS = {"b1": "root", "b2": "root", "l1": "b1", "l2": "b1", "l3": "b2", "l4": "b2"}
NAMES = ("root", "b1", "b2", "l1", "l2", "l3", "l4")
RATE = "200mbit"
PER_SITE = 300
FLAPS = int(os.environ.get("ROQ_TREE_FLAPS", "3"))



@pytest.fixture
def hosts():
    emulation = Emulation({name: HostBudget(bandwidth=RATE) for name in NAMES}).start()
    try:
        yield emulation
    finally:
        emulation.stop()


def test_a_tree_of_seven_clusters_on_emulated_hosts_carries_only_what_is_wanted_never_sideways_and_rides_out_flaps(
        tmp_path, hosts):
    sites = {name: DurableQueue(hosts.addresses[name], str(tmp_path / name), exchanges=1, enter=hosts.enter(name))
             for name in NAMES}
    conns = {name: client.connect(site.monitor) for name, site in sites.items()}
    links = []
    veth = {name: hosts.interface(name) for name in NAMES}
    try:
        for child, parent in PARENTS.items():
            links.append(spawn("link", "client.link", [
                "--name", child, "--cluster", child, "--role", "branch" if child.startswith("b") else "leaf",
                "--source", sites[child].monitor, "--target", sites[parent].monitor, "--on-demand", "--down"],
                enter=hosts.enter(child)))
        for link in links:
            link.wait_ready(60)
        view = Tree(conns, PER_SITE)
        pubs, adverts, reads, publish = view.pubs, view.adverts, view.reads, view.publish

        # demand: nobody wants anything; the root's queue takes 10 MB/s for 3 s and no other host's interface
        # carries more than heartbeats (every link's hellos, the monitors' answers, this test's own status calls)
        before = {name: interface_bytes(veth[name]) for name in NAMES}
        sent, took = publish_paced(pubs["root"], b"root.a", b"x" * 1000, 10_000, 3.0)
        moved = {name: interface_bytes(veth[name]) - before[name] for name in NAMES}
        print(f"no interest: the root took {sent * 1024 / took / 1e6:.1f} MB/s for {took:.1f} s; bytes through each "
              f"host's interface meanwhile: {moved}")
        assert moved["root"] >= sent * 1000  # (the records went through the root's link)
        for name in NAMES[1:]:
            assert moved[name] < 100_000 * took, (name, moved[name])  # heartbeats: under 100 kB/s
        assert adverts() == dict.fromkeys(NAMES, 0)

        # a subscriber at l1: one advertisement on each link of its path (at l1 and at b1), none anywhere else
        leaf = Listener(conns["l1"], b"")
        wait_until(reads("root", "b1", "down", [""]), 30, "l1's interest at the root")
        assert adverts() == {**dict.fromkeys(NAMES, 0), "l1": 1, "b1": 1}
        # a subscriber at the root: to every child, then to theirs (one per link below the root)
        top = Listener(conns["root"], b"")
        wait_until(lambda: all(reads(leaf_, leaf_, "up", [""])() for leaf_ in ("l1", "l2", "l3", "l4")), 30,
                   "the root's interest at every leaf")
        assert adverts() == {**dict.fromkeys(NAMES, 0), "root": 2, "b1": 3, "b2": 2, "l1": 1}

        publish("c")
        top.until({f"{name}.c".encode(): PER_SITE for name in NAMES}, "the root to hear every cluster")
        publish("fence", ["b1"], 1)  # after l2's records went through b1: l1 hears the fence, never them
        leaf.until({b"b1.fence": 1, b"root.c": PER_SITE, b"b1.c": PER_SITE, b"l1.c": PER_SITE}, "l1 to hear the fence")

        # l1's host's link taken down and up while the root publishes to it: nothing lost, nothing twice
        for flap in range(FLAPS):
            subprocess.run(["ip", "link", "set", veth["l1"], "down"], check=True)
            for i in range(PER_SITE):
                pubs["root"].send(b"root.flap", b"%d" % i)
            pubs["root"].flush(30)
            time.sleep(1.0)  # (the outage itself)
            subprocess.run(["ip", "link", "set", veth["l1"], "up"], check=True)
            leaf.until({b"root.flap": PER_SITE * (flap + 1)}, f"l1 to hear the root after flap {flap + 1}", 90)
        top.until({b"root.flap": PER_SITE * FLAPS}, "the root's own subscriber to hear every flap's records", 90)
        leaf.take()
        top.take()
        assert leaf.keys == {b"root.c": PER_SITE, b"b1.c": PER_SITE, b"l1.c": PER_SITE, b"b1.fence": 1,
                             b"root.flap": PER_SITE * FLAPS}, leaf.keys
        assert top.keys == {**{f"{name}.c".encode(): PER_SITE for name in NAMES}, b"b1.fence": 1,
                            b"root.flap": PER_SITE * FLAPS}, top.keys
        assert leaf.twice == top.twice == 0
    finally:
        stop_tree(links, conns, sites)
    for name, site in sites.items():  # each journal: each publisher's records once and in order
        for publisher, seqs in site.journaled().items():
            assert seqs == sorted(set(seqs)), f"{name}: a publisher's records twice or out of order"

