"""A durable queue whose journal's host is lost, end to end: a real GCM, host managers, monitor, exchanges and
journal on two loopback hosts, one of them killed with SIGKILL."""

from __future__ import annotations

import json
import time

import pytest
from kazoo.exceptions import NoNodeError

from exchange.journal import REBASE_SHIFT
from roq.zk import Paths
from zkhelp import gone, wait_until


@pytest.mark.measured  # a 4 s ZooKeeper session and a 1 s host grace: nothing that loads the machine beside it
def test_when_the_journals_host_is_lost_a_new_journal_begins_on_a_live_host_past_the_lost_ones_offsets(
        make_embedded, kz):
    """The host of the monitor, the journal and x1 dies (SIGKILL of everything on it). After the host grace the
    GCM moves them; the new journal, in an empty directory, begins past every offset the lost one gave. The
    publisher's next records are acknowledged by it; a subscriber replaying from "earliest" gets exactly those
    (the ones acknowledged before stay on the lost host's disk), and is told where the journal begins."""
    cluster = make_embedded(hosts=2, session_timeout=4.0, gcm_args=["--host-grace", "1"])
    qm = cluster.manager
    qm.create("d", "127.0.0.11")
    qm.set_rules("d", {"sustain_s": 3600, "host_cpu_percent": 100, "host_memory_percent": 100,
                       "durability": "always"})
    assert qm.scale_out("d", 2)["Placed"] == [{"Exchange": "x2", "Host": "127.0.0.12"}]
    path = Paths(cluster.root).journal("d")

    def journal_on(host: str):
        try:  # (the lost journal's node goes when its session expires: perhaps between two calls)
            doc = json.loads(kz.get(path)[0])
        except NoNodeError:
            return None
        return doc if doc.get("host") == host else None

    wait_until(lambda: journal_on("127.0.0.11"), 30, "the journal running beside the monitor")
    with cluster.connect("d") as conn:
        pub = conn.publisher()
        for i in range(1000):
            pub.send(b"k", b"%d" % i)
        pub.flush(20)
        # delivered too (the exchange says so within 20 ms of its acknowledgement): a publisher resends after a
        # fail-over what was acknowledged and not yet delivered, and the new journal would take it again
        wait_until(lambda: pub.stats()["buffered_bytes"] == 0, 10, "the first records delivered")
        lost_at = int(time.time())
        pids = cluster.crash_host("127.0.0.11")
        wait_until(lambda: all(gone(p) for p in pids), 5, "the lost host's processes dead")
        wait_until(lambda: journal_on("127.0.0.12"), 40, "a new journal on the live host")
        for i in range(1000, 2000):
            pub.send(b"k", b"%d" % i)
        pub.flush(60)
        # (the monitor's figures are the journal's last heartbeat: the one before it began may still be the last)
        wait_until(lambda: (qm.journal("d").first_offset or 0) >= lost_at << REBASE_SHIFT, 10,
                   "the new journal beginning past the lost one's offsets")
        sub = conn.subscriber(start="earliest")
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 1000 and time.monotonic() < deadline:
            got += [int(p) for b in sub.recv_many(timeout=0.5) for p in b.payloads]
        assert got == list(range(1000, 2000))
    moved = [e for e in qm.events("d") if e["kind"] == "journal_moved"]
    assert len(moved) == 1 and moved[0]["lost_host"] == "127.0.0.11" and moved[0]["host"] == "127.0.0.12"

