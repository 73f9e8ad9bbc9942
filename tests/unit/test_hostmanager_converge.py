"""hostmanager converge: the actions that bring a host's children in line with its assignments (no processes)."""

from __future__ import annotations

import logging

from hostmanager._converge import ChildState, Restart, Start, Stop, Tell, converge, wanted
from roq.wire.documents import Assignment

MON = Assignment("orders", "monitor")
X1 = Assignment("orders", "x1")
X2 = Assignment("orders", "x2")
AUDIT_X1 = Assignment("audit", "x1")
HERE = "tcp://127.0.0.12:5500"
THERE = "tcp://127.0.0.13:5500"


def assigned(*assignments: Assignment) -> dict[str, Assignment]:
    return {a.name: a for a in assignments}


def test_wanted_reads_the_znode_names_and_skips_malformed_ones_logging_each_once(caplog):
    skipped: set[str] = set()
    names = ["orders@monitor", "orders@x1", "orders@x", "nope", "a/b@x1", "orders@exchange", "@x1"]
    with caplog.at_level(logging.WARNING):
        assert wanted(names, skipped=skipped) == assigned(MON, X1)
        assert wanted(names, skipped=skipped) == assigned(MON, X1)
    assert len(caplog.records) == 5 and skipped == {"orders@x", "nope", "a/b@x1", "orders@exchange", "@x1"}


def test_nothing_running_starts_the_monitor_and_the_exchanges_whose_monitor_is_known():
    actions = converge(assigned(MON, X1, AUDIT_X1), {}, {"orders": HERE}, now=0.0)
    assert actions == [Start(MON), Start(X1, HERE)]  # audit's exchange waits for audit's monitor


def test_a_journal_is_started_with_its_queues_journal_generation_and_an_exchange_without():
    journal = Assignment("orders", "journal")
    actions = converge(assigned(journal, X1), {}, {"orders": HERE}, now=0.0, generations={"orders": 2})
    assert actions == [Start(journal, HERE, 2), Start(X1, HERE, 0)]
    assert converge(assigned(journal), {}, {"orders": HERE}, now=0.0) == [Start(journal, HERE, 0)]


def test_a_replica_placed_in_place_of_a_lost_one_is_started_as_a_learner_and_only_a_replica():
    journal = Assignment("orders", "journal")
    learner = converge(assigned(journal, X1), {}, {"orders": HERE}, now=0.0, replicas={"orders": 3},
                       learners={"orders": True})
    assert learner == [Start(journal, HERE, 0, replicas=3, learner=True), Start(X1, HERE, 0)]
    member = converge(assigned(journal), {}, {"orders": HERE}, now=0.0, replicas={"orders": 3},
                      learners={"orders": False})
    assert member == [Start(journal, HERE, 0, replicas=3)]
    alone = converge(assigned(journal), {}, {"orders": HERE}, now=0.0, learners={"orders": True})
    assert alone == [Start(journal, HERE, 0)], "an unreplicated journal is never a learner"


def test_an_exchange_waits_for_its_queues_monitor():
    assert converge(assigned(X1), {}, {"orders": ""}, now=0.0) == []
    assert converge(assigned(X1), {}, {}, now=0.0) == []


def test_running_children_in_place_need_nothing():
    children = {MON.name: ChildState(MON, running=True), X1.name: ChildState(X1, running=True, monitor=HERE)}
    assert converge(assigned(MON, X1), children, {"orders": HERE}, now=0.0) == []


def test_an_assignment_gone_stops_its_child_once():
    children = {X1.name: ChildState(X1, running=True, monitor=HERE), X2.name: ChildState(X2, running=True, monitor=HERE)}
    assert converge(assigned(X1), children, {"orders": HERE}, now=0.0) == [Stop(X2.name)]
    children[X2.name] = ChildState(X2, running=True, stopping=True, monitor=HERE)
    assert converge(assigned(X1), children, {"orders": HERE}, now=0.0) == []


def test_a_child_being_stopped_is_started_anew_only_after_its_stop():
    children = {X1.name: ChildState(X1, running=True, stopping=True, monitor=HERE)}
    assert converge(assigned(X1), children, {"orders": HERE}, now=0.0) == []


def test_a_crashed_child_restarts_after_its_back_off():
    children = {X1.name: ChildState(X1, running=False, not_before=5.0, monitor=HERE)}
    assert converge(assigned(X1), children, {"orders": HERE}, now=4.9) == []
    assert converge(assigned(X1), children, {"orders": THERE}, now=5.0) == [Start(X1, THERE)]
    children = {MON.name: ChildState(MON, running=False, not_before=5.0)}
    assert converge(assigned(MON), children, {}, now=5.0) == [Start(MON)]


def test_an_exchange_is_told_when_its_monitor_moved_or_restarted_when_it_cannot_be_told():
    told = {X1.name: ChildState(X1, running=True, monitor=HERE)}
    assert converge(assigned(X1), told, {"orders": THERE}, now=0.0) == [Tell(X1.name, THERE)]
    deaf = {X1.name: ChildState(X1, running=True, monitor=HERE, tellable=False)}
    assert converge(assigned(X1), deaf, {"orders": THERE}, now=0.0) == [Restart(X1.name, THERE)]


def test_a_monitor_gone_missing_leaves_running_exchanges_alone():
    children = {X1.name: ChildState(X1, running=True, monitor=HERE)}
    assert converge(assigned(X1), children, {"orders": ""}, now=0.0) == []


def test_a_monitor_is_never_told_anything():
    children = {MON.name: ChildState(MON, running=True)}
    assert converge(assigned(MON), children, {"orders": THERE}, now=0.0) == []


def test_a_link_starts_with_the_clusters_place_in_its_tree_and_starts_again_when_its_monitor_moved():
    from roq.wire.documents import FederationDoc

    link = Assignment("orders", "link")
    tree = FederationDoc(name="store-1", role="leaf", parent_zk="127.0.0.1:2181", parent_root="/hq")
    assert converge(assigned(link), {}, {"orders": HERE}, now=0.0, federation=tree) == [
        Start(link, HERE, federation=tree)]
    assert converge(assigned(link), {}, {"orders": HERE}, now=0.0) == []  # the cluster's place not read yet
    assert converge(assigned(link), {}, {"orders": HERE}, now=0.0, federation=FederationDoc(name="hq")) == []
    assert converge(assigned(link), {}, {}, now=0.0, federation=tree) == []  # nor the queue's monitor
    running = {link.name: ChildState(link, running=True, monitor=HERE, tellable=False)}
    assert converge(assigned(link), running, {"orders": THERE}, now=0.0, federation=tree) == [
        Restart(link.name, THERE)]
