"""Where a durable queue's journal runs (pure): its assignment follows the queue's state and rules.

A queue has a journal while it runs and its rules say ``durability`` "interval" or "always": one assignment
``<queue>@journal`` on the host in :attr:`~roq.wire.documents.QueueDoc.journal_host`, where its files are. The
first time a queue becomes durable that is its monitor's host; from then on the journal comes back to the
same host (and the same files) whenever it runs again: the queue made durable again, started again. When
the queue stops being durable, or stops, the assignment goes and the files stay.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from gcm._view import QueueView, View
from roq.wire.documents import JOURNAL, RUNNING, QueueDoc
from roq.zk import Create, Delete, Op

__all__ = ["durable", "journal_ops"]


def durable(rules: Mapping[str, Any]) -> bool:
    """Whether rules in force ask for a journal."""
    return rules.get("durability", "none") != "none"


def journal_ops(view: View, q: QueueView, doc: QueueDoc, rules: Mapping[str, Any]) -> tuple[QueueDoc, list[Op]]:
    """The queue's document (its journal's host set if it gets one) and the assignments to create or delete
    for a queue about to be ``doc`` under ``rules``."""
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
