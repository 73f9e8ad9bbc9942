"""Interest in a tree of clusters (pure): what each link advertises, and where a record goes.

A cluster's interest is, per queue, a set of key prefixes (``b""``: every key). It comes from three places:
its own subscribers, what each child advertised up (the interest of the child's whole subtree) and what the
parent advertised down (the interest of the cluster's ancestors). The rules, after the treeConnector
proposal, with nothing like a time-to-live:

* **up**: a cluster advertises to its parent its own interest and its children's, so interest made anywhere
  climbs to the root and no further;
* **down**: a cluster advertises to each child its own interest and what its parent advertised to it, so
  interest made at a cluster also reaches its whole subtree; **a child's interest is never advertised to
  another child**: it does not cross into a sibling's subtree.

A subscriber therefore hears its own cluster, its ancestors and its subtree, never a sibling's or a cousin's
subtree (a record for those is sent to the cluster by name). Records follow the interest back:

* a record published in a cluster goes up when the parent wants it and down to each child that wants it;
* a record that came from the parent goes down to each child that wants it (never back up);
* a record that came from a child goes up when the parent wants it (never down to another child).

Each side keeps the union of its sources as a *minimal* set of prefixes (none the prefix of another), counts
how many sources want each one, and advertises only changes of that set: a second subscriber on a prefix
already advertised sends nothing, and the last one leaving takes it back. A reconnect re-sends the whole set
(:meth:`InterestTable.whole_up`, :meth:`InterestTable.whole_down`), which replaces what the other side held.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Iterable, Mapping, Sequence

from roq.wire.control.links import Interest, QueueInterest

__all__ = ["PARENT", "Prefixes", "minimal", "Route", "Advert", "InterestTable"]


#: the link to the parent, among a cluster's links (a child's link is its name, which is never empty)
PARENT = ""


def minimal(prefixes: Iterable[bytes]) -> tuple[bytes, ...]:
    """The prefixes none of the others covers, sorted: ``{b"a", b"ab", b"b"}`` -> ``(b"a", b"b")``.

    Sorted, every extension of a prefix follows it before anything that does not start with it, so one pass
    that keeps what the last kept one does not cover is enough."""
    kept: list[bytes] = []
    for p in sorted(set(prefixes)):
        if not kept or not p.startswith(kept[-1]):
            kept.append(p)
    return tuple(kept)


@dataclasses.dataclass(frozen=True)
class Prefixes:
    """A minimal, sorted set of key prefixes; :meth:`match` in one bisection: of a minimal set at most one
    prefix covers a key, and it is the greatest one not after the key."""

    items: tuple[bytes, ...] = ()

    @classmethod
    def of(cls, prefixes: Iterable[bytes]) -> Prefixes:
        return cls(minimal(prefixes))

    def match(self, key: bytes) -> bool:
        i = bisect.bisect_right(self.items, key)
        return i > 0 and key.startswith(self.items[i - 1])

    def __bool__(self) -> bool:
        return bool(self.items)

    def intersect(self, other: Prefixes) -> Prefixes:
        """The keys both sets match: of every two prefixes one of which starts the other, the longer.
        ``{a.} & {a.fr, b.}`` -> ``{a.fr}``; ``{""} & X`` -> ``X``."""
        return Prefixes.of([b for a in self.items for b in other.items if b.startswith(a)]
                           + [a for a in self.items for b in other.items if a.startswith(b)])


@dataclasses.dataclass(frozen=True)
class Route:
    """Where one record goes from a cluster: to its own subscribers (``local``), up (``up``), and down to
    these children."""

    local: bool
    up: bool
    children: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Advert:
    """An :class:`~roq.wire.control.links.Interest` to send on a link (:data:`PARENT` or a child's name)."""

    link: str
    interest: Interest


def _extensions(items: list[bytes], prefix: bytes) -> tuple[int, int]:
    """Where the items that start with ``prefix`` are in the sorted ``items``: ``items[lo:hi]``."""
    lo = hi = bisect.bisect_left(items, prefix)
    while hi < len(items) and items[hi].startswith(prefix):
        hi += 1
    return lo, hi


class _Sources:
    """One queue's prefixes: how many sources want each, sorted, and the minimal set of them, kept as each
    change comes (a change costs a few bisections and the prefixes it covers, not a pass over them all)."""

    def __init__(self) -> None:
        self.counts: dict[bytes, int] = {}
        self.every: list[bytes] = []  # every prefix some source wants, sorted
        self.minimal: list[bytes] = []  # of those, the ones no other covers, sorted

    def add(self, p: bytes, added: list[bytes], removed: list[bytes]) -> None:
        n = self.counts.get(p, 0)
        self.counts[p] = n + 1
        if n:
            return
        bisect.insort(self.every, p)
        i = bisect.bisect_right(self.minimal, p)
        if i and p.startswith(self.minimal[i - 1]):
            return  # covered: the minimal set stays
        lo, hi = _extensions(self.minimal, p)
        removed.extend(self.minimal[lo:hi])
        self.minimal[lo:hi] = [p]
        added.append(p)

    def remove(self, p: bytes, added: list[bytes], removed: list[bytes]) -> None:
        n = self.counts.get(p, 0)
        if n > 1:
            self.counts[p] = n - 1
            return
        if not n:
            return
        del self.counts[p]
        del self.every[bisect.bisect_left(self.every, p)]
        i = bisect.bisect_left(self.minimal, p)
        if i == len(self.minimal) or self.minimal[i] != p:
            return  # it was covered: the minimal set stays
        lo, hi = _extensions(self.every, p)  # what it covered comes back, minimal among itself
        uncovered = list(minimal(self.every[lo:hi]))
        self.minimal[i:i + 1] = uncovered
        removed.append(p)
        added.extend(uncovered)


class _Union:
    """Per queue, how many sources want each prefix, and the minimal set of what any wants."""

    def __init__(self) -> None:
        self._queues: dict[str, _Sources] = {}
        self.sets: dict[str, Prefixes] = {}

    def change(self, queue: str, add: Iterable[bytes], remove: Iterable[bytes]) -> QueueInterest | None:
        """Count ``add`` in and ``remove`` out; what changed in the queue's minimal set (None: nothing)."""
        sources = self._queues.setdefault(queue, _Sources())
        added: list[bytes] = []
        removed: list[bytes] = []
        for p in add:
            sources.add(p, added, removed)
        for p in remove:
            sources.remove(p, added, removed)
        if not sources.counts:
            del self._queues[queue]
        if not added and not removed:
            return None
        now, gone = set(added) - set(removed), set(removed) - set(added)
        if sources.minimal:
            self.sets[queue] = Prefixes(tuple(sources.minimal))
        else:
            self.sets.pop(queue, None)
        return QueueInterest(queue, sorted(now), sorted(gone)) if now or gone else None

    def get(self, queue: str) -> Prefixes:
        return self.sets.get(queue, Prefixes())

    def count(self, queue: str, prefix: bytes) -> int:
        """How many sources want ``prefix`` of ``queue``."""
        sources = self._queues.get(queue)
        return sources.counts.get(prefix, 0) if sources is not None else 0


def _whole(sets: Mapping[str, Prefixes]) -> list[QueueInterest]:
    return [QueueInterest(q, list(p.items), []) for q, p in sorted(sets.items()) if p]


Change = tuple[str, list[bytes], list[bytes]]  # a queue, the prefixes added and those taken back


def _bring(held: dict[str, Prefixes], interest: Interest) -> list[Change]:
    """Bring one source's minimal sets (``held``) to what ``interest`` says; the changes, per queue."""
    new = {} if interest.whole else dict(held)
    for qi in interest.queues:
        now = set(new.get(qi.queue, Prefixes()).items)
        now.difference_update(qi.remove)
        now.update(qi.add)
        new[qi.queue] = Prefixes.of(now)
    changes: list[Change] = []
    for queue in sorted(set(held) | set(new)):
        before, after = held.get(queue, Prefixes()), new.get(queue, Prefixes())
        if before == after:
            continue
        old, new_ = set(before.items), set(after.items)
        changes.append((queue, sorted(new_ - old), sorted(old - new_)))
        if after:
            held[queue] = after
        else:
            held.pop(queue, None)
    return changes


class InterestTable:
    """One cluster's interest: its subscribers', each child's and its parent's, and what it advertised.

    Every change returns the :class:`Advert` s it calls for (none when the advertised sets stay as they
    were): at most one to the parent and, when the interest advertised down changes, one to each child."""

    def __init__(self, has_parent: bool) -> None:
        self.has_parent = has_parent
        self._mine = _Union()  # the cluster's own subscribers' prefixes, one count per subscriber
        self._up = _Union()  # the cluster's own interest and its children's: advertised to the parent
        self._down = _Union()  # the cluster's own interest and its parent's: advertised to every child
        self._children: dict[str, dict[str, Prefixes]] = {}  # what each child advertised
        self._parent: dict[str, Prefixes] = {}  # what the parent advertised

    # -- what comes in ------------------------------------------------------------------------------------

    def subscribe(self, queue: str, prefix: bytes) -> list[Advert]:
        """A subscriber of this cluster wants ``prefix`` of ``queue``."""
        first = not self._mine.count(queue, prefix)
        self._mine.change(queue, [prefix], ())
        if not first:
            return []
        change: list[Change] = [(queue, [prefix], [])]
        return self._advertise(up=change, down=change)

    def unsubscribe(self, queue: str, prefix: bytes) -> list[Advert]:
        """A subscriber of this cluster no longer wants ``prefix`` of ``queue`` (one that did not: nothing)."""
        n = self._mine.count(queue, prefix)
        if not n:
            return []
        self._mine.change(queue, (), [prefix])
        if n > 1:
            return []
        change: list[Change] = [(queue, [], [prefix])]
        return self._advertise(up=change, down=change)

    def from_child(self, child: str, interest: Interest) -> list[Advert]:
        """What a child advertised (a child not known yet becomes one of the children)."""
        return self._advertise(up=_bring(self._children.setdefault(child, {}), interest))

    def from_parent(self, interest: Interest) -> list[Advert]:
        """What the parent advertised."""
        return self._advertise(down=_bring(self._parent, interest))

    def child_linked(self, child: str) -> list[Advert]:
        """A child's link is up: it is told everything advertised down (its own interest comes with its hello,
        through :meth:`from_child`)."""
        self._children.setdefault(child, {})
        return [Advert(child, self.whole_down())]

    def child_gone(self, child: str) -> list[Advert]:
        """A child left the tree (refused, or removed): what it wanted is taken back. A link that is only down
        keeps its child's interest, so that what is owed to it is kept."""
        held = self._children.pop(child, None)
        if held is None:
            return []
        return self._advertise(up=_bring(held, Interest([], whole=True)))

    # -- what goes out ------------------------------------------------------------------------------------

    def whole_up(self) -> Interest:
        """Everything advertised to the parent (sent with each hello)."""
        return Interest(_whole(self._up.sets), whole=True)

    def whole_down(self) -> Interest:
        """Everything advertised to each child (sent with each welcome)."""
        return Interest(_whole(self._down.sets), whole=True)

    def route(self, queue: str, key: bytes, came_from: str | None = None) -> Route:
        """Where a record of ``queue`` with ``key`` goes; ``came_from`` is the link it came on (None:
        published in this cluster)."""
        up = (came_from != PARENT and self.has_parent
              and self._parent.get(queue, Prefixes()).match(key))
        children: tuple[str, ...] = ()
        if came_from is None or came_from == PARENT:
            children = tuple(c for c, held in self._children.items()
                             if held.get(queue, Prefixes()).match(key))
        return Route(self._mine.get(queue).match(key), bool(up), children)

    def advertised_up(self, queue: str) -> Prefixes:
        return self._up.get(queue)

    def wanted_by(self, link: str, queue: str) -> Prefixes:
        """What ``link`` (:data:`PARENT` or a child) advertised for ``queue``."""
        held = self._parent if link == PARENT else self._children.get(link, {})
        return held.get(queue, Prefixes())

    def _advertise(self, up: Sequence[Change] = (), down: Sequence[Change] = ()) -> list[Advert]:
        """Count the changes into the sets advertised up and down; the adverts of what changed in them."""
        ups = self._count(self._up, up)
        downs = self._count(self._down, down)
        adverts = []
        if ups and self.has_parent:
            adverts.append(Advert(PARENT, Interest(ups)))
        if downs:
            adverts.extend(Advert(child, Interest(downs)) for child in self._children)
        return adverts

    @staticmethod
    def _count(union: _Union, changes: Sequence[Change]) -> list[QueueInterest]:
        deltas = (union.change(queue, add, remove) for queue, add, remove in changes)
        return [d for d in deltas if d is not None]
