"""Who leads a replicated journal, and when another stands (pure).

A durable queue whose rules say ``replicas`` above 1 has that many journal replicas, one per host (the GCM places
them). Each reports to the monitor like a journal (:class:`~roq.wire.control.JournalHeartbeat`, with its name, its
role, the epoch it promised and where its log ends). The monitor names the leader: it is the one that stands, not
a vote among the replicas, because it already hears every process of the queue and so sees a leader gone within
one ``journal_timeout``. What makes it safe is not the monitor but the replicas' promises
(:mod:`exchange.journal._replication`): a replica promises each epoch once, so two candidates never both win one,
and an old leader cut off can get nothing acknowledged once a majority promised a newer epoch. A monitor that is
wrong (two of them for a moment, one that misses a live leader) costs an election, never a record.

:class:`Replicas` decides, on each heartbeat of a replica and on a timer:

* a live leader of the newest epoch heard: every other live replica that does not follow it is told to
  (:class:`~roq.wire.control.JournalRole`, again at most every :data:`RETELL_S`);
* no such leader (none yet, it went silent, it was fenced, or for a whole timeout it reached too few followers
  for a majority while enough other replicas are live: cut off from them, it can acknowledge nothing, and it
  stands last): once the monitor has heard the replicas for a
  whole timeout (a live leader's heartbeat may be on its way) and a majority of the replicas is live, a live one
  stands for the next epoch (the newest promised, plus one), with every replica heard of as a peer. One off the
  monitor's own host first: losing that host then loses only one of the two, and the next election does not wait
  for the GCM to move the monitor. Then the most advanced (highest last epoch, then end): the candidate takes the
  most advanced log of those that promise anyway (:func:`~exchange.journal._replicas.elect`), so the order only
  spares it a copy. A candidate has :data:`ELECTION_S` to win; then another stands, one not passed over first.

Every election is an event with its reason.

**The replica set** is the queue's document's (:attr:`~roq.wire.documents.QueueDoc.journal_replicas`, from the
GCM): elections count a majority of it, and a live leader that counts another set is told it. A member silent for
the rule ``replica_replace_s`` while a live leader reaches a majority and the other members that vote are a majority is
replaced (:class:`~roq.wire.management.ReplaceReplica`: the GCM refuses while its host is live, and puts a new one
on another host, a *learner*). One at a time: nothing more is replaced while a learner of the document has not
said it votes; once it does (its heartbeat), the GCM is told (:class:`~roq.wire.management.AdmitReplica`) and the
time from the lost member's last heartbeat to then is an event.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Mapping

from monitor._outbox import Outbox
from roq.wire import control
from roq.wire import management as m
from roq.wire.control import Reply
from roq.wire.status import ReplicaStatus

__all__ = ["Replicas", "RETELL_S", "ELECTION_S", "wanted"]

log = logging.getLogger(__name__)

#: least seconds between two orders to one replica that has not done what it was told
RETELL_S = 0.5
#: seconds the first election waits for every replica to be heard of (one not heard of is not counted by the leader)
FIRST_WAIT_S = 5.0
#: seconds a candidate has to win its epoch (its promises wait 2 s at most) before another stands
ELECTION_S = 2.5
#: seconds between two requests to the GCM about the replica set that were refused or not answered
RETRY_S = 2.0


def wanted(rules: Mapping[str, Any]) -> int:
    """The replica count the rules ask for (1 = an unreplicated journal)."""
    return int(rules.get("replicas", 1)) if rules.get("durability", "none") != "none" else 1


def majority(n: int) -> int:
    return n // 2 + 1


@dataclasses.dataclass
class _Replica:
    hb: control.JournalHeartbeat
    identity: bytes
    heard_at: float
    told_at: float = -1e9


class Replicas:
    """The replicas of the queue's journal as the monitor hears them, and who it names leader.

    Args:
        outbox: where orders and events go.
        rules: the rules in force (``replicas``, ``durability``).
        timeout: a replica silent this long is taken for gone.
        own_host: the monitor's host (its address): among equals, a replica elsewhere stands.
    """

    def __init__(self, outbox: Outbox, rules: Callable[[], Mapping[str, Any]], timeout: float,
                 own_host: str = "", queue: str = "") -> None:
        self.outbox = outbox
        self.queue = queue
        self.members: list[str] = []  # the document's replica set ([]: not known, the replicas heard of)
        self.learners: set[str] = set()  # of those, the ones placed as learners the document still names
        self.version = -1  # the document's version: a leader takes no set older than the one it counts
        self.admitted: set[str] = set()  # learners the GCM admitted, until the document says so
        self.named: dict[str, float] = {}  # each member of the set: when this monitor first saw it named
        self.asking = ""  # a request about the set the GCM has not answered yet
        self.retry_at = 0.0
        self.lost_at: float | None = None  # when the member last replaced was last heard (for the time it took)
        self.rules = rules
        self.timeout = timeout
        self.own_host = own_host
        self.known: dict[str, _Replica] = {}
        self.since: float | None = None  # when the first replica was heard: no election for a timeout after
        self.candidate: tuple[str, int, float] | None = None  # (name, epoch, until) of the one standing
        self.passed: set[str] = set()  # replicas passed over: one that did not win in time, a leader out of reach
        self.elections = 0
        self.leader_name = ""
        self._short = False  # a majority is not live: said once
        self._unreached: tuple[tuple[str, int], float] | None = None  # (leader, epoch) reaching no majority, since

    def heartbeat(self, hb: control.JournalHeartbeat, identity: bytes, now: float) -> None:
        r = self.known.get(hb.replica)
        if r is None:
            self.known[hb.replica] = _Replica(hb, identity, now)
        else:
            if hb.repairs > r.hb.repairs and hb.incarnation == r.hb.incarnation:
                self.outbox.event("journal_repaired", f"replica {hb.replica} found a damaged sealed segment and "
                                  f"rewrote it from another replica's copy ({hb.repairs} since it started)",
                                  replica=hb.replica, repairs=hb.repairs)
            r.hb, r.identity, r.heard_at = hb, identity, now
        if self.since is None:
            self.since = now
        self.decide(now)

    def adopt(self, replicas: tuple[str, ...], learners: tuple[str, ...], version: int = -1) -> None:
        """The queue's document (of ``version``) names the replica set ``replicas``, ``learners`` among them."""
        self.members = list(replicas)
        self.learners = set(learners) & set(replicas)
        self.version = version
        self.admitted &= self.learners

    def _voters(self, live: dict[str, _Replica]) -> dict[str, _Replica]:
        """The live replicas that vote: members of the set (when it is known), not learners."""
        return {n: r for n, r in live.items() if not r.hb.learner and (not self.members or n in self.members)}

    def discount(self, late: float) -> None:
        """The monitor did not run for ``late`` seconds: nobody's silence."""
        for r in self.known.values():
            r.heard_at += late

    def _live(self, now: float) -> dict[str, _Replica]:
        return {n: r for n, r in self.known.items() if now - r.heard_at < self.timeout}

    def leader(self, now: float) -> control.JournalHeartbeat | None:
        """The live leader of the newest epoch heard, if there is one (a member of the set, when it is known)."""
        top = max((r.hb.epoch for r in self.known.values()), default=0)
        for n, r in self._live(now).items():
            if r.hb.role == control.LEADER and r.hb.epoch == top and (not self.members or n in self.members):
                return r.hb
        return None

    @property
    def active(self) -> bool:
        """The queue's journal is replicated and replicas were heard: :meth:`decide` is timed by the tick."""
        return bool(self.known) and wanted(self.rules()) >= 2

    def decide(self, now: float) -> None:
        """Tell the replicas what to be (see the module)."""
        count = wanted(self.rules())
        if count < 2 or not self.known:
            return
        live = self._live(now)
        lead = self.leader(now)
        if lead is not None and self._out_of_reach(lead, live, count, now):
            self.passed.add(lead.replica)  # it cannot reach a majority: another stands
            lead = None
        if lead is not None:
            self.candidate = None
            self.passed.clear()
            self._short = False
            if lead.replica != self.leader_name:
                self.leader_name = lead.replica
                self.outbox.event("journal_leader", f"replica {lead.replica} leads epoch {lead.epoch} of the queue's "
                                  f"journal (intake {lead.intake})", replica=lead.replica, epoch=lead.epoch)
            for name, r in live.items():
                if name == lead.replica or (r.hb.role == control.FOLLOWER and r.hb.leader == lead.reads):
                    continue
                if self.members and name not in self.members:
                    continue  # replaced: no longer one of the set
                if now - r.told_at >= RETELL_S:
                    r.told_at = now
                    self.outbox.send(r.identity, control.JournalRole(role=control.FOLLOWER, epoch=lead.epoch,
                                                                     leader=lead.reads))
            members = self.members
            if members and lead.replica in members and sorted(lead.followers) != sorted(members):
                r = self.known[lead.replica]
                if now - r.told_at >= RETELL_S:  # the set changed: the leader counts the new one
                    r.told_at = now
                    self.outbox.send(r.identity, control.JournalRole(role=control.LEADER, epoch=lead.epoch,
                                                                     replicas=list(members), version=self.version))
            self._repair(lead, live, count, now)
            return
        if self.candidate is not None:
            if now < self.candidate[2]:
                return  # the one standing has not won yet
            self.passed.add(self.candidate[0])  # it did not win in time: another stands first
        assert self.since is not None
        if now - self.since < self.timeout:
            return  # a live leader's heartbeat may be on its way
        if not self.leader_name and len(self.known) < count and now - self.since < FIRST_WAIT_S:
            return  # the first leader: the replicas still starting are given a moment to be counted
        voters = self._voters(live)
        if len(voters) < majority(count):
            if not self._short:
                self._short = True
                self.outbox.event("journal_unavailable", f"{len(live)} of the journal's {count} replicas are live: "
                                  f"no leader can be elected until {majority(count)} are; nothing is acknowledged",
                                  live=sorted(live), replicas=count)
            return
        top = max(r.hb.epoch for r in self.known.values())
        name, r = max(voters.items(), key=lambda item: (item[0] not in self.passed,
                                                      _host(item[1].hb.intake) != self.own_host,
                                                      item[1].hb.last_epoch, item[1].hb.end, item[0]))
        epoch = top + 1
        if self.members:
            names = list(self.members)
        else:  # (no document: a monitor outside a cluster)
            names = sorted(self.known)[:count]
            if name not in names:
                names = [*names[:count - 1], name]
            names += [f"?{i}" for i in range(count - len(names))]  # not heard of yet: holds nothing
        peers = {n: x.hb.reads for n, x in self.known.items() if n != name and x.hb.reads and n in names}
        self.candidate = (name, epoch, now + ELECTION_S)
        self.elections += 1
        r.told_at = now
        self.outbox.send(r.identity, control.JournalRole(role=control.LEADER, epoch=epoch, peers=peers,
                                                         replicas=names, version=self.version))
        previous = self.known.get(self.leader_name)
        why = ("no replica leads yet" if not self.leader_name else
               f"leader {self.leader_name} silent for {now - previous.heard_at:.1f}s"
               if previous is not None and now - previous.heard_at >= self.timeout else
               f"leader {self.leader_name} reaches {previous.hb.reached} of its followers, too few for a majority"
               if previous is not None and previous.hb.role == control.LEADER and previous.hb.epoch == top else
               f"leader {self.leader_name} no longer leads the newest epoch")
        self.outbox.event("journal_election", f"{why}: replica {name} (log to {r.hb.end}, last epoch "
                          f"{r.hb.last_epoch}) stands for epoch {epoch}, {len(live)} of {count} replicas live",
                          replica=name, epoch=epoch, reason=why)

    def _repair(self, lead: control.JournalHeartbeat, live: dict[str, _Replica], count: int, now: float) -> None:
        """With a live leader: a learner that votes now is admitted; else one member gone for the rule
        ``replica_replace_s`` is replaced, if the others that vote are a majority (see the module)."""
        after = float(self.rules().get("replica_replace_s", 0.0))
        if not self.members or not self.queue or self.asking or now < self.retry_at:
            return
        for name in sorted(self.learners - self.admitted):
            r = live.get(name)
            if r is None or r.hb.learner:
                continue
            self._admit(name, lead.epoch, now)
            return
        if lead.reached + 1 < majority(count) or not after:
            return
        for name in self.members:
            self.named.setdefault(name, now)  # (one never heard of is given its time from here)
        # one at a time: while a learner has not caught up, only it may be replaced (it never voted)
        for name in sorted(self.learners) if self.learners else self.members:
            r = self.known.get(name)
            heard = r.heard_at if r is not None else self.named[name]
            if name == lead.replica or now - heard < after:
                continue
            voting = sum(1 for n in self._voters(live) if n != name)
            if voting < majority(count):
                return
            why = (f"replica {name} silent for {now - heard:.1f}s" if r is not None else
                   f"replica {name} not heard of in {now - heard:.1f}s")
            if name not in self.learners:  # (a learner replaced: the time still counts from the member lost)
                self.lost_at = heard
            self._ask(m.ReplaceReplica(QName=self.queue, Replica=name, Reason=why), f"replace replica {name}", now)
            return

    def _admit(self, name: str, epoch: int, now: float) -> None:
        """The learner ``name`` votes: the GCM is told (the document names it a learner no more), and once it
        agreed, the time it took from the lost member's last heartbeat is an event."""
        lost = self.lost_at

        def admitted() -> None:
            self.admitted.add(name)
            self.lost_at = None
            took = f", {now - lost:.1f}s after the replica it replaced was last heard" if lost is not None else ""
            self.outbox.event("journal_rereplicated", f"replica {name} holds what the leader of epoch {epoch} "
                              f"committed and votes: the journal has its {len(self.members)} replicas again{took}",
                              replica=name, took_s=round(now - lost, 3) if lost is not None else None)

        self._ask(m.AdmitReplica(QName=self.queue, Replica=name), f"admit replica {name}", now, admitted)

    def _ask(self, msg: control.Message, what: str, now: float, done: Callable[[], None] | None = None) -> None:
        self.asking = what

        def answered(reply: Reply | None, why: str, at: float) -> None:
            self.asking = ""
            if reply is not None and reply.ok:
                if done is not None:
                    done()
                return
            self.retry_at = at + RETRY_S  # the GCM may refuse (the host is live yet) or not answer: asked again
            log.info("queue %s: the GCM did not %s: %s", self.queue, what,
                     f"{reply.result}: {reply.comment}" if reply is not None else why)

        self.outbox.ask(msg, what, answered)

    def _out_of_reach(self, lead: control.JournalHeartbeat, live: dict[str, _Replica], count: int, now: float) -> bool:
        """Whether the live leader has reached too few followers for a majority for a whole timeout, while enough
        others are live to elect one of them (cut off from its followers, it can acknowledge nothing)."""
        if lead.reached + 1 >= majority(count):
            self._unreached = None
            return False
        key = (lead.replica, lead.epoch)
        if self._unreached is None or self._unreached[0] != key:
            self._unreached = (key, now)
        others = sum(1 for n in self._voters(live) if n != lead.replica)
        return now - self._unreached[1] >= self.timeout and others >= majority(count)

    def describe(self, now: float) -> list[ReplicaStatus]:
        """Each replica as the queue's status shows it (lag and in-sync as its leader counted them)."""
        lead = self.leader(now)
        out = []
        for n, r in sorted(self.known.items()):
            if self.members and n not in self.members:
                continue  # replaced: no longer the queue's
            held = r.hb.end if lead is None or n == lead.replica else lead.followers.get(n, 0)
            out.append(ReplicaStatus(replica=n, role=r.hb.role, pid=r.hb.pid, epoch=r.hb.epoch, end=r.hb.end, intake=r.hb.intake,
                                     alive=now - r.heard_at < self.timeout, silent_s=round(now - r.heard_at, 3),
                                     lag=max(0, lead.end - held) if lead is not None else 0,
                                     in_sync=lead is not None and held >= lead.committed, learner=r.hb.learner))
        return out


def _host(endpoint: str) -> str:
    """The address of ``tcp://address:port``."""
    return endpoint.rpartition("//")[2].rpartition(":")[0]
