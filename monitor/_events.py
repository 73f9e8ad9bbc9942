"""The monitor's event log: its recent topology events and the counters an operator watches.

Events are recorded by the shell as it carries out the core's outbox (see :mod:`monitor._outbox`); the
counters are counted by the core as it decides. Both are kept in ZooKeeper
(``/queues/<q>/events/monitor``, by :class:`~monitor._cluster.ClusterLink`) so that a restarted monitor
continues them, and both appear in the status reply.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Callable

__all__ = ["EventLog", "COUNTERS", "MAX_KEPT"]

COUNTERS = (
    "relocations",
    "relocations_failed",
    "failovers",
    "exchanges_lost",
    "limit_cases",
    "flaps",
    "scale_outs",
    "scale_ins",
)
MAX_KEPT = 1000  # events kept in memory (the status reply and ZooKeeper show the last 200)


class EventLog:
    """Recent topology events (bounded) and the counters.

    Args:
        size: most events kept.
        clock: the wall clock that stamps events (seconds since the epoch).
    """

    def __init__(self, size: int = MAX_KEPT, *, clock: Callable[[], float] = time.time) -> None:
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=size)
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.changed = False  # since the owner last saved them
        self._clock = clock
        self._seq = 0

    def restore(self, events: list[dict[str, Any]], counters: dict[str, int]) -> None:
        """Continue the events and counters a previous monitor of the queue left."""
        self.events.extend(events)
        self._seq = max([self._seq, *(e["seq"] for e in events if type(e.get("seq")) is int)])
        for key, value in counters.items():
            if type(value) is int:
                self.counters[key] = self.counters.get(key, 0) + value

    def add(self, kind: str, text: str, **fields: Any) -> dict[str, Any]:
        """Record one event, numbered and stamped with the wall clock; the event as recorded."""
        self._seq += 1
        event = {"seq": self._seq, "time": self._clock(), "kind": kind, "text": text, **fields}
        self.events.append(event)
        self.changed = True
        return event

    def count(self, counter: str, n: int = 1) -> None:
        self.counters[counter] = self.counters.get(counter, 0) + n
        self.changed = True

    def saved(self) -> None:
        """Its owner saved the events: nothing changed since."""
        self.changed = False

    def recent(self, n: int) -> list[dict[str, Any]]:
        """The last ``n`` events, oldest first."""
        return list(self.events)[-n:] if n > 0 else []
