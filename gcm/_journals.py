"""Where a durable queue's journal runs (pure): its assignment follows the queue's state and rules.

A queue has a journal while it runs and its rules say ``durability`` "interval" or "always": one assignment
``<queue>@journal`` on the host in :attr:`~roq.wire.documents.QueueDoc.journal_host`, where its files are. The
first time a queue becomes durable that is its monitor's host; from then on the journal comes back to the
same host (and the same files) whenever it runs again: the queue made durable again, started again. When
the queue stops being durable, or stops, the assignment goes and the files stay.

A queue whose rules say ``replicas`` above 1 has a ``<queue>@journal`` on each of that many distinct hosts
(:attr:`~roq.wire.documents.QueueDoc.journal_replicas`), kept there as long as the queue is durable: the replicas
elect their leader themselves, with the monitor (:mod:`monitor._replicas`), so a lost host moves nothing here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from gcm._view import QueueView, View
from roq.errors import UnavailableError
from roq.wire.documents import JOURNAL, RUNNING, QueueDoc
from roq.zk import Create, Delete, Op

__all__ = ["durable", "journal_ops", "journal_hosts", "replica_count"]


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
