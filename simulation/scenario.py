"""Scenario files (TOML): the cluster, its queues, the load and the faults of one simulation run. Pure.

A scenario reads like this (every key but the names, ``duration_s`` and the rates has a default)::

    [scenario]
    name = "ramp-and-drain"
    duration_s = 60            # the load runs this long; faults and schedules fall inside it
    hosts = 3                  # host managers on 127.0.0.11, .12, ...
    exchange_backend_hwm = 0   # at most this many batches an exchange queues for one subscriber (0 = default; its byte bound may hold fewer)
    exchange_subscriber_queue_bytes = 0  # the byte bound of that queue (0 = default, 64 MiB)
    faults_after_scale_out = false  # true: the scenario's clock stands still at its first fault until a queue has
                               # scaled out (at most a minute): faults meant to hit a grown queue do, however busy
                               # the machine; joins, leaves, faults and the end all move by as long

    [hosts]                    # emulated hosts (optional; needs root): each its own CPU budget and link
    cpus = 0.5                 # cores, a cgroup quota: one for all, or a list of one per host ([0.25, 0.5, 1])
    bandwidth = "100mbit"      # its link's rate (tc tbf), one for all or a list: the hosts get namespaces

    [[queue]]
    name = "ramp"
    exchanges = 1              # at creation; the autoscaler takes it from there
    rules = { exchange_records_per_s = 1500, max_exchanges = 4 }

    [[publishers]]             # a group of publishers that join one by one
    queue = "ramp"
    count = 6
    rate = 600                 # records/s, each
    size = 100                 # payload bytes; with size_max, uniform in [size, size_max]
    keys = ["k1", "k2"]
    start_s = 0                # the first joins then, the others every every_s
    every_s = 2
    stop_s = 40                # they leave then (one every leave_every_s, if set)

    [[subscribers]]            # they join before any publisher
    queue = "ramp"
    count = 2
    prefix = ""
    delay_us = 0               # processing time per record: a slow consumer
    rcvhwm = 0                 # batches its client library queues per exchange (0 = default)
    pause_at = 0               # stops reading after this many records (0 = never)...
    pause_at_s = 0             # ...or this many seconds after it joined (0 = never)...
    pause_for_s = 0            # ...for this long: a stalled consumer, which its exchanges send past once its
                               # pipes are full (sockets' buffers hold megabytes first: seconds of small records)

    [[faults]]
    at_s = 20
    kind = "kill_host"         # see FAULT_KINDS
    host = "127.0.0.12"

    [reference]                # published figures to show beside ours in the report (optional)
    source = "EQS paper, 2011"
    delivered_records_per_minute = 1000000
    note = "5 KB messages, latency flat as the queue scaled"

A scenario with an unknown key, a value of the wrong type or out of range, or a schedule that cannot
happen (a publisher that leaves before it joins, a fault after the end, a queue nobody declared) is refused
with a :class:`~roq.errors.ConfigError` naming the file, the line and the key.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from roq.errors import ConfigError
from roq.rules import merge_rules
from roq.settings import check_table, missing_keys, parse_toml, read_text
from roq.zk import check_queue_name
from roqcli.embedded import host_addresses
from roqcli.emulation import HostBudget, parse_budgets

__all__ = ["Scenario", "Info", "Reference", "HostsSpec", "QueueSpec", "PublisherGroup", "SubscriberGroup", "Fault", "FAULT_KINDS",
           "load_scenario", "parse_scenario"]

#: Faults a scenario can inject, and what each needs: ``queue`` (its exchange or monitor), ``host``, ``for_s``.
FAULT_KINDS: dict[str, tuple[str, ...]] = {
    "kill_exchange": ("queue",),  # SIGKILL the busiest exchange of the queue
    "kill_monitor": ("queue",),  # SIGKILL the queue's monitor
    "kill_host": ("host",),  # SIGKILL a host manager and every process it runs, as when the machine dies
    "kill_gcm_leader": (),  # SIGKILL the leading GCM
    "restart_zookeeper": ("for_s",),  # stop the ZooKeeper server, start it again for_s later
    "pause_exchange": ("queue", "for_s"),  # SIGSTOP the busiest exchange of the queue for for_s
    "pause_monitor": ("queue", "for_s"),  # SIGSTOP the queue's monitor for for_s
}
MAX_HOSTS = 9
MAX_PROCESSES = 64  # load processes in one scenario: each is a Python process on this machine


@dataclasses.dataclass(frozen=True)
class Info:
    name: str
    duration_s: float
    description: str = ""
    hosts: int = 3
    gcms: int = 1
    exchange_backend_hwm: int = 0  # at most this many batches an exchange queues for one subscriber (0 = its default)
    exchange_subscriber_queue_bytes: int = 0  # the bytes of batches it holds for one subscriber (0 = its default)
    faults_after_scale_out: bool = False  # the scenario's clock waits, before its first fault, for a scale-out

    def exchange_options(self) -> list[str]:
        """The host managers' flags that give their exchanges these settings."""
        return ([f"--exchange-option=backend_hwm={self.exchange_backend_hwm}"] * bool(self.exchange_backend_hwm)
                + [f"--exchange-option=subscriber_queue_bytes={self.exchange_subscriber_queue_bytes}"]
                * bool(self.exchange_subscriber_queue_bytes))


@dataclasses.dataclass(frozen=True)
class HostsSpec:
    """``[hosts]``: the emulated hosts' budgets (a value for all, or one per host)."""

    cpus: tuple[float, ...] = ()
    bandwidth: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class QueueSpec:
    name: str
    exchanges: int = 1
    host: str = ""  # "" = the host with most headroom
    rules: dict[str, Any] = dataclasses.field(default_factory=dict)  # as set through the management API


@dataclasses.dataclass(frozen=True)
class PublisherGroup:
    rate: float  # records/s, each
    queue: str = ""  # "" = the only queue
    count: int = 1
    size: int = 100
    size_max: int = 0  # 0 = every payload is ``size`` bytes
    keys: tuple[str, ...] = ("load",)
    key_run: int = 100  # records per key before the next key
    start_s: float = 0.0
    every_s: float = 0.0
    stop_s: float = -1.0  # -1 = the end of the scenario
    leave_every_s: float = 0.0

    def joins(self) -> list[float]:
        """When each publisher of the group joins (seconds from the start)."""
        return [self.start_s + i * self.every_s for i in range(self.count)]

    def leaves(self, duration: float) -> list[float]:
        """When each publisher of the group leaves, first joined first."""
        stop = duration if self.stop_s < 0 else self.stop_s
        return [stop + i * self.leave_every_s for i in range(self.count)]


@dataclasses.dataclass(frozen=True)
class SubscriberGroup:
    queue: str = ""
    count: int = 1
    prefix: str = ""
    delay_us: float = 0.0  # processing time per record
    rcvhwm: int = 0  # batches the client library queues per exchange (0 = its default)
    pause_at: int = 0  # records read before it stops reading (0 = it never stops)
    pause_at_s: float = 0.0  # or: seconds after it joined when it stops reading (0 = it never stops)
    pause_for_s: float = 0.0  # how long it stops reading

    @property
    def keeps_up(self) -> bool:
        """Whether its audit must show no loss (a slow or stalled group shows its gaps instead)."""
        return self.delay_us == 0 and not ((self.pause_at or self.pause_at_s) and self.pause_for_s)


@dataclasses.dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str
    queue: str = ""
    host: str = ""
    for_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Reference:
    """Figures published elsewhere for the same experiment, shown beside ours."""

    source: str
    delivered_records_per_minute: float = 0.0
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Scenario:
    info: Info
    queues: tuple[QueueSpec, ...]
    publishers: tuple[PublisherGroup, ...]
    subscribers: tuple[SubscriberGroup, ...]
    faults: tuple[Fault, ...]
    source: str = ""
    reference: Reference | None = None
    budgets: tuple[HostBudget, ...] = ()  # from [hosts]; () = plain loopback hosts

    @property
    def hosts(self) -> list[str]:
        return host_addresses(self.info.hosts)


def load_scenario(path: str) -> Scenario:
    """Read and check the scenario file at ``path``.

    Raises:
        ConfigError: it cannot be read, is not TOML, or is not a possible scenario (file, line and key named).
    """
    return parse_scenario(read_text(path), path)


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    """Check the scenario in ``text`` (``source`` names it in messages).

    Raises:
        ConfigError: as :func:`load_scenario`.
    """
    return _Checker(parse_toml(text, source), _Lines(text), source).scenario()


class _Lines:
    """Where each key of a TOML text stands: (table, index of its array entry, key) -> line number."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-]+)\s*\]\]?")
    _KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_\-]+)\s*=""")

    def __init__(self, text: str) -> None:
        self.keys: dict[tuple[str, int, str], int] = {}
        self.tables: dict[tuple[str, int], int] = {}
        counts: dict[str, int] = {}
        table, index = "", 0
        for number, line in enumerate(text.splitlines(), 1):
            header = self._HEADER.match(line)
            if header:
                table = header.group(2)
                top = table.split(".")[0]
                if header.group(1) == "[[":
                    counts[table] = counts.get(table, -1) + 1
                index = counts.get(top, 0)
                self.tables.setdefault((table, index), number)
                continue
            key = self._KEY.match(line)
            if key:
                name = key.group(1).strip("\"'")
                self.keys.setdefault((table, index, name), number)
                # an inline table (rules = { a = 1 }) names its keys on the same line
                for inner in re.finditer(r"([A-Za-z0-9_\-]+)\s*=", line[key.end():]):
                    self.keys.setdefault((f"{table}.{name}" if table else name, index, inner.group(1)), number)

    def of(self, table: str, index: int, key: str = "") -> int:
        if key and (table, index, key) in self.keys:
            return self.keys[(table, index, key)]
        return self.tables.get((table, index), 0)


class _Checker:
    def __init__(self, doc: dict[str, Any], lines: _Lines, source: str) -> None:
        self.doc, self.lines, self.source = doc, lines, source

    def fail(self, table: str, index: int, key: str, message: str) -> ConfigError:
        line = self.lines.of(table, index, key)
        where = f"{self.source}:{line}" if line else self.source
        entry = f"[[{table}]] #{index + 1}" if table in ("queue", "publishers", "subscribers", "faults") else f"[{table}]"
        return ConfigError(f"{where}: {entry}{' key ' + repr(key) if key else ''}: {message}")

    def table(self, cls: type, table: str, index: int, value: Any, extra: tuple[str, ...] = ()) -> dict[str, Any]:
        """The checked fields of one table; ``extra`` keys are left for the caller."""
        body = {k: v for k, v in value.items() if k not in extra} if isinstance(value, dict) else value
        try:
            values = check_table(cls, body, "")
        except ConfigError as exc:
            key = getattr(exc, "key", "")
            message = str(exc).strip().replace(f"unknown key {key!r}", "unknown key", 1)
            message = message.removeprefix(f"key {key!r} ")
            raise self.fail(table, index, key, message) from None
        for key in missing_keys(cls, values):
            raise self.fail(table, index, "", f"missing key {key!r}")
        return values

    def entries(self, name: str) -> list[Any]:
        value = self.doc.get(name, [])
        if not isinstance(value, list):
            raise self.fail(name, 0, "", f"must be an array of tables ([[{name}]])")
        return value

    def scenario(self) -> Scenario:
        known = ("scenario", "hosts", "queue", "publishers", "subscribers", "faults", "reference")
        for key in self.doc:
            if key not in known:
                raise ConfigError(f"{self.source}:{self.lines.of(key, 0, '') or self.lines.of('', 0, key)}: "
                                  f"unknown table {key!r}; known: {', '.join(known)}")
        if "scenario" not in self.doc:
            raise ConfigError(f"{self.source}: missing table [scenario] (name, duration_s)")
        info = Info(**self.table(Info, "scenario", 0, self.doc["scenario"]))
        self.positive("scenario", 0, "duration_s", info.duration_s)
        if not 1 <= info.hosts <= MAX_HOSTS:
            raise self.fail("scenario", 0, "hosts", f"must be between 1 and {MAX_HOSTS}, got {info.hosts}")
        if not 1 <= info.gcms <= 3:
            raise self.fail("scenario", 0, "gcms", f"must be between 1 and 3, got {info.gcms}")
        self.positive("scenario", 0, "exchange_backend_hwm", info.exchange_backend_hwm, zero=True)
        self.positive("scenario", 0, "exchange_subscriber_queue_bytes", info.exchange_subscriber_queue_bytes, zero=True)
        hosts = host_addresses(info.hosts)
        queues = [self.queue(i, q, hosts) for i, q in enumerate(self.entries("queue"))]
        if not queues:
            raise ConfigError(f"{self.source}: a scenario needs at least one [[queue]]")
        names = [q.name for q in queues]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise self.fail("queue", i, "name", f"queue {name!r} is declared twice")
        pubs = [self.publishers(i, p, info, names) for i, p in enumerate(self.entries("publishers"))]
        subs = [self.subscribers(i, s, names) for i, s in enumerate(self.entries("subscribers"))]
        faults = [self.fault(i, f, info, names, hosts) for i, f in enumerate(self.entries("faults"))]
        processes = sum(p.count for p in pubs) + sum(s.count for s in subs)
        if processes > MAX_PROCESSES:
            raise ConfigError(f"{self.source}: {processes} publishers and subscribers in all, more than the "
                              f"{MAX_PROCESSES} load processes one machine runs")
        reference = Reference(**self.table(Reference, "reference", 0, self.doc["reference"])) \
            if "reference" in self.doc else None
        if reference is not None:
            self.positive("reference", 0, "delivered_records_per_minute", reference.delivered_records_per_minute, zero=True)
        budgets = self.budgets(self.doc["hosts"], info.hosts) if "hosts" in self.doc else ()
        return Scenario(info, tuple(queues), tuple(pubs), tuple(subs), tuple(faults), self.source, reference, budgets)

    def budgets(self, value: Any, hosts: int) -> tuple[HostBudget, ...]:
        if not isinstance(value, dict):
            raise self.fail("hosts", 0, "", "must be a table (cpus, bandwidth)")
        lists = {k: v if isinstance(v, list) else [v] for k, v in value.items()}  # one value for all, or a list
        spec = HostsSpec(**self.table(HostsSpec, "hosts", 0, lists))
        for key in ("cpus", "bandwidth"):
            n = len(getattr(spec, key))
            if n not in (0, 1, hosts):
                raise self.fail("hosts", 0, key, f"{n} values for {hosts} hosts (give one, or one per host)")
        try:
            return tuple(parse_budgets(hosts, list(spec.cpus) or "", list(spec.bandwidth) or ""))
        except ConfigError as exc:
            key = "bandwidth" if "bandwidth" in str(exc) else "cpus"
            raise self.fail("hosts", 0, key, str(exc)) from None

    def positive(self, table: str, index: int, key: str, value: float, zero: bool = False) -> None:
        if value < 0 or (value == 0 and not zero):
            raise self.fail(table, index, key, f"must be {'0 or more' if zero else 'more than 0'}, got {value!r}")

    def which_queue(self, table: str, index: int, value: str, names: list[str]) -> str:
        if not value:
            if len(names) > 1:
                raise self.fail(table, index, "", f"missing key 'queue' (the scenario has {len(names)} queues)")
            return names[0]
        if value not in names:
            raise self.fail(table, index, "queue", f"no [[queue]] named {value!r} (queues: {', '.join(names)})")
        return value

    def queue(self, i: int, value: Any, hosts: list[str]) -> QueueSpec:
        values = self.table(QueueSpec, "queue", i, value, extra=("rules",))
        try:
            check_queue_name(values["name"])
        except ConfigError as exc:
            raise self.fail("queue", i, "name", str(exc)) from None
        if not 1 <= values.get("exchanges", 1) <= 16:
            raise self.fail("queue", i, "exchanges", f"must be between 1 and 16, got {values['exchanges']}")
        if values.get("host") and values["host"] not in hosts:
            raise self.fail("queue", i, "host", f"{values['host']!r} is not a host of the scenario ({', '.join(hosts)})")
        rules = value.get("rules", {})
        if not isinstance(rules, dict):
            raise self.fail("queue", i, "rules", "must be a table of rules")
        try:
            merge_rules(None, rules)
        except ConfigError as exc:
            bad = next((k for k in rules if f"'{k}'" in str(exc)), "")
            line = self.lines.of("queue.rules", i, bad) or self.lines.of("queue", i, "rules")
            raise ConfigError(f"{self.source}:{line}: [[queue]] #{i + 1} rules: {exc}") from None
        return QueueSpec(**values, rules=dict(rules))

    def publishers(self, i: int, value: Any, info: Info, names: list[str]) -> PublisherGroup:
        values = self.table(PublisherGroup, "publishers", i, value)
        values["queue"] = self.which_queue("publishers", i, values.get("queue", ""), names)
        group = PublisherGroup(**values)
        self.positive("publishers", i, "rate", group.rate)
        if group.count < 1:
            raise self.fail("publishers", i, "count", f"must be at least 1, got {group.count}")
        if group.size < 24:
            raise self.fail("publishers", i, "size", f"must be at least 24 bytes (the audit's header), got {group.size}")
        if group.size_max and group.size_max < group.size:
            raise self.fail("publishers", i, "size_max", f"must be 0 or at least size ({group.size}), got {group.size_max}")
        if not group.keys or any(not k for k in group.keys):
            raise self.fail("publishers", i, "keys", "must name at least one non-empty key")
        if group.key_run < 1:
            raise self.fail("publishers", i, "key_run", f"must be at least 1, got {group.key_run}")
        for key in ("start_s", "every_s", "leave_every_s"):
            self.positive("publishers", i, key, getattr(group, key), zero=True)
        if group.stop_s != -1.0:
            self.positive("publishers", i, "stop_s", group.stop_s)
        joins, leaves = group.joins(), group.leaves(info.duration_s)
        if joins[-1] >= info.duration_s:
            key = "every_s" if group.count > 1 and group.every_s else "start_s"
            raise self.fail("publishers", i, key, f"publisher {group.count} would join at {joins[-1]:g} s, "
                                                  f"not before the end ({info.duration_s:g} s)")
        if leaves[-1] > info.duration_s:
            key = "leave_every_s" if group.count > 1 and group.leave_every_s else "stop_s"
            raise self.fail("publishers", i, key, f"publisher {group.count} would leave at {leaves[-1]:g} s, "
                                                  f"after the end ({info.duration_s:g} s)")
        for n, (join, leave) in enumerate(zip(joins, leaves), 1):
            if leave <= join:
                key = "stop_s" if group.stop_s >= 0 else "start_s"
                raise self.fail("publishers", i, key, f"publisher {n} would leave at {leave:g} s, "
                                                      f"before it joins at {join:g} s")
        return group

    def subscribers(self, i: int, value: Any, names: list[str]) -> SubscriberGroup:
        values = self.table(SubscriberGroup, "subscribers", i, value)
        values["queue"] = self.which_queue("subscribers", i, values.get("queue", ""), names)
        group = SubscriberGroup(**values)
        if group.count < 1:
            raise self.fail("subscribers", i, "count", f"must be at least 1, got {group.count}")
        self.positive("subscribers", i, "delay_us", group.delay_us, zero=True)
        self.positive("subscribers", i, "rcvhwm", group.rcvhwm, zero=True)
        self.positive("subscribers", i, "pause_at", group.pause_at, zero=True)
        self.positive("subscribers", i, "pause_at_s", group.pause_at_s, zero=True)
        self.positive("subscribers", i, "pause_for_s", group.pause_for_s, zero=True)
        if group.pause_at and group.pause_at_s:
            raise self.fail("subscribers", i, "pause_at_s", "give pause_at (records) or pause_at_s (seconds), not both")
        return group

    def fault(self, i: int, value: Any, info: Info, names: list[str], hosts: list[str]) -> Fault:
        values = self.table(Fault, "faults", i, value)
        fault = Fault(**values)
        if fault.kind not in FAULT_KINDS:
            raise self.fail("faults", i, "kind", f"unknown fault {fault.kind!r}; known: {', '.join(FAULT_KINDS)}")
        if not 0 < fault.at_s < info.duration_s:
            raise self.fail("faults", i, "at_s", f"must fall inside the run (0 to {info.duration_s:g} s), "
                                                 f"got {fault.at_s:g}")
        needs = FAULT_KINDS[fault.kind]
        for key in ("queue", "host", "for_s"):
            given = bool(getattr(fault, key))
            if given and key not in needs:
                raise self.fail("faults", i, key, f"a {fault.kind} fault takes no {key!r}")
        if "queue" in needs:
            fault = dataclasses.replace(fault, queue=self.which_queue("faults", i, fault.queue, names))
        if "host" in needs and fault.host not in hosts:
            what = f"not a host of the scenario: {fault.host!r}" if fault.host else "missing key 'host'"
            raise self.fail("faults", i, "host" if fault.host else "", f"{what} (hosts: {', '.join(hosts)})")
        if "for_s" in needs:
            self.positive("faults", i, "for_s", fault.for_s)
            if fault.at_s + fault.for_s >= info.duration_s:
                raise self.fail("faults", i, "for_s", f"the fault would last past the end "
                                                      f"({fault.at_s:g} + {fault.for_s:g} >= {info.duration_s:g} s)")
        return fault
