"""Linux control groups: where the CPU controller is, a process's CPU quota and use, and groups made with one.

cgroup v2 (the unified hierarchy) is used where its ``cpu`` controller is available; otherwise v1's ``cpu``
hierarchy for the quota and ``cpuacct`` for the use (often mounted together). A host manager reads its own
group (:meth:`CpuGroup.of`): run in a container with ``--cpus`` or on an emulated host, its budget is the
quota of its group (the tightest on the path up to the mount), and its use the group's CPU time, which
no process outside the group adds to. :class:`Controller` makes and removes such groups (the emulated hosts of
the local cluster). The parsers are pure and take the text of ``/proc/<pid>/mountinfo`` and ``/proc/<pid>/cgroup``.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath

from roq.errors import ConfigError

__all__ = ["Hierarchy", "CpuGroup", "Controller", "parse_mounts", "parse_membership", "parse_cpu_max",
           "parse_cfs_quota", "cpu_hierarchies", "quota_period"]

_PERIOD_US = 100_000  # the kernel's default period of a quota
#: The period of the quotas written here: a group that used its quota waits for the next period, so a
#: tenth of a core over 100 ms runs 10 ms and stops 90; an exchange then forwards 90 ms of arrivals in one
#: burst, faster than ZeroMQ's I/O thread (stopped with it) drains them, and its subscribers' pipes
#: overflow. Over 10 ms the same share runs 1 ms in 10, closer to a small host's own core.
SHORT_PERIOD_US = 10_000
#: The smallest quota the kernel takes.
MIN_QUOTA_US = 1000


def quota_period(cores: float) -> tuple[int, int]:
    """The quota and period (microseconds) written for a budget of ``cores``: the period as short as
    :data:`SHORT_PERIOD_US` where the quota stays at least :data:`MIN_QUOTA_US`, up to the kernel's default."""
    period = min(_PERIOD_US, max(SHORT_PERIOD_US, int(MIN_QUOTA_US / cores + 0.999999)))
    return max(MIN_QUOTA_US, int(round(cores * period))), period


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """A mounted cgroup hierarchy: v1 (its controllers named in its mount options) or v2."""

    version: int
    mount: str  # where it is mounted
    root: str  # the group at the mount point ("/" unless a container sees only its own part)
    controllers: frozenset[str]

    def directory(self, group: str) -> str:
        """The directory of ``group`` (a path as ``/proc/<pid>/cgroup`` names it)."""
        rel = posixpath.relpath(group, self.root) if group.startswith(self.root) else group.lstrip("/")
        return os.path.normpath(os.path.join(self.mount, "" if rel == "." else rel))


def parse_mounts(mountinfo: str, v2_controllers: dict[str, str] | None = None) -> list[Hierarchy]:
    """The cgroup hierarchies in ``mountinfo`` (the text of ``/proc/self/mountinfo``). A v2 hierarchy's
    controllers are read from ``v2_controllers`` (mount point -> the text of its ``cgroup.controllers``)."""
    found = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, mount, fstype = fields[3], fields[4], tail[0]
        if fstype == "cgroup2":
            names = (v2_controllers or {}).get(mount, "").split()
            found.append(Hierarchy(2, mount, root, frozenset(names)))
        elif fstype == "cgroup":
            options = set(tail[2].split(","))
            found.append(Hierarchy(1, mount, root, frozenset(options & {"cpu", "cpuacct", "memory", "cpuset"})))
    return found


def parse_membership(text: str) -> dict[str, str]:
    """A process's groups from the text of ``/proc/<pid>/cgroup``: controller -> group (v2's under "")."""
    groups: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, group = parts
        if not names:
            groups[""] = group
        for name in names.split(","):
            if name:
                groups[name] = group
    return groups


def parse_cpu_max(text: str) -> float | None:
    """Cores from v2's ``cpu.max`` (``"50000 100000"`` -> 0.5; ``"max 100000"`` -> None: no quota)."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    period = int(parts[1]) if len(parts) > 1 else _PERIOD_US
    return int(parts[0]) / period


def parse_cfs_quota(quota: str, period: str) -> float | None:
    """Cores from v1's ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` (a quota of -1 -> None)."""
    q = int(quota.strip())
    return None if q < 0 else q / int(period.strip())


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _mounts() -> list[Hierarchy]:
    text = _read("/proc/self/mountinfo")
    v2 = {}
    for h in parse_mounts(text):
        if h.version == 2:
            try:
                v2[h.mount] = _read(os.path.join(h.mount, "cgroup.controllers"))
            except OSError:
                pass
    return parse_mounts(text, v2)


def cpu_hierarchies() -> tuple[Hierarchy, Hierarchy] | None:
    """The hierarchy of CPU quotas and the one of CPU use: v2's (both the same) where its ``cpu`` controller
    is available, else v1's ``cpu`` and ``cpuacct``; None if there are none (not Linux, or not mounted)."""
    try:
        mounts = _mounts()
    except OSError:
        return None
    for h in mounts:
        if h.version == 2 and "cpu" in h.controllers:
            return h, h
    quota = next((h for h in mounts if h.version == 1 and "cpu" in h.controllers), None)
    usage = next((h for h in mounts if h.version == 1 and "cpuacct" in h.controllers), None)
    return (quota, usage) if quota and usage else None


@dataclasses.dataclass(frozen=True)
class CpuGroup:
    """A process's CPU group: the tightest quota on its path (cores), and where its CPU time is counted."""

    cores: float | None  # None: no quota on its path
    where: str  # the directory holding the quota (or the group's, without one)
    usage_file: str  # v2's cpu.stat or v1's cpuacct.usage of the group

    @classmethod
    def of(cls, pid: int | str = "self") -> CpuGroup | None:
        """The CPU group of process ``pid``; None without a CPU controller."""
        found = cpu_hierarchies()
        if found is None:
            return None
        quota_h, usage_h = found
        try:
            groups = parse_membership(_read(f"/proc/{pid}/cgroup"))
        except OSError:
            return None
        key = "" if quota_h.version == 2 else "cpu"
        if key not in groups:
            return None
        directory = quota_h.directory(groups[key])
        cores, where = None, directory
        path = directory
        while True:  # the tightest quota from the group up to the mount
            q = _quota(quota_h.version, path)
            if q is not None and (cores is None or q < cores):
                cores, where = q, path
            if os.path.normpath(path) == os.path.normpath(quota_h.mount):
                break
            path = os.path.dirname(path)
        if usage_h.version == 2:
            usage = os.path.join(directory, "cpu.stat")
        else:
            usage = os.path.join(usage_h.directory(groups.get("cpuacct", "/")), "cpuacct.usage")
        return cls(cores, where, usage)

    def usage_ns(self) -> int | None:
        """CPU time used by the group's processes since it was made (ns); None if it cannot be read."""
        try:
            text = _read(self.usage_file)
        except OSError:
            return None
        if self.usage_file.endswith("cpu.stat"):
            for line in text.splitlines():
                name, _, value = line.partition(" ")
                if name == "usage_usec":
                    return int(value) * 1000
            return None
        return int(text.strip())


def _quota(version: int, directory: str) -> float | None:
    try:
        if version == 2:
            return parse_cpu_max(_read(os.path.join(directory, "cpu.max")))
        return parse_cfs_quota(_read(os.path.join(directory, "cpu.cfs_quota_us")),
                               _read(os.path.join(directory, "cpu.cfs_period_us")))
    except (OSError, ValueError):
        return None


class Controller:
    """Makes groups with a CPU quota under ``base`` (a path below the hierarchies' mount points), puts
    processes in them and removes them.

    Raises:
        ConfigError: no CPU controller is mounted.
    """

    def __init__(self, base: str) -> None:
        found = cpu_hierarchies()
        if found is None:
            raise ConfigError("no cgroup CPU controller is mounted (cgroup v2 with 'cpu', or v1 'cpu' and "
                              "'cpuacct'): CPU budgets need one")
        self.quota_h, self.usage_h = found
        self.base = base.strip("/")

    @property
    def version(self) -> int:
        return self.quota_h.version

    def _dirs(self, name: str) -> list[str]:
        rel = posixpath.join(self.base, name) if name else self.base
        mounts = dict.fromkeys([self.quota_h.mount, self.usage_h.mount])
        return [os.path.join(m, rel) for m in mounts]

    def create(self, name: str, cores: float) -> list[str]:
        """Make group ``base/name`` with a quota of ``cores``; its directories (one per hierarchy).

        The quota is a ceiling; the group also gets ``cores`` as a floor on a busy machine, as a host with that
        many cores of its own would: the groups above it (``base`` and each level of ``name``) take the
        highest weight, so that processes outside them, however many are busy, cannot starve it (the groups
        together can take no more than their quotas), and it weighs ``cores`` among its siblings.
        """
        dirs = self._dirs(name)
        for d in dirs:
            if self.version == 2:
                self._enable_cpu(os.path.dirname(d))
            os.makedirs(d, exist_ok=True)
        quota, period = quota_period(cores)
        top = self._dirs("")[0]
        d = os.path.dirname(dirs[0])
        while d.startswith(top):
            self._weigh(d, None)
            d = os.path.dirname(d)
        self._weigh(dirs[0], cores)
        if self.version == 2:
            _write(os.path.join(dirs[0], "cpu.max"), f"{quota} {period}")
        else:
            _write(os.path.join(dirs[0], "cpu.cfs_period_us"), str(period))
            _write(os.path.join(dirs[0], "cpu.cfs_quota_us"), str(quota))
        return dirs

    def _weigh(self, directory: str, cores: float | None) -> None:
        """Give a group the weight of ``cores`` among its siblings (None: the highest weight there is)."""
        if self.version == 2:  # cpu.weight: 1..10000, 100 a process's default
            weight = 10000 if cores is None else min(10000, max(1, round(100 * cores)))
            _write(os.path.join(directory, "cpu.weight"), str(weight))
        else:  # cpu.shares: 2..262144, 1024 a process's default
            shares = 262144 if cores is None else min(262144, max(2, round(1024 * cores)))
            _write(os.path.join(directory, "cpu.shares"), str(shares))

    def _enable_cpu(self, parent: str) -> None:
        """v2: let ``parent``'s children have the cpu controller (and its parents', up from the mount)."""
        mount = self.quota_h.mount
        chain = []
        d = parent
        while os.path.normpath(d) != os.path.normpath(mount) and d.startswith(mount):
            chain.append(d)
            d = os.path.dirname(d)
        for d in [mount, *reversed(chain)]:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "cgroup.subtree_control")) as f:
                if "cpu" in f.read().split():
                    continue
            _write(os.path.join(d, "cgroup.subtree_control"), "+cpu")

    def join(self, name: str, pid: int) -> None:
        """Move process ``pid`` into group ``base/name`` (in every hierarchy)."""
        for d in self._dirs(name):
            _write(os.path.join(d, "cgroup.procs"), str(pid))

    def members(self, name: str = "") -> list[int]:
        """The processes in group ``base/name`` and the groups below it."""
        pids: set[int] = set()
        for top in self._dirs(name):
            for d, _, _ in os.walk(top):
                try:
                    pids.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split())
                except OSError:
                    continue
        return sorted(pids)

    def children(self, name: str = "") -> list[str]:
        """The names of the groups right under ``base/name``."""
        top = self._dirs(name)[0]
        try:
            return sorted(e.name for e in os.scandir(top) if e.is_dir())
        except FileNotFoundError:
            return []

    def remove(self, name: str = "") -> None:
        """Remove group ``base/name`` and every group below it (they must hold no process)."""
        for top in self._dirs(name):
            if not os.path.isdir(top):
                continue
            for d, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    pass


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)
