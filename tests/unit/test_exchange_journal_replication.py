"""The rules of a replicated journal (pure): fencing, the commit end, elections, cutting back a divergent tail; and
a model of three replicas under random crashes, partitions and zombie leaders in which nothing acknowledged is
lost and no offset names two records."""

from __future__ import annotations

import bisect
import collections
import os
import random

import pytest

from exchange.journal._replication import (ACCEPT, EPOCH_SHIFT, FETCH, STALE, TRUNCATE, Election, EpochHistory, Promise,
                                           Quorum, Replica, Waiting, majority)


def test_majorities():
    assert [majority(n) for n in range(1, 6)] == [1, 2, 2, 3, 3]


def test_an_epoch_history_says_where_each_epoch_ends_and_what_two_logs_share():
    a = EpochHistory()
    a.begin(1, 0, 0)
    a.begin(2, 10, 10)
    a.begin(4, 1 << 30, 30)  # a new leader's epoch begins far past the end of the log it took over
    assert a.end_of(1, 1 << 31) == 10 and a.end_of(2, 1 << 31) == 30 and a.end_of(4, 1 << 31) == 1 << 31
    assert a.end_of(3, 1 << 31) == 30 and a.end_of(0, 1 << 31) == 0
    b = EpochHistory()
    b.begin(1, 0, 0)
    b.begin(2, 10, 10)  # it holds epoch 2 up to 33: three entries past the end of epoch 2 in a, never acknowledged
    assert b.shared_end(33, a, (1 << 30) + 5) == 30 and a.shared_end((1 << 30) + 5, b, 33) == 30
    assert EpochHistory().shared_end(0, a, 40) == 0
    a.truncate(1 << 30)
    assert a.starts == [(1, 0), (2, 10)] and a.end_of(2, 30) == 30
    with pytest.raises(ValueError):
        a.begin(1, 50, 30)


def _history(*epochs: tuple[int, int, int]) -> EpochHistory:
    h = EpochHistory()
    for epoch, start, end in epochs:
        h.begin(epoch, start, end)
    return h


def test_a_replica_promises_each_epoch_once_and_refuses_older_leaders():
    r = Replica("r1", end=10, history=_history((1, 0, 0)), promised=1)
    assert r.promise(1) is None  # promised already
    assert r.promise(2) == Promise("r1", 2, 1, 10)
    assert r.promise(2) is None  # one promise per epoch: a second candidate for it is refused
    leader1 = _history((1, 0, 0))
    assert r.check(1, 10, [10, 11], leader1, 12).action == STALE  # the old leader is fenced
    assert r.check(1, 10, [10, 11], leader1, 12).epoch == 2


def test_a_follower_takes_contiguous_entries_skips_what_it_holds_and_fetches_what_it_lacks():
    leader = _history((1, 0, 0))
    r = Replica("r2", end=5, history=_history((1, 0, 0)), promised=1)
    assert r.check(1, 5, [5, 6, 7], leader, 10).action == ACCEPT
    v = r.check(1, 3, [3, 4, 5, 6], leader, 10)  # sent again from 3: it holds 3 and 4
    assert (v.action, v.skip) == (ACCEPT, 2)
    v = r.check(1, 8, [8, 9], leader, 10)
    assert (v.action, v.at) == (FETCH, 5)


def test_a_follower_cuts_back_a_tail_the_new_leader_does_not_have():
    r = Replica("r3", end=27, history=_history((1, 0, 0), (2, 10, 10), (3, 25, 25)), promised=3)
    leader = _history((1, 0, 0), (2, 10, 10), (4, 1 << 30, 30))
    v = r.check(4, 30, [1 << 30], leader, (1 << 30) + 1)  # the new leader's epoch begins far past 30, where its
    assert (v.action, v.at) == (TRUNCATE, 25)  # epoch 2 ended; the old leader of epoch 3 wrote from 25
    r.truncated(25)
    v = r.check(4, 30, [1 << 30], leader, (1 << 30) + 1)
    assert (v.action, v.at) == (FETCH, 25)  # then it fetches epoch 2's entries 25..29 it lacks
    assert r.promised == 4  # a leader elected without it: its epoch is the newest it knows


def test_the_commit_end_is_what_a_majority_holds_and_moves_only_past_the_epoch_base():
    q = Quorum("a", ["a", "b", "c"], epoch=2, base=100, committed=40)
    assert q.held("a", 60, 0.0) == 40  # the leader's own log, taken over: an older epoch's tail
    assert q.held("b", 60, 0.0) == 40  # on a majority, but not an entry of epoch 2: not committed by counting
    assert q.held("a", 103, 0.0) == 40
    assert q.held("b", 101, 0.0) == 101  # epoch 2's first entry on a majority: it and everything before
    assert q.held("c", 50, 0.0) == 101
    assert q.held("b", 99, 0.0) == 101  # never backwards
    assert q.lag("c", 103) == 53 and not q.in_sync("c", 0.5, 103, 1.0) and q.in_sync("b", 0.5, 103, 1.0)
    with pytest.raises(ValueError):
        Quorum("z", ["a", "b"], 1, 0)


def test_an_election_needs_a_majority_and_takes_the_most_advanced_log():
    e = Election("b", ["a", "b", "c"], epoch=5)
    e.promised(Promise("b", 5, 3, 40))
    assert not e.won
    e.promised(Promise("c", 4, 3, 90))  # a promise for another epoch does not count
    e.promised(Promise("c", 5, 4, 12))
    assert e.won and e.source() == Promise("c", 5, 4, 12)  # the newer epoch wins over the longer log
    assert e.base(1000.0) == 1000 << EPOCH_SHIFT
    assert e.base(0.0) == 40
    lost = Election("a", ["a", "b", "c"], epoch=5)
    lost.promised(Promise("a", 5, 4, 12))
    lost.refused(5)
    lost.promised(Promise("b", 5, 3, 40))
    assert lost.lost and not lost.won


# ---------------------------------------------------------------------------------------------------- the model


class _Node:
    """A replica with its log in memory: offset -> (epoch, value)."""

    def __init__(self, name: str, learner: bool = False) -> None:
        self.rules = Replica(name, learner=learner)
        self.log: dict[int, tuple[int, str]] = {}
        self.up = True

    def offsets(self) -> list[int]:
        return sorted(self.log)

    def cut(self, end: int) -> None:
        for o in [o for o in self.log if o >= end]:
            del self.log[o]
        self.rules.truncated(end)


class _Leader:
    def __init__(self, node: _Node, epoch: int, quorum: Quorum, base: int) -> None:
        self.node = node
        self.epoch = epoch
        self.quorum = quorum
        self.next = base

    @property
    def fenced(self) -> bool:
        return self.node.rules.promised != self.epoch


def _model(seed: int, steps: int = 400, gate: bool = True) -> dict[str, int]:
    """``gate``: a replica placed in place of a lost one is a learner (False: broken on purpose)."""
    rng = random.Random(seed)
    names = ["r0", "r1", "r2"]  # the replica set (the queue's document), changed one member at a time
    nodes = {n: _Node(n) for n in names}
    links: dict[tuple[str, str], bool] = collections.defaultdict(lambda: True)
    acked: dict[int, str] = {}  # every entry any leader acknowledged: offset -> value
    leaders: list[_Leader] = []  # every leader elected, the fenced ones too (zombies that still try)
    epochs = 0  # the epoch counter (ZooKeeper's, in the process)
    clock = 0.0
    counts = {"elections": 0, "stale": 0, "truncated": 0, "acked": 0, "replaced": 0, "admitted": 0}

    def reach(a: str, b: str) -> bool:
        return nodes[a].up and nodes[b].up and links[(a, b)]

    def check_acked(leader: _Leader) -> None:
        for o in leader.node.offsets():
            if o >= leader.quorum.committed:
                break
            value = leader.node.log[o][1]
            assert acked.setdefault(o, value) == value, f"offset {o} named {acked[o]} and {value}"

    def replicate(leader: _Leader, node: _Node) -> None:
        if leader.fenced or not reach(leader.node.rules.name, node.rules.name):
            return
        offsets = leader.node.offsets()
        start = bisect.bisect_left(offsets, leader.quorum.ends.get(node.rules.name, 0))
        for _ in range(3):
            sent = offsets[start:start + rng.randint(1, 8 if len(offsets) - start < 64 else 64)]  # (catching up)
            prev = offsets[start - 1] + 1 if start else 0
            v = node.rules.check(leader.epoch, prev, sent, leader.node.rules.history, leader.node.rules.end)
            if v.action == STALE:
                counts["stale"] += 1
                return
            if v.action == TRUNCATE:
                counts["truncated"] += 1
                node.cut(v.at)
                continue
            if v.action == FETCH:
                start = bisect.bisect_left(offsets, v.at)
                continue
            for o in sent[v.skip:]:
                node.log[o] = leader.node.log[o]
            for o in sent[v.skip:]:
                node.rules.appended(leader.node.log[o][0], [o], o + 1)
            if sent:
                leader.quorum.held(node.rules.name, sent[-1] + 1, clock)
                check_acked(leader)
            if node.rules.learner and node.rules.admit(list(leader.quorum.ends), leader.epoch,
                                                       leader.node.rules.history, leader.quorum.committed):
                counts["admitted"] += 1
            return

    def elect(candidate: _Node) -> None:
        nonlocal epochs
        epochs += 1
        election = Election(candidate.rules.name, names, epochs)
        for n in names:
            if nodes[n].rules.learner:
                continue  # it refuses to promise, and is no newer epoch either
            if n == candidate.rules.name or reach(candidate.rules.name, n):
                p = nodes[n].rules.promise(epochs)
                if p is None:
                    election.refused(nodes[n].rules.promised)
                else:
                    election.promised(p)
        if not election.won:
            return
        source = nodes[election.source().replica]
        if source is not candidate:  # take the source's log: cut back what it lacks, copy what we lack
            keep = candidate.rules.history.shared_end(candidate.rules.end, source.rules.history, source.rules.end)
            candidate.cut(keep)
            for o in source.offsets():
                if o >= keep:
                    candidate.log[o] = source.log[o]
                    candidate.rules.appended(source.log[o][0], [o], o + 1)
        for o, value in acked.items():  # every acknowledged entry is in the new leader's log
            assert candidate.log.get(o, (0, None))[1] == value, f"acknowledged offset {o} lost at epoch {epochs}"
        base = election.base(clock)
        quorum = Quorum(candidate.rules.name, list(names), epochs, base)
        leader = _Leader(candidate, epochs, quorum, base)
        quorum.held(candidate.rules.name, candidate.rules.end, clock)
        leaders.append(leader)
        counts["elections"] += 1

    elect(nodes["r0"])
    for step in range(steps):
        clock += rng.random() * 0.05  # (an election a second or more apart begins its epoch past a jump)
        r = rng.random()
        live = [ld for ld in leaders if not ld.fenced and ld.node.up]
        if r < 0.4 and live:  # a leader (maybe a zombie no follower obeys) appends a round
            leader = rng.choice(live)
            for _ in range(rng.randint(1, 5)):
                o = leader.next
                leader.next += 1
                leader.node.log[o] = (leader.epoch, f"{leader.epoch}:{o}:{step}")
                leader.node.rules.appended(leader.epoch, [o], o + 1)
            leader.quorum.held(leader.node.rules.name, leader.node.rules.end, clock)
            check_acked(leader)
        elif r < 0.85 and live:
            leader = rng.choice(live)
            replicate(leader, nodes[rng.choice(sorted(nodes))])  # a fetch from any replica, a member or not
        elif r < 0.9:  # a host goes down or comes back (its disk keeps its log and its promise)
            node = nodes[rng.choice(list(nodes))]
            node.up = not node.up or sum(n.up for n in nodes.values()) == 1
        elif r < 0.95:  # a link flaps
            a, b = rng.sample(sorted(nodes), 2)
            links[(a, b)] = links[(b, a)] = not links[(a, b)]
        elif r < 0.96:  # a member down is replaced, if the others that vote are a majority and none is a learner
            down = [n for n in names if not nodes[n].up]
            voting = [n for n in names if nodes[n].up and not nodes[n].rules.learner]
            if down and len(voting) >= 2 and not any(nodes[n].rules.learner for n in names):
                lost = rng.choice(down)
                new = f"r{len(nodes)}"
                nodes[new] = _Node(new, learner=gate)
                names[names.index(lost)] = new
                counts["replaced"] += 1
                nodes[lost].up = rng.random() < 0.5  # it may come back (its assignment gone: a member no more)
        elif r < 0.98:  # the monitor tells a live leader of the set the set (not every one: partitions)
            told = [ld for ld in live if ld.node.rules.name in names]
            if told:
                rng.choice(told).quorum.members(list(names))
        elif r > 0.98 or not live:  # someone stands (soon when no leader is left)
            candidates = [nodes[n] for n in names if nodes[n].up and not nodes[n].rules.learner]
            if candidates:
                elect(rng.choice(candidates))
    for leader in leaders:
        check_acked(leader)
    counts["acked"] = len(acked)
    return counts


def test_three_replicas_under_crashes_partitions_zombie_leaders_and_replacements_lose_nothing_acknowledged():
    """Besides crashes, partitions and leaders that go on after they were fenced: members down replaced by new
    ones, one at a time, as learners; leaders told the new set or not (partitioned from the monitor); a replaced
    member that comes back and still takes an old leader's entries."""
    trials = int(os.environ.get("ROQ_REPLICATION_TRIALS", "300"))
    totals = dict.fromkeys(("elections", "stale", "truncated", "acked", "replaced", "admitted"), 0)
    for seed in range(trials):
        for k, v in _model(seed).items():
            totals[k] += v
    print("replication model:", trials, "trials:", totals)
    # the model did what it is for: many elections, fenced leaders refused, divergent tails cut back, much acked,
    # members replaced and learners admitted
    assert totals["elections"] > trials * 3 and totals["stale"] > trials and totals["truncated"] > trials / 10
    assert totals["acked"] > trials * 20 and totals["replaced"] > trials / 2 and totals["admitted"] > trials / 10


def test_without_the_learners_gate_the_model_loses_acknowledged_entries():
    """Broken on purpose: a new member that votes at once, its log empty, outvotes the survivor holding what was
    acknowledged with the lost member's help. The model must see it, or it proves nothing about the gate."""
    failures = 0
    for seed in range(300):
        try:
            _model(seed, gate=False)
        except AssertionError:
            failures += 1
    print("without the gate:", failures, "of 300 trials lost an acknowledged entry")
    assert failures > 0


def test_a_round_is_due_once_the_commit_end_reaches_the_end_of_the_log_after_it():
    w: Waiting[str] = Waiting()
    w.add(10, "a")
    w.add(20, "b")
    assert w.due(9) == [] and len(w) == 2
    assert w.due(15) == ["a"]
    w.add(20, "c")  # a round that added nothing (batches sent again): due with "b", no later
    assert w.due(20) == ["b", "c"] and not w
    w.add(20, "d")  # ... and due at once where the commit end is already there (no move of it will come)
    assert w.due(20) == ["d"]


def test_a_learner_promises_nothing_until_a_leader_that_counts_it_committed_past_its_epochs_start():
    leader = _history((1, 0, 40), (3, 1 << 30, -1))  # the leader of epoch 3 began it past a jump
    n = Replica("n", learner=True)
    assert n.promise(4) is None and "learner" in n.refusal(4) and n.promised == 0
    n.end = 40
    assert not n.admit(["a", "b", "n"], 3, leader, 40)  # 40 is not past epoch 3's start: it says nothing yet
    assert not n.admit(["a", "b", "c"], 3, leader, (1 << 30) + 1)  # a leader that does not count it
    assert not n.admit(["a", "b", "n"], 3, leader, (1 << 30) + 1)  # it does not hold that much
    n.end = (1 << 30) + 1
    assert not n.admit(["a", "b", "n"], 2, leader, (1 << 30) + 1)  # (an epoch the leader's history lacks)
    assert n.admit(["a", "b", "n"], 3, leader, (1 << 30) + 1) and not n.learner
    assert n.promise(4) is not None


def test_a_new_replica_set_is_counted_from_the_change_and_the_commit_end_never_goes_back():
    q = Quorum("a", ["a", "b", "c"], epoch=2, base=100, committed=0)
    q.held("a", 120, 0.0)
    assert q.held("b", 110, 0.0) == 110
    q.members(["a", "b", "n"])  # c lost, n in its place: holds nothing yet
    assert q.held("c", 120, 0.0) == 110  # no longer counted
    assert q.held("a", 130, 0.0) == 110 and q.held("n", 130, 0.0) == 130
    q.members(["a", "n", "m"])
    assert q.committed == 130 and q.held("a", 140, 0.0) == 130  # a and n needed now
    with pytest.raises(ValueError):
        q.members(["b", "n", "m"])
