"""The relocation rule (pure): which publisher to move off which hot exchange, and where.

Evaluated every KPI period on smoothed loads (records/s):

* every exchange has its own *mark*: the queue's ``high``, or less when the exchange is saturated first
  (:func:`saturation_mark`: the records/s it forwards at the queue's ``exchange_busy`` fraction of its time,
  estimated from its load and its busy fraction), as on a host with a small CPU budget;
* an exchange is *hot* when its load is above its mark; it must stay hot for ``sustain`` seconds;
* from a hot exchange, move the most productive publisher that is not cooling down (moved less than
  ``cooldown`` seconds ago) and that the least loaded accepting exchange can take while staying below
  its own mark; if the most productive one does not fit, the next one down is tried; at most one move per
  hot exchange per evaluation (the next evaluation sees the effect);
* a publisher whose own rate is above its exchange's mark cannot be helped by moving it: it is reported
  as a *limit case* and left where it is;
* when no exchange has room but the hot one and some other are both saturated, their publishers' rates
  are what the exchanges leave them, not what they would send: a publisher moves to the saturated exchange
  where its share (mark / publishers) would be largest, if that is at least :data:`FAIR_GAIN` times the
  share it has now. Publishers end spread so that no move improves anyone's share by that much, whatever
  the order in which they came (a lone publisher may fill a small exchange by itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

__all__ = ["Ewma", "ExchangeLoad", "Move", "LimitCase", "evaluate", "saturation_mark", "MIN_BUSY", "FAIR_GAIN"]

#: Below this busy fraction an exchange's capacity is not estimated: fixed costs (heartbeats,
#: acknowledgements) dominate, and load / busy would say little.
MIN_BUSY = 0.1

#: Between saturated exchanges, a publisher moves only for a share this many times larger than its own: the
#: marks are estimates, and a smaller gain would not be worth a move.
FAIR_GAIN = 1.2


def saturation_mark(high: float, load: float, busy: float, limit: float) -> float:
    """An exchange's own mark: ``high``, or the records/s it forwards when busy for ``limit`` of its time.

    Forwarding costs the exchange about the same time per record, so at ``busy`` (smoothed, 0..1) and
    ``load`` (smoothed records/s) it would forward ``limit * load / busy`` at ``limit``. ``limit`` = 1 leaves
    the mark at ``high`` until the exchange is busy all the time, and its load then stays at its mark.
    """
    if busy < MIN_BUSY or load <= 0:
        return high
    return min(high, limit * load / busy)


class Ewma:
    """Exponentially weighted moving average; the first sample sets the value."""

    __slots__ = ("alpha", "value", "samples")

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.value = 0.0
        self.samples = 0

    def shift(self, by: float) -> None:
        """Move the average by ``by`` at once (a move booked before the samples show it)."""
        self.value += by

    def add(self, sample: float) -> float:
        self.value = sample if self.samples == 0 else self.alpha * sample + (1 - self.alpha) * self.value
        self.samples += 1
        return self.value


@dataclass
class ExchangeLoad:
    """What the rule sees of one exchange.

    Attributes:
        exchange: its id.
        load: smoothed records/s.
        hot_since: monotonic time since when ``load`` has been above its mark (None: not hot).
        publishers: smoothed records/s of each publisher that sends through it (and is not moving).
        accepts: whether it may receive publishers (alive, not draining, heard by every subscriber).
        mark: its own mark, records/s (0: the queue's ``high``; see :func:`saturation_mark`).
        arriving: publishers moving onto it (counted where they go when shares are evened out).
    """

    exchange: str
    load: float
    hot_since: float | None = None
    publishers: Mapping[str, float] = field(default_factory=dict)
    accepts: bool = True
    mark: float = 0.0
    arriving: int = 0


@dataclass(frozen=True)
class Move:
    publisher: str
    source: str
    target: str
    publisher_rate: float
    source_load: float
    target_load: float
    high: float  # the source's mark
    saturated: bool = False  # the source's mark is below the queue's: it is saturated
    shares: tuple[float, float] | None = None  # between saturated exchanges: the share per publisher, now and there

    def describe(self) -> str:
        where = (f"publisher {self.publisher[:8]} ({self.publisher_rate:,.0f} rec/s) from {self.source} "
                 f"({self.source_load:,.0f} rec/s > {_mark(self.high, self.saturated)}) to {self.target} ")
        if self.shares is not None:
            return where + (f"(saturated too: {self.shares[0]:,.0f} -> {self.shares[1]:,.0f} rec/s per publisher)")
        return where + f"({self.target_load:,.0f} -> {self.target_load + self.publisher_rate:,.0f} rec/s)"


@dataclass(frozen=True)
class LimitCase:
    exchange: str
    publisher: str
    publisher_rate: float
    high: float  # the exchange's mark
    saturated: bool = False

    def describe(self) -> str:
        return (
            f"limit case: publisher {self.publisher[:8]} alone sends {self.publisher_rate:,.0f} rec/s "
            f"through {self.exchange}, above {_mark(self.high, self.saturated)}; not moved"
        )


def _mark(mark: float, saturated: bool) -> str:
    return f"its saturation mark {mark:,.0f}" if saturated else f"high {mark:,.0f}"


def evaluate(
    exchanges: Sequence[ExchangeLoad],
    *,
    now: float,
    high: float,
    sustain: float,
    cooldown: float,
    moved_at: Mapping[str, float],
    stuck: list[str] | None = None,
) -> tuple[list[Move], list[LimitCase]]:
    """Apply the rule once.

    Args:
        exchanges: every live exchange of the queue.
        now: the current monotonic time.
        high: the queue's high-water mark, records/s (an exchange's own mark may be lower).
        sustain: seconds an exchange must have been hot.
        cooldown: seconds a moved publisher stays put.
        moved_at: when each publisher was last moved (monotonic).
        stuck: if given, receives the hot exchanges that have a publisher the rule could move (not a limit
            case, not cooling down) but no exchange that can absorb it: a new exchange would help them.

    Returns:
        The moves to make (at most one per hot exchange) and the limit cases seen.
    """
    books = _Books(exchanges, high)
    loads, marks, moving = books.loads, books.marks, books.moving
    moves: list[Move] = []
    limits: list[LimitCase] = []
    hot = [x for x in exchanges
           if x.hot_since is not None and now - x.hot_since >= sustain and x.load > marks[x.exchange]]
    for x in sorted(hot, key=lambda e: e.load, reverse=True):
        mark = marks[x.exchange]
        saturated = mark < high
        ranked = sorted(x.publishers.items(), key=lambda item: item[1], reverse=True)
        for pub, rate in ranked:
            if rate > mark:
                limits.append(LimitCase(x.exchange, pub, rate, mark, saturated))
        movable = [
            (pub, rate)
            for pub, rate in ranked
            if rate <= mark and pub not in moving and now - moved_at.get(pub, float("-inf")) >= cooldown
        ]
        targets = [y.exchange for y in exchanges if y.exchange != x.exchange and y.accepts]
        if not targets:
            if movable and stuck is not None:
                stuck.append(x.exchange)
            continue
        target = min(targets, key=lambda y: (loads[y] / marks[y], loads[y]))
        for pub, rate in movable:
            if loads[target] + rate < marks[target]:
                moves.append(books.book(Move(pub, x.exchange, target, rate, loads[x.exchange], loads[target], mark,
                                             saturated)))
                break
        else:
            if movable and stuck is not None:
                stuck.append(x.exchange)  # a new exchange would help it, even if a move evens out the shares
            fair = books.fairer(x.exchange, movable[0], targets) if movable and saturated else None
            if fair is not None:
                moves.append(books.book(fair))
    return moves, limits


class _Books:
    """The loads, marks and publisher counts of one evaluation, updated by each move it decides."""

    def __init__(self, exchanges: Sequence[ExchangeLoad], high: float) -> None:
        self.high = high
        self.loads = {x.exchange: x.load for x in exchanges}
        self.counts = {x.exchange: len(x.publishers) + x.arriving for x in exchanges}
        self.marks = {x.exchange: min(x.mark, high) if x.mark > 0 else high for x in exchanges}
        self.moving: set[str] = set()

    def book(self, move: Move) -> Move:
        """``move``, booked for the rest of the evaluation."""
        self.loads[move.source] -= move.publisher_rate
        self.loads[move.target] += move.publisher_rate
        self.counts[move.source] -= 1
        self.counts[move.target] += 1
        self.moving.add(move.publisher)
        return move

    def fairer(self, source: str, candidate: tuple[str, float], targets: Sequence[str]) -> Move | None:
        """The move of ``candidate`` off saturated ``source`` to the saturated target where its share would be
        largest, if that is :data:`FAIR_GAIN` times its share now; None otherwise."""
        marks, counts = self.marks, self.counts
        share = marks[source] / max(1, counts[source])
        saturated = [y for y in targets if marks[y] < self.high]
        if not saturated:
            return None
        target = max(saturated, key=lambda y: marks[y] / (counts[y] + 1))
        there = marks[target] / (counts[target] + 1)
        if there < FAIR_GAIN * share:
            return None
        pub, rate = candidate
        return Move(pub, source, target, rate, self.loads[source], self.loads[target], marks[source], True,
                    (share, there))
