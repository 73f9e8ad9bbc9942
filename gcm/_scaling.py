"""Scale-out and exchange removal (2017, 2018): a queue's exchange slots added or taken away.

Both are asked for by the queue's monitor (or an operator) and are idempotent, so a request repeated after
a lost reply or a GCM fail-over changes nothing twice: a scale-out names the total it wants, a removal the
slot. Each is one ZooKeeper transaction (the queue node with a version check, and the assignments) and is
answered once stored, not when the processes have started or stopped: the monitor sees them come and go.
"""

from __future__ import annotations

from typing import Any, Callable

from kazoo.client import KazooClient

from gcm._events import EventLog
from gcm._placement import Placer, slot_order
from gcm._view import RUNNING, QueueView, View
from roq.control import Result
from roq.errors import ConfigError
from roq.zk import Paths, dumps, exchange_slot

__all__ = ["Scaling", "MAX_AT_ONCE"]

MAX_AT_ONCE = 64  # most exchanges one request may add

Reply = tuple[int, str, dict[str, Any]]


class Scaling:
    """Carries out scale-out and removal requests on the leader's view.

    Args:
        zk, paths: where the topology lives.
        events: where decisions are recorded.
        commit: runs ``ops(transaction)`` as one ZooKeeper transaction, raising its first error.
    """

    def __init__(self, zk: KazooClient, paths: Paths, events: EventLog,
                 commit: Callable[[Callable[[Any], None]], None]) -> None:
        self.zk = zk
        self.paths = paths
        self.events = events
        self.commit = commit

    def scale_out(self, view: View, q: QueueView, wanted: int, reason: str) -> Reply:
        """Place exchanges until ``q`` has ``wanted`` (as many as fit).

        Raises:
            ConfigError: ``wanted`` is below 1 or adds more than :data:`MAX_AT_ONCE` at once.
            KazooException: the transaction failed (e.g. the queue changed meanwhile): nothing was stored.
        """
        if wanted < 1:
            raise ConfigError(f"Exchanges must be at least 1, got {wanted}")
        have = len(q.placement)
        if q.state != RUNNING:
            return Result.UNAVAILABLE, f"queue {q.name!r} is {q.state}", {}
        if wanted <= have:
            return Result.OK, f"already {have} placed", {"Placed": [], "Exchanges": have}
        most = int(q.rules["max_exchanges"])
        if wanted > most:
            return (Result.BAD_REQUEST,
                    f"queue {q.name!r} may have at most {most} exchanges (rule max_exchanges); "
                    f"{wanted} asked, {have} placed", {})  # fmt: skip
        if wanted - have > MAX_AT_ONCE:
            raise ConfigError(f"at most {MAX_AT_ONCE} exchanges can be added at once, asked for {wanted - have}")
        placer = Placer(view)
        numbers = [slot_order(x)[0] for x in q.placement if slot_order(x)[0] < 1 << 62]
        first = max(q.next_exchange, max(numbers, default=0) + 1)
        placed: list[tuple[str, str]] = []
        while have + len(placed) < wanted:
            host = placer.choose(q)
            if host is None:
                break
            placer.place(q.name, host)
            placed.append((f"x{first + len(placed)}", host))
        if not placed:
            return Result.UNAVAILABLE, f"queue {q.name!r}: no host can take an exchange: {placer.explain(q)}", {}
        placement = {**q.placement, **dict(placed)}
        paths = self.paths
        for host in {h for _, h in placed}:
            self.zk.ensure_path(paths.host_assignments(host))
        data = {"state": q.state, "host": q.host, "placement": placement, "next_exchange": first + len(placed)}

        def ops(t: Any) -> None:
            t.set_data(paths.queue(q.name), dumps(data), version=q.version)
            for xid, host in placed:
                t.create(paths.assignment(host, q.name, xid), b"")

        self.commit(ops)
        where = ", ".join(f"{x} on {h}" for x, h in placed)
        short = wanted - have - len(placed)
        missing = f"; {short} more did not fit ({placer.explain(q)})" if short else ""
        self.events.record(
            q.name, "exchange_placed",
            f"scale-out to {wanted} exchanges{f' ({reason})' if reason else ''}: placed {where}; "
            f"{have} -> {len(placement)} exchanges{missing}",
            reason=reason, hosts=",".join(h for _, h in placed), placed=",".join(x for x, _ in placed),
            exchanges=len(placement), previous=have, wanted=wanted,
        )  # fmt: skip
        return (Result.OK, f"placed {where}{missing}",
                {"Placed": [{"Exchange": x, "Host": h} for x, h in placed], "Exchanges": len(placement)})

    def remove(self, q: QueueView, name: str, reason: str) -> Reply:
        """Take exchange slot ``name`` (or the slot of an incarnation name, ``x3-1a2b``) out of ``q``.

        Raises:
            ConfigError: ``name`` is empty.
            KazooException: the transaction failed: nothing was stored.
        """
        slot = exchange_slot(name.strip())
        if not slot:
            raise ConfigError("Exchange must name an exchange slot such as 'x3'")
        have = len(q.placement)
        if slot not in q.placement:
            return Result.OK, f"exchange {slot} of {q.name!r} already gone", {"Exchange": slot, "Exchanges": have}
        least = int(q.rules["min_exchanges"])
        if have - 1 < least:
            return (Result.BAD_REQUEST,
                    f"removing {slot} would leave {have - 1} exchanges, below min_exchanges {least}", {})  # fmt: skip
        host = q.placement[slot]
        placement = {x: h for x, h in q.placement.items() if x != slot}
        assignment = self.paths.assignment(host, q.name, slot)
        doomed = self.zk.exists(assignment) is not None
        data = {"state": q.state, "host": q.host, "placement": placement, "next_exchange": q.next_exchange}

        def ops(t: Any) -> None:
            t.set_data(self.paths.queue(q.name), dumps(data), version=q.version)
            if doomed:
                t.delete(assignment)

        self.commit(ops)
        self.events.record(
            q.name, "exchange_removed",
            f"exchange {slot} removed from {host}{f' ({reason})' if reason else ''}: {have} -> {len(placement)} exchanges",
            reason=reason, exchange=slot, host=host, exchanges=len(placement), previous=have,
        )  # fmt: skip
        return (Result.OK, f"exchange {slot} removed from {host}",
                {"Exchange": slot, "Host": host, "Exchanges": len(placement)})
