"""Where a queue's link to the parent cluster runs (pure): one ``<queue>@link`` on a host with headroom.

In a cluster with a parent (the GCM's ``parent_zk``, published in ``/federation``), a queue that runs, is
durable and whose rules say ``link = "parent"`` has one link process: it carries the queue's records up into the
parent's queue of the same name and the parent's down into it, on demand (:mod:`client.link`). The leader places
it on the live host within the queue's CPU, memory and network limits that runs the fewest links and has the most
headroom (:meth:`gcm._placement.Placer.choose_link`: a link's cost is a core's share and the network it crosses),
keeps it there while that host lives (a link that moved would only read on from its position elsewhere), moves it
when its host is lost, and takes it away when the queue stops, stops being durable or linked, or the cluster has
no parent. Unlike a journal's, the assignment is not written in the transaction of the decision that calls for
it: the leader reconciles it on its next turn (:func:`place_links`), and a link that comes a turn late misses
nothing, since it reads the queue's journal from where it left off.
"""

from __future__ import annotations

import collections

from gcm._journals import durable
from gcm._outcome import Event, Outcome
from gcm._placement import Placer
from gcm._view import QueueView, View
from roq.wire.documents import LINK, RUNNING
from roq.zk import Create, Delete, Op

__all__ = ["place_links", "linked"]


def linked(view: View, q: QueueView) -> bool:
    """Whether ``q`` should have a link to the parent cluster."""
    federation = view.federation
    if federation is None or not federation.parent_zk:
        return False
    return q.state == RUNNING and q.rules.get("link", "none") == "parent" and durable(q.rules)


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
    placer = Placer(view)
    links = collections.Counter(h for hosts in placed.values() for h in hosts if h in view.hosts)
    for q in view.queues.values():
        hosts = placed.pop(q.name, [])
        host = ""
        if linked(view, q):
            live = [h for h in hosts if h in view.hosts]
            host = live[0] if live else placer.choose_link(q, links) or ""
        ops: list[Op] = [Delete(view.paths.assignment(h, q.name, LINK)) for h in hosts if h != host]
        if host and host not in hosts:
            ops.append(Create(view.paths.assignment(host, q.name, LINK)))
            links[host] += 1
        if not ops:
            continue
        if host:
            lost = [h for h in hosts if h != host]
            text = (f"link to the parent cluster placed on {host}, the host with most headroom"
                    + (f" (its host {', '.join(lost)} is lost)" if lost else ""))
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
