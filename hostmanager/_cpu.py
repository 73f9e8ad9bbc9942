"""The host's CPU budget and its use of it.

The budget is what the host can give its processes, in cores: the ``cpus`` setting if given, else the quota of
the host manager's cgroup (a container run with ``--cpus``, an emulated host of the local cluster), else the
machine's cores. The use is measured where it is counted best: the cgroup's own CPU time when the host
manager runs under a quota (nothing outside the group adds to it, however busy the machine), the CPU time of
its process tree when only the setting gives a budget, the machine's CPU otherwise (a host of its own).
"""

from __future__ import annotations

import os
import time

import psutil

from roq.cgroups import CpuGroup

__all__ = ["CpuMeter", "process_tree"]


class CpuMeter:
    """Reads the host's CPU use as a percentage of its budget, since the previous reading.

    Args:
        cpus: the budget in cores (0 = the cgroup's quota, else the machine's cores).
    """

    def __init__(self, cpus: float = 0.0) -> None:
        group = CpuGroup.of()
        quota = group.cores if group is not None else None
        self.cores = cpus if cpus > 0 else quota if quota else float(psutil.cpu_count() or 1)
        self._group = group if quota and group is not None and group.usage_ns() is not None else None
        self._machine = self._group is None and cpus <= 0  # the machine's CPU is the host's
        if self._group is not None:
            self.source = f"cgroup {self._group.where} (quota {quota:g} cores)"
        else:
            self.source = "the machine" if self._machine else "the host manager's processes"
        self._last = (time.monotonic(), 0.0 if self._machine else self._used())
        psutil.cpu_percent(None)  # the machine's reading counts from here

    def percent(self) -> float:
        """The CPU used since the last call, in % of the budget (may exceed 100 briefly: a quota is enforced
        per period of the kernel's, and a process tree is read at two instants)."""
        if self._machine:
            return psutil.cpu_percent(None)
        now, used = time.monotonic(), self._used()
        then, before = self._last
        self._last = (now, used)
        if now <= then:
            return 0.0
        return max(0.0, 100.0 * (used - before) / (now - then) / self.cores)

    def _used(self) -> float:
        """CPU seconds used so far by the group, or else by the host manager's process tree."""
        if self._group is not None:
            return (self._group.usage_ns() or 0) / 1e9
        total = 0.0
        for pid in process_tree(os.getpid()):
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue  # gone since listed: its time is now its parent's children_*
            total += t.user + t.system + t.children_user + t.children_system
        return total


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it, from the kernel's list of each task's children: the tree's
    own files, where psutil's ``children(recursive=True)`` reads every process of the machine (10-20 ms a call
    on a busy machine, each KPI period). Where the kernel keeps no such list, psutil's way."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        return _psutil_tree(pid)  # a kernel without the lists (or no such process)
    tree, todo = [pid], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # gone
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue  # the task ended
            tree += kids
            todo += kids
    return tree


def _psutil_tree(pid: int) -> list[int]:
    try:
        me = psutil.Process(pid)
        return [pid, *(p.pid for p in me.children(recursive=True))]
    except psutil.Error:
        return [pid]
