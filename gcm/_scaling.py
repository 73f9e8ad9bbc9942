"""Scale-out and exchange removal (2017, 2018): a queue's exchange slots added or taken away. Pure decisions.

Both are asked for by the queue's monitor (or an operator) and are idempotent, so a request repeated after
a lost reply or a GCM fail-over changes nothing twice: a scale-out names the total it wants, a removal the
slot. Each is one transaction (the queue node with a version check, and the assignments) and is answered
once stored, not when the processes have started or stopped: the monitor sees them come and go.
"""

from __future__ import annotations

import dataclasses

from gcm._lifecycle import MAX_AT_ONCE, next_slot
from gcm._outcome import Event, Outcome
from gcm._placement import Placer
from gcm._view import View, echo
from roq.wire import management as m
from roq.wire.control import Reply
from roq.wire.documents import REMOVING, RUNNING
from roq.errors import BadRequestError, ConflictError, UnavailableError
from roq.zk import Create, Delete, Op, SetData, exchange_slot

__all__ = ["scale_out", "remove_exchange", "MAX_REASON"]

MAX_REASON = 200  # characters of a request's Reason kept in its event


def scale_out(view: View, msg: m.ScaleOut, now: float) -> Outcome:
    """Place exchanges until the queue has ``msg.Exchanges`` (as many as fit).

    Raises:
        BadRequestError: a bad name; ``Exchanges`` below 1, more than :data:`MAX_AT_ONCE` added at once, or above
            the queue's ``max_exchanges``. NotFoundError: no such queue. UnavailableError: the queue is not
            running, or no host can take even one exchange (every host's reason).
    """
    q = view.queue(msg.QName)
    wanted, reason = msg.Exchanges, msg.Reason[:MAX_REASON]
    if wanted < 1:
        raise BadRequestError(f"Exchanges must be at least 1, got {wanted}")
    have = len(q.placement)
    if q.state != RUNNING:
        raise ConflictError(f"queue {q.name!r} is {q.state}")
    if wanted <= have:
        return Outcome.answer(f"already {have} placed", Placed=[], Exchanges=have)
    most = int(q.rules["max_exchanges"])
    if wanted > most:
        raise BadRequestError(f"queue {q.name!r} may have at most {most} exchanges (rule max_exchanges); "
                              f"{wanted} asked, {have} placed")
    if wanted - have > MAX_AT_ONCE:
        raise BadRequestError(f"at most {MAX_AT_ONCE} exchanges can be added at once, asked for {wanted - have}")
    placer = Placer(view)
    first = max(q.next_exchange, next_slot(q.placement))
    placed: list[tuple[str, str]] = []
    while have + len(placed) < wanted:
        host = placer.choose(q)
        if host is None:
            break
        placer.place(q.name, host)
        placed.append((f"x{first + len(placed)}", host))
    if not placed:
        raise UnavailableError(f"queue {q.name!r}: no host can take an exchange: {placer.explain(q)}")
    placement = {**q.placement, **dict(placed)}
    paths = view.paths
    doc = dataclasses.replace(q.doc, placement=placement, next_exchange=first + len(placed))
    ops: tuple[Op, ...] = (SetData(paths.queue(q.name), doc.encode(), q.version),
           *(Create(paths.assignment(host, q.name, slot)) for slot, host in placed
             if not view.has_assignment(host, q.name, slot)))
    where = ", ".join(f"{x} on {h}" for x, h in placed)
    short = wanted - have - len(placed)
    missing = f"; {short} more did not fit ({placer.explain(q)})" if short else ""
    event = Event(
        q.name, "exchange_placed",
        f"scale-out to {wanted} exchanges{f' ({reason})' if reason else ''}: placed {where}; "
        f"{have} -> {len(placement)} exchanges{missing}",
        {"reason": reason, "hosts": ",".join(h for _, h in placed), "placed": ",".join(x for x, _ in placed),
         "exchanges": len(placement), "previous": have, "wanted": wanted},
    )  # fmt: skip
    reply = Reply(comment=f"placed {where}{missing}",
                  data={"Placed": [{"Exchange": x, "Host": h} for x, h in placed], "Exchanges": len(placement)})
    return Outcome(ops=ops, ensure=tuple(view.paths.host_assignments(h) for h in sorted({h for _, h in placed})),
                   events=(event,), reply=reply)


def remove_exchange(view: View, msg: m.RemoveExchange, now: float) -> Outcome:
    """Take exchange slot ``msg.Exchange`` (or the slot of an incarnation name, ``x3-1a2b``) out of the queue.

    Raises:
        BadRequestError: a bad name, no slot named, or it would leave fewer than the queue's ``min_exchanges``.
            NotFoundError: no such queue. UnavailableError: the queue is being removed.
    """
    q = view.queue(msg.QName)
    if q.state == REMOVING:
        raise ConflictError(f"queue {q.name!r} is being removed")
    slot = exchange_slot(msg.Exchange.strip())
    if not slot or len(slot) > 64:
        raise BadRequestError(f"Exchange must name an exchange slot such as 'x3', got {echo(msg.Exchange)}")
    reason = msg.Reason[:MAX_REASON]
    have = len(q.placement)
    if slot not in q.placement:
        return Outcome.answer(f"exchange {slot} of {q.name!r} already gone", Exchange=slot, Exchanges=have)
    least = int(q.rules["min_exchanges"])
    if have - 1 < least:
        raise BadRequestError(f"removing {slot} would leave {have - 1} exchanges, below min_exchanges {least}")
    host = q.placement[slot]
    placement = {x: h for x, h in q.placement.items() if x != slot}
    paths = view.paths
    doc = dataclasses.replace(q.doc, placement=placement)
    ops: tuple[Op, ...] = (SetData(paths.queue(q.name), doc.encode(), q.version),
           *((Delete(paths.assignment(host, q.name, slot)),) if view.has_assignment(host, q.name, slot) else ()))
    event = Event(
        q.name, "exchange_removed",
        f"exchange {slot} removed from {host}{f' ({reason})' if reason else ''}: {have} -> {len(placement)} exchanges",
        {"reason": reason, "exchange": slot, "host": host, "exchanges": len(placement), "previous": have},
    )  # fmt: skip
    reply = Reply(comment=f"exchange {slot} removed from {host}",
                  data={"Exchange": slot, "Host": host, "Exchanges": len(placement)})
    return Outcome(ops=ops, events=(event,), reply=reply)
