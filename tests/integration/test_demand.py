"""Demand forwarding through a chain of links: a record crosses only while a subscriber at the chain's end wants its
key (real processes: three sites' durable queues on loopback aliases, two link processes, a load publisher)."""

from __future__ import annotations

import time
from typing import Callable

import client
from roq.process import spawn
from tests.integration.sites import DurableQueue


def wait_until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_an_on_demand_chain_carries_a_record_only_while_a_subscriber_at_its_end_wants_it(tmp_path, loads):
    leaf = DurableQueue("127.0.0.18", str(tmp_path / "leaf"), exchanges=1)
    branch = DurableQueue("127.0.0.19", str(tmp_path / "branch"), exchanges=1)
    root = DurableQueue("127.0.0.20", str(tmp_path / "root"), exchanges=1)
    sites = (leaf, branch, root)
    links, conns = [], [client.connect(site.monitor) for site in sites]
    try:
        for name, source, target in (("leaf", leaf, branch), ("branch", branch, root)):
            links.append(spawn("link", "client.link", ["--name", name, "--source", source.monitor, "--target",
                                                       target.monitor, "--on-demand"]))
        for link in links:
            link.wait_ready(60)
        loads.start("publish", leaf.monitor, "--rate", "1000", "--keys", "a.1,b.1", "--duration", "300")

        def journaled(site: int) -> int:
            """Records in a site's journal, as its last heartbeat said."""
            return conns[site].status().journal.next_offset or 0

        # nobody beyond the leaf wants anything: 2,000 records published there, none crossed
        wait_until(lambda: journaled(0) >= 2000, 60, "2,000 records at the leaf")
        assert journaled(1) == journaled(2) == 0

        def adverts() -> list[int]:
            """Interest messages each site's monitor sent a link because what it wants changed."""
            return [conn.status().count("interest_adverts") for conn in conns]

        def receive(sub: client.Subscriber, count: int) -> list[bytes]:
            got: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(got) < count:
                assert time.monotonic() < deadline, f"{len(got)} records reached the root's subscriber"
                got += [b.key for b in sub.recv_many(timeout=0.5) for _ in b.payloads]
            return got

        # a subscriber at the root on "a.": a.1 crosses both links, b.1 neither; its interest cost one message on
        # each link on its way (the root's monitor to the branch's link, the branch's monitor to the leaf's) and
        # none elsewhere
        assert adverts() == [0, 0, 0]
        first = conns[2].subscriber(b"a.")
        assert set(receive(first, 300)) == {b"a.1"}
        assert adverts() == [0, 1, 1]
        # two more on what is wanted already: nothing more is told anywhere
        more = [conns[2].subscriber(b"a."), conns[2].subscriber(b"a.1")]
        for sub in more:
            assert set(receive(sub, 100)) == {b"a.1"}
        for sub in more:
            sub.close()
        assert adverts() == [0, 1, 1]
        first.close()

        # it left: soon nothing crosses any more, while the leaf publishes on
        def crossing_stopped() -> bool:
            before, mark = journaled(1), journaled(0)
            wait_until(lambda: journaled(0) >= mark + 500, 60, "500 more records at the leaf")
            return journaled(1) == before

        wait_until(crossing_stopped, 60, "the links to stop carrying")
        assert journaled(1) > 0 and journaled(2) > 0
        assert adverts() == [0, 2, 2]  # the last one left: one message on each link again
    finally:
        for link in links:
            link.stop()
        for conn in conns:
            conn.close()
        for site in reversed(sites):
            site.stop()
    assert set(branch.keys()) == {b"a.1"} and set(root.keys()) == {b"a.1"}  # never a key nobody wanted
