"""Who the monitor names leader of a replicated journal, and when another stands (monitor/_replicas.py, pure)."""

from __future__ import annotations

import dataclasses

from monitor._outbox import Outbox
from monitor._replicas import ELECTION_S, RETELL_S, RETRY_S, Replicas
from roq.errors import Result
from roq.wire import control
from roq.wire import management as m
from roq.wire.control import Reply

RULES = {"durability": "always", "replicas": 3}


def _hb(name: str, role: str = control.STANDBY, epoch: int = 0, last_epoch: int = 0, end: int = 0,
        leader: str = "", followers: dict | None = None, committed: int = 0, reached: int = 2) -> control.JournalHeartbeat:
    return control.JournalHeartbeat(journal=name, intake=f"tcp://{name}:5000", pid=1, incarnation=1,
                                    reads=f"tcp://{name}:6000", replica=name, role=role, epoch=epoch,
                                    last_epoch=last_epoch, end=end, leader=leader, followers=followers or {},
                                    committed=committed, reached=reached)


def _make(rules=RULES, own_host="127.0.0.11"):
    out = Outbox()
    return Replicas(out, lambda: rules, timeout=1.0, own_host=own_host), out


def _orders(out: Outbox) -> list[tuple[bytes, control.JournalRole]]:
    return [(i, m) for i, m in out.take().sends if isinstance(m, control.JournalRole)]


def test_the_first_leader_stands_once_the_replicas_were_heard_for_a_timeout_and_off_the_monitors_host():
    r, out = _make()
    for now in (0.0, 0.5):
        for name in ("127.0.0.11", "127.0.0.12", "127.0.0.13"):
            r.heartbeat(_hb(name), name.encode(), now)
    r.decide(0.9)
    assert _orders(out) == [], "a live leader's heartbeat may still be on its way"
    r.decide(1.0)
    taken = out.take()
    [(identity, order)] = [(i, m) for i, m in taken.sends if isinstance(m, control.JournalRole)]
    assert identity == b"127.0.0.13" and order.role == control.LEADER and order.epoch == 1
    assert order.peers == {"127.0.0.11": "tcp://127.0.0.11:6000", "127.0.0.12": "tcp://127.0.0.12:6000"}
    assert order.replicas == ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
    [event] = [e for e in taken.events if e.kind == "journal_election"]
    assert event.fields["reason"] == "no replica leads yet" and event.fields["epoch"] == 1


def test_off_the_monitors_host_the_most_advanced_replica_stands():
    r, out = _make(own_host="127.0.0.13")
    for now in (0.0, 0.5):
        r.heartbeat(_hb("127.0.0.11", epoch=3, last_epoch=3, end=900), b"a", now)
        r.heartbeat(_hb("127.0.0.12", epoch=3, last_epoch=3, end=800), b"b", now)
        r.heartbeat(_hb("127.0.0.13", epoch=4, last_epoch=2, end=5000), b"c", now)
    r.decide(1.0)
    [(identity, order)] = _orders(out)
    assert identity == b"a" and order.epoch == 5, "highest last epoch, then end; the next epoch past every promise"
    r, out = _make(own_host="127.0.0.11")
    for now in (0.0, 0.5, 1.0):
        r.heartbeat(_hb("127.0.0.11", epoch=3, last_epoch=3, end=900), b"a", now)
        r.heartbeat(_hb("127.0.0.12", epoch=3, last_epoch=3, end=800), b"b", now)
    assert _orders(out) == [], "the first election waits a moment for the third replica to be heard of"
    for now in (4.5, 5.0):
        r.heartbeat(_hb("127.0.0.11", epoch=3, last_epoch=3, end=900), b"a", now)
        r.heartbeat(_hb("127.0.0.12", epoch=3, last_epoch=3, end=800), b"b", now)
    [(identity, order)] = _orders(out)
    assert order.replicas == ["127.0.0.11", "127.0.0.12", "?0"], "a majority of three, one not heard of"
    assert identity == b"b", "off the monitor's host first: it takes what it lacks from the most advanced log"


def test_a_live_leader_of_the_newest_epoch_is_followed_and_an_order_is_repeated_only_after_a_while():
    r, out = _make()
    lead = _hb("127.0.0.13", control.LEADER, epoch=2, last_epoch=2, end=100)
    r.heartbeat(lead, b"c", 0.0)
    r.heartbeat(_hb("127.0.0.12", epoch=2), b"b", 0.0)
    orders = _orders(out)
    assert [(i, m.role, m.epoch, m.leader) for i, m in orders] == [(b"b", control.FOLLOWER, 2, lead.reads)]
    r.heartbeat(_hb("127.0.0.12", epoch=2), b"b", RETELL_S / 2)
    assert _orders(out) == []
    r.heartbeat(_hb("127.0.0.12", epoch=2), b"b", RETELL_S)
    assert len(_orders(out)) == 1, "told again: it did not do what it was told"
    r.heartbeat(_hb("127.0.0.12", control.FOLLOWER, epoch=2, leader=lead.reads), b"b", 2 * RETELL_S)
    r.heartbeat(lead, b"c", 2 * RETELL_S)
    assert _orders(out) == [] and r.leader(2 * RETELL_S) == lead


def test_a_silent_leader_is_replaced_and_a_candidate_that_does_not_win_in_time_is_followed_by_another():
    r, out = _make()
    r.heartbeat(_hb("127.0.0.13", control.LEADER, epoch=2, last_epoch=2, end=100), b"c", 0.0)
    r.heartbeat(_hb("127.0.0.12", control.FOLLOWER, epoch=2, last_epoch=2, end=100), b"b", 0.0)
    r.heartbeat(_hb("127.0.0.11", control.FOLLOWER, epoch=2, last_epoch=2, end=90), b"a", 0.0)
    out.take()
    r.heartbeat(_hb("127.0.0.12", control.FOLLOWER, epoch=2, last_epoch=2, end=100), b"b", 1.0)
    r.heartbeat(_hb("127.0.0.11", control.FOLLOWER, epoch=2, last_epoch=2, end=90), b"a", 1.0)
    taken = out.take()
    [order] = [m for i, m in taken.sends if i == b"b"]
    assert order.role == control.LEADER and order.epoch == 3
    [event] = [e for e in taken.events if e.kind == "journal_election"]
    assert event.fields["reason"] == "leader 127.0.0.13 silent for 1.0s"
    r.heartbeat(_hb("127.0.0.12", control.STANDBY, epoch=3, last_epoch=2, end=100), b"b", 1.5)
    r.heartbeat(_hb("127.0.0.11", control.FOLLOWER, epoch=3, last_epoch=2, end=90), b"a", 1.5)
    r.decide(1.0 + ELECTION_S - 0.01)
    assert _orders(out) == [], "the candidate has its time to win"
    r.heartbeat(_hb("127.0.0.12", control.STANDBY, epoch=3, last_epoch=2, end=100), b"b", 1.0 + ELECTION_S)
    r.heartbeat(_hb("127.0.0.11", control.FOLLOWER, epoch=3, last_epoch=2, end=90), b"a", 1.0 + ELECTION_S)
    [(identity, order)] = _orders(out)
    assert order.role == control.LEADER and order.epoch == 4, "a new candidacy is for a newer epoch"


def test_a_fenced_leader_is_no_leader_and_a_minority_elects_nobody():
    r, out = _make()
    r.heartbeat(_hb("127.0.0.13", control.FENCED, epoch=3, last_epoch=2, end=100), b"c", 0.0)
    r.heartbeat(_hb("127.0.0.12", epoch=3, last_epoch=2, end=100), b"b", 0.0)
    assert r.leader(0.0) is None
    r.heartbeat(_hb("127.0.0.12", epoch=3, last_epoch=2, end=100), b"b", 5.0)
    r.decide(5.1)
    r.decide(5.2)
    taken = out.take()
    assert [m for _, m in taken.sends if isinstance(m, control.JournalRole)] == []
    assert [e.kind for e in taken.events] == ["journal_unavailable"], "said once"
    r.heartbeat(_hb("127.0.0.13", control.FENCED, epoch=3, last_epoch=2, end=100), b"c", 5.3)
    [(_, order)] = _orders(out)
    assert order.role == control.LEADER and order.epoch == 4, "a majority live again: one stands"


def test_an_unreplicated_journal_is_nobody_s_business_here():
    r, out = _make(rules={"durability": "always", "replicas": 1})
    r.heartbeat(_hb("127.0.0.12"), b"b", 0.0)
    r.decide(5.0)
    assert not out.take()
    r2, out2 = _make(rules={"durability": "none", "replicas": 3})
    r2.heartbeat(_hb("127.0.0.12"), b"b", 0.0)
    r2.decide(5.0)
    assert not out2.take()


def test_the_status_shows_each_replicas_lag_and_whether_it_holds_everything_committed():
    r, _ = _make()
    r.heartbeat(_hb("127.0.0.13", control.LEADER, epoch=2, last_epoch=2, end=100, committed=90,
                    followers={"127.0.0.13": 100, "127.0.0.12": 95, "127.0.0.11": 40}), b"c", 0.0)
    r.heartbeat(_hb("127.0.0.12", control.FOLLOWER, epoch=2, end=95), b"b", 0.0)
    r.heartbeat(_hb("127.0.0.11", control.FOLLOWER, epoch=2, end=40), b"a", 0.0)
    shown = {s.replica: (s.role, s.lag, s.in_sync) for s in r.describe(0.5)}
    assert shown == {"127.0.0.13": (control.LEADER, 0, True), "127.0.0.12": (control.FOLLOWER, 5, True),
                     "127.0.0.11": (control.FOLLOWER, 60, False)}


def test_a_leader_that_reaches_too_few_followers_for_a_timeout_is_replaced_when_the_others_are_a_majority():
    r, out = _make()
    lead = lambda reached: _hb("127.0.0.13", control.LEADER, epoch=2, last_epoch=2, end=100,  # noqa: E731
                               reached=reached)
    follower = _hb("127.0.0.12", control.FOLLOWER, epoch=2, last_epoch=2, end=100, leader="tcp://127.0.0.13:6000")
    r.heartbeat(lead(2), b"c", 0.0)
    r.heartbeat(follower, b"b", 0.0)
    r.heartbeat(dataclasses.replace(follower, replica="127.0.0.11", journal="127.0.0.11"), b"a", 0.0)
    out.take()
    for now in (0.5, 1.0, 1.4):  # cut off from both followers, which still report to the monitor
        r.heartbeat(lead(0), b"c", now)
        r.heartbeat(follower, b"b", now)
        r.heartbeat(dataclasses.replace(follower, replica="127.0.0.11", journal="127.0.0.11"), b"a", now)
    assert _orders(out) == [], "not before a whole timeout"
    r.heartbeat(lead(1), b"c", 1.45)  # one follower reached again: with itself, a majority
    r.decide(2.0)
    assert _orders(out) == []
    for now in (2.1, 2.6, 3.2):
        r.heartbeat(lead(0), b"c", now)
        r.heartbeat(follower, b"b", now)
        r.heartbeat(dataclasses.replace(follower, replica="127.0.0.11", journal="127.0.0.11"), b"a", now)
    taken = out.take()
    [order] = [m for _, m in taken.sends if isinstance(m, control.JournalRole)]
    assert order.role == control.LEADER and order.epoch == 3
    [event] = [e for e in taken.events if e.kind == "journal_election"]
    assert event.fields["reason"] == "leader 127.0.0.13 reaches 0 of its followers, too few for a majority"


def test_a_leader_out_of_reach_and_a_candidate_that_did_not_win_stand_last():
    r, out = _make()
    follower = _hb("127.0.0.12", control.FOLLOWER, epoch=2, last_epoch=2, end=90, leader="tcp://127.0.0.13:6000")
    other = dataclasses.replace(follower, replica="127.0.0.11", journal="127.0.0.11", end=80)
    for now in (0.0, 0.5, 1.0, 1.5):  # the leader holds the most advanced log, and reaches no follower
        r.heartbeat(_hb("127.0.0.13", control.LEADER, epoch=2, last_epoch=2, end=100, reached=0), b"c", now)
        r.heartbeat(follower, b"b", now)
        r.heartbeat(other, b"a", now)
    [(identity, order)] = _orders(out)
    assert identity == b"b" and order.epoch == 3, "not the leader cut off from its followers, though most advanced"
    for now in (2.0, 2.5, 3.0, 3.5, 4.0):  # b did not win within its time
        r.heartbeat(_hb("127.0.0.13", control.LEADER, epoch=2, last_epoch=2, end=100, reached=0), b"c", now)
        r.heartbeat(dataclasses.replace(follower, role=control.STANDBY, epoch=3), b"b", now)
        r.heartbeat(dataclasses.replace(other, epoch=3), b"a", now)
    [(identity, order)] = _orders(out)
    assert identity == b"a" and order.epoch == 4, "the next candidate is one not passed over"


SET = ("127.0.0.11", "127.0.0.12", "127.0.0.13")
REPLACE_S = 5.0


def _cluster(learners=()):
    out = Outbox()
    r = Replicas(out, lambda: {**RULES, "replica_replace_s": REPLACE_S}, timeout=1.0, own_host="127.0.0.11",
                 queue="q")
    r.adopt(SET, tuple(learners))
    return r, out


def _asked(out: Outbox) -> list:
    return [req.message for req in out.requests]


def test_an_election_counts_the_documents_replica_set_and_a_learner_neither_stands_nor_counts():
    r, out = _cluster(learners=("127.0.0.13",))
    for now in (0.0, 0.5, 1.0):
        r.heartbeat(_hb("127.0.0.11", end=10), b"a", now)
        r.heartbeat(dataclasses.replace(_hb("127.0.0.13", end=50), learner=True), b"c", now)
        r.heartbeat(_hb("127.0.0.99", end=90), b"z", now)  # replaced long ago, still running: not one of the set
    assert _orders(out) == [], "one voter of three: nobody can win"
    r.heartbeat(_hb("127.0.0.12", end=20), b"b", 1.2)
    [(identity, order)] = _orders(out)
    assert identity == b"b" and order.replicas == list(SET), "off the monitor's host, the learner passed over"
    assert "127.0.0.99" not in order.peers


def test_a_live_leader_is_told_the_new_set_and_a_member_silent_for_long_is_replaced_one_at_a_time():
    r, out = _cluster()
    lead = _hb("127.0.0.12", control.LEADER, epoch=2, last_epoch=2, end=100, reached=1,
               followers={"127.0.0.11": 100, "127.0.0.12": 100, "127.0.0.13": 100})
    follower = _hb("127.0.0.11", control.FOLLOWER, epoch=2, leader=lead.reads)
    r.heartbeat(_hb("127.0.0.13", control.FOLLOWER, epoch=2, leader=lead.reads), b"c", 0.0)
    for now in (0.0, 2.0, 4.0, REPLACE_S - 0.1):
        r.heartbeat(lead, b"b", now)
        r.heartbeat(follower, b"a", now)
    assert _asked(out) == [], "silent, but not for long"
    r.heartbeat(follower, b"a", REPLACE_S + 0.1)
    r.heartbeat(lead, b"b", REPLACE_S + 0.1)
    [ask] = _asked(out)
    assert isinstance(ask, m.ReplaceReplica) and (ask.QName, ask.Replica) == ("q", "127.0.0.13")
    assert "silent" in ask.Reason
    out.requests[0].answer(Reply(result=Result.CONFLICT, comment="its host is live"), "", REPLACE_S + 0.2)
    out.take()
    r.heartbeat(lead, b"b", REPLACE_S + 0.3)
    assert _asked(out) == [], "refused: asked again after a while"
    r.heartbeat(follower, b"a", REPLACE_S + 0.3 + RETRY_S)
    r.heartbeat(lead, b"b", REPLACE_S + 0.3 + RETRY_S)
    assert len(_asked(out)) == 1
    out.requests[0].answer(Reply(comment="replaced"), "", REPLACE_S + 3)
    out.take()
    r.adopt(("127.0.0.11", "127.0.0.12", "127.0.0.14"), ("127.0.0.14",))  # the GCM's change, in the document
    r.heartbeat(follower, b"a", 9.0)
    r.heartbeat(lead, b"b", 9.0)
    [(identity, order)] = _orders(out)
    assert identity == b"b" and order.role == control.LEADER and order.epoch == 2
    assert order.replicas == ["127.0.0.11", "127.0.0.12", "127.0.0.14"], "the leader counts the new set"
    learning = dataclasses.replace(_hb("127.0.0.14", control.FOLLOWER, epoch=2, leader=lead.reads), learner=True)
    for now in (9.5, 20.0, 29.9):
        r.heartbeat(learning, b"d", now)
    r.heartbeat(lead, b"b", 30.0)
    r.heartbeat(follower, b"a", 30.0)
    assert _asked(out) == [], "a learner catching up: nothing is replaced (127.0.0.13 is gone from the set)"
    out.take()
    r.heartbeat(_hb("127.0.0.14", control.FOLLOWER, epoch=2, leader=lead.reads), b"d", 30.5)
    taken = out.take()
    [request] = taken.requests
    assert isinstance(request.message, m.AdmitReplica) and request.message.Replica == "127.0.0.14"
    assert not [e for e in taken.events if e.kind == "journal_rereplicated"], "not before the GCM agreed"
    request.answer(Reply(comment="admitted"), "", 30.6)
    [event] = [e for e in out.take().events if e.kind == "journal_rereplicated"]
    assert event.fields["took_s"] > 25, "from the lost one's last heartbeat"
    r.heartbeat(_hb("127.0.0.14", control.FOLLOWER, epoch=2, leader=lead.reads), b"d", 31.0)
    assert _asked(out) == [], "admitted once, until the document says so"


def test_a_learner_lost_before_it_caught_up_is_replaced_itself_and_the_set_is_ordered_by_the_documents_version():
    r, out = _cluster(learners=("127.0.0.13",))
    r.adopt(SET, ("127.0.0.13",), version=7)
    lead = _hb("127.0.0.12", control.LEADER, epoch=2, last_epoch=2, end=100, reached=1,
               followers={"127.0.0.11": 100, "127.0.0.12": 100, "127.0.0.13": 0})
    follower = _hb("127.0.0.11", control.FOLLOWER, epoch=2, leader=lead.reads)
    for now in (0.0, 2.0, 4.0, REPLACE_S + 0.1):
        r.heartbeat(follower, b"a", now)
        r.heartbeat(lead, b"b", now)
    [ask] = _asked(out)
    assert isinstance(ask, m.ReplaceReplica) and ask.Replica == "127.0.0.13", "the learner, never heard of"
    out.requests[0].answer(Reply(comment="replaced"), "", REPLACE_S + 0.2)
    out.take()
    r.adopt(("127.0.0.11", "127.0.0.12", "127.0.0.15"), ("127.0.0.15",), version=8)
    r.heartbeat(lead, b"b", REPLACE_S + 0.5)
    [(_, order)] = _orders(out)
    assert order.version == 8 and order.replicas == ["127.0.0.11", "127.0.0.12", "127.0.0.15"]


def test_a_member_is_not_replaced_when_the_others_that_vote_are_no_majority():
    r, out = _cluster(learners=())
    lead = _hb("127.0.0.12", control.LEADER, epoch=2, last_epoch=2, end=100, reached=1,
               followers={n: 100 for n in SET})
    for now in (0.0, 3.0, 6.0, 9.0):
        r.heartbeat(lead, b"b", now)
        r.heartbeat(dataclasses.replace(_hb("127.0.0.11", control.FOLLOWER, epoch=2, leader=lead.reads),
                                        learner=True), b"a", now)
    assert not any(isinstance(a, m.ReplaceReplica) for a in _asked(out)), \
        "the leader and a learner: the lost member may hold what is committed"
