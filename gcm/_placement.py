"""Where exchanges and monitors go, and where the slots of a lost host go. Pure logic on a :class:`View`.

A host can take an exchange of queue ``q`` when it is registered, has a free slot (its ``max_exchanges``
over every queue), holds fewer than ``q``'s ``max_exchanges_per_host``, and its CPU, memory and link are within
``q``'s ``host_cpu_percent`` / ``host_memory_percent`` / ``host_net_percent`` (a host's CPU % is of its own
budget: the cores of its cgroup's quota or container, else of the machine; its network % is of its link's rate,
0 when unknown). Among those the choice spreads the queue over hosts first, then takes the most headroom (the
cores of its budget it does not use, in tenths of a core, so that equal hosts a few percent apart count as
equal), the least busy link (in tenths), the most free slots, the lowest memory %, the lowest address. A
new queue (an operator's explicit request, with no rules yet) only prefers hosts within the default limits:
a cluster whose every host is busy still creates it, on the least busy host with a free slot. A
:class:`Placer` counts every placement it decided for the next choice, so several exchanges placed in one
decision spread as if placed one after the other: a queue created anywhere with N exchanges goes to N
hosts when N hosts have room (:meth:`Placer.spread`), its monitor beside its first exchange.

A placement an operator asks for on a named host (create on a host, create an exchange on a host) is not
held to the CPU and memory limits, but it cannot exceed the host's ``max_exchanges`` (nor, for one more
exchange of an existing queue, the queue's ``max_exchanges_per_host``): :meth:`Placer.room` says why not.
A new queue created on a named host takes all its exchanges there and needs room for all N.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Iterable, Mapping

from gcm._view import HostView, QueueView, View
from roq.wire.documents import MONITOR, REMOVING, RUNNING
from roq.rules import DEFAULT_RULES

__all__ = ["Placer", "Move", "Blocked", "choose_host", "explain_no_host", "plan_replacements", "slot_order"]


def slot_order(slot: str) -> tuple[int, str]:
    """Sort key of exchange slots: x2 before x10."""
    match = re.fullmatch(r"x(\d+)", slot)
    return (int(match.group(1)), slot) if match else (1 << 62, slot)


class Placer:
    """Placement decisions on one view, each one counted for the next."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.assigned = view.assigned()  # host -> exchanges of every queue not being removed
        self._of_queue: dict[tuple[str, str], int] = {}  # (queue, host) -> its exchanges there
        self._monitors: dict[str, int] = {}  # host -> monitors of queues not being removed
        for q in view.queues.values():
            if q.state == REMOVING:
                continue
            for host in q.placement.values():
                self._of_queue[(q.name, host)] = self._of_queue.get((q.name, host), 0) + 1
            if q.state == RUNNING and q.host:
                self._monitors[q.host] = self._monitors.get(q.host, 0) + 1

    def of_queue(self, queue: str, host: str) -> int:
        return self._of_queue.get((queue, host), 0)

    def free(self, host: HostView) -> int:
        """Exchange slots of ``host`` not placed yet (over every queue); below 0 when over-placed."""
        return host.max_exchanges - self.assigned.get(host.address, 0)

    def room(self, host: HostView, queue: QueueView | None, count: int = 1) -> str:
        """Why ``host`` has no room for ``count`` more exchanges of ``queue`` (None: of a new queue) by
        capacity alone: its ``max_exchanges``, and ``queue``'s ``max_exchanges_per_host``; "" if it has."""
        used, most, free = self.assigned.get(host.address, 0), host.max_exchanges, self.free(host)
        if free <= 0:
            return f"full ({used}/{most})"
        if free < count:
            return f"has room for {free} of the {count} exchanges asked ({used}/{most} placed)"
        if queue is not None:
            mine, per_host = self.of_queue(queue.name, host.address), int(queue.rules["max_exchanges_per_host"])
            if mine + count > per_host:
                return f"holds {mine} of {queue.name}'s exchanges (max_exchanges_per_host {per_host})"
        return ""

    def refusal(self, host: HostView, queue: QueueView | None) -> str:
        """Why ``host`` cannot take one more exchange of ``queue`` (None: a new queue); "" if it can."""
        return self.room(host, queue) or (self.overloaded(host, queue.rules) if queue is not None else "")

    @staticmethod
    def overloaded(host: HostView, rules: Mapping[str, Any]) -> str:
        """Why ``host`` is above the CPU, memory or network limit of ``rules``; "" if it is not."""
        if host.cpu_percent > float(rules["host_cpu_percent"]):
            return f"CPU {host.cpu_percent:.0f}% > {float(rules['host_cpu_percent']):.0f}%"
        if host.memory_percent > float(rules["host_memory_percent"]):
            return f"memory {host.memory_percent:.0f}% > {float(rules['host_memory_percent']):.0f}%"
        if host.net_percent > float(rules["host_net_percent"]):
            return f"link {host.net_percent:.0f}% > {float(rules['host_net_percent']):.0f}%"
        return ""

    def choose(self, queue: QueueView | None = None, *, exclude: Iterable[str] = ()) -> str | None:
        """The best host for one more exchange of ``queue`` (None: the first of a new queue), or None if none
        can."""
        skip = set(exclude)
        return self._pick(queue.name if queue is not None else "", queue is None,
                          lambda h: h.address not in skip and not self.refusal(h, queue))

    def spread(self, name: str, count: int) -> list[str] | None:
        """The hosts of the ``count`` exchanges of a new queue ``name``, spread over as many hosts as have a
        free slot (each placement counted); None if the free slots of every host together are fewer."""
        if sum(max(0, self.free(h)) for h in self.view.hosts.values()) < count:
            return None
        hosts = []
        for _ in range(count):
            host = self._pick(name, True, lambda h: not self.room(h, None))
            assert host is not None  # there were enough free slots
            hosts.append(host)
            self.place(name, host)
        return hosts

    def _pick(self, name: str, new: bool, eligible: Callable[[HostView], bool]) -> str | None:
        """The best of the ``eligible`` hosts for an exchange of queue ``name``: (a new queue: within the default
        limits first) the fewest of ``name``'s exchanges, the most headroom (tenths of a core), the least busy
        link (tenths), the most free slots, the least memory, the lowest address."""
        ranked = [((new and bool(self.overloaded(h, DEFAULT_RULES))), self.of_queue(name, h.address),
                   -round(h.headroom, 1), round(h.net_percent, -1), -self.free(h), h.memory_percent, h.address)
                  for h in self.view.hosts.values() if eligible(h)]
        return min(ranked)[-1] if ranked else None

    def slots(self) -> str:
        """Every host's exchange slots in use: ``"5 free in all (127.0.0.11: 3/8 placed; 127.0.0.12: 4/4 placed)"``."""
        if not self.view.hosts:
            return "no host manager is registered"
        free = sum(max(0, self.free(h)) for h in self.view.hosts.values())
        each = "; ".join(f"{a}: {self.assigned.get(a, 0)}/{h.max_exchanges} placed" for a, h in sorted(self.view.hosts.items()))
        return f"{free} free in all ({each})"

    def explain(self, queue: QueueView | None = None, *, exclude: Iterable[str] = ()) -> str:
        """Why no host can take an exchange: ``"127.0.0.11: full (4/4); 127.0.0.12: CPU 97% > 90%"``."""
        skip = set(exclude)
        reasons = [f"{a}: {self.refusal(h, queue) or 'excluded'}"
                   for a, h in sorted(self.view.hosts.items()) if a not in skip]
        return "; ".join(reasons) if reasons else "no host manager is registered"

    def choose_monitor(self, queue: QueueView, *, exclude: Iterable[str] = ()) -> str | None:
        """A live host for ``queue``'s monitor: within the queue's CPU and memory limits if any host is, then
        the fewest monitors, the lowest CPU %, memory %, address."""
        skip = set(exclude)
        rules = queue.rules
        best: tuple[bool, int, float, float, str] | None = None
        for host in self.view.hosts.values():
            if host.address in skip:
                continue
            over = bool(self.overloaded(host, rules))
            key = (over, self._monitors.get(host.address, 0), host.cpu_percent, host.memory_percent, host.address)
            if best is None or key < best:
                best = key
        return best[-1] if best else None

    def choose_link(self, queue: QueueView, links: Mapping[str, int]) -> str | None:
        """A live host for ``queue``'s link to the parent cluster (``links``: how many each host runs already):
        within the queue's CPU, memory and network limits if any host is, then the fewest links, the most headroom
        (tenths of a core), the least busy network (tenths), the least memory, the lowest address."""
        ranked = [(bool(self.overloaded(h, queue.rules)), links.get(h.address, 0), -round(h.headroom, 1),
                   round(h.net_percent, -1), h.memory_percent, h.address) for h in self.view.hosts.values()]
        return min(ranked)[-1] if ranked else None

    def place(self, queue: str, host: str, source: str | None = None) -> None:
        """Count an exchange of ``queue`` placed on ``host`` (moved off ``source``, if given)."""
        self.assigned[host] = self.assigned.get(host, 0) + 1
        self._of_queue[(queue, host)] = self.of_queue(queue, host) + 1
        if source is not None:
            self.assigned[source] = max(0, self.assigned.get(source, 0) - 1)
            self._of_queue[(queue, source)] = max(0, self.of_queue(queue, source) - 1)

    def place_monitor(self, host: str, source: str | None = None) -> None:
        self._monitors[host] = self._monitors.get(host, 0) + 1
        if source is not None:
            self._monitors[source] = max(0, self._monitors.get(source, 0) - 1)


def choose_host(view: View, queue: QueueView | None = None, *, exclude: Iterable[str] = ()) -> str | None:
    """The host that should take one more exchange of ``queue`` (None: the first of a new queue, judged by
    capacity and the default CPU and memory limits); None if no host can (see :func:`explain_no_host`)."""
    return Placer(view).choose(queue, exclude=exclude)


def explain_no_host(view: View, queue: QueueView | None = None, *, exclude: Iterable[str] = ()) -> str:
    """Every host's reason not to take one more exchange of ``queue``, in one line."""
    return Placer(view).explain(queue, exclude=exclude)


@dataclasses.dataclass(frozen=True)
class Move:
    """Slot ``slot`` of ``queue`` (an exchange ``x3``, or ``monitor``) goes from ``source`` to ``target``."""

    queue: str
    slot: str
    source: str
    target: str


@dataclasses.dataclass(frozen=True)
class Blocked:
    """Slot ``slot`` of ``queue`` stays on lost host ``source``: ``why`` no live host can take it."""

    queue: str
    slot: str
    source: str
    why: str


def plan_replacements(view: View, lost: Iterable[str], queues: Iterable[str] | None = None) -> tuple[list[Move], list[Blocked]]:
    """Where the exchange slots and monitors of running queues on ``lost`` hosts go.

    Args:
        view: the topology; the lost hosts are normally no longer registered in it.
        lost: hosts whose slots must move; never chosen as a target.
        queues: only these queues (default: every running queue).

    Returns:
        The moves (queues by name, slots in order, each counted for the next choice) and the slots that no
        live host can take, with the reasons.
    """
    dead = set(lost)
    placer = Placer(view)
    names = sorted(view.queues) if queues is None else sorted(set(queues) & set(view.queues))
    moves: list[Move] = []
    blocked: list[Blocked] = []
    for name in names:
        q = view.queues[name]
        if q.state != RUNNING:
            continue
        for slot in sorted((s for s, h in q.placement.items() if h in dead), key=slot_order):
            source = q.placement[slot]
            target = placer.choose(q, exclude=dead)
            if target is None:
                blocked.append(Blocked(name, slot, source, placer.explain(q, exclude=dead)))
                continue
            placer.place(name, target, source)
            moves.append(Move(name, slot, source, target))
        if q.host in dead:
            target = placer.choose_monitor(q, exclude=dead)
            if target is None:
                blocked.append(Blocked(name, MONITOR, q.host, "no live host manager is registered"))
            else:
                placer.place_monitor(target, q.host)
                moves.append(Move(name, MONITOR, q.host, target))
    return moves, blocked
