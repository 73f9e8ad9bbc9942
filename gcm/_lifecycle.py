"""A queue's lifecycle (2003, 2010 create; 2002 stop; 2005 start; 2001 remove; 2004 create an exchange): pure
decisions on a :class:`~gcm._view.View`.

The GCM does not command host managers: each decision is one transaction that writes the queue's node (with
a version check) and creates or deletes its assignments; the host managers converge on them. Create and
start answer once the monitor and every placed exchange have registered, stop once every process is gone,
remove once the queue's znodes are deleted (:func:`finish_removals`, once its processes are gone or after
``stop_timeout``). Creating a queue that exists answers once it is ready: a create retried after a lost reply
or on a new leader changes nothing twice.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from gcm._journals import journal_hosts, journal_ops
from gcm._outcome import READY, REMOVED, STOPPED as STOP_WAIT, Event, Outcome, Wait
from gcm._placement import Placer, slot_order
from gcm._view import QueueView, View, checked_name, echo
from roq.wire import management as m
from roq.wire.control import Reply
from roq.wire.documents import REMOVING, RUNNING, STOPPED, MONITOR, EventsDoc, QueueDoc, RulesDoc
from roq.errors import BadRequestError, ConflictError, NotFoundError, UnavailableError
from roq.rules import DEFAULT_RULES
from roq.wire.shape import to_document
from roq.zk import Create, Delete, Op, SetData

__all__ = ["create", "stop", "start", "remove", "create_exchange", "finish_removals", "next_slot", "MAX_AT_ONCE"]

MAX_AT_ONCE = 64  # most exchanges one request may add


def create(view: View, msg: m.CreateQueue | m.CreateQueueAnywhere, now: float) -> Outcome:
    """Create ``msg.QName`` with its monitor and ``msg.Exchanges`` exchanges, all on ``msg.Host`` (CreateQueue),
    or spread over the hosts with most headroom, the monitor beside the first (CreateQueueAnywhere).

    Raises:
        BadRequestError: a bad name or count. NotFoundError: no host manager at ``Host``. UnavailableError:
            the queue is being removed, or the host has no room for the exchanges (every host's reason).
    """
    name, count = checked_name(msg.QName), msg.Exchanges
    if not 1 <= count <= MAX_AT_ONCE:
        raise BadRequestError(f"Exchanges must be between 1 and {MAX_AT_ONCE}, got {count}")
    existing = view.queues.get(name)
    if existing is not None:
        if existing.state == REMOVING:
            raise ConflictError(f"queue {name!r} is being removed; retry")
        if existing.state == STOPPED:
            return Outcome.answer(f"queue {name!r} already exists and is stopped", **existing.summary().document())
        return Outcome(wait=_ready(name, "already exists"))  # a retry, perhaps after a GCM crash
    placer = Placer(view)
    if isinstance(msg, m.CreateQueue):
        host = msg.Host
        if host not in view.hosts:
            known = ", ".join(sorted(view.hosts)) or "none"
            raise NotFoundError(f"no host manager registered at {echo(host)} (hosts: {known})")
        why = placer.room(view.hosts[host], None, count)
        if why:
            raise UnavailableError(f"queue {name!r} not created: {host}: {why}")
        hosts = [host] * count
    else:
        spread = placer.spread(name, count)
        if not spread:
            raise UnavailableError(f"no room for a new queue of {count} exchange(s): exchange slots {placer.slots()}")
        hosts, host = spread, spread[0]
    placement = {f"x{i}": h for i, h in enumerate(hosts, 1)}
    doc = QueueDoc(state=RUNNING, host=host, placement=placement, next_exchange=count + 1, created=now)
    # asked for N exchanges, the operator keeps at least N: the autoscaler must not take back what was asked
    # for (the rule shows in GetRules and can be lowered); otherwise only what an operator sets is stored, so
    # that defaults and thresholds stay live
    rules = {"min_exchanges": count} if count > DEFAULT_RULES["min_exchanges"] else {}
    if count > DEFAULT_RULES["max_exchanges"]:
        rules["max_exchanges"] = count
    paths = view.paths
    ops: list[Op] = [
        Create(paths.queue(name), doc.encode()),
        Create(paths.rules(name), RulesDoc(rules).encode()),
        Create(paths.thresholds(name), RulesDoc().encode()),
        Create(paths.exchanges(name)),
        Create(paths.events(name)),
        Create(paths.events(name, "gcm"), EventsDoc().encode()),
        *(Create(paths.assignment(h, name, slot)) for h, slot in ((host, MONITOR), *((h, x) for x, h in placement.items()))
          if not view.has_assignment(h, name, slot)),  # one left by a queue of that name is taken over
    ]
    fields: dict[str, str | int] = {"host": host, "exchanges": count}
    where = host
    if len(set(hosts)) > 1:
        where = ", ".join(f"{x}@{h}" for x, h in placement.items())
        fields["hosts"] = ",".join(sorted(set(hosts)))
    event = Event(name, "queue_created", f"created on {where} with {count} exchange(s)", fields)
    return Outcome(ops=tuple(ops), ensure=tuple(paths.host_assignments(h) for h in sorted({host, *hosts})),
                   events=(event,), wait=_ready(name, "created"))


def stop(view: View, msg: m.StopQueue, now: float) -> Outcome:
    """Stop the queue's processes (its assignments go); its definition and rules stay.

    Raises:
        BadRequestError, NotFoundError: no such queue. UnavailableError: it is being removed.
    """
    q = _changeable(view, msg.QName)
    outcome = Outcome()
    if q.state == RUNNING:
        ops = (SetData(view.paths.queue(q.name), dataclasses.replace(q.doc, state=STOPPED).encode(), q.version),
               *_unassign(view, q))
        event = Event(q.name, "queue_stopped",
                      f"stopped: its monitor and {len(q.placement)} exchange(s) are being stopped",
                      {"exchanges": len(q.placement)})
        outcome = Outcome(ops=ops, events=(event,))
    done = Reply(comment="stopped", data={"State": STOPPED})
    return dataclasses.replace(outcome, wait=Wait(q.name, "stopped", STOP_WAIT,
                                                  lambda v: done if v is not None and v.quiet else None))


def start(view: View, msg: m.StartQueue, now: float) -> Outcome:
    """Start a stopped queue again: its monitor and exchanges where they were, or, off hosts that are gone,
    where a scale-out would put them.

    Raises:
        BadRequestError, NotFoundError: no such queue. UnavailableError: it is being removed, or no host is live.
    """
    q = _changeable(view, msg.QName)
    if q.state != STOPPED:
        return Outcome(wait=_ready(q.name, "running"))
    placer = Placer(view)
    host = q.host if q.host in view.hosts else (placer.choose_monitor(q) or "")
    if not host:
        raise UnavailableError("no live host to start the queue on")
    placement = {}
    for slot in sorted(q.placement, key=slot_order) or ["x1"]:
        old = q.placement.get(slot, "")
        if old in view.hosts:
            placement[slot] = old
        else:  # its host is gone: where a scale-out would put it, else beside the monitor
            placement[slot] = placer.choose(q) or host
            placer.place(q.name, placement[slot], old or None)
    doc = dataclasses.replace(q.doc, state=RUNNING, host=host, placement=placement,
                              next_exchange=max(q.next_exchange, next_slot(placement)))
    doc, journal = journal_ops(view, q, doc, q.rules)
    paths = view.paths
    wanted = [(host, MONITOR), *((h, slot) for slot, h in placement.items())]
    ops = (SetData(paths.queue(q.name), doc.encode(), q.version),
           *(Create(paths.assignment(h, q.name, slot)) for h, slot in wanted if not view.has_assignment(h, q.name, slot)),
           *journal)
    where = ", ".join(f"{x}@{h}" for x, h in placement.items())
    event = Event(q.name, "queue_started", f"started: monitor on {host}, exchanges {where}",
                  {"host": host, "exchanges": len(placement)})
    hosts = {host, *placement.values(), *(journal_hosts(doc) if journal else [])}
    return Outcome(ops=ops, ensure=tuple(paths.host_assignments(h) for h in sorted(hosts)),
                   events=(event,), wait=_ready(q.name, "running"))


def remove(view: View, msg: m.RemoveQueue, now: float) -> Outcome:
    """Stop the queue's processes and mark it removing; its znodes go once they are gone
    (:func:`finish_removals`). Answers once the queue is gone.

    Raises:
        BadRequestError, NotFoundError: no such queue.
    """
    q = view.queue(msg.QName)
    outcome = Outcome()
    if q.state != REMOVING:
        doc = dataclasses.replace(q.doc, state=REMOVING, removing_since=now)
        outcome = Outcome(ops=(SetData(view.paths.queue(q.name), doc.encode(), q.version), *_unassign(view, q)),
                          notes=(f"queue {q.name} being removed",))
    done = Reply(comment="removed")
    return dataclasses.replace(outcome, wait=Wait(q.name, "removal", REMOVED, lambda v: done if v is None else None))


def create_exchange(view: View, msg: m.CreateExchange, now: float) -> Outcome:
    """One more exchange for ``msg.QName``, on ``msg.Host`` ("" = the host with most headroom). Answers once it
    registered.

    Raises:
        BadRequestError, NotFoundError: no such queue, or no host manager at ``Host``. UnavailableError: the
            queue is not running, or the host has no room (it is full, or holds the queue's
            ``max_exchanges_per_host``), or no host can take one (every host's reason).
    """
    q = view.queue(msg.QName)
    if q.state != RUNNING:
        raise ConflictError(f"queue {q.name!r} is {q.state}")
    placer = Placer(view)
    if msg.Host:
        host = msg.Host
        if host not in view.hosts:
            raise NotFoundError(f"no host manager registered at {echo(host)}")
        why = placer.room(view.hosts[host], q)
        if why:
            raise UnavailableError(f"queue {q.name!r}: no exchange placed: {host}: {why}")
    else:
        host = placer.choose(q) or ""
        if not host:
            raise UnavailableError(f"no host can take an exchange of {q.name!r}: {placer.explain(q)}")
    number = max(q.next_exchange, next_slot(q.placement))
    slot = f"x{number}"
    placement = {**q.placement, slot: host}
    paths = view.paths
    doc = dataclasses.replace(q.doc, placement=placement, next_exchange=number + 1)
    ops = (SetData(paths.queue(q.name), doc.encode(), q.version),
           *(() if view.has_assignment(host, q.name, slot) else (Create(paths.assignment(host, q.name, slot)),)))
    event = Event(q.name, "exchange_placed",
                  f"exchange {slot} placed on {host} (create-exchange request): "
                  f"{len(q.placement)} -> {len(placement)} exchanges",
                  {"reason": "create-exchange request", "hosts": host, "placed": slot, "exchanges": len(placement),
                   "previous": len(q.placement)})

    def done(v: QueueView | None) -> Reply | None:
        if v is None or slot not in v.exchanges:
            return None
        return Reply(comment="created", data={"Exchange": slot, "Host": host, **to_document(v.exchanges[slot])})

    return Outcome(ops=ops, ensure=(paths.host_assignments(host),), events=(event,),
                   wait=Wait(q.name, f"exchange {slot} ready", READY, done))


def finish_removals(view: View, now: float, stop_timeout: float) -> list[Outcome]:
    """The queues being removed whose znodes can go: their processes are gone, or ``stop_timeout`` passed
    since the removal was decided (a dead host never says goodbye)."""
    out = []
    for q in view.queues.values():
        if q.state != REMOVING:
            continue
        if q.quiet:
            out.append(Outcome(purge=(view.paths.queue(q.name),), notes=(f"queue {q.name} removed",)))
        elif now - q.doc.removing_since > stop_timeout:
            out.append(Outcome(purge=(view.paths.queue(q.name),),
                               notes=(f"queue {q.name}: processes still registered after {stop_timeout:.0f}s; "
                                      "removed anyway",)))
    return out


def next_slot(slots: Iterable[str]) -> int:
    """One above the highest exchange slot number among ``slots`` (1 when there is none)."""
    numbers = [slot_order(x)[0] for x in slots if slot_order(x)[0] < 1 << 62]
    return max(numbers, default=0) + 1


def _ready(name: str, comment: str) -> Wait:
    return Wait(name, "ready", READY,
                lambda q: Reply(comment=comment, data=q.summary().document()) if q is not None and q.ready else None)


def _changeable(view: View, name: str) -> QueueView:
    q = view.queue(name)
    if q.state == REMOVING:
        raise ConflictError(f"queue {q.name!r} is being removed")
    return q


def _unassign(view: View, q: QueueView) -> list[Op]:
    """Deletions of the queue's assignments that exist."""
    paths = view.paths
    wanted = [(q.host, MONITOR), *((h, slot) for slot, h in q.placement.items())]
    return [*(Delete(paths.assignment(h, q.name, slot)) for h, slot in wanted if view.has_assignment(h, q.name, slot)),
            *journal_ops(view, q, dataclasses.replace(q.doc, state=STOPPED), q.rules)[1]]
