"""Running a scenario: its cluster, its load processes on their schedule, its faults, and what they measured.

:class:`Runner` starts an embedded cluster (ZooKeeper, GCMs, host managers on loopback aliases), creates the
scenario's queues with their rules, starts every subscriber group, then every publisher at its join time as
a process of its own (``python -m simulation.load``, connected by name so it follows a moving monitor) that
stops itself at its leave time, and injects the faults at their times. Once a second it samples every
queue's monitor (records/s per exchange, exchanges, publishers, counters) for the timeline and the progress
line. At the end, or on Ctrl-C, it collects the publishers' and subscribers' reports, audits every
subscriber against what the publishers sent, and writes ``summary.json`` and ``timeline.json`` to its
output directory. Every process it started is stopped, by pid, whatever happens.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
import time
from typing import Any, Callable

import psutil

import client
from roq.errors import ConfigError, RoQError
from roq import defaults
from simulation.audit import compare
from roqcli.embedded import EmbeddedCluster
from simulation.load import Loads
from simulation.report import latency_by_exchanges, render
from simulation.scenario import Fault, Scenario, SubscriberGroup

log = logging.getLogger(__name__)

__all__ = ["Runner"]

SAMPLE_INTERVAL = 1.0
#: seconds the scenario's clock waits at its first fault for a scale-out, at most (``faults_after_scale_out``)
SCALE_OUT_WAIT_S = 60.0
SILENT_S = 0.75  # three missed exchange heartbeats
DRAIN_S = 3.0  # after the last publisher flushed, subscribers get this long before they report


#: faults only the runner's own cluster can take: it must own the host managers, the GCMs and ZooKeeper
OWN_CLUSTER_FAULTS = ("kill_host", "kill_gcm_leader", "restart_zookeeper")


class GivenCluster:
    """A running cluster the runner uses but does not own (``--zk``): it starts and stops nothing of it, and
    removes only the queues it created."""

    zookeeper = None
    emulation = None

    def __init__(self, zk: str, root: str = defaults.ROOT, credentials: str | None = None) -> None:
        self.zk, self.root, self.credentials = zk, root, credentials
        self.addresses: list[str] = []
        self.manager = client.QueueManager(zk, root=root, credentials=credentials)

    def start(self) -> GivenCluster:
        self.addresses = sorted(h["Address"] for h in self.manager.hosts())
        if not self.addresses:
            raise ConfigError(f"the cluster at {self.zk} (root {self.root}) has no live host")
        return self

    def connect(self, queue: str) -> client.Connection:
        return client.connect(zk=self.zk, queue=queue, root=self.root, credentials=self.credentials)

    def address_of(self, host: str) -> str:
        return host

    def stop(self) -> None:
        self.manager.close()


def _pause_flags(group: SubscriberGroup) -> tuple[str, ...]:
    """A stalled group's flags for ``simulation.load subscribe`` (a count of records or a time, and how long)."""
    if not group.pause_for_s:
        return ()
    at = ("--pause-at", str(group.pause_at)) if group.pause_at else (
        ("--pause-at-s", str(group.pause_at_s)) if group.pause_at_s else ())
    return (*at, "--pause-for", str(group.pause_for_s)) if at else ()


@dataclasses.dataclass
class _Pending:
    """A publisher still to start, or running."""

    group: int
    index: int
    queue: str
    join: float
    leave: float
    child: Any = None
    report: dict[str, Any] | None = None
    told_to_leave: bool = False  # SIGTERM sent at its leave (its report is read once it has flushed and ended)


class Runner:
    """Run ``scenario``; results go to ``out_dir``.

    Args:
        scenario: what to run.
        out_dir: where ``summary.json``, ``timeline.json`` and the processes' logs go.
        progress: called with one line of progress about once a second.
        stop_requested: polled; when it returns True the run ends early (its results are still written).
        zk, root: run on this existing cluster instead of an embedded one of its own. Its hosts replace the
            scenario's; the scenario's queues must not exist there yet and are removed at the end; the faults
            of :data:`OWN_CLUSTER_FAULTS` are refused.
        secure: the runner's own cluster runs with CURVE on every socket (keys in ``out_dir/keys``); its
            processes and load processes use the admin's credentials.
        credentials: with ``zk``, the credentials directory to use that cluster with (None: plaintext).

    Raises:
        ConfigError: (with ``zk``) the scenario has a fault only the runner's own cluster can take.
    """

    def __init__(self, scenario: Scenario, out_dir: str, *, progress: Callable[[str], None] = print,
                 stop_requested: Callable[[], bool] = lambda: False, zk: str = "", root: str = defaults.ROOT,
                 secure: bool = True, credentials: str | None = None) -> None:
        if zk:
            for i, f in enumerate(scenario.faults):
                if f.kind in OWN_CLUSTER_FAULTS:
                    raise ConfigError(f"{scenario.source}: [[faults]] #{i + 1} {f.kind} needs the runner's own "
                                      f"cluster; run the scenario without --zk")
        self.zk, self.root = zk, root
        self.secure, self.credentials = secure, credentials
        self.scenario = scenario
        self.out_dir = out_dir
        self.progress = progress
        self.stop_requested = stop_requested
        self.cluster: Any = None  # EmbeddedCluster, or GivenCluster with zk
        self._created: list[str] = []  # queues made on a given cluster, to remove at the end
        self.timeline: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self._scaled_out = False  # a sample showed a queue with more live exchanges than it was created with
        self._paused: dict[int, float] = {}  # pid -> when to SIGCONT it (monotonic)
        self._zk_back_at: float | None = None
        self._connections: dict[str, Any] = {}
        self._started = 0.0
        self._started_wall = time.time()

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, Any]:
        """Run the scenario to its end (or until stopped); return the summary it wrote.

        Raises:
            RoQError: the cluster could not be started or a queue could not be created.
        """
        s = self.scenario
        os.makedirs(self.out_dir, exist_ok=True)
        logs = os.path.join(self.out_dir, "logs")
        os.makedirs(logs, exist_ok=True)
        cluster: GivenCluster | EmbeddedCluster
        if self.zk:
            cluster = self.cluster = GivenCluster(self.zk, self.root, self.credentials)
        else:
            cluster = self.cluster = EmbeddedCluster(hosts=s.info.hosts, gcms=s.info.gcms, log_dir=logs,
                                                     hostmanager_args=s.info.exchange_options(),
                                                     budgets=s.budgets or None, secure=self.secure,
                                                     keys=os.path.join(self.out_dir, "keys"))
        loads = Loads(logs)
        pending = [_Pending(g, i, group.queue, join, leave)
                   for g, group in enumerate(s.publishers)
                   for i, (join, leave) in enumerate(zip(group.joins(), group.leaves(s.info.duration_s)))]
        subscribers: list[tuple[int, Any]] = []
        interrupted = False
        try:
            cluster.start()
            if isinstance(cluster, GivenCluster):  # (given with zk)
                self._check_given(cluster)
                self.progress(f"using the cluster at {cluster.zk} (root {cluster.root}): hosts {', '.join(cluster.addresses)} "
                              f"(its hosts, GCMs and exchange settings, not the scenario's)")
            else:
                hosts = cluster.emulation.describe() if cluster.emulation is not None else cluster.addresses
                self.progress(f"cluster up: ZooKeeper {cluster.zk}, {s.info.gcms} GCM(s), hosts {'; '.join(hosts)}")
                self.progress(f"CURVE on every socket: the cluster's keys and the admin's credentials in "
                              f"{cluster.keys.directory}" if cluster.keys is not None else
                              "INSECURE (--insecure): no CURVE, anyone who reaches the cluster's ports may use it")
                self.progress(f"watch it live: {cluster.http_url()}/ (the dashboard; metrics at /metrics)")
            for q in s.queues:
                if self.zk:
                    self._created.append(q.name)
                cluster.manager.create(q.name, cluster.address_of(q.host) if q.host else None, exchanges=q.exchanges)
                if q.rules:
                    cluster.manager.set_rules(q.name, q.rules)
                self._connections[q.name] = cluster.connect(q.name)
            for g, group in enumerate(s.subscribers):
                for _ in range(group.count):
                    child = loads.start("subscribe", "", *self._where(group.queue), "--prefix", group.prefix,
                                        "--delay-us", str(group.delay_us), "--idle-exit", "0",
                                        "--timeline-every", str(SAMPLE_INTERVAL),
                                        *(("--rcvhwm", str(group.rcvhwm)) if group.rcvhwm else ()),
                                        *_pause_flags(group))
                    subscribers.append((g, child))
            self.progress(f"{len(s.queues)} queue(s) created, {len(subscribers)} subscriber(s) joined; "
                          f"running for {s.info.duration_s:g} s")
            interrupted = self._drive(loads, pending)
            self._finish_faults(force=True)
            for p in pending:  # publishers stop at their leave (the runner stops them); the others now
                if p.child is not None and p.report is None:
                    p.report = self._report(loads, p.child, stop=interrupted or p.child.alive())
            self.progress("publishers done; letting subscribers drain")
            time.sleep(DRAIN_S)  # a schedule, not a wait for a condition: what is in flight arrives within it
            reports = [(g, self._report(loads, child, stop=True)) for g, child in subscribers]
            curves = [{"group": g, "queue": s.subscribers[g].queue, "prefix": s.subscribers[g].prefix,
                       "keeps_up": s.subscribers[g].keeps_up, "points": r.get("timeline", [])} for g, r in reports]
            timeline = {"started": self._started_wall, "samples": self.timeline, "subscribers": curves,
                        "faults": self.faults, "events": self._events()}
            summary = self._summary(pending, reports, timeline, interrupted)
        finally:
            self._finish_faults(force=True)
            for conn in self._connections.values():
                conn.close()
            loads.close()
            for name in self._created:
                try:
                    cluster.manager.remove(name)
                except RoQError as exc:
                    log.warning("queue %s not removed: %s", name, exc)
            cluster.stop()
        self._write("summary.json", summary)
        self._write("timeline.json", timeline)
        render(self.out_dir)
        return summary

    def _check_given(self, cluster: GivenCluster) -> None:
        """The scenario fits the given cluster: its queues are new there, their hosts are the cluster's."""
        s = self.scenario
        for i, q in enumerate(s.queues):
            if cluster.manager.exists(q.name):
                raise ConfigError(f"{s.source}: [[queue]] #{i + 1}: queue {q.name!r} already exists on the cluster "
                                  f"at {cluster.zk}; the scenario creates its queues (and removes them after)")
            if q.host and q.host not in cluster.addresses:
                raise ConfigError(f"{s.source}: [[queue]] #{i + 1}: host {q.host!r} is not a live host of the cluster "
                                  f"({', '.join(cluster.addresses)})")

    def _where(self, queue: str) -> tuple[str, ...]:
        assert self.cluster is not None
        credentials = self.cluster.credentials
        return ("--zk", self.cluster.zk, "--queue", queue, "--root", self.cluster.root,
                *(("--credentials", credentials) if credentials else ()))

    def _drive(self, loads: Loads, pending: list[_Pending]) -> bool:
        """Start and stop publishers, inject faults, sample; True if the run was cut short."""
        s = self.scenario
        faults = sorted(s.faults, key=lambda f: f.at_s)
        self._started, self._started_wall = time.monotonic(), time.time()
        next_sample = self._started
        held = 0.0  # seconds the scenario's clock stood still, waiting for a scale-out
        gave_up = False
        while True:
            now = time.monotonic()
            t = now - self._started - held
            waiting = (s.info.faults_after_scale_out and bool(faults) and not self._scaled_out and not gave_up
                       and t >= faults[0].at_s)
            if waiting:  # at the first fault, the clock stands still until the queue has grown
                held, t = now - self._started - faults[0].at_s, faults[0].at_s
                if held >= SCALE_OUT_WAIT_S:
                    gave_up = True
                    self.progress(f"no scale-out within {SCALE_OUT_WAIT_S:g} s: the faults go on")
            if self.stop_requested():
                self.progress(f"stopped at {t:.1f} s; collecting what there is")
                return True
            # the faults due go in before the run may end: a turn that came late (a sample on a busy machine waits
            # for the monitors' answers) must not skip them
            while faults and t >= faults[0].at_s and not waiting:
                self._inject(faults.pop(0), t)
            if t >= s.info.duration_s:
                return False
            for p in pending:
                if p.child is None and t >= p.join:
                    group = s.publishers[p.group]
                    p.child = loads.start(  # (stopped at its leave by the scenario's clock, which may wait)
                        "publish", "", *self._where(p.queue), "--rate", str(group.rate),
                        "--duration", str(max(0.1, p.leave - t) + SCALE_OUT_WAIT_S), "--size", str(group.size),
                        "--size-max", str(group.size_max), "--keys", ",".join(group.keys),
                        "--key-run", str(group.key_run))
                elif p.child is not None and p.report is None and not p.child.alive():
                    p.report = self._report(loads, p.child)
                elif p.child is not None and p.report is None and t >= p.leave and not p.told_to_leave:
                    p.child.signal(signal.SIGTERM)  # (not waited for here: the clock and the others go on)
                    p.told_to_leave = True
            self._finish_faults()
            if now >= next_sample:
                next_sample = now + SAMPLE_INTERVAL
                self._sample(t, pending)
            time.sleep(0.05)

    # ------------------------------------------------------------------ faults

    def _inject(self, fault: Fault, t: float) -> None:
        assert self.cluster is not None
        cluster = self.cluster
        record: dict[str, Any] = {"t": round(t, 3), "kind": fault.kind}
        try:
            if fault.kind in ("kill_exchange", "pause_exchange"):
                status = self._connections[fault.queue].status(timeout=5)
                x = max(status.exchanges, key=lambda x: x.records_per_s)
                record.update(queue=fault.queue, exchange=x.id, pid=x.pid)
                self._hit(x.pid, fault, ("exchange", "--id", x.id))
            elif fault.kind in ("kill_monitor", "pause_monitor"):
                status = self._connections[fault.queue].status(timeout=5)
                record.update(queue=fault.queue, pid=status.pid)
                self._hit(status.pid, fault, ("monitor", "--queue", fault.queue))
            elif fault.kind == "kill_host":
                record.update(host=fault.host, pids=cluster.crash_host(cluster.address_of(fault.host)))
            elif fault.kind == "kill_gcm_leader":
                leader = cluster.leader()
                record.update(gcm=leader, pid=cluster.kill_gcm(leader))
            elif fault.kind == "restart_zookeeper":
                assert cluster.zookeeper is not None
                cluster.zookeeper.kill()  # keeps its data: the same server comes back
                self._zk_back_at = time.monotonic() + fault.for_s
                record.update(for_s=fault.for_s)
        except (RoQError, psutil.Error, KeyError, ValueError) as exc:
            record["error"] = str(exc)
        self.faults.append(record)
        self.progress(f"fault at {t:.1f} s: {fault.kind} {json.dumps({k: v for k, v in record.items() if k not in ('t', 'kind')})}")

    def _hit(self, pid: int, fault: Fault, marks: tuple[str, ...]) -> None:
        """SIGKILL or SIGSTOP ``pid`` once its command line shows every one of ``marks``: the pid a monitor
        reports may belong to another machine, where the same number is some other process."""
        process = psutil.Process(pid)
        command = process.cmdline()
        # a flag and its value as one argument (--queue=q, as a host manager writes them) or as two
        words = [*command, *(part for arg in command if arg.startswith("--") for part in arg.split("=", 1))]
        if not all(m in words for m in marks):
            raise ValueError(f"pid {pid} on this machine is not the {marks[0]} ({' '.join(command)[:120]})")
        if fault.kind.startswith("pause_"):
            os.kill(pid, signal.SIGSTOP)
            self._paused[pid] = time.monotonic() + fault.for_s
            # resumed on time by a timer of its own: the run's loop may be waiting that long on the paused process
            # itself (a status asked of a paused monitor: a pause of 1.5 s lasted 6.4 s so, in one run)
            timer = threading.Timer(fault.for_s, self._resume, (pid,))
            timer.daemon = True
            timer.start()
        else:
            process.kill()

    def _resume(self, pid: int) -> None:
        if self._paused.pop(pid, None) is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def _finish_faults(self, force: bool = False) -> None:
        """Resume paused processes and restart ZooKeeper when their time has come (all of them if ``force``)."""
        now = time.monotonic()
        for pid, until in list(self._paused.items()):
            if force or now >= until:
                self._resume(pid)
        if self._zk_back_at is not None and (force or now >= self._zk_back_at):
            self._zk_back_at = None
            assert self.cluster is not None and self.cluster.zookeeper is not None
            self.cluster.zookeeper.start()

    # ------------------------------------------------------------------ measuring

    def _sample(self, t: float, pending: list[_Pending]) -> None:
        sample: dict[str, Any] = {"t": round(t, 3), "queues": {}}
        moves = 0
        for name, conn in self._connections.items():
            try:
                s = conn.status(timeout=0.5)
            except RoQError:
                continue  # its monitor is restarting or moving: a hole in the timeline, not an error
            sample["queues"][name] = {
                # an exchange silent for several heartbeats is dead or paused (until the monitor says which)
                "exchanges": {x.id: x.records_per_s for x in s.exchanges if x.silent_s <= SILENT_S},
                "silent": [x.id for x in s.exchanges if x.silent_s > SILENT_S],
                "publishers": len(s.publishers),
                # what the scenario's running publishers of the queue send, records/s (0: as fast as they can)
                "offered": sum(self.scenario.publishers[p.group].rate for p in pending
                               if p.queue == name and p.child is not None and p.report is None),
                "subscribers": len(s.subscribers),
                "counters": dict(s.counters),
            }
            moves += s.count("relocations")
        self.timeline.append(sample)
        queues = sample["queues"].values()
        created = {q.name: q.exchanges for q in self.scenario.queues}
        self._scaled_out = self._scaled_out or any(len(q["exchanges"]) > created.get(name, 1)
                                                   for name, q in sample["queues"].items())
        rate = sum(sum(q["exchanges"].values()) for q in queues)
        exchanges = sum(len(q["exchanges"]) for q in queues)
        running = sum(1 for p in pending if p.child is not None and p.report is None)
        self.progress(f"{t:6.1f} / {self.scenario.info.duration_s:g} s  {rate:10,.0f} records/s  exchanges {exchanges}  "
                      f"publishers {running}  relocations {moves}  faults {len(self.faults)}")

    def _report(self, loads: Loads, child: Any, stop: bool = False) -> dict[str, Any]:
        try:
            return loads.report(child, stop=stop, timeout=60)
        except (RoQError, ValueError) as exc:
            return {"error": f"no report from {child.name}: {exc}"}

    def _events(self) -> list[dict[str, Any]]:
        assert self.cluster is not None
        events: list[dict[str, Any]] = []
        for q in self.scenario.queues:
            try:
                events += self.cluster.manager.events(q.name, 1000)
            except RoQError as exc:
                log.warning("events of %s not read: %s", q.name, exc)
        return sorted(events, key=lambda e: e.get("time", 0.0))

    def _summary(self, pending: list[_Pending], reports: list[tuple[int, dict[str, Any]]],
                 timeline: dict[str, Any], interrupted: bool) -> dict[str, Any]:
        s = self.scenario
        events = timeline["events"]
        sent: dict[str, dict[str, dict[str, int]]] = {q.name: {} for q in s.queues}
        publishers = []
        for p in pending:
            r = p.report or {}
            if "publisher" in r:
                sent[p.queue][r["publisher"]] = r["keys"]
            publishers.append({"group": p.group, "queue": p.queue, "join_s": p.join, "leave_s": p.leave,
                               "sent": r.get("sent", 0), "rate_records_per_s": r.get("rate", 0.0),
                               "longest_send_ms": r.get("longest_send_ms"), "error": r.get("error", "")
                               if p.child is not None else "never started"})
        subscribers = []
        for g, r in reports:
            group = s.subscribers[g]
            entry: dict[str, Any] = {"group": g, "queue": group.queue, "prefix": group.prefix,
                                     "keeps_up": group.keeps_up}
            if "audit" in r:
                entry["audit"] = compare(r["audit"], sent[group.queue], group.prefix.encode())
                entry["latency_ms"] = r["latency_ms"]
                entry["gaps"] = r["stats"].get("gaps", 0)  # discontinuities the client library saw...
                entry["gap_records"] = r["stats"].get("lost", 0)  # ...and the records missing in them
                entry["rate_records_per_s"] = r["rate"]
            else:
                entry["error"] = r.get("error", "no report")
            subscribers.append(entry)
        keep_up = [x for x in subscribers if x["keeps_up"]]
        lost = sum(x.get("audit", {}).get("lost", 0) for x in keep_up)
        dup = sum(x.get("audit", {}).get("duplicated", 0) for x in keep_up)
        reordered = sum(x.get("audit", {}).get("reordered", 0) for x in keep_up)
        kinds = [e.get("kind") for e in events]
        peak = max((sum(len(q["exchanges"]) for q in x["queues"].values()) for x in self.timeline), default=0)
        delivered = sum(x.get("audit", {}).get("received", 0) for x in subscribers)
        return {
            "scenario": s.info.name,
            "source": s.source,
            "interrupted": interrupted,
            "duration_s": s.info.duration_s,
            "units": {"duration_s": "s", "rate_records_per_s": "records/s", "latency_ms": "ms",
                      "delivered_records_per_minute": "records/min",
                      "longest_send_ms": "ms", "published": "records", "delivered": "records",
                      "gaps": "discontinuities", "gap_records": "records", "audit": "records",
                      "p50_ms": "ms", "p99_ms": "ms", "seconds": "s"},
            "published": sum(x["sent"] for x in publishers),
            "delivered": delivered,
            "delivered_records_per_s": round(delivered / s.info.duration_s, 1),
            "delivered_records_per_minute": round(delivered / s.info.duration_s * 60),
            "delivered_records_per_minute_peak": self._best_minute(reports),
            "reference": dataclasses.asdict(s.reference) if s.reference else None,
            "latency_by_exchanges": latency_by_exchanges(timeline),
            "exchanges_peak": peak,
            "relocations": kinds.count("relocated"),
            "scale_outs": kinds.count("scale_out_done"),  # exchanges that joined, not decisions
            "scale_outs_refused": kinds.count("scale_out_refused"),
            "scale_ins": kinds.count("scale_in") - kinds.count("scale_in_refused"),
            "failovers": sum(1 for e in events if e.get("kind") == "relocated" and e.get("reason") == "failover"),
            "exchanges_restarted": kinds.count("exchange_restarted"),  # by their host managers, on new endpoints
            "faults": self.faults,
            "keep_up_audit": {"lost": lost, "duplicated": dup, "reordered": reordered,
                              "clean": bool(keep_up) and lost == dup == reordered == 0
                              and all("audit" in x for x in keep_up)},
            "publishers": publishers,
            "subscribers": subscribers,
        }

    def _best_minute(self, reports: list[tuple[int, dict[str, Any]]]) -> int:
        """Records delivered to all subscribers in the best 60 s of the run (scaled up if it was shorter)."""
        per_second: dict[int, int] = {}
        for _, r in reports:
            before = 0
            for p in r.get("timeline", []):
                second = int(p["time"] - self._started_wall)
                per_second[second] = per_second.get(second, 0) + p["received"] - before
                before = p["received"]
        if not per_second:
            return 0
        seconds = [per_second.get(i, 0) for i in range(max(per_second) + 1)]
        window = min(60, len(seconds))
        best = max(sum(seconds[i:i + window]) for i in range(len(seconds) - window + 1))
        return round(best * 60 / window)

    def _write(self, name: str, document: dict[str, Any]) -> None:
        path = os.path.join(self.out_dir, name)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(document, f, indent=1, sort_keys=True, default=str)
        os.replace(path + ".tmp", path)
