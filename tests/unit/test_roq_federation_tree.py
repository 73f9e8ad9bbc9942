"""A cluster's place in its tree: children admitted from their hellos, names announced up, refusals that name
both ends, and records for a named cluster routed by the names each child announced."""

from __future__ import annotations

import collections

import pytest

from roq.errors import ConfigError
from roq.federation import Tree, split_address
from roq.wire.control import ClusterName, LinkHello, LinkRefused, Names, NamesRefused, decode, encode


class Forest:
    """Trees joined in one process: a hello goes to the parent, what it calls for is carried on at once."""

    def __init__(self) -> None:
        self.trees: dict[str, Tree] = {}
        self.parent: dict[str, str] = {}
        self.cut: list[tuple[str, str, LinkRefused]] = []  # (parent, child, why)
        self.refused_here: dict[str, str] = {}
        self.names_sent: collections.Counter[str] = collections.Counter()

    def add(self, name: str, role: str, key: str = "") -> Tree:
        self.trees[name] = Tree(name, role, key or f"key-{name}")
        return self.trees[name]

    def link(self, child: str, parent: str, incarnation: int = 1, key: str | None = None) -> LinkRefused | None:
        kid, up = self.trees[child], self.trees[parent]
        names = kid.whole_names().add
        hello = LinkHello(child, kid.role, incarnation, names, [])
        hello = decode(encode(hello))
        assert isinstance(hello, LinkHello)
        outcome = up.hello(hello, key if key is not None else kid.key)
        if outcome.refusal is not None:
            return outcome.refusal.link_refused()
        self.parent[child] = parent
        kid.welcomed([parent, *up.path])
        self._carry(parent, outcome)
        return None

    def _carry(self, at: str, outcome) -> None:
        if outcome.refused_here is not None:
            self.refused_here[at] = outcome.refused_here.detail
        for child, msg in outcome.down:
            if isinstance(msg, LinkRefused):
                self.cut.append((at, child, msg))
                self.parent.pop(child, None)
            else:
                self._carry(child, self.trees[child].names_refused(msg))
        if outcome.up is not None and at in self.parent:
            self.names_sent[at] += 1
            parent = self.parent[at]
            names = decode(encode(outcome.up))
            assert isinstance(names, Names)
            up = self.trees[parent].names(at, names)
            for child, msg in up.down:  # refusals come back down to the one that announced
                assert child == at and isinstance(msg, NamesRefused)
                self._carry(at, self.trees[at].names_refused(msg))
            self._carry(parent, type(up)(up=up.up))


def seven() -> Forest:
    f = Forest()
    f.add("hq", "root")
    for branch, leaves in (("uk", ("london", "leeds")), ("fr", ("paris", "lyon"))):
        f.add(branch, "branch")
        assert f.link(branch, "hq") is None
        for leaf in leaves:
            f.add(leaf, "leaf")
            assert f.link(leaf, branch) is None
    return f


def test_a_parent_learns_its_subtree_from_hellos_and_routes_named_records_down_it():
    f = seven()
    hq, uk, london = f.trees["hq"], f.trees["uk"], f.trees["london"]
    assert set(hq.below()) == {"uk", "fr", "london", "leeds", "paris", "lyon"}
    assert hq.route("lyon") == "fr" and hq.route("uk") == "uk" and hq.route("hq") is None
    assert uk.route("leeds") == "leeds" and uk.route("lyon") == ""  # not below: up
    assert london.route("paris") == "" and london.route("london") is None
    assert london.path == ("uk", "hq")
    with pytest.raises(ConfigError, match="no cluster named 'nowhere' in the tree of hq"):
        hq.route("nowhere")


def test_addresses_name_a_cluster_and_its_queue():
    assert split_address("store-417/orders") == ("store-417", "orders")
    assert split_address("orders") == (None, "orders")
    with pytest.raises(ConfigError):
        split_address("bad name!/orders")


def test_a_cycle_is_refused_naming_both_ends():
    f = seven()
    refusal = f.link("hq", "london")  # the root under one of its own leaves
    assert refusal is not None and refusal.reason == "not_a_parent"  # a leaf takes no children
    f.add("loop", "branch")
    assert f.link("loop", "uk") is None
    # "uk" (already the parent of "loop") asks to go under "loop": its subtree holds "loop"
    refusal = f.trees["loop"].hello(LinkHello("uk", "branch", 1, f.trees["uk"].whole_names().add, []),
                                    "key-uk").refusal
    assert refusal is not None and refusal.reason == "cycle"
    assert "uk under loop would close a cycle" in refusal.detail and "loop -> uk -> hq" in refusal.detail


def test_a_duplicate_name_is_refused_where_it_is_seen_and_a_cousins_is_found_above():
    f = seven()
    f.add("london", "leaf", key="another-london")  # a second cluster named london, its own key
    refusal = f.link("london", "uk", key="another-london")
    assert refusal is not None and refusal.reason == "duplicate_name"
    assert "uk already has a child named london" in refusal.detail
    # under fr, the clash is only seen at hq: fr admits it, hq refuses the name, fr cuts the link
    assert f.link("london", "fr", key="another-london") is None
    assert f.cut and f.cut[-1][:2] == ("fr", "london") and f.cut[-1][2].reason == "duplicate_name"
    assert "london is already a cluster below hq's child uk" in f.cut[-1][2].detail
    assert "london" not in f.trees["fr"].below()
    assert f.trees["hq"].route("london") == "uk"  # the first one keeps its name


def test_a_second_parent_is_refused_naming_both():
    f = seven()
    # london's own key, announced again under fr: the same cluster with a second parent
    f.trees["london"].welcomed(["fr", "hq"])
    assert f.link("london", "fr") is None  # fr sees no clash; hq does
    reason, detail = f.cut[-1][2].reason, f.cut[-1][2].detail
    assert reason == "second_parent"
    assert "london already has the parent uk" in detail and "fr may not be a second parent" in detail


def test_a_leaf_takes_no_children_and_only_a_branch_or_a_leaf_has_a_parent():
    f = seven()
    f.add("kiosk", "leaf")
    refusal = f.link("kiosk", "paris")
    assert refusal is not None and refusal.reason == "not_a_parent" and "paris is a leaf" in refusal.detail
    f.add("hq2", "root")
    refusal = f.link("hq2", "hq")
    assert refusal is not None and refusal.reason == "not_a_parent" and "hq2 says it is the root" in refusal.detail


def test_reconnects_are_never_refused_and_an_older_link_is_stale():
    f = seven()
    sent_before = sum(f.names_sent.values())
    for incarnation in [1] * 500 + list(range(2, 502)):  # the same link again, then newer ones
        assert f.link("leeds", "uk", incarnation=incarnation) is None
    assert not f.cut and not f.refused_here
    assert sum(f.names_sent.values()) == sent_before  # nothing changed: nothing announced
    refusal = f.link("leeds", "uk", incarnation=3)
    assert refusal is not None and refusal.reason == "stale"


def test_each_link_of_a_child_keeps_its_own_incarnations():
    """A child links several queues, a link each, each started at its own time: none is stale for another's."""
    hq = Tree("hq", "root")
    uk = [ClusterName("uk", "")]

    def hello(link: str, incarnation: int):
        return hq.hello(LinkHello("uk", "leaf", incarnation, uk, [], link=link), "key-uk").refusal

    for _ in range(3):
        assert hello("uk@orders", 100) is None and hello("uk@stock", 200) is None
    refusal = hello("uk@orders", 99)  # an older incarnation of that link
    assert refusal is not None and refusal.reason == "stale" and "uk@orders" in refusal.detail
    assert hq.children()["uk"][1] == 200


def test_a_child_gone_is_taken_out_of_every_ancestors_names():
    f = seven()
    outcome = f.trees["uk"].child_gone("leeds")
    assert outcome.up == Names([], ["leeds"])
    f._carry("uk", outcome)
    assert "leeds" not in f.trees["hq"].below()
    assert f.trees["uk"].child_gone("leeds").up is None


def test_names_announced_one_change_at_a_time_reach_the_root():
    f = seven()
    f.add("soho", "leaf")
    sent = sum(f.names_sent.values())
    assert f.link("soho", "uk") is None
    assert sum(f.names_sent.values()) == sent + 1  # uk told hq, once
    assert f.trees["hq"].route("soho") == "uk"


@pytest.mark.parametrize("hello", [
    LinkHello("bad name", "leaf", 1, [ClusterName("bad name", "", "")], []),
    LinkHello("x", "leaf", 1, [], []),  # its own name missing
    LinkHello("x", "leaf", 1, [ClusterName("y", "x", "")], []),  # another first
    LinkHello("x", "branch", 1, [ClusterName("x", "", ""), ClusterName("y", "x", ""), ClusterName("y", "x", "")], []),
])
def test_a_malformed_hello_is_refused_with_a_reason(hello):
    refusal = Tree("hq", "root").hello(hello, "k").refusal
    assert refusal is not None and refusal.reason == "malformed" and "refused by hq" in refusal.detail
