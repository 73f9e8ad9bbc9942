"""What a decision says should happen: the GCM's shell carries it out.

A decision is a pure function ``(view, request, now) -> Outcome``: it never calls ZooKeeper, a socket or a
clock. Its :class:`Outcome` lists the znodes to write as one transaction (``ops``, :mod:`roq.zk` operations,
with the version check on the queue node), the paths to create first if missing (``ensure``: the
assignment directories of hosts), the :class:`Event` s to record once the transaction is in, log lines for
decisions that record no event (``notes``), and either the reply to send now or the :class:`Wait` to answer
once the cluster reaches a state; ``purge`` names subtrees to delete (the node of a queue whose removal is
done). The shell applies it in that order; if the transaction fails because the
view was stale (a node exists, is missing or changed) nothing was written, and the shell decides again on a
fresh view.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

from roq.wire.control import Reply
from roq.zk import Op

if TYPE_CHECKING:
    from gcm._view import QueueView

__all__ = ["Outcome", "Event", "Wait", "READY", "STOPPED", "REMOVED"]

#: which of the GCM's deadlines a :class:`Wait` has: ``ready_timeout``, ``stop_timeout``, or
#: ``stop_timeout`` and the few seconds the removal of the queue's znodes takes after it
READY, STOPPED, REMOVED = "ready", "stopped", "removed"


@dataclasses.dataclass(frozen=True)
class Event:
    """A topology event of ``queue`` to record (and log): ``kind``, a sentence with its numbers, and its fields."""

    queue: str
    kind: str
    text: str
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Wait:
    """Answer once ``done(queue)`` gives a reply (``queue`` is the queue's view then, None once it is gone), or
    with UNAVAILABLE at the deadline of kind ``until`` (:data:`READY`, :data:`STOPPED`, :data:`REMOVED`)
    saying that ``what`` was not reached."""

    queue: str
    what: str
    until: str
    done: Callable[[QueueView | None], Reply | None]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What should happen (see the module)."""

    ops: tuple[Op, ...] = ()
    ensure: tuple[str, ...] = ()
    events: tuple[Event, ...] = ()
    notes: tuple[str, ...] = ()
    reply: Reply | None = None
    wait: Wait | None = None
    purge: tuple[str, ...] = ()  # subtrees deleted once the transaction is in (a removed queue's node)

    @classmethod
    def answer(cls, comment: str = "", **data: Any) -> Outcome:
        """Nothing to write: answer OK now with ``comment`` and ``data``."""
        return cls(reply=Reply(comment=comment, data=data))
