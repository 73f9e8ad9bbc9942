"""Host loss: the leader moves the exchange slots, monitors and journals of running queues off hosts that are gone.

A host is lost once it has had no registration in ``/hosts`` for ``host_grace`` seconds as seen by the
leader (its ZooKeeper session expired: it died, froze or was cut off). Each queue's slots on it are moved
in one transaction (queue node with a version check, the old assignments deleted, the new ones created,
same slot names) to hosts chosen as for a scale-out; its monitor too, if it was there. A slot that no host
can take stays where it is and is tried again on later refreshes, at most once a second per queue. A host
that comes back after its slots moved simply has no assignments any more: its host manager stops the
processes it still runs.

A durable queue's journal on a lost host starts anew beside the queue's monitor (:func:`gcm._journals.journal_ops`),
in an empty directory, as the queue's journal of the next generation (counted in the queue's document,
:attr:`~roq.wire.documents.QueueDoc.journal_generation`, in the same transaction): it begins at an offset past
every one its monitor and exchanges heard of the lost one (the monitor tells it), and the records the lost one
held stay on the lost host's disk.

:class:`HostLoss` keeps the clocks; what it decides is a list of :class:`~gcm._outcome.Outcome` s that the
GCM's shell commits (a transaction that fails is tried again a second later).
"""

from __future__ import annotations

import dataclasses

from gcm._journals import journal_ops
from gcm._outcome import Event, Outcome
from gcm._placement import Move, plan_replacements, slot_order
from gcm._view import QueueView, View
from roq.wire.documents import MONITOR, RUNNING
from roq.zk import Create, Delete, SetData

__all__ = ["HostLoss", "LostHosts", "RETRY"]

RETRY = 1.0  # least seconds between two attempts for one queue


class LostHosts:
    """Hosts that hold work of running queues but have no registration, and since when (as seen here).

    The clock of a host starts the first time :meth:`update` sees it missing, so a GCM that just took over
    waits the whole grace before moving anything.

    Args:
        grace: seconds a host may be missing before its slots move.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.missing_since: dict[str, float] = {}

    def update(self, view: View, now: float) -> None:
        referenced: set[str] = set()
        for q in view.queues.values():
            if q.state == RUNNING:
                referenced.update(h for h in q.placement.values() if h)
                if q.host:
                    referenced.add(q.host)
                if q.durable and q.doc.journal_host:
                    referenced.add(q.doc.journal_host)
        missing = referenced - set(view.hosts)
        self.missing_since = {h: self.missing_since.get(h, now) for h in missing}

    def lost(self, now: float) -> set[str]:
        """The hosts missing for at least the grace."""
        return {h for h, since in self.missing_since.items() if now - since >= self.grace}

    def deadlines(self) -> list[float]:
        """When each missing host's grace ends."""
        return [since + self.grace for since in self.missing_since.values()]

    def reset(self) -> None:
        self.missing_since.clear()


class HostLoss:
    """The leader's watch over lost hosts (see the module): clocks and retry times, and the moves decided.

    Args:
        grace: seconds a host may be unregistered before its slots move.
    """

    def __init__(self, grace: float) -> None:
        self.hosts = LostHosts(grace)
        self._next_try: dict[str, float] = {}
        self._noted: set[tuple[str, str, str]] = set()  # (queue, slot, host) already reported as stuck

    def update(self, view: View, now: float) -> None:
        """Note which hosts are missing now (call on every fresh view)."""
        self.hosts.update(view, now)

    def reset(self) -> None:
        """Forget every clock (this GCM no longer leads: a new term starts the clocks again)."""
        self.hosts.reset()
        self._next_try.clear()
        self._noted.clear()

    def next_deadline(self, now: float) -> float | None:
        """The next moment :meth:`act` may have something to do (None: nothing pending)."""
        later = [t for t in (*self.hosts.deadlines(), *self._next_try.values()) if t > now]
        return min(later, default=None)

    def act(self, view: View, now: float) -> list[Outcome]:
        """What to do about the hosts lost by ``now`` (monotonic): a transaction per queue that has slots to
        move, and a ``replacement_blocked`` event for each slot newly stuck."""
        lost = self.hosts.lost(now)
        if not lost:
            return []
        due = [
            q.name for q in view.queues.values()
            if q.state == RUNNING
            and (q.host in lost or lost & set(q.placement.values()) or _journal_on_lost_host(q, lost))
            and now >= self._next_try.get(q.name, 0.0)
        ]  # fmt: skip
        self._next_try = {name: t for name, t in self._next_try.items() if t > now}
        if not due:
            return []
        for name in due:
            self._next_try[name] = now + RETRY
        moves, blocked = plan_replacements(view, lost, due)
        outcomes = []
        for name in due:
            mine = [mv for mv in moves if mv.queue == name]
            if mine or _journal_on_lost_host(view.queues[name], lost):
                outcomes.append(self._move(view, view.queues[name], mine, lost))
        stuck = {(b.queue, b.slot, b.source) for b in blocked}
        self._noted = {key for key in self._noted if key[0] not in due or key in stuck}
        events = []
        for b in blocked:
            if (b.queue, b.slot, b.source) in self._noted:
                continue
            self._noted.add((b.queue, b.slot, b.source))
            what = "the monitor" if b.slot == MONITOR else b.slot
            events.append(Event(b.queue, "replacement_blocked",
                                f"host {b.source} lost: cannot replace {what}, no host can take it ({b.why}); "
                                f"retrying every {RETRY:.0f}s", {"slot": b.slot, "lost_host": b.source, "why": b.why}))
        if events:
            outcomes.append(Outcome(events=tuple(events)))
        return outcomes

    def _move(self, view: View, q: QueueView, moves: list[Move], lost: set[str]) -> Outcome:
        """One transaction moving ``moves`` of queue ``q`` (same slot names, the queue node version-checked),
        and its journal if its host is ``lost`` (beside the monitor, once the monitor is on a live host)."""
        exchanges = sorted((mv for mv in moves if mv.slot != MONITOR), key=lambda mv: slot_order(mv.slot))
        monitor = next((mv for mv in moves if mv.slot == MONITOR), None)
        placement = {**q.placement, **{mv.slot: mv.target for mv in exchanges}}
        host = monitor.target if monitor is not None else q.host
        paths = view.paths
        doc = dataclasses.replace(q.doc, host=host, placement=placement)
        journal: list = []
        lost_journal = q.doc.journal_host if _journal_on_lost_host(q, lost) and host in view.hosts else ""
        if lost_journal:  # the queue's journal of the next generation
            doc = dataclasses.replace(doc, journal_generation=doc.journal_generation + 1)
            doc, journal = journal_ops(view, q, doc, q.rules)
        ops = (
            SetData(paths.queue(q.name), doc.encode(), q.version),
            *journal,
            *(Delete(paths.assignment(mv.source, q.name, mv.slot)) for mv in moves
              if view.has_assignment(mv.source, q.name, mv.slot)),
            *(Create(paths.assignment(mv.target, q.name, mv.slot)) for mv in moves
              if not view.has_assignment(mv.target, q.name, mv.slot)),
        )  # fmt: skip
        grace = self.hosts.grace
        events = []
        if exchanges:
            sources = sorted({mv.source for mv in exchanges})
            text = ", ".join(f"{mv.slot} to {mv.target}" for mv in exchanges)
            events.append(Event(
                q.name, "exchanges_replaced",
                f"host {', '.join(sources)} lost (unregistered for over {grace:g}s): moved {text}; "
                f"{len(placement)} exchange(s) placed",
                {"lost_host": ",".join(sources), "moved": len(exchanges), "exchanges": len(placement),
                 "moves": ",".join(f"{mv.slot}@{mv.target}" for mv in exchanges),
                 "hosts": ",".join(sorted({mv.target for mv in exchanges}))},
            ))  # fmt: skip
        if monitor is not None:
            events.append(Event(q.name, "monitor_moved",
                                f"host {monitor.source} lost (unregistered for over {grace:g}s): "
                                f"monitor moved to {monitor.target}",
                                {"lost_host": monitor.source, "host": monitor.target}))
        if lost_journal:
            events.append(Event(q.name, "journal_moved",
                                f"host {lost_journal} lost (unregistered for over {grace:g}s): the journal starts "
                                f"anew on {doc.journal_host}, past the last offset heard of the lost one; the records "
                                f"it held stay on {lost_journal}", {"lost_host": lost_journal, "host": doc.journal_host}))
        targets = {mv.target for mv in moves} | ({doc.journal_host} if lost_journal else set())
        return Outcome(ops=ops, ensure=tuple(paths.host_assignments(t) for t in sorted(targets)), events=tuple(events))


def _journal_on_lost_host(q: QueueView, lost: set[str]) -> bool:
    """Whether ``q`` is durable, its journal is not replicated (the replicas elect another leader) and its host is
    ``lost``."""
    return q.durable and not q.doc.journal_replicas and q.doc.journal_host in lost
