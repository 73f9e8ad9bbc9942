"""Scaling a queue out and in (pure): when to ask for one more exchange, and which one to drain.

Evaluated with the relocation rule, on the same smoothed loads (records/s) and the queue's rules:

* **out** (one more exchange) when the queue has fewer than ``max_exchanges`` and:

  - it has fewer than ``min_exchanges`` (at once); or
  - some exchange is *stuck*: hot (above its mark: ``exchange_records_per_s``, or less when it is
    saturated, see :func:`monitor._rule.saturation_mark`) for ``sustain_s`` already, and the
    relocation rule found no exchange that can absorb any of its movable publishers (a publisher alone
    above the mark is a limit case: a new exchange would not help it); at once, as the relocation rule
    has counted the sustain; or, for ``sustain_s``,
  - the queue's average load per exchange is above ``scale_out_records_per_s`` (when set); or
  - it has more publishers per exchange than ``publishers_per_exchange`` (when set);

* **in** (drain the least loaded exchange) when the queue has more than ``min_exchanges`` and either more
  than ``max_exchanges`` (at once: an operator lowered it), or, for ``sustain_s``, its whole load fits in
  one exchange fewer at ``scale_in_ratio`` of the mark each (the exchanges' own marks on average, which are
  lower than the queue's where they saturate first, an exchange without one counted at the average of those
  known; and of ``scale_out_records_per_s``, and within ``publishers_per_exchange``, when those are set), and
  no exchange's publishers wait for it (their mean *pressure*, the share of their time their batches waited
  for its acknowledgements or its pipe, below :data:`PRESSED`): demand the queue does not meet is not shown by
  what it forwards, and a queue whose publishers wait gives no capacity back.

Pressure does not scale out by itself: a publisher that sends as fast as it can waits on any exchange (its
window of unacknowledged batches is always full), so its waiting says that demand is unmet, not which
resource binds. What binds shows in the exchange's busy fraction, measured in wall-clock time (a quota's
throttling, or a host's CPU taken by others, makes the same work take longer).

Hysteresis keeps the two apart: out above the mark, in only well below it (0.6 of it by default), each
condition sustained, nothing decided while an earlier decision is being carried out, and a decision that
reverses the previous one only after ``cooldown_s``. Reversing it within two cool-downs counts a flap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["QueueLoad", "Decision", "Scaler", "PRESSED"]

#: Publishers whose batches wait for their exchange this share of their time: the queue does not meet demand.
PRESSED = 0.5


@dataclass(frozen=True)
class QueueLoad:
    """What the scaler sees of the queue.

    Attributes:
        loads: smoothed records/s of every live exchange that is not draining, by id.
        publishers: publishers on each of those exchanges, by id.
        stuck: hot exchanges (for ``sustain_s``) whose movable publishers no other exchange can absorb.
        placed: exchanges the queue has placed (running or starting); defaults to ``len(loads)``.
        marks: each exchange's own mark, records/s, where it is below the queue's (it saturates first).
        pressure: the mean pressure of each exchange's publishers (0..1).
    """

    loads: Mapping[str, float]
    publishers: Mapping[str, int] = field(default_factory=dict)
    stuck: Sequence[str] = ()
    placed: int | None = None
    marks: Mapping[str, float] = field(default_factory=dict)
    pressure: Mapping[str, float] = field(default_factory=dict)

    def mark(self, exchange: str, high: float) -> float:
        """The mark of ``exchange``: its own, or the queue's ``high``."""
        own = self.marks.get(exchange, 0.0)
        return min(own, high) if own > 0 else high

    @property
    def count(self) -> int:
        return len(self.loads) if self.placed is None else max(self.placed, len(self.loads))


@dataclass(frozen=True)
class Decision:
    """Scale ``out`` (ask for exchange number ``exchanges + 1``) or ``in`` (drain ``victim``)."""

    kind: str  # "out" or "in"
    reason: str
    exchanges: int  # how many the queue has now
    victim: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    bound: bool = False  # taken to respect min_exchanges / max_exchanges, not because of the load


class Scaler:
    """Keeps the timers of the two conditions and the last decision; :meth:`evaluate` once per period."""

    def __init__(self) -> None:
        self.out_since: float | None = None
        self.in_since: float | None = None
        self.last: tuple[str, float] | None = None  # (kind, monotonic time) of the last decision

    def reset(self) -> None:
        """Forget the conditions' timers (a decision is being carried out, or the rules changed)."""
        self.out_since = self.in_since = None

    def evaluate(self, q: QueueLoad, rules: Mapping[str, Any], now: float) -> Decision | None:
        """The decision to take now, if any (the caller reports it back with :meth:`decided`)."""
        high = float(rules["exchange_records_per_s"])
        n = q.count
        total = sum(q.loads.values())
        pubs = sum(q.publishers.values())
        numbers = {"exchanges": n, "total_records_per_s": round(total, 1), "publishers": pubs, "high": high}
        why_out = self._why_out(q, rules, n, total, pubs) if n < int(rules["max_exchanges"]) else ""
        why_in = self._why_in(q, rules, n, total, pubs) if not why_out and n > int(rules["min_exchanges"]) else ""
        # hot (cold) since: None while there is no reason to scale out (in)
        out_since = self.out_since = (self.out_since if self.out_since is not None else now) if why_out else None
        in_since = self.in_since = (self.in_since if self.in_since is not None else now) if why_in else None
        sustain = float(rules["sustain_s"])
        # the operator's bounds apply at once, whatever the cool-down; a stuck exchange was hot for the sustain
        out_bound = n < int(rules["min_exchanges"])
        in_bound = n > int(rules["max_exchanges"])
        if out_since is not None and (out_bound or (
                (q.stuck or now - out_since >= sustain) and self._may("out", now, rules))):
            return Decision("out", why_out, n, numbers=numbers, bound=out_bound)
        if in_since is not None and q.loads and (in_bound or (now - in_since >= sustain and self._may("in", now, rules))):
            victim = min(q.loads, key=lambda x: (q.loads[x], q.publishers.get(x, 0), x))
            numbers = {**numbers, "victim_records_per_s": round(q.loads[victim], 1)}
            return Decision("in", why_in, n, victim=victim, numbers=numbers, bound=in_bound)
        return None

    def decided(self, d: Decision, now: float, rules: Mapping[str, Any]) -> bool:
        """Record ``d`` as taken; True if it reverses the previous decision within two cool-downs (a flap)."""
        flap = (
            not d.bound
            and self.last is not None
            and self.last[0] != d.kind
            and now - self.last[1] < 2 * float(rules["cooldown_s"])
        )
        self.last = (d.kind, now)
        self.reset()
        return flap

    def _may(self, kind: str, now: float, rules: Mapping[str, Any]) -> bool:
        """A decision the same way as the last may follow at once; the other way only after the cool-down."""
        return self.last is None or self.last[0] == kind or now - self.last[1] >= float(rules["cooldown_s"])

    @staticmethod
    def _why_out(q: QueueLoad, rules: Mapping[str, Any], n: int, total: float, pubs: int) -> str:
        high = float(rules["exchange_records_per_s"])
        least = int(rules["min_exchanges"])
        if n < least:
            return f"{n} exchange{'s' if n != 1 else ''}, below min_exchanges {least}"
        if q.stuck:
            hot = ", ".join(f"{x} ({q.loads.get(x, 0.0):,.0f} rec/s, mark {q.mark(x, high):,.0f})" for x in q.stuck)
            return f"{hot} above its mark and no other exchange can take its publishers"
        per_exchange = float(rules["scale_out_records_per_s"])
        if per_exchange and n and total / n > per_exchange:
            return f"average load {total / n:,.0f} rec/s per exchange above scale_out_records_per_s {per_exchange:,.0f}"
        limit = int(rules["publishers_per_exchange"])
        if limit and n and pubs / n > limit:
            return f"{pubs} publishers on {n} exchanges, above publishers_per_exchange {limit}"
        return ""

    @staticmethod
    def _why_in(q: QueueLoad, rules: Mapping[str, Any], n: int, total: float, pubs: int) -> str:
        if n < 2 or len(q.loads) < n:
            return ""  # an exchange is still starting
        most = int(rules["max_exchanges"])
        if n > most:
            return f"{n} exchanges, above max_exchanges {most}"
        if q.stuck or any(p >= PRESSED for p in q.pressure.values()):
            return ""  # something is hot, or publishers wait
        ratio = float(rules["scale_in_ratio"])
        fewer = n - 1
        high = float(rules["exchange_records_per_s"])
        # an exchange that has not saturated yet (no mark of its own: a new one, or one lightly loaded) is taken
        # to saturate like those that have, not at the queue's mark, which may be far out of reach
        known = [q.mark(x, high) for x in q.loads if q.marks.get(x, 0.0) > 0]
        unknown = min(high, sum(known) / len(known)) if known else high
        mark = (sum(known) + unknown * (len(q.loads) - len(known))) / len(q.loads)
        room = ratio * mark * fewer
        per_exchange = float(rules["scale_out_records_per_s"])
        if per_exchange:
            room = min(room, ratio * per_exchange * fewer)
        limit = int(rules["publishers_per_exchange"])
        if total > room or (limit and pubs > limit * fewer):
            return ""
        return (
            f"load {total:,.0f} rec/s fits in {fewer} exchange{'s' if fewer > 1 else ''} at "
            f"{ratio:.0%} of the mark{' (the exchanges saturate first)' if mark < high else ''} "
            f"(room {room:,.0f} rec/s)"
        )
