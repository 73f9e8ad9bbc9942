"""Converging on the assignments: what a host manager must do to run what ZooKeeper asks of its host.

A pure decision: given the wanted assignments (the names of the znodes under
``assignments/<address>``, see :func:`wanted`), the state of the supervised children (:class:`ChildState`)
and the endpoint of each queue's monitor, :func:`converge` returns the actions that bring the host closer
to the assignments. The host manager applies them and asks again whenever something changes.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable, Mapping

from roq.wire.documents import JOURNAL, LINK, MONITOR, Assignment, FederationDoc
from roq.errors import ProtocolError

__all__ = ["ChildState", "Start", "Stop", "Tell", "Restart", "Action", "wanted", "converge"]

log = logging.getLogger("hostmanager")


@dataclasses.dataclass(frozen=True)
class ChildState:
    """What the decision needs to know of a supervised child.

    Attributes:
        assignment: what it runs.
        running: a process is up (or starting) for it.
        stopping: it is being stopped for good (its assignment went away).
        not_before: no start before this time (the back-off after a crash).
        monitor: an exchange's monitor endpoint, as the exchange knows it.
        tellable: an exchange can be told where its monitor moved (its command pipe works).
    """

    assignment: Assignment
    running: bool = False
    stopping: bool = False
    not_before: float = 0.0
    monitor: str = ""
    tellable: bool = True


@dataclasses.dataclass(frozen=True)
class Start:
    """Start a process for ``assignment`` (an exchange, a journal or a link of the queue whose monitor is
    ``monitor``; a journal of the queue's journal ``generation``; a link from the cluster's place in its tree,
    ``federation``; a journal one of ``replicas``, a ``learner`` if it was placed in place of a lost one)."""

    assignment: Assignment
    monitor: str = ""
    generation: int = 0
    replicas: int = 1
    learner: bool = False
    federation: FederationDoc | None = None


@dataclasses.dataclass(frozen=True)
class Stop:
    """Stop the process of assignment ``name`` for good: it is no longer assigned here."""

    name: str


@dataclasses.dataclass(frozen=True)
class Tell:
    """Tell the exchange of ``name`` that its queue's monitor is now at ``monitor``."""

    name: str
    monitor: str


@dataclasses.dataclass(frozen=True)
class Restart:
    """Stop the exchange of ``name`` (it cannot be told where its monitor moved); it starts again after."""

    name: str
    monitor: str


Action = Start | Stop | Tell | Restart


def wanted(names: Iterable[str], *, skipped: set[str] | None = None) -> dict[str, Assignment]:
    """The assignments the znode ``names`` stand for, by name; a malformed name is skipped and logged (once
    per name if a ``skipped`` set is kept across calls)."""
    found: dict[str, Assignment] = {}
    for name in names:
        try:
            a = Assignment.parse(name)
        except ProtocolError as exc:
            if skipped is None or name not in skipped:
                log.warning("ignoring the assignment %r: %s", name[:200], exc)
                if skipped is not None and len(skipped) < 1000:
                    skipped.add(name)
            continue
        found[a.name] = a
    return found


def converge(assignments: Mapping[str, Assignment], children: Mapping[str, ChildState],
             monitors: Mapping[str, str], now: float, generations: Mapping[str, int] | None = None,
             federation: FederationDoc | None = None, replicas: Mapping[str, int] | None = None,
             learners: Mapping[str, bool] | None = None) -> list[Action]:
    """The actions that bring the children in line with ``assignments``.

    Args:
        assignments: what this host must run, by assignment name.
        children: the supervised children, by assignment name.
        monitors: queue -> its monitor's endpoint ("" or missing: no monitor yet, its exchanges wait).
        now: the time (for restart back-offs).
        generations: queue -> its journal generation (how many times its journal was started anew after its
            host was lost: the queue's document says), for the journals started.
        federation: the cluster's place in its tree, for the links started (None, or no parent: a link waits).
        replicas: queue -> how many replicas its journal has (missing: 1), for the journals started.
        learners: queue -> whether this host's replica of its journal is a learner (the queue's document names it
            among ``journal_learners``; missing: no), for the journals started.
    """
    actions: list[Action] = []
    for name, unassigned in children.items():
        if name not in assignments and not unassigned.stopping:
            actions.append(Stop(name))
    for name, a in assignments.items():
        child = children.get(name)
        if child is not None and child.stopping:
            continue  # started anew once its stop is over
        if child is not None and child.running:
            monitor = monitors.get(a.queue, "")
            if a.role != MONITOR and monitor and child.monitor != monitor:
                actions.append(Tell(name, monitor) if child.tellable else Restart(name, monitor))
            continue
        if child is not None and now < child.not_before:
            continue
        if a.role == MONITOR:
            actions.append(Start(a))
        elif a.role == LINK:
            if monitors.get(a.queue) and federation is not None and federation.parent_zk:
                actions.append(Start(a, monitors[a.queue], federation=federation))
        elif monitors.get(a.queue):
            generation = (generations or {}).get(a.queue, 0) if a.role == JOURNAL else 0
            copies = (replicas or {}).get(a.queue, 1) if a.role == JOURNAL else 1
            learner = copies > 1 and (learners or {}).get(a.queue, False)
            actions.append(Start(a, monitors[a.queue], generation, replicas=copies, learner=learner))
    return actions
