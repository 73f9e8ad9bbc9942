"""The GCM's place in its tree: children admitted or refused at their hello, forgotten when silent."""

from __future__ import annotations

import pytest

from gcm._federation import CHILD_TIMEOUT, Federation
from roq.errors import ConflictError
from roq.wire.control.links import ClusterName, LinkHello, LinkStats

CARRIED = LinkStats("tcp://127.0.0.11:5500", records_sent=1200, bytes_sent=150_000, backlog=4096, moves=1, rate_limit=250_000,
                    carrying=[b"eu.", b"\xff"])


def _hello(cluster: str, role: str = "leaf", incarnation: int = 1, below: tuple[str, ...] = (),
           stats: tuple[LinkStats, ...] = ()) -> LinkHello:
    names = [ClusterName(cluster, "hq")] + [ClusterName(n, cluster) for n in below]
    return LinkHello(cluster=cluster, role=role, incarnation=incarnation, names=names, interest=[], stats=list(stats))


def test_a_child_is_welcomed_with_the_path_to_the_root_and_shown_in_the_status():
    hq = Federation("hq", "root")
    reply = hq.hello(_hello("eu", "branch", below=("store-1",)), "eu-key", now=0.0)
    assert reply.data == {"Path": ["hq"], "Interest": []}
    assert hq.hello(_hello("eu", "branch", below=("store-1",)), "eu-key", now=1.0).data["Path"] == ["hq"]  # again
    assert hq.status(1.5) == {"Name": "hq", "Role": "root", "Path": [], "Refusals": {}, "Children": [
        {"Name": "eu", "Key": "eu-key", "Incarnation": 1, "Below": ["store-1"], "HeardS": 0.5, "Links": []}]}


def test_what_a_childs_link_carried_is_kept_as_its_last_hello_said_and_shown():
    hq = Federation("hq", "root")
    hq.hello(_hello("eu", stats=(CARRIED,)), "eu-key", now=0.0)
    assert hq.status(2.0)["Children"][0]["Links"] == [{
        "Target": "tcp://127.0.0.11:5500", "Records": 1200, "Bytes": 150_000, "Backlog": 4096, "Moves": 1,
        "RateLimit": 250_000, "Carrying": ["eu.", "\\xff"], "Refused": "",
        "BytesRead": 0, "Compressed": False}]
    assert hq.links(2.0) == [("eu", 2.0, [CARRIED])]
    hq.hello(_hello("eu"), "eu-key", now=3.0)  # a new incarnation that has carried nothing yet says so
    assert hq.links(3.0) == [("eu", 0.0, [])]
    hq.expire(3.0 + CHILD_TIMEOUT + 1)
    assert hq.links(30.0) == []


@pytest.mark.parametrize("hello, key, reason, named", [
    (_hello("eu", below=("hq",)), "eu-key", "cycle", "hq"),
    (_hello("us"), "other-key", "duplicate_name", "us"),
    (_hello("us", incarnation=1), "us-key", "stale", "us"),
    (_hello("x", role="root"), "x-key", "not_a_parent", "x"),
    (_hello("bad/name"), "x-key", "malformed", "bad/name"),
])
def test_a_link_is_refused_with_its_reason_and_both_ends_named_and_counted(hello, key, reason, named):
    hq = Federation("hq", "root")
    hq.hello(_hello("us", incarnation=2), "us-key", now=0.0)
    with pytest.raises(ConflictError) as refused:
        hq.hello(hello, key, now=0.0)
    assert refused.value.data == {"Reason": reason} and named in str(refused.value)
    assert hq.status(30.0)["Refusals"] == {reason: 1}
    assert [c["Name"] for c in hq.status(30.0)["Children"]] == ["us"]  # the one admitted is still there


def test_a_cluster_in_no_tree_or_a_leaf_refuses_every_link():
    for federation, says in ((Federation("", "root"), "in no tree"), (Federation("store-1", "leaf"), "is a leaf")):
        with pytest.raises(ConflictError, match=says) as refused:
            federation.hello(_hello("x"), "x-key", now=0.0)
        assert refused.value.data == {"Reason": "not_a_parent"}
    assert Federation("", "root").status(0.0)["Name"] == ""


def test_a_silent_child_is_forgotten_and_a_new_leader_knows_no_child_until_it_says_hello_again():
    hq = Federation("hq", "root")
    hq.hello(_hello("eu"), "eu-key", now=0.0)
    hq.hello(_hello("us"), "us-key", now=10.0)
    assert hq.expire(CHILD_TIMEOUT + 1.0) == ["eu"]
    assert [c["Name"] for c in hq.status(30.0)["Children"]] == ["us"]
    hq.hello(_hello("eu"), "another-key", now=20.0)  # its name is free again
    hq.reset()
    assert hq.status(30.0)["Children"] == []
    hq.hello(_hello("us"), "us-key", now=21.0)
    assert [c["Name"] for c in hq.status(30.0)["Children"]] == ["us"]


def test_a_childs_crossing_that_begins_or_stops_carrying_into_a_queue_is_a_change_to_record():
    hq = Federation("hq", "root")
    other = LinkStats("tcp://127.0.0.11:5600")
    hq.hello(_hello("eu"), "eu-key", now=0.0)  # not carrying yet: nothing
    assert hq.take_changes() == []
    hq.hello(_hello("eu", stats=(CARRIED,)), "eu-key", now=1.0)
    hq.hello(_hello("eu", stats=(CARRIED,)), "eu-key", now=2.0)  # the same again: nothing more
    assert hq.take_changes() == [("link_up", "eu", CARRIED.target, "")]
    hq.hello(_hello("eu", incarnation=2), "eu-key", now=3.0)  # started again, not carrying yet: nothing
    hq.hello(_hello("eu", incarnation=2, stats=(other,)), "eu-key", now=4.0)  # now into another queue only
    assert hq.take_changes() == [("link_up", "eu", other.target, ""),
                                 ("link_down", "eu", CARRIED.target, "its link carries into it no more")]
    hq.expire(4.0 + CHILD_TIMEOUT + 1)
    assert hq.take_changes() == [("link_down", "eu", other.target, f"no hello for {CHILD_TIMEOUT:.0f}s")]
    hq.hello(_hello("eu", incarnation=3, stats=(other,)), "eu-key", now=30.0)
    hq.reset()  # a new leader: nothing left to record, and it learns the links again
    assert hq.take_changes() == []


def test_records_for_a_named_cluster_go_where_the_tree_knows_it_and_an_unknown_one_is_refused_at_the_root():
    from roq.errors import BadRequestError, NotFoundError
    hq = Federation("hq", "root")
    hq.hello(_hello("eu", "branch", below=("store-1",)), "eu-key", now=0.0)
    assert hq.route("store-1", "orders") == "store-1" and hq.route("eu", "orders") == "eu"
    assert hq.route("hq", "orders") == ""  # its own: a plain record of its queue
    with pytest.raises(NotFoundError, match="no cluster named 'store-9' in the tree of hq"):
        hq.route("store-9", "orders")
    with pytest.raises(BadRequestError, match="cluster's name"):
        hq.route("bad name!", "orders")
    assert Federation("eu", "branch").route("store-9", "orders") == "store-9"  # unknown below a branch: up
    with pytest.raises(BadRequestError, match="in no tree"):
        Federation("", "").route("store-1", "orders")


def test_a_childs_links_each_say_what_they_carried():
    hq = Federation("hq", "root")
    other = LinkStats("tcp://127.0.0.11:5600", records_sent=5, bytes_sent=500, backlog=0, moves=0, rate_limit=0,
                      carrying=[])
    for at in (0.0, 1.0):
        hq.hello(LinkHello("eu", "leaf", 7, [ClusterName("eu", "")], [], [CARRIED], link="eu@orders"), "k", now=at)
        hq.hello(LinkHello("eu", "leaf", 9, [ClusterName("eu", "")], [], [other], link="eu@stock"), "k", now=at)
    assert hq.links(1.0) == [("eu", 0.0, [CARRIED, other])] and hq.refusals == {}


def test_a_crossing_the_parents_permissions_refuse_is_counted_once_and_told_as_a_change():
    hq = Federation("hq", "root")
    refused = LinkStats("tcp://127.0.0.11:5500", records_sent=0, bytes_sent=0, backlog=0, moves=0, rate_limit=0,
                        carrying=[], refused="publish to orders: not allowed for eu")
    for at in (0.0, 1.0, 2.0):  # said again with each hello: counted once
        hq.hello(LinkHello("eu", "leaf", 7, [ClusterName("eu", "")], [], [refused], link="eu@orders"), "k", now=at)
    assert hq.refusals == {"forbidden": 1}
    assert ("link_refused", "eu", "tcp://127.0.0.11:5500", "publish to orders: not allowed for eu") in hq.take_changes()
