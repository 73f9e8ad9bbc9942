"""Where a durable queue's journal runs (pure): its assignment follows the queue's state and rules.

A queue has a journal while it runs and its rules say ``durability`` "interval" or "always": one assignment
``<queue>@journal`` on the host in :attr:`~roq.wire.documents.QueueDoc.journal_host`, where its files are. The
first time a queue becomes durable that is its monitor's host; from then on the journal comes back to the
same host (and the same files) whenever it runs again: the queue made durable again, started again. When
the queue stops being durable, or stops, the assignment goes and the files stay.

A queue whose rules say ``replicas`` above 1 has a ``<queue>@journal`` on each of that many distinct hosts
(:attr:`~roq.wire.documents.QueueDoc.journal_replicas`), kept there as long as the queue is durable: the replicas
elect their leader themselves, with the monitor (:mod:`monitor._replicas`), so a lost host moves nothing here.
A replica lost with its host is replaced only when asked (2025, :func:`replace_replica`): one member at a time, the
new one in the lost one's place and named a learner (:attr:`~roq.wire.documents.QueueDoc.journal_learners`) until
its monitor says it votes (2026, :func:`admit_replica`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from gcm._outcome import Event, Outcome
from gcm._view import QueueView, View, echo
from roq.errors import BadRequestError, ConflictError, UnavailableError
from roq.wire import management as m
from roq.wire.control import Reply
from roq.wire.documents import JOURNAL, RUNNING, QueueDoc
from roq.zk import Create, Delete, Op, SetData

__all__ = ["durable", "journal_ops", "journal_hosts", "replica_count", "replace_replica", "admit_replica"]

_MAX_REASON = 200  # characters of a request's Reason kept in its event, as for a scaling request's


def durable(rules: Mapping[str, Any]) -> bool:
    """Whether rules in force ask for a journal."""
    return rules.get("durability", "none") != "none"


def replica_count(rules: Mapping[str, Any]) -> int:
    """How many replicas of its journal a queue under ``rules`` has (1 when it is not durable)."""
    return int(rules.get("replicas", 1)) if durable(rules) else 1


def journal_hosts(doc: QueueDoc) -> list[str]:
    """The hosts of the queue's journal: its replicas' (replicated), else its one host (none: never had one)."""
    return list(doc.journal_replicas) or ([doc.journal_host] if doc.journal_host else [])


def journal_ops(view: View, q: QueueView, doc: QueueDoc, rules: Mapping[str, Any]) -> tuple[QueueDoc, list[Op]]:
    """The queue's document (its journal's host set if it gets one) and the assignments to create or delete
    for a queue about to be ``doc`` under ``rules``.

    Raises:
        UnavailableError: a replicated journal needs more live hosts than there are.
    """
    count = replica_count(rules)
    if count > 1 or doc.journal_replicas:
        return _replicated(view, q, doc, count, doc.state == RUNNING and durable(rules))
    host = doc.journal_host
    if not host or host not in view.hosts:
        host = doc.host  # first time, or its host is gone: beside the monitor (a new journal)
    wanted = doc.state == RUNNING and durable(rules) and bool(host)
    ops: list[Op] = []
    for h in sorted(view.assignments):
        if view.has_assignment(h, q.name, JOURNAL) and not (wanted and h == host):
            ops.append(Delete(view.paths.assignment(h, q.name, JOURNAL)))
    if wanted:
        if not view.has_assignment(host, q.name, JOURNAL):
            ops.append(Create(view.paths.assignment(host, q.name, JOURNAL)))
        if host != doc.journal_host:
            doc = dataclasses.replace(doc, journal_host=host)
    return doc, ops


def _replicated(view: View, q: QueueView, doc: QueueDoc, count: int, wanted: bool) -> tuple[QueueDoc, list[Op]]:
    """A replicated journal: one ``<queue>@journal`` on each of ``count`` distinct hosts, kept where they were
    (their files are there; a replica whose host is missing stays named: the others are a majority meanwhile),
    the first ones chosen where the queue's journal was, then on the live hosts other than the monitor's by name,
    and the monitor's last: a host lost with the monitor then takes no replica with it while others can hold
    them."""
    hosts = list(doc.journal_replicas) or ([doc.journal_host] if doc.journal_host else [])
    if wanted:
        for h in [*sorted(h for h in view.hosts if h != doc.host), doc.host]:
            if len(hosts) >= count:
                break
            if h and h in view.hosts and h not in hosts:
                hosts.append(h)
        if len(hosts) < count:
            raise UnavailableError(f"queue {q.name!r}: {count} replicas of its journal need {count} live hosts, each "
                                   f"its own; the cluster has {len(view.hosts)} ({', '.join(sorted(view.hosts))})")
    ops: list[Op] = []
    for h in sorted(view.assignments):
        if view.has_assignment(h, q.name, JOURNAL) and not (wanted and h in hosts):
            ops.append(Delete(view.paths.assignment(h, q.name, JOURNAL)))
    if wanted:
        ops += [Create(view.paths.assignment(h, q.name, JOURNAL)) for h in hosts
                if h in view.hosts and not view.has_assignment(h, q.name, JOURNAL)]
        if hosts != doc.journal_replicas:
            doc = dataclasses.replace(doc, journal_replicas=hosts, journal_host=hosts[0])
    return doc, ops


def replace_replica(view: View, msg: m.ReplaceReplica, now: float) -> Outcome:
    """Put the journal replica of ``msg.QName`` that was on host ``msg.Replica`` on another live host, in its place.

    The new replica takes the lost one's position in
    :attr:`~roq.wire.documents.QueueDoc.journal_replicas` (the first still names the journal's host) and is named
    in :attr:`~roq.wire.documents.QueueDoc.journal_learners`: it starts empty, so it votes in no election until it
    holds what is committed. The lost host's assignment goes in the same transaction: were that host to come back
    with its replica, two old members could elect a log without what the new set committed. The host is chosen
    as :func:`journal_ops` chooses replicas' hosts: off the monitor's host first, then by name. Idempotent: a
    replica no longer in the set answers OK and changes nothing, so a request repeated after a lost reply never
    replaces two.

    Raises:
        BadRequestError: a bad name, no replica named, or the queue's journal is not replicated. NotFoundError: no
            such queue. ConflictError: the queue is not running, the replica's host is live (its host manager
            restarts it there), or another replica is a learner still (one at a time). UnavailableError: every live
            host has a replica of the queue already.
    """
    q = view.queue(msg.QName)
    doc = q.doc
    lost, reason = msg.Replica.strip(), msg.Reason[:_MAX_REASON]
    if not lost:
        raise BadRequestError("Replica must name the host of the replica to replace")
    if not doc.journal_replicas:
        raise BadRequestError(f"queue {q.name!r} has no replicated journal (rule replicas above 1): there is no "
                              "replica to replace")
    if lost not in doc.journal_replicas:
        return Outcome.answer(f"no replica of {q.name!r} on {echo(lost)}: already replaced",
                              Replicas=list(doc.journal_replicas))
    if q.state != RUNNING or not q.durable:
        raise ConflictError(f"queue {q.name!r} is {q.state if q.state != RUNNING else 'not durable'}: its "
                            "replicas are replaced while its journal runs")
    if lost in view.hosts:
        raise ConflictError(f"the replica of {q.name!r} on {lost} is on a live host: its host manager restarts it; "
                            "a replica is replaced only when its host is lost")
    if doc.journal_learners and lost not in doc.journal_learners:
        raise ConflictError(f"queue {q.name!r}: replica {', '.join(doc.journal_learners)} has not caught up yet; one "
                            "replica is replaced at a time (a learner lost may be replaced itself)")
    free = [h for h in (*sorted(h for h in view.hosts if h != doc.host), doc.host)
            if h in view.hosts and h not in doc.journal_replicas]
    if not free:
        raise UnavailableError(f"queue {q.name!r}: no live host is free for a replica of its journal: each of "
                               f"{', '.join(sorted(view.hosts)) or 'none'} has one")
    new = free[0]
    replicas = [new if h == lost else h for h in doc.journal_replicas]
    learners = [*(h for h in doc.journal_learners if h not in (lost, new)), new]
    doc = dataclasses.replace(doc, journal_replicas=replicas, journal_host=replicas[0], journal_learners=learners)
    paths = view.paths
    ops: list[Op] = [SetData(paths.queue(q.name), doc.encode(), q.version)]
    if view.has_assignment(lost, q.name, JOURNAL):
        ops.append(Delete(paths.assignment(lost, q.name, JOURNAL)))
    if not view.has_assignment(new, q.name, JOURNAL):
        ops.append(Create(paths.assignment(new, q.name, JOURNAL)))
    why = f" ({reason})" if reason else ""
    event = Event(
        q.name, "journal_replica_replaced",
        f"replica {lost} lost with its host: replaced by one on {new}, a learner until it holds what is "
        f"committed{why}; replicas {', '.join(replicas)}",
        {"replica": lost, "replacement": new, "reason": reason, "replicas": ",".join(replicas)},
    )  # fmt: skip
    reply = Reply(comment=f"replica {lost} replaced by one on {new}",
                  data={"Replaced": lost, "Replica": new, "Replicas": replicas})
    return Outcome(ops=tuple(ops), ensure=(paths.host_assignments(new),), events=(event,), reply=reply)


def admit_replica(view: View, msg: m.AdmitReplica, now: float) -> Outcome:
    """Name the replica of ``msg.QName`` on host ``msg.Replica`` a learner no more: it holds what its leader
    committed and votes, and its host manager does not make it one again when it starts it anew. Idempotent: a
    replica that is no learner answers OK and changes nothing.

    Raises:
        BadRequestError: a bad name, or no replica named. NotFoundError: no such queue.
    """
    q = view.queue(msg.QName)
    replica = msg.Replica.strip()
    if not replica:
        raise BadRequestError("Replica must name the host of the learner to admit")
    if replica not in q.doc.journal_learners:
        return Outcome.answer(f"no learner of {q.name!r} on {echo(replica)}: already admitted",
                              Learners=list(q.doc.journal_learners))
    learners = [h for h in q.doc.journal_learners if h != replica]
    doc = dataclasses.replace(q.doc, journal_learners=learners)
    what = f"queue {q.name}: replica {replica} of its journal votes, a learner no more"
    return Outcome(ops=(SetData(view.paths.queue(q.name), doc.encode(), q.version),), notes=(what,),
                   reply=Reply(comment=f"replica {replica} admitted", data={"Replica": replica, "Learners": learners}))
