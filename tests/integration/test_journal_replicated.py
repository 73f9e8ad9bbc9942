"""A replicated journal (``replicas = 3``) in a real cluster: a GCM, a host manager per loopback host, the monitor,
an exchange and three journal replicas, under faults: the leader's host lost, processes killed with ``kill -9`` or
paused with SIGSTOP past the heartbeat timeout, one fault or two at once.

Every scenario runs the same audit: 3,000 records published and acknowledged, a durable subscriber's position
committed, 3,000 more sent and in flight when the fault strikes, 3,000 more sent during it; once it is healed,
every record is acknowledged, a replay from "earliest" holds each of the 9,000 once and in order, the durable
subscriber goes on from its position, and every live replica follows the leader of the newest epoch again."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import threading
import time
import urllib.request
from typing import Callable

import pytest

from roq.errors import BrokerTimeoutError
from roqcli.emulation import HostBudget
from zkhelp import gone, wait_until

HOSTS = ("127.0.0.11", "127.0.0.12", "127.0.0.13")  # the monitor and the exchange on the first


def _read(sub, count: int, timeout: float = 30.0, number: Callable[[bytes], int] = int) -> list[int]:
    """The numbers in the payloads of the first ``count`` records ``sub`` gets, within ``timeout``."""
    got: list[int] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += [number(p) for b in sub.recv_many(timeout=0.5) for p in b.payloads]
    return got


def _replicated_queue(cluster):
    """Queue "r" with its monitor on the cluster's first host, durable (``always``) with three replicas, nothing
    else moving it (no scaling, no host too busy); the cluster's queue manager."""
    qm = cluster.manager
    qm.create("r", cluster.addresses[0])
    qm.set_rules("r", {"sustain_s": 3600, "host_cpu_percent": 100, "host_memory_percent": 100,
                       "durability": "always", "replicas": 3})
    return qm


def _replicas(qm, queue: str = "r") -> dict:
    """The live replicas of ``queue``'s journal as its monitor last heard them, by name."""
    journal = qm.journal(queue)
    return {r.replica: r for r in (journal.replicas or []) if r.alive} if journal is not None else {}


def _settled(qm, count: int) -> dict | None:
    """``count`` live replicas, one leading and the others following it, all in sync; None until then."""
    found = _replicas(qm)
    roles = sorted(r.role for r in found.values())
    if roles != ["follower"] * (count - 1) + ["leader"] or not all(r.in_sync for r in found.values()):
        return None
    return found


def _leader(found: dict):
    return next(r for r in found.values() if r.role == "leader")


@dataclasses.dataclass
class Rig:
    """The cluster of one scenario and what the scenario's fault needs of it."""

    cluster: object
    qm: object
    leader: object  # the leader's ReplicaStatus before the fault
    followers: list  # the followers' ReplicaStatus before the fault
    pub: object = None  # the audited publisher
    lost_hosts: list[str] = dataclasses.field(default_factory=list)
    paused: list[int] = dataclasses.field(default_factory=list)
    healers: list[Callable[[], None]] = dataclasses.field(default_factory=list)

    def pause(self, *pids: int) -> None:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            self.paused.append(pid)

    def heal(self) -> None:
        """Undo what the fault did that can be undone (paused processes, links, dropped packets)."""
        for pid in self.paused:
            os.kill(pid, signal.SIGCONT)
        self.paused.clear()
        while self.healers:
            self.healers.pop()()

    def monitor_pid(self) -> int:
        status = self.qm.status("r")
        assert status is not None
        return status.pid


def _lose_leaders_host(rig: Rig) -> None:
    pids = rig.cluster.crash_host(rig.leader.replica)
    rig.lost_hosts.append(rig.leader.replica)
    wait_until(lambda: all(gone(p) for p in pids), 5, "the lost host's processes dead")


def _pause_leader(rig: Rig) -> None:  # past the heartbeat timeout: another is elected; it comes back fenced
    rig.pause(rig.leader.pid)
    wait_until(lambda: any(r.role == "leader" and r.epoch > rig.leader.epoch for r in _replicas(rig.qm).values()), 15,
               "another leader elected")


def _kill_leader(rig: Rig) -> None:  # its host manager starts it again: it comes back as a follower
    os.kill(rig.leader.pid, signal.SIGKILL)


def _kill_follower(rig: Rig) -> None:  # the other two are a majority: nothing waits
    os.kill(rig.followers[0].pid, signal.SIGKILL)


def _pause_both_followers(rig: Rig) -> None:  # no majority: nothing is acknowledged, and no election either
    rig.pause(*(f.pid for f in rig.followers))
    rig.pub.send(b"k", b"-1")  # sent once neither follower runs: a majority never holds it while they are paused
    with pytest.raises(BrokerTimeoutError):
        rig.pub.flush(1.5)


def _kill_monitor(rig: Rig) -> None:  # the new monitor finds the live leader: no election
    os.kill(rig.monitor_pid(), signal.SIGKILL)


def _kill_leader_and_a_follower(rig: Rig) -> None:  # two faults at once: a minority left until they are back
    os.kill(rig.leader.pid, signal.SIGKILL)
    os.kill(rig.followers[0].pid, signal.SIGKILL)


FAULTS: dict[str, Callable[[Rig], None]] = {
    "leader's host lost": _lose_leaders_host,
    "leader paused past its timeout": _pause_leader,
    "leader killed": _kill_leader,
    "a follower killed": _kill_follower,
    "both followers paused": _pause_both_followers,
    "monitor killed": _kill_monitor,
    "leader and a follower killed at once": _kill_leader_and_a_follower,
}


@pytest.mark.measured  # a 4 s ZooKeeper session: nothing that loads the machine beside it
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_replicated_journal_keeps_every_acknowledged_record_through(fault, make_embedded):
    _audit(make_embedded(hosts=3, session_timeout=4.0, gcm_args=["--host-grace", "1"]), fault, FAULTS[fault])


def _iptables(rig: Rig, host: str, *rules: str) -> None:
    """Rules in ``host``'s own network namespace (gone with it): ``-A OUTPUT -d X -j DROP``..."""
    emulation = rig.cluster.emulation
    namespace = emulation.namespaces[emulation.named(host)]
    for rule in rules:
        subprocess.run(["ip", "netns", "exec", namespace, "iptables", *rule.split()], check=True)


def _cut(rig: Rig, host: str, *others: str) -> None:
    """Drop every packet between ``host`` and ``others``, both ways, in ``host``'s namespace."""
    _iptables(rig, host, *(f"-A {chain} {way} {other} -j DROP" for other in others
                           for chain, way in (("INPUT", "-s"), ("OUTPUT", "-d"))))
    rig.healers.append(lambda: _iptables(rig, host, "-F INPUT", "-F OUTPUT"))


def _link(rig: Rig, host: str, state: str) -> None:
    emulation = rig.cluster.emulation
    subprocess.run(["ip", "link", "set", emulation.interface(emulation.named(host)), state], check=True)


def _new_leader(rig: Rig) -> None:
    wait_until(lambda: any(r.role == "leader" and r.epoch > rig.leader.epoch for r in _replicas(rig.qm).values()),
               15, "another leader elected")


def _flap_leaders_link(rig: Rig) -> None:  # down past the heartbeat timeout, not past its ZooKeeper session
    _link(rig, rig.leader.replica, "down")
    rig.healers.append(lambda: _link(rig, rig.leader.replica, "up"))
    _new_leader(rig)


def _leaders_link_down_past_its_session(rig: Rig) -> None:
    _link(rig, rig.leader.replica, "down")
    rig.healers.append(lambda: _link(rig, rig.leader.replica, "up"))
    _new_leader(rig)
    wait_until(lambda: rig.leader.replica not in {h["Address"] for h in rig.qm.hosts()}, 20,
               "the leader's host unregistered (its ZooKeeper session expired)")


def _leader_cut_from_its_followers(rig: Rig) -> None:  # it still reaches the monitor, the exchange and ZooKeeper
    _cut(rig, rig.leader.replica, *(f.replica for f in rig.followers))
    _new_leader(rig)


def _leader_cut_from_zookeeper(rig: Rig) -> None:  # its host is lost to the GCM; the replica leads on
    _cut(rig, rig.leader.replica, rig.cluster.emulation.gateway)
    wait_until(lambda: rig.leader.replica not in {h["Address"] for h in rig.qm.hosts()}, 20,
               "the leader's host unregistered (its ZooKeeper session expired)")


def _leader_cut_from_the_monitor_and_exchange(rig: Rig) -> None:
    _cut(rig, rig.leader.replica, rig.cluster.addresses[0])
    _new_leader(rig)


def _follower_cut_off(rig: Rig) -> None:  # the leader and the other follower are a majority
    _cut(rig, rig.followers[0].replica, *(h for h in rig.cluster.addresses if h != rig.followers[0].replica),
         rig.cluster.emulation.gateway)


LINK_FAULTS: dict[str, tuple[Callable[[Rig], None], bool]] = {  # the fault, and whether the leader stays
    "leader's link flapped": (_flap_leaders_link, False),
    "leader's link down past its session": (_leaders_link_down_past_its_session, False),
    "leader cut off from its followers": (_leader_cut_from_its_followers, False),
    "leader cut off from ZooKeeper": (_leader_cut_from_zookeeper, True),
    "leader cut off from the monitor and the exchange": (_leader_cut_from_the_monitor_and_exchange, False),
    "a follower cut off from everything": (_follower_cut_off, True),
}


@pytest.mark.one_at_a_time("emulated")  # network namespaces: one emulated cluster at a time, as every other
@pytest.mark.parametrize("fault", list(LINK_FAULTS))
def test_a_replicated_journal_on_emulated_hosts_keeps_every_acknowledged_record_through(fault, make_embedded):
    """Partitions of the network: emulated hosts (a network namespace and a link each, on one bridge), a link set
    down or packets dropped by iptables in one host's namespace. Four hosts: the replicas are placed off the
    monitor's host, so the leader can be cut off from its followers and still reach the monitor."""
    cluster = make_embedded(hosts=4, zk=None, session_timeout=4.0, gcm_args=["--host-grace", "1"],
                            budgets=[HostBudget(0.0, "1gbit")])  # the monitor and the exchange alone on the first
    _audit(cluster, fault, *LINK_FAULTS[fault])


def _audit(cluster, name: str, fault: Callable[[Rig], None], leader_stays: bool | None = None) -> None:
    """Run the audit of the module's docstring around ``fault``."""
    qm = _replicated_queue(cluster)
    monitor_host = cluster.addresses[0]
    before = wait_until(lambda: _settled(qm, 3), 30, "a leader elected and two followers in sync")
    leader = _leader(before)
    assert leader.replica != monitor_host, "the first leader stands off the monitor's host"
    rig = Rig(cluster, qm, leader, sorted((r for r in before.values() if r.role == "follower"),
                                          key=lambda r: r.replica))
    if leader_stays is None:
        leader_stays = name in ("a follower killed", "both followers paused", "monitor killed")
    with cluster.connect("r") as conn:
        pub = rig.pub = conn.publisher()
        for i in range(3000):
            pub.send(b"k", b"%d" % i)
        pub.flush(30)
        wait_until(lambda: pub.stats()["buffered_bytes"] == 0, 10, "the first records delivered")
        durable = conn.subscriber(durable="audit", start="earliest")
        assert _read(durable, 3000) == list(range(3000))
        durable.commit()  # on a majority of the replicas: it survives whatever the fault takes
        durable.close()
        # the fault strikes once the monitor heard the leader say its followers hold the first records (a leader
        # lost in its first heartbeat period after the election left only its first report, "no follower reached
        # yet", and was passed over for that a moment before its silence counted)
        wait_until(lambda: (found := _settled(qm, 3)) and _leader(found).end > leader.end, 10,
                   "the leader's report of its followers holding the first records")
        for i in range(3000, 6000):  # in flight when the fault strikes
            pub.send(b"k", b"%d" % i)
        struck = time.monotonic()
        try:
            fault(rig)
            for i in range(6000, 9000):
                pub.send(b"k", b"%d" % i)
        finally:
            rig.heal()
        pub.flush(60)
        acknowledged = time.monotonic() - struck
        after = wait_until(lambda: _settled(qm, 3 - len(rig.lost_hosts)), 30,
                           "every live replica following the newest leader, in sync")
        got = _read(conn.subscriber(start="earliest"), 9000)
        assert [n for n in got if n >= 0] == list(range(9000)), f"{len(got)} records replayed, {len(set(got))} distinct"
        resumed = [n for n in _read(conn.subscriber(durable="audit", start="earliest"), 6000) if n >= 0]
        assert resumed == list(range(3000, 9000)), "the durable subscriber goes on from its committed position"
    new = _leader(after)
    if leader_stays:
        assert new.replica == leader.replica and new.epoch == leader.epoch, "the leader stays"
    else:
        assert new.epoch > leader.epoch
    elections = wait_until(lambda: (found := [e for e in qm.events("r") if e["kind"] == "journal_election"]) and
                           any(e["epoch"] == new.epoch for e in found) and found, 10,
                           "the elections in the queue's events")  # (the monitor writes its events every so often)
    assert len(elections) == 1 if leader_stays else len(elections) >= new.epoch, elections
    if name == "leader's host lost":
        assert f"leader {leader.replica} silent" in elections[-1]["text"], elections
        assert not [e for e in qm.events("r") if e["kind"] == "journal_moved"], "the GCM moved no journal"
        shown = wait_until(lambda: (text := _metrics(cluster)) and
                           f'roq_journal_replica_leader{{queue="r",replica="{new.replica}"}} 1.0' in text and text,
                           15, "the new leader in /metrics")
        assert f'roq_journal_replica_epoch{{queue="r",replica="{new.replica}"}} {float(new.epoch)!r}' in shown
    if name == "leader cut off from its followers":
        assert "too few for a majority" in elections[-1]["text"], elections
    print(f"{name}: every record acknowledged {acknowledged:.2f}s after the fault struck; leader "
          f"{leader.replica} (epoch {leader.epoch}) -> {new.replica} (epoch {new.epoch}); elections: "
          f"{[e['text'] for e in elections]}")


def _metrics(cluster) -> str:
    with urllib.request.urlopen(cluster.http_url() + "/metrics", timeout=10) as answer:
        return answer.read().decode()


#: trials of the leader's host lost under load: ``make test`` runs a few, ``make jepsen`` 200 (``ROQ_REPLICA_TRIALS``)
TRIALS = int(os.environ.get("ROQ_REPLICA_TRIALS", "3"))


class Load:
    """One publisher sending numbered records as fast as its window lets it, on a thread of its own, and when
    its acknowledged count moved (for the time to recover)."""

    def __init__(self, conn) -> None:
        self.pub = conn.publisher()
        self.sent = 0
        self.samples: list[tuple[float, int]] = []  # (time, acknowledged) each time the count moved
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            last = -1
            while not self._stop.is_set():
                for _ in range(20):
                    self.pub.send(b"k", b"%d" % self.sent)
                    self.sent += 1
                acked = self.pub.stats()["acked"]
                if acked != last:
                    self.samples.append((time.monotonic(), acked))
                    last = acked
                time.sleep(0.002)
        except BaseException as exc:  # (seen by the test, which fails with it)
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def recovered(self, struck: float) -> float:
        """Seconds from ``struck`` to the end of the longest stall of acknowledgements after it."""
        moves = [t for t, _ in self.samples if t >= struck - 0.05]
        if len(moves) < 2:
            return float("nan")
        gaps = [(b - a, b) for a, b in zip(moves, moves[1:])]
        return max(gaps)[1] - struck


@pytest.mark.measured  # a 4 s ZooKeeper session: nothing that loads the machine beside it
def test_the_leaders_host_lost_at_a_random_moment_under_load_in_seeded_trials(make_embedded):
    """Each trial: the leader's host dies (SIGKILL of everything on it) at a random moment while a publisher sends
    without pause; it comes back, and its replica follows the new leader. Every record is acknowledged in the end
    and the replay from "earliest" holds each once, in order. The time from the loss to the end of the stall of
    acknowledgements is printed, with its percentiles over the trials."""
    seed = int(os.environ.get("ROQ_SEED", "33"))
    rng = random.Random(seed)
    cluster = make_embedded(hosts=3, session_timeout=4.0, gcm_args=["--host-grace", "1"])
    qm = _replicated_queue(cluster)
    wait_until(lambda: _settled(qm, 3), 30, "a leader elected and two followers in sync")
    times: list[float] = []
    with cluster.connect("r") as conn, Load(conn) as load:
        for trial in range(TRIALS):
            before = wait_until(lambda: _settled(qm, 3), 60, f"trial {trial}: three replicas in sync")
            leader = _leader(before)
            if leader.replica == HOSTS[0]:
                pytest.fail(f"trial {trial}: the leader stands on the monitor's host")
            time.sleep(rng.uniform(0.05, 0.5))  # the random moment (the load runs meanwhile)
            struck = time.monotonic()
            pids = cluster.crash_host(leader.replica)
            wait_until(lambda: all(gone(p) for p in pids), 5, "the lost host's processes dead")
            wait_until(lambda: any(r.role == "leader" and r.epoch > leader.epoch for r in _replicas(qm).values()),
                       15, f"trial {trial}: a new leader")
            wait_until(lambda: any(t > struck + 0.05 and t > _last_before(load, struck) for t, _ in load.samples),
                       15, f"trial {trial}: acknowledgements again")
            time.sleep(0.3)  # (load after the recovery, for the stall to end in the samples)
            times.append(load.recovered(struck))
            cluster.add_host(leader.replica)
            assert load.error is None, load.error
        load.stop()
        load.pub.flush(60)
        sent = load.sent
        times.sort()
        p = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
        print(f"{TRIALS} trials (seed {seed}), {sent} records: from the leader's host lost to acknowledgements "
              f"again p50 {p(0.5):.2f}s, p99 {p(0.99):.2f}s, max {times[-1]:.2f}s")
        got = _read(conn.subscriber(start="earliest"), sent, timeout=max(60.0, sent / 20_000))
    assert got == list(range(sent)), f"{len(got)} of {sent} records replayed, {len(set(got))} distinct"


def _last_before(load: Load, struck: float) -> float:
    """When the acknowledged count last moved before ``struck``."""
    return max((t for t, _ in load.samples if t < struck), default=0.0)


@pytest.mark.measured  # a 4 s ZooKeeper session: nothing that loads the machine beside it
def test_a_replica_lost_with_its_host_is_replaced_on_another_and_the_new_one_holds_what_was_acknowledged(
        make_embedded):
    """Four hosts, three replicas (off the monitor's host). A follower's host dies under load: the GCM puts a new
    replica on the one host free, the monitor's, a learner that copies the journal and then votes, and the queue has
    three replicas in sync again without an operator (the time it took is printed). Then the leader's host dies too:
    the new replica and the one old follower left are a majority, elect a leader between them, and the replay holds
    every record once, in order."""
    cluster = make_embedded(hosts=4, session_timeout=4.0, gcm_args=["--host-grace", "1"])
    qm = _replicated_queue(cluster)
    qm.set_rules("r", {"replica_replace_s": 2})
    before = wait_until(lambda: _settled(qm, 3), 30, "a leader elected and two followers in sync")
    leader = _leader(before)
    lost = sorted(r.replica for r in before.values() if r.role == "follower")[0]
    with cluster.connect("r") as conn, Load(conn) as load:
        wait_until(lambda: load.pub.stats()["acked"] > 5000, 30, "records acknowledged before the loss")
        struck = time.monotonic()
        pids = cluster.crash_host(lost)
        wait_until(lambda: all(gone(p) for p in pids), 5, "the lost host's processes dead")
        after = wait_until(lambda: (found := _settled(qm, 3)) and lost not in found and found, 90,
                           "three replicas in sync again, one on another host")
        took = time.monotonic() - struck
        [new] = set(after) - set(before)
        assert _leader(after).replica == leader.replica and _leader(after).epoch == leader.epoch, \
            "a follower replaced: no election"
        events = wait_until(lambda: (found := {e["kind"]: e for e in qm.events("r")}) and
                            "journal_rereplicated" in found and found, 15, "the re-replication in the events")
        assert events["journal_replica_replaced"]["replica"] == lost, events["journal_replica_replaced"]
        assert f"replica {new} holds what the leader" in events["journal_rereplicated"]["text"]
        acked = load.pub.stats()["acked"]
        wait_until(lambda: load.pub.stats()["acked"] > acked + 2000, 30, "records acknowledged with the new set")
        pids = cluster.crash_host(leader.replica)  # the new replica's vote now counts, and so does its log
        wait_until(lambda: all(gone(p) for p in pids), 5, "the leader's host's processes dead")
        wait_until(lambda: any(r.role == "leader" and r.epoch > leader.epoch for r in _replicas(qm).values()), 30,
                   "a leader elected by the new replica and the old follower")
        acked = load.pub.stats()["acked"]
        wait_until(lambda: load.pub.stats()["acked"] > acked + 2000, 30, "records acknowledged again")
        load.stop()
        assert load.error is None, load.error
        load.pub.flush(60)
        sent = load.sent
        got = _read(conn.subscriber(start="earliest"), sent, timeout=max(60.0, sent / 20_000))
    assert got == list(range(sent)), f"{len(got)} of {sent} records replayed, {len(set(got))} distinct"
    print(f"replica {lost} lost with its host: {new} in its place and three replicas in sync {took:.1f}s later "
          f"(replica_replace_s 2, the host's ZooKeeper session 4 s); {events['journal_rereplicated']['text']}")


@pytest.mark.measured  # a 4 s ZooKeeper session: nothing that loads the machine beside it
def test_a_bit_flipped_in_a_sealed_segment_is_found_by_the_scrub_and_repaired_from_another_replica(make_embedded):
    """A bit flipped on the disk in a follower's sealed segment, then in the leader's: each replica's scrub reads its
    sealed segments in turn, finds the entry whose checksum fails, and rewrites the segment from another replica's
    entries (the leader's, or a follower's for the leader): the same offsets, times and bytes, so the segment is
    what it was before the flip, byte for byte. Nothing is lost, and a replay from "earliest"
    gets every record once (a reader that meets the damage before the repair is told of an error, never served
    corrupt bytes)."""
    cluster = make_embedded(hosts=3, session_timeout=4.0, gcm_args=["--host-grace", "1"],
                            hostmanager_args=["--journal-option=segment_bytes=65536",
                                              "--journal-option=scrub_interval=0.1"])
    qm = _replicated_queue(cluster)
    replicas = wait_until(lambda: _settled(qm, 3), 30, "a leader elected and two followers in sync")
    with cluster.connect("r") as conn:
        pub = conn.publisher()
        for i in range(6000):
            pub.send(b"k", b"%06d" % i + b"." * 100)
            if i % 100 == 99:
                pub.flush(30)  # (small batches: many segments)
        wait_until(lambda: _settled(qm, 3), 30, "every replica in sync")
        leader = _leader(replicas)
        follower = next(r for r in replicas.values() if r.role == "follower")
        directory = lambda host: os.path.join(cluster.journal_dir, host, "r")  # noqa: E731
        for victim in (follower.replica, leader.replica):
            segments = sorted(f for f in os.listdir(directory(victim)) if f.endswith(".log"))
            assert len(segments) >= 3, segments
            name = segments[len(segments) // 2]  # sealed, and in the middle of the journal
            path = os.path.join(directory(victim), name)
            with open(path, "rb") as f:  # (its bounds are its own: a replica rolls its segments where it writes)
                copy = f.read()
            with open(path, "r+b") as f:
                at = len(copy) // 2
                f.seek(at)
                f.write(bytes([copy[at] ^ 0x10]))
                f.flush()
                os.fsync(f.fileno())

            def repaired() -> bool:
                with open(path, "rb") as f:
                    return f.read() == copy

            wait_until(repaired, 30, f"{victim}'s segment {name} repaired from another replica's copy")
        got = _read(conn.subscriber(start="earliest"), 6000, number=lambda p: int(p[:6]))
    assert got == list(range(6000)), f"{len(got)} records replayed"
    repaired = wait_until(lambda: {e["replica"] for e in qm.events("r") if e["kind"] == "journal_repaired"}
                          == {follower.replica, leader.replica} or None, 10, "both repairs in the queue's events")
    assert repaired



#: power losses of every replica at once: ``make test`` runs a few, ``make jepsen`` more (``ROQ_POWER_TRIALS``)
POWER_TRIALS = int(os.environ.get("ROQ_POWER_TRIALS", "2"))


def _lose_power(directory: str, rng: random.Random) -> str:
    """Cut a replica's files back as a power loss would: its active segment at a random point past what it last
    synced (``synced``, which its ``sync_log`` keeps), random bytes added; what was done."""
    try:
        with open(os.path.join(directory, "synced")) as f:
            name, synced = f.read().split()
    except FileNotFoundError:
        return "nothing synced yet"
    path = os.path.join(directory, name)
    size = os.path.getsize(path)
    # (a replica that cut its tail back since, to follow a new leader, and synced nothing after: its file is shorter
    # than it last said; keeping what a power loss might have lost is always allowed)
    cut = rng.randint(min(int(synced), size), size)
    os.truncate(path, cut)
    extra = rng.randbytes(rng.randint(0, 4096))
    with open(path, "ab") as f:
        f.write(extra)
    return f"{name} cut to {cut} of {size} bytes ({synced} synced), {len(extra)} random bytes added"


@pytest.mark.measured  # a 4 s ZooKeeper session: nothing that loads the machine beside it
def test_every_replica_losing_power_at_once_under_load_loses_no_acknowledged_record(make_embedded):
    """Each trial, at a random moment under a publisher that never pauses: every replica's process is killed at once
    (its host manager held still meanwhile, so that none is started again too soon) and each replica's last segment
    is cut at a random point past what it had synced, with random bytes added: what three disks hold after a power
    failure. Started again, the replicas elect a leader from what they hold; every record is acknowledged in the end
    and the replay from "earliest" holds each once, in order."""
    rng = random.Random(int(os.environ.get("ROQ_SEED", "34")))
    cluster = make_embedded(hosts=3, session_timeout=4.0, gcm_args=["--host-grace", "1"],
                            hostmanager_args=["--journal-option=sync_log=true",
                                              "--journal-option=segment_bytes=262144"])
    qm = _replicated_queue(cluster)
    wait_until(lambda: _settled(qm, 3), 30, "a leader elected and two followers in sync")
    with cluster.connect("r") as conn, Load(conn) as load:
        for trial in range(POWER_TRIALS):
            replicas = wait_until(lambda: _settled(qm, 3), 60, f"trial {trial}: three replicas in sync")
            epoch = _leader(replicas).epoch
            time.sleep(rng.uniform(0.1, 0.5))  # the random moment (the load runs meanwhile)
            managers = [cluster.hostmanagers[h].pid for h in HOSTS]
            for pid in managers:
                os.kill(pid, signal.SIGSTOP)
            try:
                for r in replicas.values():
                    os.kill(r.pid, signal.SIGKILL)
                wait_until(lambda: all(gone(r.pid) for r in replicas.values()), 5, "every replica's process dead")
                cuts = [_lose_power(os.path.join(cluster.journal_dir, h, "r"), rng) for h in HOSTS]
            finally:
                for pid in managers:
                    os.kill(pid, signal.SIGCONT)
            print(f"trial {trial}: " + "; ".join(cuts))
            wait_until(lambda: any(r.role == "leader" and r.epoch > epoch for r in _replicas(qm).values()), 30,
                       f"trial {trial}: a leader elected from what the replicas hold")
            assert load.error is None, load.error
        load.stop()
        load.pub.flush(60)
        sent = load.sent
        got = _read(conn.subscriber(start="earliest"), sent, timeout=60)
    assert got == list(range(sent)), f"{len(got)} of {sent} records replayed, {len(set(got))} distinct"
