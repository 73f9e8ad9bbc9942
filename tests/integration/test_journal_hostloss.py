"""A durable queue whose journal's host is lost, end to end: a real GCM, host managers, monitor, exchanges and
journal on two loopback hosts, one of them killed with SIGKILL."""

from __future__ import annotations

import json
import time
import urllib.request

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


def _read(sub, count: int, timeout: float = 30.0) -> list[int]:
    """The payloads (numbers) of the first ``count`` records ``sub`` gets, within ``timeout``."""
    got: list[int] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += [int(p) for b in sub.recv_many(timeout=0.5) for p in b.payloads]
    return got


def _roles(qm, queue: str) -> dict[str, str]:
    """Each replica of ``queue``'s journal and its role, as the monitor last heard them (live ones only)."""
    journal = qm.journal(queue)
    return {r.replica: r.role for r in (journal.replicas or []) if r.alive} if journal is not None else {}


@pytest.mark.measured  # a 4 s ZooKeeper session: nothing that loads the machine beside it
def test_a_replicated_journal_loses_its_leaders_host_and_keeps_every_acknowledged_record(make_embedded):
    """``replicas = 3`` on three hosts: the monitor has one replica elected (off its own host) and the others follow
    it. The leader's host dies (SIGKILL of everything on it) while the publisher has records in flight: another
    replica is elected within a few seconds, with no operator and no move by the GCM, and a subscriber replaying
    from "earliest" gets every record the publisher sent, once and in order, the ones acknowledged before the
    loss too."""
    cluster = make_embedded(hosts=3, session_timeout=4.0, gcm_args=["--host-grace", "1"])
    qm = cluster.manager
    qm.create("r", "127.0.0.11")
    qm.set_rules("r", {"sustain_s": 3600, "host_cpu_percent": 100, "host_memory_percent": 100,
                       "durability": "always", "replicas": 3})
    roles = wait_until(lambda: (r := _roles(qm, "r")) and sorted(r.values()) == ["follower", "follower", "leader"]
                       and r, 30, "a leader elected and two followers")
    leader = next(h for h, role in roles.items() if role == "leader")
    assert leader != "127.0.0.11", "the first leader stands off the monitor's host"
    with cluster.connect("r") as conn:
        pub = conn.publisher()
        for i in range(3000):
            pub.send(b"k", b"%d" % i)
        pub.flush(30)
        wait_until(lambda: pub.stats()["buffered_bytes"] == 0, 10, "the first records delivered")
        durable = conn.subscriber(durable="audit", start="earliest")
        assert _read(durable, 3000) == list(range(3000))
        durable.commit()  # on a majority of the replicas: it survives the leader's host
        durable.close()
        for i in range(3000, 6000):  # in flight when the leader's host dies
            pub.send(b"k", b"%d" % i)
        lost_at = time.monotonic()
        pids = cluster.crash_host(leader)
        wait_until(lambda: all(gone(p) for p in pids), 5, "the lost host's processes dead")
        for i in range(6000, 9000):
            pub.send(b"k", b"%d" % i)
        pub.flush(60)
        recovered = time.monotonic() - lost_at
        after = wait_until(lambda: (r := _roles(qm, "r")) and sorted(r.values()) == ["follower", "leader"] and r,
                           10, "the new leader and its follower")
        assert leader not in after
        got = _read(conn.subscriber(start="earliest"), 9000)
        assert got == list(range(9000)), f"{len(got)} records replayed, {len(set(got))} distinct"
        resumed = _read(conn.subscriber(durable="audit", start="earliest"), 6000)
        assert resumed == list(range(3000, 9000)), "the durable subscriber goes on from its committed position"
    new_leader = next(h for h, role in after.items() if role == "leader")

    def metrics() -> str:
        with urllib.request.urlopen(cluster.http_url() + "/metrics", timeout=10) as answer:
            return answer.read().decode()

    shown = wait_until(lambda: (text := metrics()) and 'roq_journal_elections_total{queue="r"} 2.0' in text and text,
                       15, "the second election in /metrics")
    assert f'roq_journal_replica_leader{{queue="r",replica="{new_leader}"}} 1.0' in shown
    assert f'roq_journal_replica_epoch{{queue="r",replica="{new_leader}"}} 2.0' in shown
    elections = [e for e in qm.events("r") if e["kind"] == "journal_election"]
    assert len(elections) >= 2 and f"leader {leader} silent" in elections[-1]["text"], elections
    assert not [e for e in qm.events("r") if e["kind"] == "journal_moved"], "the GCM moved no journal"
    print(f"every record acknowledged {recovered:.2f}s after the leader's host was lost; elections: "
          f"{[e['text'] for e in elections]}")
