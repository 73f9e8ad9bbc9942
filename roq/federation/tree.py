"""A cluster's place in its tree (pure): who its children are, which clusters are below it, and who is refused.

Each cluster knows its own name and role, its parent's path to the root (from the parent's welcome) and, for
each child, the clusters of that child's subtree (from the child's :class:`~roq.wire.control.links.Names`),
each with its parent's name and its key's digest. Nothing else is configured anywhere: a parent learns its
children from their hellos.

A child is refused, with the reason and both ends named, when

* linking it would close a **cycle** (its subtree holds this cluster or one of its ancestors);
* it claims a name that another cluster of this subtree holds with another key (**duplicate name**), or one
  that a cluster with its key holds under another parent (**second parent**);
* this cluster is a leaf (**not a parent**);
* its link is older than the one already admitted for it (**stale**: a newer incarnation replaced it).

A name can also be held in a cousin's subtree, which only a common ancestor sees: every cluster announces its
subtree to its parent, the announcement climbs to the root, and the first ancestor that finds a clash answers
:class:`~roq.wire.control.links.NamesRefused`, which goes back down to the cluster that admitted the newcomer;
that cluster cuts the newcomer's link. A link is admitted at once when nothing here clashes (a region keeps
serving its stores while headquarters is away), and the clash, if any, is found when the announcement gets
through. A reconnect of a link already admitted (same name, same key, the same or a newer incarnation) is never
refused.

Records for a named cluster (``store-417/orders``) follow :meth:`Tree.route`: down to the child whose subtree
holds the name, otherwise up; at the root, an unknown name is refused.
"""

from __future__ import annotations

import dataclasses
import re

from roq.errors import ConfigError
from roq.wire import batch
from roq.wire.control.links import ClusterName, LinkHello, LinkRefused, Names, NamesRefused

__all__ = ["SEPARATOR", "check_name", "split_address", "address", "Refusal", "Outcome", "Tree"]

#: between a cluster's name and its queue's in an address: ``store-417/orders``
SEPARATOR = "/"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")


def check_name(name: object) -> str:
    """A cluster's name: 1-64 letters, digits, ``_``, ``.``, ``-`` (as a queue's).

    Raises:
        ConfigError: any other text, or not text.
    """
    if not isinstance(name, str) or not _NAME.match(name) or name in (".", ".."):
        raise ConfigError(f"a cluster's name is 1-64 letters, digits, '_', '.', '-', got {str(name)[:80]!r}")
    return name


def split_address(address: str) -> tuple[str | None, str]:
    """``store-417/orders`` -> ``("store-417", "orders")``; ``orders`` -> ``(None, "orders")``.

    Raises:
        ConfigError: a cluster's name that is not one, or more than one separator.
    """
    cluster, sep, queue = address.rpartition(SEPARATOR)
    if not sep:
        return None, address
    return check_name(cluster), queue


def address(cluster: str) -> bytes:
    """How the key of a record for ``cluster`` begins on its way there (:data:`roq.wire.batch.ADDRESSED`, the
    name, ``/``): the prefix the links toward it carry.

    Raises:
        ConfigError: not a cluster's name.
    """
    return batch.ADDRESSED + check_name(cluster).encode() + SEPARATOR.encode()


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a link or a name is refused: ``reason`` one of :data:`roq.wire.control.links.REFUSALS`, ``detail``
    naming both ends."""

    reason: str
    detail: str

    def link_refused(self) -> LinkRefused:
        return LinkRefused(self.reason, self.detail)


#: links of one child whose incarnations are kept, at most (a child has one per queue it links)
MAX_LINKS = 4096


@dataclasses.dataclass
class _Child:
    key: str
    incarnations: dict[str, int]  # each of its links (by name) -> its newest incarnation admitted
    names: dict[str, ClusterName]  # the child's subtree by name, the child first

    @property
    def incarnation(self) -> int:
        return max(self.incarnations.values(), default=0)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one step of the tree calls for: a refusal to answer the link that spoke (None: admitted), what to
    tell the parent (``up``), and per child what to tell it (``down``: a child to cut gets its ``LinkRefused``,
    one that holds a refused name deeper down gets the ``NamesRefused``)."""

    refusal: Refusal | None = None
    up: Names | None = None
    down: tuple[tuple[str, LinkRefused | NamesRefused], ...] = ()
    refused_here: Refusal | None = None  # this cluster's own name was refused above


class Tree:
    """One cluster's place in its tree and what it knows of the clusters below it."""

    def __init__(self, name: str, role: str, key: str = "") -> None:
        check_name(name)
        if role not in ("root", "branch", "leaf"):
            raise ConfigError(f"a cluster's role is root, branch or leaf, got {role[:40]!r}")
        self.name, self.role, self.key = name, role, key
        self.path: tuple[str, ...] = ()  # the parent's path to the root: the parent first, the root last
        self._children: dict[str, _Child] = {}
        self._below: dict[str, str] = {}  # every cluster of the subtree below this one -> the child holding it

    # -- this cluster and its parent --------------------------------------------------------------------

    def welcomed(self, path: list[str]) -> None:
        """The parent admitted this cluster; ``path``: the parent's path to the root."""
        self.path = tuple(path)

    def whole_names(self) -> Names:
        """This cluster's subtree, itself first (sent with each hello, and whole after a reconnect)."""
        return Names(list(self._subtree().values()), [], whole=True)

    def names_refused(self, refused: NamesRefused) -> Outcome:
        """An ancestor refused names of this subtree: the children that brought them are cut, or told."""
        if self.name in refused.names:
            return Outcome(refused_here=Refusal(refused.reason, refused.detail))
        down: list[tuple[str, LinkRefused | NamesRefused]] = []
        before = self._subtree()
        for child_name in sorted({self._below[n] for n in refused.names if n in self._below}):
            child = self._children[child_name]
            if child_name in refused.names:
                down.append((child_name, LinkRefused(refused.reason, refused.detail)))
                self._forget(child_name)
            else:
                down.append((child_name, NamesRefused([n for n in refused.names if n in child.names],
                                                      refused.reason, refused.detail)))
        return Outcome(down=tuple(down), up=self._announce(before))

    # -- the children ----------------------------------------------------------------------------------

    def hello(self, hello: LinkHello, key: str) -> Outcome:
        """A child opens its link (``key``: its key's digest, from its connection)."""
        try:
            check_name(hello.cluster)
            names = self._read_names(hello.names, hello.cluster, key)
        except ConfigError as exc:
            return Outcome(Refusal("malformed", f"{hello.cluster[:64]!r} refused by {self.name}: {exc}"))
        if self.role == "leaf":
            return Outcome(Refusal("not_a_parent", f"{self.name} is a leaf and takes no children: "
                                                   f"{hello.cluster} refused"))
        if hello.role not in ("branch", "leaf"):
            return Outcome(Refusal("not_a_parent", f"{hello.cluster} says it is the {hello.role[:16]}: only a "
                                                   f"branch or a leaf has a parent ({self.name} refused it)"))
        known = self._children.get(hello.cluster)
        admitted = known.incarnations.get(hello.link, -1) if known is not None else -1
        if known is not None and known.key == key and hello.incarnation < admitted:
            return Outcome(Refusal("stale", f"{hello.cluster}'s link {hello.link or ''}{' ' if hello.link else ''}of "
                                            f"incarnation {hello.incarnation} is older than the one {self.name} "
                                            f"admitted ({admitted})"))
        if known is not None and known.key != key:
            return Outcome(Refusal("duplicate_name", f"{self.name} already has a child named {hello.cluster} "
                                                     f"(key {known.key[:16]}); the one with key {key[:16]} is refused"))
        refusal = self._clash(hello.cluster, names)
        if refusal is not None:
            return Outcome(refusal)
        before = self._subtree()
        if known is not None:
            self._forget(hello.cluster)
        incarnations = dict(known.incarnations) if known is not None and known.key == key else {}
        incarnations.pop(hello.link, None)
        incarnations[hello.link] = hello.incarnation  # (the newest last: the oldest go first beyond the bound)
        while len(incarnations) > MAX_LINKS:
            del incarnations[next(iter(incarnations))]
        self._children[hello.cluster] = _Child(key, incarnations, names)
        self._below.update((n, hello.cluster) for n in names)
        return Outcome(up=self._announce(before))

    def names(self, child: str, names: Names) -> Outcome:
        """A child's subtree changed: names it adds (whole: its subtree) and takes back. Those that clash are
        refused to it; the others are taken."""
        held = self._children.get(child)
        if held is None:
            return Outcome()
        try:
            added = self._read_names(names.add, None, None)
        except ConfigError as exc:
            return Outcome(down=((child, NamesRefused([n.name[:64] for n in names.add], "malformed",
                                                      f"refused by {self.name}: {exc}")),))
        new = {child: held.names[child]} if names.whole else dict(held.names)
        for name in names.remove:
            if name != child:
                new.pop(name, None)
        clashes: list[str] = []
        reason = detail = ""
        before = self._subtree()
        for name, entry in added.items():
            if name == child:
                continue
            refusal = self._clash(child, {name: entry})
            if refusal is not None:
                clashes.append(name)
                reason, detail = reason or refusal.reason, detail or refusal.detail  # the first clash says why
            else:
                new[name] = entry
        for name in set(held.names) - set(new):
            self._below.pop(name, None)
        held.names = new
        self._below.update((n, child) for n in new)
        down = ((child, NamesRefused(clashes, reason, detail)),) if clashes else ()
        return Outcome(up=self._announce(before), down=down)

    def child_gone(self, child: str) -> Outcome:
        """A child left the tree (refused, or forgotten after its link stayed down too long)."""
        if child not in self._children:
            return Outcome()
        before = self._subtree()
        self._forget(child)
        return Outcome(up=self._announce(before))

    def below(self) -> tuple[str, ...]:
        """Every cluster of the subtree below this one."""
        return tuple(self._below)

    def children(self) -> dict[str, tuple[str, int, tuple[str, ...]]]:
        """Each child admitted: its key's digest, its link's incarnation, and the clusters below it."""
        return {name: (c.key, c.incarnation, tuple(n for n in c.names if n != name))
                for name, c in self._children.items()}

    def route(self, cluster: str) -> str | None:
        """The link a record for ``cluster`` leaves by: "" (:data:`roq.federation.interest.PARENT`) up, a
        child's name down, ``None`` when it is this cluster's own (a refusal at the root is
        :class:`~roq.errors.ConfigError`).

        Raises:
            ConfigError: the root knows no cluster of that name.
        """
        if cluster == self.name:
            return None
        holder = self._below.get(cluster)
        if holder is not None:
            return holder
        if self.role == "root":
            raise ConfigError(f"no cluster named {cluster[:64]!r} in the tree of {self.name}")
        return ""

    # -- the bookkeeping --------------------------------------------------------------------------------

    def _read_names(self, entries: list[ClusterName], first: str | None, key: str | None) -> dict[str, ClusterName]:
        names: dict[str, ClusterName] = {}
        for entry in entries:
            check_name(entry.name)
            if entry.name in names:
                raise ConfigError(f"{entry.name} is named twice in one subtree")
            names[entry.name] = entry
        if first is not None:
            if not entries or entries[0].name != first:
                raise ConfigError(f"a hello names its own cluster first ({first})")
            names[first] = ClusterName(first, self.name, key or "")
        return names

    def _clash(self, child: str, names: dict[str, ClusterName]) -> Refusal | None:
        """Whether ``names``, brought by ``child``, clash with this cluster, its ancestors or another subtree."""
        ancestry = (self.name,) + self.path
        for name, entry in names.items():
            if name in ancestry:
                where = " -> ".join(ancestry)
                return Refusal("cycle", f"{child} under {self.name} would close a cycle: its subtree holds "
                                        f"{name}, an ancestor ({where})")
            holder = self._below.get(name)
            if holder is None or holder == child:
                continue
            other = self._children[holder].names[name]
            if other.key and other.key == entry.key and other.parent != entry.parent:
                return Refusal("second_parent", f"{name} already has the parent {other.parent} (below "
                                                f"{self.name}'s child {holder}); {entry.parent} may not be a "
                                                f"second parent")
            return Refusal("duplicate_name", f"{name} is already a cluster below {self.name}'s child {holder} "
                                             f"(parent {other.parent}); the one under {entry.parent} is refused")
        return None

    def _forget(self, child: str) -> None:
        held = self._children.pop(child)
        for name in held.names:
            if self._below.get(name) == child:
                del self._below[name]

    def _subtree(self) -> dict[str, ClusterName]:
        parent = self.path[0] if self.path else ""
        names = {self.name: ClusterName(self.name, parent, self.key)}
        for child in self._children.values():
            names.update(child.names)
        return names

    def _announce(self, before: dict[str, ClusterName]) -> Names | None:
        """What changed in this subtree since ``before``, to tell the parent (None: nothing, or no parent)."""
        if self.role == "root":
            return None
        after = self._subtree()
        add = [entry for name, entry in after.items() if before.get(name) != entry]
        remove = sorted(set(before) - set(after))
        return Names(add, remove) if add or remove else None
