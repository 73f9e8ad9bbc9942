"""A queue's rules and thresholds (2006 set rules, 2015 set thresholds): pure decisions on a view.

``/queues/<q>/rules`` holds only the keys an operator set (a ``null`` unsets one); ``/queues/<q>/thresholds``
the thresholds an operator or the KPI tuner set, merged into those stored; the evidence that came with them
goes to ``/queues/<q>/tuning`` in the same transaction. Every update is checked against the whole in force
(:mod:`roq.rules`) and a bad value changes nothing. Each write carries the version of the node it was read
at, so two updates decided on the same snapshot cannot both land.
"""

from __future__ import annotations

from typing import Any

from gcm._journals import journal_hosts, journal_ops
from gcm._outcome import Outcome
from gcm._view import View, echo
from roq.wire import management as m
from roq.wire.control import Reply
from roq.wire.documents import RulesDoc, TuningDoc
from roq.errors import BadRequestError, ConfigError
from roq.rules import check_thresholds, effective_rules, update_rules
from roq.zk import Create, Op, SetData

__all__ = ["set_rules", "set_thresholds", "MAX_EVIDENCE"]

MAX_EVIDENCE = 256 << 10  # bytes of thresholds' evidence kept in ZooKeeper (its node limit is 1 MB)


def set_rules(view: View, msg: m.SetRules, now: float) -> Outcome:
    """Store the keys an operator set (a None value unsets one); answer the rules now in force.

    Raises:
        BadRequestError: a bad name, an unknown rule or a value out of range (the rules stay as they were).
            NotFoundError: no such queue.
    """
    q = view.queue(msg.QName)
    _check_keys(msg.Rules, f"rules of {q.name!r} unchanged: unknown rule")
    try:
        explicit = update_rules(dict(q.explicit_rules), msg.Rules, dict(q.thresholds))
    except ConfigError as exc:
        raise BadRequestError(f"rules of {q.name!r} unchanged: {exc}") from exc
    rules = effective_rules(explicit, dict(q.thresholds))
    was, wanted = int(q.rules.get("replicas", 1)), int(rules.get("replicas", 1))
    if wanted != was and q.doc.journal_host:
        raise BadRequestError(f"rules of {q.name!r} unchanged: its journal exists, and its replica count cannot change "
                              f"({was} to {wanted}): new replicas start empty, and a majority of the new set need not "
                              f"hold what a majority of the old one acknowledged (a change of the replica set is not "
                              f"built yet); a new queue can have {wanted}")
    ops = [_write(view.paths.rules(q.name), RulesDoc(explicit).encode(), q.rules_version)]
    doc, journal = journal_ops(view, q, q.doc, rules)
    if journal:  # the queue gets its journal, or loses it: in the same transaction, against the queue's version
        ops += [SetData(view.paths.queue(q.name), doc.encode(), q.version), *journal]
    ensure = tuple(view.paths.host_assignments(h) for h in journal_hosts(doc)) if journal else ()
    return Outcome(ops=tuple(ops), ensure=ensure, notes=(f"queue {q.name}: rules set by the operator now {explicit}",),
                   reply=Reply(comment="rules set", data={"Rules": rules, "Explicit": explicit}))


def set_thresholds(view: View, msg: m.SetThresholds, now: float) -> Outcome:
    """Merge thresholds into those stored; ``Evidence``, if any, goes beside them (``/tuning``) with the
    thresholds it came with and the wall-clock ``now``.

    Raises:
        BadRequestError: a bad name, an unknown threshold, a value out of range, or evidence over
            :data:`MAX_EVIDENCE` bytes (nothing changes). NotFoundError: no such queue.
    """
    q = view.queue(msg.QName)
    _check_keys(msg.Thresholds, f"thresholds of {q.name!r} unchanged: unknown threshold")
    try:
        checked = check_thresholds(msg.Thresholds, q.thresholds)
    except ConfigError as exc:
        raise BadRequestError(f"thresholds of {q.name!r} unchanged: {exc}") from exc
    value = {**q.thresholds, **checked}
    ops = [_write(view.paths.thresholds(q.name), RulesDoc(value).encode(), q.thresholds_version)]
    if msg.Evidence:
        tuning = TuningDoc(thresholds=checked, evidence=msg.Evidence, time=now).encode()
        if len(tuning) > MAX_EVIDENCE:
            raise BadRequestError(f"evidence of {len(tuning)} bytes: at most {MAX_EVIDENCE} are kept")
        ops.append(_write(view.paths.tuning(q.name), tuning, q.tuning_version))
    return Outcome(ops=tuple(ops), notes=(f"queue {q.name}: thresholds now {value}",),
                   reply=Reply(comment="thresholds set", data={"Thresholds": value}))


def _write(path: str, data: bytes, version: int) -> Op:
    """Replace the node read at ``version``, or create it if it was not there (-1)."""
    return SetData(path, data, version) if version >= 0 else Create(path, data)


def _check_keys(document: dict[str, Any], refusal: str) -> None:
    """Refuse a key no rule could have before a message quotes it whole."""
    for key in document:
        if len(key) > 64:
            raise BadRequestError(f"{refusal} {echo(key)}")
