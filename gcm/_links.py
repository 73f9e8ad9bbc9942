"""Where a queue's link to the parent cluster runs (pure): one ``<queue>@link`` beside the queue's monitor.

In a cluster with a parent (the GCM's ``parent_zk``, published in ``/federation``), a queue that runs, is
durable and whose rules say ``link = "parent"`` has one link process: it carries the queue's records up into the
parent's queue of the same name and the parent's down into it, on demand (:mod:`client.link`). The leader keeps
its assignment on the host of the queue's monitor (where the queue's control already is; a monitor moved off a
lost host takes its link with it) and takes it away when the queue stops, stops being durable or linked, or the
cluster has no parent. Unlike a journal's, the assignment is not written in the transaction of the decision that
calls for it: the leader reconciles it on its next turn (:func:`place_links`), and a link that comes a turn late
misses nothing, since it reads the queue's journal from where it left off.
"""

from __future__ import annotations

from gcm._journals import durable
from gcm._outcome import Event, Outcome
from gcm._view import QueueView, View
from roq.wire.documents import LINK, RUNNING
from roq.zk import Create, Delete, Op

__all__ = ["place_links", "linked"]


def linked(view: View, q: QueueView) -> str:
    """The host the link of ``q`` should run on ("": it should have none)."""
    federation = view.federation
    if federation is None or not federation.parent_zk:
        return ""
    if q.state != RUNNING or q.rules.get("link", "none") != "parent" or not durable(q.rules):
        return ""
    return q.doc.host if q.doc.host in view.hosts else ""


def place_links(view: View) -> list[Outcome]:
    """The assignments of links to create or delete, an outcome per queue whose link is not where it should be (the
    leader asks on every turn: one pass over the assignments, and nothing more in a cluster with neither a parent nor
    a link)."""
    suffix = "@" + LINK
    placed: dict[str, list[str]] = {}  # queue -> the hosts its link is assigned to
    for h in sorted(view.assignments):
        for name in view.assignments[h]:
            if name.endswith(suffix):
                placed.setdefault(name[:-len(suffix)], []).append(h)
    federation = view.federation
    if not placed and (federation is None or not federation.parent_zk):
        return []
    out = []
    for q in view.queues.values():
        host = linked(view, q)
        hosts = placed.pop(q.name, [])
        ops: list[Op] = [Delete(view.paths.assignment(h, q.name, LINK)) for h in hosts if h != host]
        if host and host not in hosts:
            ops.append(Create(view.paths.assignment(host, q.name, LINK)))
        if not ops:
            continue
        if host:
            text = f"link to the parent cluster placed on {host}, beside the queue's monitor"
            event = Event(q.name, "link_placed", text, {"host": host})
        else:
            event = Event(q.name, "link_removed", "link to the parent cluster removed (the queue is not linked, "
                                                  "durable and running in a cluster with a parent)", {})
        out.append(Outcome(ops=tuple(ops), ensure=(view.paths.host_assignments(host),) if host else (),
                           events=(event,)))
    for queue, hosts in sorted(placed.items()):  # the links of queues that are gone
        out.append(Outcome(ops=tuple(Delete(view.paths.assignment(h, queue, LINK)) for h in hosts),
                           notes=(f"queue {queue} is gone: its link's assignment removed",)))
    return out
