"""The rules of a replicated journal (pure): who may append, what is acknowledged, who leads next.

A queue with ``replicas = n`` keeps its journal on ``n`` replicas on distinct hosts. One *leads*: it takes the
exchanges' batches, gives them offsets and sends each round to the others, which *follow*: they append the same
entries at the same offsets. Everything here decides; nothing reads a socket, a file or a clock.

**Epochs.** Each leadership is an *epoch*, a number that only grows. A replica *promises* an epoch when a
candidate asks it to (:meth:`Replica.promise`), and from then on takes nothing of an older one: a leader cut off
(partitioned, paused past its session) whose followers promised a newer epoch gets no append of its taken, so
nothing it sends is acknowledged again. That is the fencing.

**Acknowledged means on a majority** (:class:`Quorum`). The leader acknowledges the exchanges (and so the
publishers) up to the *commit end*: the highest end that a majority of the replicas hold, under the queue's policy
(``always``: synced on each; ``interval``: written). It never goes backwards, and it moves only once an entry of
the leader's own epoch is on a majority (an older epoch's tail becomes committed behind it, as in Raft: an entry
of an older epoch counted on a majority could still be lost to a leader elected without it). Readers are served
only what is committed.

**Elections** (:class:`Election`). A candidate asks every replica it reaches to promise the next epoch; each
answers with its log's last epoch and end (:class:`Promise`). With a majority (itself included), every
acknowledged entry is in at least one of those logs (two majorities meet), and the log with the highest (last
epoch, end) holds all of them (:meth:`Election.source`): the candidate takes that log's entries it lacks before it
leads. Its epoch begins at :meth:`Election.base`, past every end it heard and past the wall clock's seconds times
2**21 (the rule a journal started anew already follows: a journal gives fewer than 2**21 offsets a second), so an
offset never names two different records, not even an entry of an old leader's that was never acknowledged and is
cut away later.

**Catching up.** A follower whose log does not end where the leader's next entries begin either lacks entries (it
fetches from its end) or holds entries the leader does not (a tail an old leader wrote and never got acknowledged):
it cuts its log back to the end both logs share (:meth:`EpochHistory.shared_end`), told by the two logs' epoch
histories (:class:`EpochHistory`: where each epoch began and ended), as Kafka's followers do with leader epochs.
"""

from __future__ import annotations

import bisect
import collections
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["EpochHistory", "Promise", "Replica", "Verdict", "ACCEPT", "STALE", "FETCH", "TRUNCATE",
           "Quorum", "Waiting", "Election", "majority", "EPOCH_SHIFT"]

T = TypeVar("T")

#: an epoch begins at an offset at or past the wall clock's seconds shifted by this much (see the module's doc)
EPOCH_SHIFT = 21

ACCEPT, STALE, FETCH, TRUNCATE = "accept", "stale", "fetch", "truncate"


def majority(n: int) -> int:
    """Replicas that make a majority of ``n``."""
    return n // 2 + 1


@dataclass
class EpochHistory:
    """Where each epoch of a log began (``starts``: ``(epoch, first offset)`` pairs, both increasing) and where each
    epoch but the last ended (``ends``: the log's end when the next one began; a new epoch may begin past it)."""

    starts: list[tuple[int, int]] = field(default_factory=list)
    ends: dict[int, int] = field(default_factory=dict)

    def begin(self, epoch: int, start: int, end: int) -> None:
        """Entries of ``epoch`` follow from ``start`` in a log that ended at ``end`` (an epoch older than the last, or
        a start before it, is a bug of the caller)."""
        if self.starts:
            last_epoch, last_start = self.starts[-1]
            if epoch == last_epoch:
                return
            if epoch < last_epoch or start < last_start or start < end:
                raise ValueError(f"epoch {epoch} at {start} after epoch {last_epoch} at {last_start}, ending at {end}")
            self.ends[last_epoch] = end
        self.starts.append((epoch, start))

    @property
    def last_epoch(self) -> int:
        """The epoch of the log's newest entries (0: none)."""
        return self.starts[-1][0] if self.starts else 0

    def epochs(self) -> set[int]:
        return {epoch for epoch, _ in self.starts}

    def start_of(self, epoch: int) -> int:
        """Where ``epoch``'s entries begin (-1: this log holds none of it)."""
        return next((start for e, start in self.starts if e == epoch), -1)

    def end_of(self, epoch: int, log_end: int) -> int:
        """Where ``epoch``'s entries end in a log ending at ``log_end`` (an epoch it does not hold: where the newest
        older one it holds ended)."""
        i = bisect.bisect_right(self.starts, (epoch, float("inf")))
        if i == len(self.starts):
            return log_end
        return self.ends[self.starts[i - 1][0]] if i else 0

    def truncate(self, end: int) -> None:
        """The log was cut back to ``end``: forget the epochs that began at or after it."""
        while self.starts and self.starts[-1][1] >= end:
            self.starts.pop()
        if self.starts:
            self.ends.pop(self.starts[-1][0], None)  # the last epoch left is the open one again

    def copy(self) -> EpochHistory:
        return EpochHistory(list(self.starts), dict(self.ends))

    def epoch_at(self, offset: int) -> int:
        """The epoch of the entry at ``offset`` (0: before every epoch this history knows)."""
        i = bisect.bisect_right(self.starts, (offset, float("inf")), key=lambda s: (s[1], 0)) - 1
        return self.starts[i][0] if i >= 0 else 0

    def to_list(self) -> list[list[int]]:
        """``[epoch, first offset, end]`` each, the last one's end -1 (on the wire, on disk)."""
        return [[epoch, start, self.ends.get(epoch, -1)] for epoch, start in self.starts]

    @classmethod
    def from_list(cls, items: list[list[int]]) -> EpochHistory:
        """What :meth:`to_list` gave.

        Raises:
            ValueError: not a history (not triples of integers, epochs or starts that do not grow).
        """
        history = cls()
        rows = [list(item) for item in items]
        if not all(len(r) == 3 and all(type(v) is int for v in r) for r in rows):
            raise ValueError(f"an epoch history is [epoch, start, end] triples of integers, got {items!r:.200}")
        for i, (epoch, start, _end) in enumerate(rows):
            history.begin(epoch, start, rows[i - 1][2] if i else start)
        return history

    def shared_end(self, end: int, theirs: EpochHistory, their_end: int) -> int:
        """The end of the longest prefix this log (ending at ``end``) shares with another: both hold the newest epoch
        they have in common up to the shorter of its two ends (an epoch's entries are its leader's, and a replica
        took them only after cutting its log back to that leader's), and every older entry the same; 0 when they
        share no epoch."""
        common = self.epochs() & theirs.epochs()
        if not common:
            return 0
        epoch = max(common)
        return min(self.end_of(epoch, end), theirs.end_of(epoch, their_end))


@dataclass(frozen=True)
class Promise:
    """A replica's answer to a candidate: it promised ``epoch``; its log ends at ``end``, its newest entries are of
    ``last_epoch``."""

    replica: str
    epoch: int
    last_epoch: int
    end: int


@dataclass(frozen=True)
class Verdict:
    """What a follower does with an append: ``ACCEPT`` (from ``skip`` entries on, those below its end being held
    already), ``STALE`` (of an epoch older than it promised: refused, and the sender told ``epoch``), ``FETCH`` (it
    lacks entries before them: it reads from ``at``), ``TRUNCATE`` (it holds entries the leader does not: it cuts
    its log back to ``at`` first, then fetches)."""

    action: str
    epoch: int = 0
    at: int = 0
    skip: int = 0


class Replica:
    """One replica's side of the rules: the epoch it promised, its log's end and epoch history.

    Args:
        name: the replica (its host's name, say).
        end: the end of its log (the next offset).
        history: where each epoch of its log began.
        promised: the highest epoch it promised (kept on disk beside its log: a restart keeps the fence).
        learner: a replica new to the set (in place of one lost): it promises nothing until :meth:`admit`.
    """

    def __init__(self, name: str, end: int = 0, history: EpochHistory | None = None, promised: int = 0,
                 learner: bool = False) -> None:
        self.name = name
        self.end = end
        self.history = history if history is not None else EpochHistory()
        self.promised = promised
        self.learner = learner
        self.leader_history: EpochHistory | None = None  # the leader's, once its epoch was reconciled with ours

    def refusal(self, epoch: int) -> str:
        """Why this replica may not promise ``epoch`` ("": it may)."""
        if self.learner:
            return (f"replica {self.name} is a learner: it promises nothing until it holds what its leader "
                    f"committed")
        if epoch <= self.promised:
            return f"replica {self.name} promised epoch {self.promised} already"
        return ""

    def promise(self, epoch: int) -> Promise | None:
        """A candidate for ``epoch`` asks: promise it (and refuse every older one from now on), or None when this
        replica may not (:meth:`refusal`: it promised ``epoch`` or a newer one already, to another candidate, one
        promise per epoch; or it is a learner)."""
        if self.refusal(epoch):
            return None
        self.promised = epoch
        self.leader_history = None
        return Promise(self.name, epoch, self.history.last_epoch, self.end)

    def lead(self, epoch: int, start: int | None = None) -> None:
        """This replica leads ``epoch`` (it won it): its entries of that epoch begin at ``start``
        (:meth:`Election.base`, past a jump), or follow its log's end.

        Raises:
            ValueError: it promised a newer epoch.
        """
        if epoch < self.promised:
            raise ValueError(f"replica {self.name} promised epoch {self.promised}: it cannot lead epoch {epoch}")
        self.promised = epoch
        start = self.end if start is None else start
        self.history.begin(epoch, start, self.end)
        self.end = max(self.end, start)

    def check(self, epoch: int, prev: int, offsets: list[int], leader: EpochHistory, leader_end: int) -> Verdict:
        """The leader of ``epoch``, whose log's epochs are ``leader`` and whose log ends at ``leader_end``, sends
        entries at ``offsets`` following its entry that ends at ``prev``: take them, refuse them, or first fetch or
        cut back."""
        if epoch < self.promised:
            return Verdict(STALE, self.promised)
        if epoch > self.promised:  # a leader elected without us: its epoch is the newest we know
            self.promised = epoch
            self.leader_history = None
        if self.leader_history != leader:
            keep = self.history.shared_end(self.end, leader, leader_end)
            if keep < self.end:
                return Verdict(TRUNCATE, epoch, keep)
            self.leader_history = leader.copy()
        if self.end < prev:
            return Verdict(FETCH, epoch, self.end)
        skip = bisect.bisect_left(offsets, self.end)
        return Verdict(ACCEPT, epoch, self.end, skip)

    def admit(self, members: list[str], epoch: int, leader: EpochHistory, committed: int) -> bool:
        """The leader of ``epoch`` (its log's epochs ``leader``) counts ``members`` and has committed up to
        ``committed``: a learner whose log reaches that votes from now on. True if it just stopped being a learner
        (its heartbeat says so; its monitor has the queue's document say so, so that it is not made one again).

        Only a commit end past the start of the leader's own epoch says that everything acknowledged before is
        behind it (a leader just elected commits by counting an entry of its epoch; until then its commit end says
        nothing about the log it took over), and only a leader that counts this replica commits nothing more
        without a majority that meets one holding it."""
        if not self.learner or self.name not in members or committed < 0 or self.end < committed:
            return False
        start = leader.start_of(epoch)
        if start < 0 or committed <= start:
            return False
        self.learner = False
        return True

    def appended(self, epoch: int, offsets: list[int], end: int) -> None:
        """Entries of ``epoch`` at ``offsets`` were written; the log now ends at ``end``."""
        if offsets:
            self.history.begin(epoch, offsets[0], self.end)
        self.end = end

    def wrote(self, end: int) -> None:
        """The leader wrote entries of its own epoch up to ``end``: its log (what its promise names) ends there."""
        self.end = max(self.end, end)

    def truncated(self, end: int) -> None:
        """The log was cut back to ``end``."""
        self.end = min(self.end, end)
        self.history.truncate(end)
        self.leader_history = None


class Quorum:
    """The leader's count of what each replica holds in its epoch, and so what is acknowledged.

    Args:
        leader: the leading replica.
        replicas: every replica of the queue, the leader among them.
        epoch: the leader's epoch.
        base: the first offset of its epoch.
        committed: what it knows was committed before (the end of the log it took over at most).
    """

    def __init__(self, leader: str, replicas: list[str], epoch: int, base: int, committed: int = 0) -> None:
        if leader not in replicas:
            raise ValueError(f"leader {leader} is not one of the replicas {replicas}")
        self.leader = leader
        self.epoch = epoch
        self.base = base
        self.ends = {r: 0 for r in replicas}
        self.heard_at = {r: 0.0 for r in replicas}
        self.committed = committed

    @property
    def needed(self) -> int:
        return majority(len(self.ends))

    def held(self, replica: str, end: int, now: float) -> int:
        """``replica`` holds the leader's log up to ``end`` under the queue's policy (the leader counts its own
        writes too); the commit end afterwards."""
        if replica not in self.ends:
            return self.committed
        if end > self.ends[replica]:
            self.ends[replica] = end
        self.heard_at[replica] = now
        on_majority = sorted(self.ends.values(), reverse=True)[self.needed - 1]
        if on_majority > self.base and on_majority > self.committed:  # an entry of our epoch is on a majority
            self.committed = on_majority
        return self.committed

    def members(self, replicas: list[str]) -> None:
        """The replica set is ``replicas`` now (one member in place of one lost, the leader among them): the
        commit end counts a majority of them from here on, and never goes back."""
        if self.leader not in replicas:
            raise ValueError(f"leader {self.leader} is not one of the replicas {replicas}")
        self.ends = {r: self.ends.get(r, 0) for r in replicas}
        self.heard_at = {r: self.heard_at.get(r, 0.0) for r in replicas}

    def lag(self, replica: str, leader_end: int) -> int:
        """Offsets ``replica`` is behind the leader's log."""
        return max(0, leader_end - self.ends.get(replica, 0))

    def in_sync(self, replica: str, now: float, leader_end: int, max_lag_s: float) -> bool:
        """Whether ``replica`` holds everything committed and was heard within ``max_lag_s``."""
        return (replica == self.leader or now - self.heard_at.get(replica, 0.0) <= max_lag_s) and \
            self.ends.get(replica, 0) >= min(self.committed, leader_end)


class Waiting(Generic[T]):
    """What each round written owes the exchanges (its acknowledgements), until the commit end reaches the log's end
    after it. A round may add nothing to the log (only batches it holds already, sent again after a failover) and
    end where the commit end already is: it is due at once, not at the next move of the commit end, which may never
    come on a queue gone quiet."""

    def __init__(self) -> None:
        self.rounds: collections.deque[tuple[int, T]] = collections.deque()  # (the log's end after it, its due)

    def add(self, end: int, due: T) -> None:
        """A round after which the log ends at ``end`` (never below a round's before it)."""
        self.rounds.append((end, due))

    def due(self, committed: int) -> list[T]:
        """What the rounds ending at or before ``committed`` owe, in their order (taken out)."""
        rounds, out = self.rounds, []
        while rounds and rounds[0][0] <= committed:
            out.append(rounds.popleft()[1])
        return out

    def __len__(self) -> int:
        return len(self.rounds)


class Election:
    """A candidate's count of promises for ``epoch`` among ``replicas``.

    Args:
        candidate: the replica that stands.
        replicas: every replica of the queue.
        epoch: the epoch it stands for (past every one it heard of).
    """

    def __init__(self, candidate: str, replicas: list[str], epoch: int) -> None:
        self.candidate = candidate
        self.replicas = set(replicas)
        self.epoch = epoch
        self.promises: dict[str, Promise] = {}
        self.newer = 0  # a newer epoch some replica promised: this candidacy is lost

    def promised(self, promise: Promise) -> None:
        if promise.replica in self.replicas and promise.epoch == self.epoch:
            self.promises[promise.replica] = promise

    def refused(self, epoch: int) -> None:
        """A replica promised ``epoch`` already (at least ours)."""
        self.newer = max(self.newer, epoch)

    @property
    def won(self) -> bool:
        return not self.newer and self.candidate in self.promises and \
            len(self.promises) >= majority(len(self.replicas))

    @property
    def lost(self) -> bool:
        return bool(self.newer)

    def source(self) -> Promise:
        """The log that holds every acknowledged entry: the highest (last epoch, end) among the promises."""
        if not self.won:
            raise ValueError("no majority yet")
        return max(self.promises.values(), key=lambda p: (p.last_epoch, p.end))

    def base(self, now_s: float) -> int:
        """Where the new epoch's offsets begin: past every log end heard, and past the wall clock's seconds times
        2**21."""
        return max(max(p.end for p in self.promises.values()), int(now_s) << EPOCH_SHIFT)
