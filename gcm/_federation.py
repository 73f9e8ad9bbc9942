"""The GCM's place in a tree of clusters: the links of its children, admitted or refused at their hello.

A cluster with a name (``cluster_name``) is a node of a tree, the root, a branch or a leaf
(``cluster_role``). A child cluster's link opens with a :class:`~roq.wire.control.links.LinkHello` to the
leader's management port, and says it again every second or so: the leader answers with the welcome (the path
to the root, the parent first) or refuses it with ConflictError, its ``Reason`` one of
:data:`~roq.wire.control.links.REFUSALS` and its comment naming both ends; :class:`roq.federation.Tree`
decides. A child is known by its link's principal (with CURVE, the key it connected with; plaintext: "").

The tree is the leader's, in memory: a new leader starts with no children and learns them again from their
next hellos, which are whole and idempotent. A child whose hellos stop for :data:`CHILD_TIMEOUT` seconds is
forgotten, and its names with it. Refusals are counted per reason (:attr:`Federation.refusals`). Each welcomed
hello also says what the link's crossings carried (:class:`~roq.wire.control.links.LinkStats`): kept as the
last one said, shown by :meth:`Federation.status` and in ``/metrics`` (:meth:`Federation.links`); a crossing that
begins carrying into one of this cluster's queues, or stops (its child forgotten, or its hello says it no more), is
an event of that queue (``link_up``, ``link_down``: :meth:`Federation.take_changes`, recorded by the GCM), and so is
one that the queue's monitor refuses (``link_refused``: the parent's permissions do not let the child publish into
it; counted as a ``forbidden`` refusal and put in the audit trail).
"""

from __future__ import annotations

import logging
import dataclasses
from typing import Any

from roq.errors import BadRequestError, ConfigError, ConflictError, NotFoundError
from roq.federation import Tree, check_name
from roq.wire.control import Reply
from roq.wire.control.links import LinkHello, LinkStats

log = logging.getLogger(__name__)

__all__ = ["Federation", "CHILD_TIMEOUT"]

#: seconds without a hello after which a child is forgotten
CHILD_TIMEOUT = 15.0
#: crossings of one child's link kept, and prefixes shown of each
MAX_CROSSINGS = 64
MAX_CARRYING = 64
#: links' changes kept for the next turn of the leader, at most
MAX_CHANGES = 1024


class Federation:
    """The GCM's tree node (a cluster without a name is in no tree: every hello is refused).

    Raises:
        ConfigError: a name that is not a cluster's name, or a role that is not one.
    """

    def __init__(self, name: str, role: str) -> None:
        self.name, self.role = name, role
        self.tree: Tree | None = Tree(name, role) if name else None
        self.refusals: dict[str, int] = {}
        self._heard: dict[str, float] = {}  # child -> when its last hello came (monotonic)
        # child -> each of its links (one per queue it links) -> when it said, and what its crossings carried
        self._stats: dict[str, dict[str, tuple[float, list[LinkStats]]]] = {}
        self._carried: dict[str, set[str]] = {}  # child -> the monitors its links carry into, as last said
        self._changes: list[tuple[str, str, str, str]] = []  # (kind, child, monitor, why) not yet taken

    def reset(self) -> None:
        """Forget every child (a new leader: they say hello again)."""
        if self.tree is not None:
            self.tree = Tree(self.name, self.role)
        self._heard.clear()
        self._stats.clear()
        self._carried.clear()
        self._changes.clear()

    def hello(self, msg: LinkHello, principal: str | None, now: float) -> Reply:
        """A child's link says hello: the welcome, or a refusal.

        Raises:
            ConflictError: refused; ``data["Reason"]`` why (one of REFUSALS), the comment naming both ends.
        """
        tree = self.tree
        if tree is None:
            self._refuse("not_a_parent", f"this cluster is in no tree (it has no name): {msg.cluster[:64]!r} refused")
        assert tree is not None
        outcome = tree.hello(msg, principal or "")
        if outcome.refusal is not None:
            self._refuse(outcome.refusal.reason, outcome.refusal.detail)
        if msg.cluster not in self._heard:
            log.info("cluster %s: child %s linked (%s, incarnation %d, %d cluster(s) below it)", self.name,
                     msg.cluster, msg.role, msg.incarnation, len(msg.names))
        self._heard[msg.cluster] = now
        links = self._stats.setdefault(msg.cluster, {})
        was_refused = {s.target: s.refused for s in links.get(msg.link, (0.0, []))[1]}
        for s in msg.stats[:MAX_CROSSINGS]:  # a crossing the queue's monitor newly refuses: counted, recorded
            if s.refused and was_refused.get(s.target) != s.refused[:500]:
                self.refusals["forbidden"] = self.refusals.get("forbidden", 0) + 1
                self._changes.append(("link_refused", msg.cluster, s.target, s.refused[:500]))
                log.warning("cluster %s: the link %s of child %s is refused by the queue at %s: %s", self.name,
                            msg.link, msg.cluster, s.target, s.refused[:200])
        links.pop(msg.link, None)
        links[msg.link] = (now, [dataclasses.replace(s, carrying=s.carrying[:MAX_CARRYING])
                                 for s in msg.stats[:MAX_CROSSINGS]])
        while links and (len(links) > MAX_CROSSINGS or now - next(iter(links.values()))[0] > CHILD_TIMEOUT):
            del links[next(iter(links))]  # (the oldest said first: beyond the bound, or not heard for long)
        targets = {s.target for _, stats in links.values() for s in stats}
        if not targets:  # (a link process that has not begun carrying yet, a new incarnation's first hellos)
            return Reply(data={"Path": [tree.name, *tree.path], "Interest": []})
        before = self._carried.get(msg.cluster, set())
        self._changes += [("link_up", msg.cluster, t, "") for t in sorted(targets - before)]
        self._changes += [("link_down", msg.cluster, t, "its link carries into it no more")
                          for t in sorted(before - targets)]
        self._carried[msg.cluster] = targets
        return Reply(data={"Path": [tree.name, *tree.path], "Interest": []})

    def route(self, cluster: str, queue: str) -> str:
        """Where records published here to ``cluster``'s ``queue`` go: "" when that is this cluster (they are its
        own), else ``cluster``: they enter this cluster's queue addressed to it, and the links carry them there.

        Raises:
            BadRequestError: this cluster is in no tree, or ``cluster`` is not a cluster's name.
            NotFoundError: the root knows no cluster of that name.
        """
        tree = self.tree
        if tree is None:
            raise BadRequestError(f"this cluster is in no tree (it has no name): {cluster[:64]}/{queue} has no way there")
        try:
            check_name(cluster)
        except ConfigError as exc:
            raise BadRequestError(str(exc)) from None
        try:
            return "" if tree.route(cluster) is None else cluster
        except ConfigError as exc:
            raise (NotFoundError if tree.role == "root" else BadRequestError)(str(exc)) from None

    def expire(self, now: float) -> list[str]:
        """Forget the children not heard for :data:`CHILD_TIMEOUT`; their names."""
        tree = self.tree
        gone = [c for c, at in self._heard.items() if now - at > CHILD_TIMEOUT]
        for child in gone:
            del self._heard[child]
            self._stats.pop(child, None)
            self._changes += [("link_down", child, t, f"no hello for {CHILD_TIMEOUT:.0f}s")
                              for t in sorted(self._carried.pop(child, set()))]
            if tree is not None:
                tree.child_gone(child)
            log.warning("cluster %s: child %s forgotten: no hello for %.0fs", self.name, child, CHILD_TIMEOUT)
        return gone

    def take_changes(self) -> list[tuple[str, str, str, str]]:
        """The links that began or stopped carrying into a queue of this cluster since the last call: (``link_up`` or
        ``link_down``, the child, the queue's monitor endpoint, why it stopped); the GCM records them as the queue's
        events (at most :data:`MAX_CHANGES` kept between two calls, the oldest dropped)."""
        changes, self._changes = self._changes[-MAX_CHANGES:], []
        return changes

    def links(self, now: float) -> list[tuple[str, float, list[LinkStats]]]:
        """Each child's link: its name, seconds since its last hello, and what its crossings carried."""
        return [(child, max(0.0, now - at), [s for _, stats in self._stats.get(child, {}).values() for s in stats])
                for child, at in sorted(self._heard.items())]

    def status(self, now: float) -> dict[str, Any]:
        """This cluster's place: name, role, path to the root, children (each with the clusters below it, and its
        link: seconds since its hello, what each crossing carried)."""
        tree = self.tree
        if tree is None:
            return {"Name": "", "Role": "", "Path": [], "Children": [], "Refusals": dict(self.refusals)}
        links = {child: (age, stats) for child, age, stats in self.links(now)}
        children = [{"Name": name, "Key": key, "Incarnation": incarnation, "Below": sorted(below),
                     "HeardS": round(links.get(name, (0.0, []))[0], 3),
                     "Links": [_crossing(s) for s in links.get(name, (0.0, []))[1]]}
                    for name, (key, incarnation, below) in sorted(tree.children().items())]
        return {"Name": tree.name, "Role": tree.role, "Path": list(tree.path), "Children": children,
                "Refusals": dict(self.refusals)}

    def count(self, reason: str) -> None:
        """A refusal decided elsewhere (``unknown_key``: at the CURVE handshake), counted with the others."""
        self.refusals[reason] = self.refusals.get(reason, 0) + 1

    def _refuse(self, reason: str, detail: str) -> None:
        self.refusals[reason] = self.refusals.get(reason, 0) + 1
        log.warning("cluster %s: link refused (%s): %s", self.name or "(no name)", reason, detail)
        raise ConflictError(detail, data={"Reason": reason})


def _crossing(s: LinkStats) -> dict[str, Any]:
    return {"Target": s.target, "Records": s.records_sent, "Bytes": s.bytes_sent, "Backlog": s.backlog, "Moves": s.moves,
            "RateLimit": s.rate_limit, "Carrying": [p.decode("utf-8", "backslashreplace") for p in s.carrying],
            "Refused": s.refused, "BytesRead": s.bytes_read, "Compressed": s.compressed}
