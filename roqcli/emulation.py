"""Emulated hosts: each host of the local cluster with its own CPU budget and, optionally, its own network link.

* **CPU**: each host manager (and so every exchange and monitor it starts) runs in a cgroup of its own with
  a CPU quota (:class:`roq.cgroups.Controller`: v2 where its cpu controller is available, v1 otherwise). The
  host manager reads its budget and use from that group, as it would in a container run with ``--cpus``: a
  process burning CPU outside the cluster's groups does not count against any host, nor can it starve one
  (the groups are weighted so that each gets its budget on a busy machine, as a host with cores of its own
  would: :meth:`roq.cgroups.Controller.create`).
* **Network**: each host gets a network namespace of its own, joined to a bridge made for the cluster by a
  veth pair, with a ``tc`` token bucket (``tbf``) on both ends of its link: the host sends and receives at
  most its rate. The hosts take addresses in 198.18.0.0/15 (the range set aside for benchmarking, RFC 2544),
  on a /24 no interface of the machine uses; ZooKeeper and the GCMs bind the bridge's address. Traffic stays
  on the bridge and in the namespaces made here.

Everything made is named after the launcher (its pid and a counter) and written down in
``/run/roq-emulated/<name>.json`` before it is made; :meth:`Emulation.stop` removes it, and
:func:`sweep` (called at every start) removes what a launcher that died (``kill -9``) left: its processes
(stopped by pid), groups, namespaces and links.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import os
import re
import signal
import subprocess
import time
from typing import Callable, Sequence

import psutil

from roq.cgroups import Controller
from roq.errors import ConfigError
from roq.settings import parse_rate

__all__ = ["HostBudget", "Emulation", "sweep", "parse_budgets", "STATE_DIR", "CGROUP_BASE"]

log = logging.getLogger(__name__)

STATE_DIR = "/run/roq-emulated"
CGROUP_BASE = "roq-emulated"
_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")
_CLONE_NEWNET = 0x40000000


@dataclasses.dataclass(frozen=True)
class HostBudget:
    """What one emulated host has: ``cpus`` cores (0 = no quota), a link of ``bandwidth`` ("" = none: the
    host stays a loopback address)."""

    cpus: float = 0.0
    bandwidth: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.cpus <= 1024 or (self.cpus and self.cpus < 0.01):
            raise ConfigError(f"cpus must be 0 (no quota) or between 0.01 and 1024, got {self.cpus}")
        if self.bandwidth:
            parse_rate(self.bandwidth)

    @property
    def rate(self) -> float:
        """The link's bytes/s (0 = no link of its own)."""
        return parse_rate(self.bandwidth) if self.bandwidth else 0.0


def parse_budgets(hosts: int, cpus: str | float | Sequence[float] = "", bandwidth: str | Sequence[str] = "") -> list[HostBudget]:
    """The budget of each of ``hosts`` hosts, from one value for all or a list (or a comma-separated string)
    of one per host: ``cpus="0.5"``, ``cpus="0.25,1"``, ``bandwidth="100mbit"``.

    Raises:
        ConfigError: a bad value, or a list whose length is not ``hosts``.
    """
    def each(value: object, what: str) -> list[str]:
        items = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value).split(",")
        items = [i.strip() for i in items]
        if items == [""]:
            return [""] * hosts
        if len(items) == 1:
            return items * hosts
        if len(items) != hosts:
            raise ConfigError(f"{what}: {len(items)} values for {hosts} hosts (give one, or one per host)")
        return items

    values = each(cpus, "host cpus")
    try:
        cores = [float(c) if c else 0.0 for c in values]
    except ValueError:
        raise ConfigError(f"host cpus {cpus!r}: not a number of cores (such as 0.5, or 0.5,1,2 for each host)") from None
    return [HostBudget(c, b) for c, b in zip(cores, each(bandwidth, "host bandwidth"))]


def _owner_alive(pid: int, started: float) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.Error:
        return False


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise ConfigError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


class Emulation:
    """The emulated hosts of one cluster: their groups, namespaces and links.

    Args:
        budgets: each host's budget, by its name in the cluster (its loopback address).

    Raises (:meth:`start`):
        ConfigError: not root, no CPU controller, ``ip``/``tc`` missing or refusing.
    """

    _count = 0

    def __init__(self, budgets: dict[str, HostBudget]) -> None:
        Emulation._count += 1
        self.budgets = dict(budgets)
        self.name = f"{os.getpid()}.{Emulation._count}"
        self.tag = _tag(os.getpid(), Emulation._count)
        self.cpu: Controller | None = None
        self.addresses: dict[str, str] = {}  # host -> its address (in its namespace, or its loopback one)
        self.gateway = ""  # the bridge's address, where ZooKeeper and the GCMs bind ("" = no network)
        self.namespaces: dict[str, str] = {}  # host -> its namespace
        self._state = os.path.join(STATE_DIR, self.name + ".json")

    @property
    def networked(self) -> bool:
        return any(b.bandwidth for b in self.budgets.values())

    def named(self, address: str) -> str:
        """The name a host was given (its loopback address) from its address."""
        return next((h for h, a in self.addresses.items() if a == address), address)

    def start(self) -> Emulation:
        """Make the groups, namespaces and links (removing first what dead launchers left)."""
        if os.geteuid() != 0:
            raise ConfigError("emulated hosts (CPU or bandwidth budgets) need root: cgroups and network namespaces")
        sweep()
        try:
            self._record()
            if any(b.cpus for b in self.budgets.values()):
                self.cpu = Controller(CGROUP_BASE)
                for host, b in self.budgets.items():
                    if b.cpus:
                        self.cpu.create(f"{self.name}/{host}", b.cpus)
            self.addresses = {h: h for h in self.budgets}
            if self.networked:
                self._network()
        except BaseException:
            self.stop()
            raise
        return self

    def enter(self, host: str) -> Callable[[], None] | None:
        """What a process of ``host`` runs between fork and exec: join its group and namespace (None: nothing)."""
        group = f"{self.name}/{host}" if self.cpu is not None and self.budgets[host].cpus else ""
        netns = self.namespaces.get(host, "")
        if not group and not netns:
            return None
        cpu = self.cpu

        def enter() -> None:
            if group and cpu is not None:
                cpu.join(group, os.getpid())
            if netns:
                _setns(netns)

        return enter

    def interface(self, host: str) -> str:
        """The bridge's end of ``host``'s link (its namespace's eth0 is the other end): what ``ip link set ... down``
        cuts and ``ip -s link`` counts ("" for a host without a link of its own)."""
        if host not in self.namespaces:
            return ""
        return _veth(self.tag, list(self.budgets).index(host))

    def stop(self) -> None:
        """Stop what still runs in the hosts' groups (by pid) and remove everything made. Never raises."""
        _remove(self.name, self.tag, self._namespace_names(), self.cpu)
        try:
            os.unlink(self._state)
        except FileNotFoundError:
            pass
        _tidy(self.cpu)

    def describe(self) -> list[str]:
        """A line per host: its address, its CPU budget, its link."""
        lines = []
        for host, b in self.budgets.items():
            cpu = f"{b.cpus:g} cores" if b.cpus else "the machine's CPU"
            link = f"link {b.bandwidth} in netns {self.namespaces[host]}" if host in self.namespaces else "loopback"
            lines.append(f"{self.addresses.get(host, host)}: {cpu}, {link}")
        return lines

    # ------------------------------------------------------------------ network

    def _namespace_names(self) -> list[str]:
        return [_netns(self.tag, i) for i in range(len(self.budgets))] if self.networked else []

    def _record(self) -> None:
        os.makedirs(STATE_DIR, exist_ok=True)
        state = {"pid": os.getpid(), "started": psutil.Process().create_time(), "name": self.name, "tag": self.tag,
                 "namespaces": self._namespace_names()}
        # whole or not at all: another cluster's sweep may read the directory at any moment
        partial = os.path.join(STATE_DIR, f".{self.name}.json.part")
        with open(partial, "w") as f:
            json.dump(state, f)
        os.replace(partial, self._state)

    def _network(self) -> None:
        subnet = _free_subnet()
        base = subnet.network_address
        bridge = _bridge(self.tag)
        self.gateway = str(base + 1)
        _run("ip", "link", "add", bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", bridge)
        _run("ip", "link", "set", bridge, "up")
        for i, (host, b) in enumerate(self.budgets.items()):
            ns, outside = _netns(self.tag, i), _veth(self.tag, i)
            address = str(base + 11 + i)
            _run("ip", "netns", "add", ns)
            self.namespaces[host] = ns
            _run("ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", outside, "master", bridge, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            if b.bandwidth:  # both ways: what the host sends (eth0) and what it is sent (the bridge's port)
                _tbf(["ip", "netns", "exec", ns], "eth0", b.rate)
                _tbf([], outside, b.rate)
            self.addresses[host] = address


def _netns(tag: str, i: int) -> str:
    return f"roq{tag}n{i}"


def _veth(tag: str, i: int) -> str:
    """The bridge's end of host ``i``'s link (the other end is eth0 in its namespace)."""
    return f"rq{tag}v{i}"


def _bridge(tag: str) -> str:
    return f"rq{tag}b"


def _tbf(prefix: list[str], dev: str, rate: float) -> None:
    burst = max(16_384, int(rate / 100))  # 10 ms of the rate, at least a few frames
    _run(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{int(rate * 8)}bit",
         "burst", str(burst), "latency", "50ms")


def _tag(pid: int, n: int) -> str:
    """A short name for links (15 characters at most in all): pid and counter in base 36."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    value, out = pid * 64 + n % 64, ""
    while value:
        value, r = divmod(value, 36)
        out = digits[r] + out
    return out or "0"


def _free_subnet() -> ipaddress.IPv4Network:
    used = []
    for line in _run("ip", "-o", "-4", "addr", "show").stdout.splitlines():
        match = re.search(r"inet (\S+)", line)
        if match:
            used.append(ipaddress.ip_interface(match.group(1)).network)
    for subnet in _NETWORK.subnets(new_prefix=24):
        if not any(subnet.overlaps(u) for u in used):
            return subnet
    raise ConfigError("no free /24 in 198.18.0.0/15 for the emulated hosts' links")


def _setns(name: str) -> None:
    import ctypes

    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
    finally:
        os.close(fd)


def _remove(name: str, tag: str, namespaces: list[str], cpu: Controller | None) -> list[str]:
    """Remove what launcher ``name`` made: stop its processes by pid, then groups, links, namespaces."""
    done = []
    try:
        cpu = cpu or Controller(CGROUP_BASE)
    except ConfigError:
        cpu = None
    if cpu is not None and name in cpu.children():
        pids = cpu.members(name)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5.0
        while cpu.members(name) and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            cpu.remove(name)
            done.append(f"cgroup {CGROUP_BASE}/{name}" + (f" (stopped pids {pids})" if pids else ""))
        except OSError as exc:
            log.warning("could not remove cgroup %s/%s: %s", CGROUP_BASE, name, exc)
    for i, ns in enumerate(namespaces):
        if tag and _run("ip", "link", "del", _veth(tag, i), check=False).returncode == 0:  # both ends of the pair
            done.append(f"link {_veth(tag, i)}")
        if _run("ip", "netns", "del", ns, check=False).returncode == 0:
            done.append(f"netns {ns}")
    if tag and _run("ip", "link", "del", _bridge(tag), check=False).returncode == 0:
        done.append(f"bridge {_bridge(tag)}")
    return done


def _tidy(cpu: Controller | None) -> None:
    """Remove the base group and the state directory once nothing is in them (another cluster may run)."""
    try:
        if cpu is not None and not cpu.children():
            cpu.remove()
        os.rmdir(STATE_DIR)
    except OSError:
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:  # another cluster's sweep took it first
        pass


def sweep() -> list[str]:
    """Remove what launchers that are gone left (their state files name it); a line per thing removed.

    Several may sweep at once (clusters starting side by side): what one finds gone, another removed.
    """
    done = []
    try:
        entries = sorted(os.listdir(STATE_DIR))
    except FileNotFoundError:
        entries = []
    for entry in [e for e in entries if e.startswith(".")]:  # being written, or left by a launcher killed meanwhile
        writer = entry[1:].split(".")[0]
        if not (writer.isdigit() and psutil.pid_exists(int(writer))):
            _unlink(os.path.join(STATE_DIR, entry))
    entries = [e for e in entries if not e.startswith(".")]
    for entry in entries:
        path = os.path.join(STATE_DIR, entry)
        try:
            with open(path) as f:
                state = json.load(f)
            pid, started = int(state["pid"]), float(state["started"])
            name, tag, namespaces = str(state["name"]), str(state["tag"]), [str(n) for n in state["namespaces"]]
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("removing unreadable emulation state %s", path)
            _unlink(path)
            continue
        if _owner_alive(pid, started):
            continue
        done += _remove(name, tag, namespaces, None)
        _unlink(path)
    try:
        cpu = Controller(CGROUP_BASE)
    except ConfigError:
        return done
    for name in cpu.children():  # a group with no state file: its launcher died before writing... or after
        if not os.path.exists(os.path.join(STATE_DIR, name + ".json")):
            pid = int(name.split(".")[0]) if name.split(".")[0].isdigit() else 0
            if not psutil.pid_exists(pid):
                done += _remove(name, "", [], cpu)
    _tidy(cpu)
    for line in done:
        log.warning("removed what a stopped cluster left: %s", line)
    return done
