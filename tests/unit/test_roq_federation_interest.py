"""Interest in a tree of clusters: what each link advertises (counted, link by link) and where records go.

The clusters here are :class:`~roq.federation.InterestTable` s joined in one process: every advert is
delivered at once to the far end of its link and counted there, as the links of a real tree would."""

from __future__ import annotations

import collections
import random

import pytest

from roq.federation import PARENT, InterestTable, Prefixes, minimal
from roq.wire.control import Interest, QueueInterest, decode, encode


class Tree:
    """Clusters joined by in-process links; ``sent[(a, b)]``: adverts that crossed from ``a`` to ``b``."""

    def __init__(self, parents: dict[str, str | None]) -> None:
        self.parent = parents
        self.kids: dict[str, list[str]] = collections.defaultdict(list)
        for name, parent in parents.items():
            if parent is not None:
                self.kids[parent].append(name)
        self.tables = {name: InterestTable(has_parent=parent is not None) for name, parent in parents.items()}
        self.sent: collections.Counter[tuple[str, str]] = collections.Counter()
        for name in self._top_down():
            for child in self.kids[name]:
                self._deliver(name, self.tables[name].child_linked(child))
                self._deliver(child, [])  # the child's hello: its (empty) interest

    def _top_down(self) -> list[str]:
        order = [n for n, p in self.parent.items() if p is None]
        for name in order:
            order.extend(self.kids[name])
        return order

    def _deliver(self, sender: str, adverts: list) -> None:
        queue = collections.deque((sender, a) for a in adverts)
        while queue:
            frm, advert = queue.popleft()
            to = self.parent[frm] if advert.link == PARENT else advert.link
            assert to is not None
            self.sent[frm, to] += 1
            interest = decode(encode(advert.interest))  # as it crosses a link
            assert isinstance(interest, Interest)
            out = (self.tables[to].from_parent(interest) if advert.link != PARENT
                   else self.tables[to].from_child(frm, interest))
            queue.extend((to, a) for a in out)

    def subscribe(self, cluster: str, queue: str, prefix: bytes) -> int:
        """Subscribe at ``cluster``; how many adverts crossed links because of it."""
        before = sum(self.sent.values())
        self._deliver(cluster, self.tables[cluster].subscribe(queue, prefix))
        return sum(self.sent.values()) - before

    def unsubscribe(self, cluster: str, queue: str, prefix: bytes) -> int:
        before = sum(self.sent.values())
        self._deliver(cluster, self.tables[cluster].unsubscribe(queue, prefix))
        return sum(self.sent.values()) - before

    def publish(self, cluster: str, queue: str, key: bytes) -> tuple[collections.Counter[str], list[tuple[str, str]]]:
        """Where a record published at ``cluster`` is delivered (cluster -> times) and the links it crossed."""
        delivered: collections.Counter[str] = collections.Counter()
        crossed: list[tuple[str, str]] = []
        todo: list[tuple[str, str | None]] = [(cluster, None)]
        while todo:
            at, came_from = todo.pop()
            route = self.tables[at].route(queue, key, came_from)
            if route.local:
                delivered[at] += 1
            nexts = ([self.parent[at]] if route.up else []) + list(route.children)
            for nxt in nexts:
                assert nxt is not None
                crossed.append((at, nxt))
                todo.append((nxt, PARENT if self.parent[nxt] == at else at))  # from its side: parent or child
        return delivered, crossed

    def ancestors(self, name: str) -> list[str]:
        out = []
        while self.parent[name] is not None:
            name = self.parent[name]  # type: ignore[assignment]
            out.append(name)
        return out

    def subtree(self, name: str) -> set[str]:
        out = {name}
        for kid in self.kids[name]:
            out |= self.subtree(kid)
        return out


SEVEN = {"hq": None, "uk": "hq", "fr": "hq", "london": "uk", "leeds": "uk", "paris": "fr", "lyon": "fr"}


def test_minimal_sets_keep_what_nothing_else_covers_and_match_in_one_bisection():
    assert minimal([b"ab", b"a", b"b", b"abc", b"ba"]) == (b"a", b"b")
    assert minimal([b"", b"x"]) == (b"",)
    rng = random.Random(7)
    for _ in range(300):
        prefixes = [bytes(rng.choice(b"abc") for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(0, 6))]
        p = Prefixes.of(prefixes)
        for _ in range(20):
            key = bytes(rng.choice(b"abcd") for _ in range(rng.randint(0, 4)))
            assert p.match(key) == any(key.startswith(x) for x in prefixes), (prefixes, key)


def test_the_intersection_of_two_prefix_sets_matches_the_keys_both_match():
    assert Prefixes.of([b"a."]).intersect(Prefixes.of([b"a.fr", b"b."])) == Prefixes.of([b"a.fr"])
    assert Prefixes.of([b""]).intersect(Prefixes.of([b"x", b"y"])) == Prefixes.of([b"x", b"y"])
    assert not Prefixes.of([b"a"]).intersect(Prefixes())
    rng = random.Random(11)
    for _ in range(300):
        one, two = ([bytes(rng.choice(b"abc") for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(0, 4))]
                    for _ in range(2))
        both = Prefixes.of(one).intersect(Prefixes.of(two))
        for _ in range(20):
            key = bytes(rng.choice(b"abcd") for _ in range(rng.randint(0, 4)))
            assert both.match(key) == (Prefixes.of(one).match(key) and Prefixes.of(two).match(key)), (one, two, key)


def test_a_subscriber_at_a_leaf_costs_one_advert_per_link_on_its_way_to_the_root_and_none_elsewhere():
    tree = Tree(SEVEN)
    tree.sent.clear()
    assert tree.subscribe("london", "orders", b"eu.") == 2
    assert tree.sent == {("london", "uk"): 1, ("uk", "hq"): 1}
    assert tree.subscribe("london", "orders", b"eu.") == 0  # a second subscriber on the same prefix
    assert tree.subscribe("london", "orders", b"eu.uk") == 0  # covered by what is advertised
    assert tree.subscribe("leeds", "orders", b"eu.") == 1  # its branch already advertises the prefix up
    assert tree.sent == {("london", "uk"): 1, ("uk", "hq"): 1, ("leeds", "uk"): 1}
    # the last one leaving takes it back, and only then
    assert tree.unsubscribe("london", "orders", b"eu.") == 0
    assert tree.unsubscribe("london", "orders", b"eu.uk") == 0
    assert tree.unsubscribe("london", "orders", b"eu.") == 1
    assert tree.unsubscribe("leeds", "orders", b"eu.") == 2
    assert tree.tables["hq"].wanted_by("uk", "orders") == Prefixes()
    assert tree.unsubscribe("leeds", "orders", b"eu.") == 0  # one too many: nothing


def test_interest_made_at_a_branch_or_the_root_goes_up_and_down_its_own_subtree_only():
    tree = Tree(SEVEN)
    tree.sent.clear()
    assert tree.subscribe("uk", "orders", b"") == 3
    assert tree.sent == {("uk", "hq"): 1, ("uk", "london"): 1, ("uk", "leeds"): 1}
    tree.sent.clear()
    assert tree.subscribe("hq", "orders", b"") == 4  # down, except where uk's own already covers it
    assert set(tree.sent) == {("hq", "uk"), ("hq", "fr"), ("fr", "paris"), ("fr", "lyon")}
    fresh = Tree(SEVEN)
    fresh.sent.clear()
    assert fresh.subscribe("hq", "orders", b"") == 6  # every link, down, and none up
    assert set(fresh.sent) == {("hq", "uk"), ("hq", "fr"), ("uk", "london"), ("uk", "leeds"),
                               ("fr", "paris"), ("fr", "lyon")}


def test_a_thousand_leaves_under_one_branch_each_join_costs_two_adverts():
    parents: dict[str, str | None] = {"hq": None, "region": "hq"}
    parents.update({f"store-{i}": "region" for i in range(1000)})
    tree = Tree(parents)
    tree.sent.clear()
    for i in range(1000):
        assert tree.subscribe(f"store-{i}", "orders", f"store-{i}.".encode()) == 2
    assert sum(tree.sent.values()) == 2000
    assert all(to in ("region", "hq") for _, to in tree.sent)  # not one advert reached another store
    assert tree.sent["region", "hq"] == 1000
    # a second subscriber at each store, on the same prefix: nothing anywhere
    assert sum(tree.subscribe(f"store-{i}", "orders", f"store-{i}.".encode()) for i in range(1000)) == 0


def test_records_reach_their_cluster_its_ancestors_and_its_subtree_once_and_cross_only_where_wanted():
    rng = random.Random(11)
    for trial in range(40):
        names = [f"c{i}" for i in range(rng.randint(2, 14))]
        parents: dict[str, str | None] = {names[0]: None}
        for i, name in enumerate(names[1:], 1):
            parents[name] = names[rng.randrange(i)]
        tree = Tree(parents)
        subs: dict[str, collections.Counter[bytes]] = collections.defaultdict(collections.Counter)
        for _ in range(rng.randint(1, 12)):
            at, prefix = rng.choice(names), bytes(rng.choice(b"ab") for _ in range(rng.randint(0, 2)))
            tree.subscribe(at, "q", prefix)
            subs[at][prefix] += 1
        for _ in range(rng.randint(0, 4)):  # some leave again
            at = rng.choice(sorted(subs))
            if subs[at]:
                prefix = rng.choice(sorted(subs[at]))
                tree.unsubscribe(at, "q", prefix)
                subs[at] -= collections.Counter([prefix])
        for _ in range(30):
            origin, key = rng.choice(names), bytes(rng.choice(b"ab") for _ in range(rng.randint(0, 3)))
            delivered, crossed = tree.publish(origin, "q", key)
            hears = {origin} | set(tree.ancestors(origin))
            expected = {y for y in names if any(key.startswith(p) for p in subs[y])
                        and (y in hears or origin in tree.subtree(y) or y in tree.subtree(origin))}
            assert set(delivered) == expected, (trial, parents, dict(subs), origin, key)
            assert all(n == 1 for n in delivered.values())
            assert len(crossed) == len(set(crossed))  # each link at most once
            for frm, to in crossed:  # and only toward a cluster that delivers it, there or beyond
                beyond = tree.subtree(to) if parents[to] == frm else set(names) - tree.subtree(frm)
                assert expected & beyond, (trial, frm, to)


def test_the_whole_set_sent_again_on_a_reconnect_changes_nothing_and_replaces_what_was_held():
    tree = Tree(SEVEN)
    tree.subscribe("london", "orders", b"a")
    tree.subscribe("hq", "orders", b"b")
    uk, london = tree.tables["uk"], tree.tables["london"]
    assert uk.from_child("london", london.whole_up()) == []  # the same again: nothing moves
    assert london.from_parent(uk.whole_down()) == []
    # a whole set replaces: london now says it wants only "c"
    out = uk.from_child("london", Interest([QueueInterest("orders", [b"c"])], whole=True))
    assert [(a.link, a.interest.queues) for a in out] == [(PARENT, [QueueInterest("orders", [b"c"], [b"a"])])]
    # a child gone takes its interest back; a link only down keeps it (nothing was called)
    assert [a.link for a in uk.child_gone("london")] == [PARENT]
    assert uk.advertised_up("orders") == Prefixes()
    assert uk.child_gone("london") == []


def test_interest_of_several_queues_is_kept_apart():
    tree = Tree(SEVEN)
    tree.subscribe("paris", "orders", b"")
    tree.subscribe("paris", "prices", b"fr.")
    assert tree.publish("hq", "orders", b"x")[0] == {"paris": 1}
    assert tree.publish("hq", "prices", b"uk.1")[0] == {}
    assert tree.publish("hq", "stock", b"fr.1")[0] == {}


@pytest.mark.parametrize("prefix", [b"", b"\x00\xff", "é".encode()])
def test_any_bytes_are_a_prefix(prefix):
    tree = Tree(SEVEN)
    assert tree.subscribe("lyon", "q", prefix) == 2
    assert tree.publish("hq", "q", prefix + b"tail")[0] == {"lyon": 1}


def test_the_minimal_set_kept_change_by_change_is_the_one_computed_from_scratch():
    from roq.federation.interest import _Union

    rng = random.Random(5)
    for _ in range(50):
        union, counts = _Union(), collections.Counter()
        shown: set[bytes] = set()
        for _ in range(60):
            p = bytes(rng.choice(b"ab") for _ in range(rng.randint(0, 3)))
            if counts[p] and rng.random() < 0.5:
                counts[p] -= 1
                delta = union.change("q", (), [p])
            else:
                counts[p] += 1
                delta = union.change("q", [p], ())
            if delta is not None:  # the deltas, applied in turn, give the set
                shown = (shown - set(delta.remove)) | set(delta.add)
            expected = minimal(p for p, n in counts.items() if n > 0)
            assert union.get("q").items == expected
            assert tuple(sorted(shown)) == expected
