"""Journal <-> monitor: the journal's heartbeat and the policy its monitor gives it.

A durable queue's journal registers with the queue's monitor by its first :class:`JournalHeartbeat`, which
says where its exchanges send and its readers fetch, and what it holds; the monitor answers with the queue's
:class:`JournalPolicy` whenever the journal holds another. Where the exchanges find the journal is
:class:`roq.wire.control.exchanges.Journaling`; what readers ask of it, :mod:`roq.wire.control.reads`.
"""

from __future__ import annotations

import dataclasses

from roq.wire.control.codec import Message, message

__all__ = ["JournalHeartbeat", "JournalPolicy", "JournalRole", "LEADER", "FOLLOWER", "STANDBY", "FENCED"]

#: a replica's roles, as its heartbeat names them (``role``; "" = an unreplicated journal)
LEADER, FOLLOWER, STANDBY, FENCED = "leader", "follower", "standby", "fenced"


@message(8)
class JournalHeartbeat(Message):
    """Journal -> monitor, every heartbeat interval; also registers it: where its exchanges send (``intake``),
    where readers fetch (``reads``), which policy and permissions it holds (:meth:`JournalPolicy.digest`, ""
    none yet; :meth:`AclRules.digest`, "" none yet, "-" plaintext) and what it holds.

    ``first_offset``..``next_offset``: the records it keeps; ``unsynced_bytes``: written and not yet on disk;
    ``sync_ms``/``sync_max_ms``: its syncs' mean and longest since the last heartbeat; ``error``: why its
    last write failed ("" none since the last heartbeat).

    A replica of a replicated journal (``replicas`` above 1) also names itself (``replica``, its host), its role
    (:data:`LEADER`, :data:`FOLLOWER`, :data:`STANDBY`: waiting to be told, :data:`FENCED`: a leader that learnt of
    a newer epoch), the epoch it promised (``epoch``), its log's last epoch and end (``last_epoch``, ``end``: what
    an election compares), the leader it follows (``leader``: its reads endpoint), its commit end as it knows it
    (``committed``) and, for a leader, each follower's end (``followers``: name -> end) and how many followers
    fetched from it lately (``reached``: a leader that reaches too few for a majority can acknowledge nothing), and
    how many damaged sealed segments it rewrote from another replica's copy since it started (``repairs``), and
    whether it is a ``learner`` (new to the replica set in place of one lost: it votes in no election until it
    holds what a leader that counts it committed)."""

    journal: str
    intake: str
    pid: int
    incarnation: int
    reads: str = ""
    policy: str = ""
    permissions: str = "-"
    first_offset: int = 0
    next_offset: int = 0
    size_bytes: int = 0
    segments: int = 0
    unsynced_bytes: int = 0
    records: int = 0
    duplicates: int = 0
    skipped: int = 0
    syncs: int = 0
    sync_ms: float = 0.0
    sync_max_ms: float = 0.0
    write_failures: int = 0
    error: str = ""
    replica: str = ""
    role: str = ""
    epoch: int = 0
    last_epoch: int = 0
    end: int = 0
    leader: str = ""
    committed: int = 0
    followers: dict[str, int] = dataclasses.field(default_factory=dict)
    reached: int = 0
    repairs: int = 0
    learner: bool = False


@message(1110)
class JournalPolicy(Message):
    """Monitor -> journal, when it joins, whenever the queue's rules change them and whenever its heartbeat
    shows others: how it acknowledges and syncs (``durability`` "interval" or "always", ``sync_interval_ms``)
    and what it keeps (``retention_bytes``, ``retention_s``; 0 = no bound).

    ``last``: the highest offset its monitor heard of the queue's journals (not in the digest). A journal of an
    earlier generation than its host manager started it with (:attr:`roq.config.JournalConfig.generation`: new
    and empty, or the files of a lost host that came back) begins past every offset the ones before may have
    given, and past ``last``. A journal with a monitor journals nothing before the first policy."""

    durability: str = "always"
    sync_interval_ms: int = 100
    retention_bytes: int = 0
    retention_s: float = 0.0
    last: int = 0

    def digest(self) -> str:
        """A short digest of this policy, for a heartbeat to say which the journal holds."""
        return f"{self.durability}/{self.sync_interval_ms}/{self.retention_bytes}/{self.retention_s:g}"


@message(1111)
class JournalRole(Message):
    """Monitor -> a replica of a replicated journal: what it is to be.

    ``role`` :data:`FOLLOWER`: follow the leader whose reads endpoint is ``leader`` (leading ``epoch``).
    ``role`` :data:`LEADER`: stand for ``epoch`` (ask the promises of ``peers``, name -> reads endpoint, take the
    most advanced log of a majority) and lead it, counting a majority of ``replicas`` (the names of every replica
    of the queue, itself included; a name not yet heard of counts as one that holds nothing). To the leader of that
    epoch already, with ``replicas``: the replica set changed (one lost, replaced by a learner), counted from now
    on, unless its ``version`` (the queue document's, where the set is kept) is older than the set's it counts: a
    monitor that read an older document never takes a leader back to an older set. Sent again while the replica's heartbeat shows it is not what it was told; a replica that is already what
    it is told does nothing."""

    role: str
    epoch: int
    leader: str = ""
    peers: dict[str, str] = dataclasses.field(default_factory=dict)
    replicas: list[str] = dataclasses.field(default_factory=list)
    version: int = -1
