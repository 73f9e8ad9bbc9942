"""Shared fixtures: local clusters and load processes, all stopped by pid; nothing may outlive a test."""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import itertools
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any
from pathlib import Path

import psutil
import pytest

from kazoo.client import KazooClient

from roq import prefork
from roq.process import die_with_parent
from roqcli.zkserver import ZooKeeperServer
from simulation.cluster import LocalCluster
from roqcli.embedded import EmbeddedCluster
from simulation.load import Loads


#: Modules whose tests make emulated hosts (CPU quotas in cgroups, network namespaces) and weigh the machine's CPU
#: among them: one after another. (A test elsewhere may make some too: each checks only what it made is gone.)
EMULATED_MODULES = {"test_saturation.py", "test_elasticity.py", "test_emulated_hosts.py", "test_tree_clusters.py"}
#: Modules whose tests load the machine heavily: Spark, a browser with Prometheus, crash loops, fuzzing, busy loops,
#: gigabytes pushed through. A test elsewhere says so with ``@pytest.mark.measured``. They assert outcomes, not
#: figures (the figures are the benchmark's: ``make bench-check``), so they may run beside anything; one after
#: another, two of them never share the machine's two cores.
MEASURED_MODULES = {"test_slow_subscriber.py", "test_dashboard.py", "test_journal_crash.py", "test_fuzz.py",
                    "test_scenario_run.py", "test_flow_control.py"}
#: Modules that run Spark (a JVM of a gigabyte or more, a job at a time), by group: in each group one after another,
#: beside anything else. Three chains of Spark tests at once: one chain of them all was the run's longest, twelve
#: minutes under load, with the other workers idle at its end.
SPARK_MODULES = {"test_spark_source.py": "spark", "test_spark_cluster.py": "spark", "test_kpi_queue.py": "spark-queue",
                 "test_kpi.py": "spark-kpi"}


#: Where the groups' locks are: one file per group, machine-wide (two test runs at once share them too).
GROUP_LOCKS = Path("/tmp/roq-test-groups")


def group_of(item: pytest.Item) -> str | None:
    """The group whose tests run one after another: "emulated", "spark", "spark-queue", "spark-kpi", "measured", one a
    module names with ``pytestmark = pytest.mark.one_at_a_time("name")``, or None."""
    if item.path.name in EMULATED_MODULES:
        return "emulated"
    if item.path.name in SPARK_MODULES:
        return SPARK_MODULES[item.path.name]
    if item.path.name in MEASURED_MODULES or item.get_closest_marker("measured") is not None:
        return "measured"
    mark = item.get_closest_marker("one_at_a_time")
    return str(mark.args[0]) if mark is not None else None


#: The groups whose tests take longest, each placed where a worker's share of the run begins, in this order (with
#: fewer workers than groups, the last ones follow the one before them).
PLACED_GROUPS = ("spark", "spark-queue", "spark-kpi", "measured", "emulated")


def pytest_collection_modifyitems(config, items):
    """Where the long groups' tests go in the run: each at the beginning of one worker's share, everything else
    around them in the order collected. pytest-xdist (``--dist worksteal``) gives each worker one contiguous share
    of the order, sized as computed here, and an idle one takes tests from the end of another's: so each worker
    begins with one group, one test after another, and none waits for a group's lock another holds. (Scattered,
    the waits added up to minutes of a worker's time per run; with the emulated tests at the end, they were a
    tail of three minutes that one worker ran alone.)"""
    workers = max(2, int(getattr(config, "workerinput", {}).get("workercount", 2)))  # the same on every worker
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for i, group in enumerate(PLACED_GROUPS):
        shares[min(i, workers - 1)] += [item for item in items if group_of(item) == group]
    rest = [item for item in items if group_of(item) not in PLACED_GROUPS]
    left = len(items)
    for i, share in enumerate(shares):  # as pytest-xdist splits: what is left, evenly over the workers left
        size = left // (workers - i)
        take = max(0, size - len(share))
        share += rest[:take]
        rest = rest[take:]
        left -= len(share)
    shares[-1] += rest
    items[:] = [item for share in shares for item in share]


@pytest.fixture(autouse=True)
def _one_at_a_time(request):
    """A test of a group holds the group's lock (``flock``) from its first fixture to its last: under
    pytest-xdist (``make test``: ``-n 2``) two tests of one group never run at once, whichever workers they are
    sent to; a worker whose test waits for the lock waits. (Not pytest-xdist's ``--dist loadgroup``: under pytest
    9.2 it silently stopped grouping, and ran two fuzzers at once.)"""
    group = group_of(request.node)
    if group is None:
        yield
        return
    GROUP_LOCKS.mkdir(exist_ok=True)
    with open(GROUP_LOCKS / f"{group}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


def _cpu_seconds() -> float:
    """CPU seconds this process and every descendant that ended have spent (user and system): those it reaped, and
    those its prefork server reaped."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime + prefork.ended_cpu_seconds()


@pytest.fixture(autouse=True)
def _cpu_spent(request):
    """What a test cost the machine: the CPU seconds of its own process and of every process it started (and
    they started), reported with the test (``cpu_s``) and summed by module at the end of a run. The suite's
    time on two cores is bounded by its CPU, not only by its waits."""
    started = _cpu_seconds()
    yield
    request.node.user_properties.append(("cpu_s", round(_cpu_seconds() - started, 3)))


_CPU_BY_MODULE: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        for name, value in report.user_properties:
            if name == "cpu_s":
                _CPU_BY_MODULE[report.nodeid.split("::")[0]] += value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def _print_logs(directory: Path) -> None:
    for log in sorted(directory.rglob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        print(f"---- {log.relative_to(directory)} (last 30 of {len(lines)} lines)")
        print("\n".join(lines[-30:]))


def _clusters(kind: Any, tmp_path: Path, request: Any, defaults: Any):
    """A factory of started clusters of ``kind`` (logs under the test's tmp_path), stopped after the test;
    their logs are printed when the test failed."""
    clusters: list[Any] = []

    def make(**options: Any) -> Any:
        options.setdefault("log_dir", str(tmp_path / f"cluster{len(clusters)}"))
        for key, value in defaults().items():
            options.setdefault(key, value)
        cluster = kind(**options)
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in clusters:
        cluster.stop()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        _print_logs(tmp_path)


@pytest.fixture
def make_cluster(tmp_path, request):
    """Start a LocalCluster; stopped at the end of the test."""
    yield from _clusters(LocalCluster, tmp_path, request, dict)


@pytest.fixture
def cluster(make_cluster) -> LocalCluster:
    return make_cluster()


@pytest.fixture
def loads(tmp_path):
    directory = tmp_path / "load"
    directory.mkdir()
    loads = Loads(directory, ready_timeout=20)
    yield loads
    loads.close()


def _of_an_older_jvm(p: psutil.Process, before: set[int]) -> bool:
    """Whether ``p`` descends from a Java process older than the test: a Spark session a module's tests share forks
    its Python workers as their tasks come, and keeps them for the next (they go with it)."""
    for parent in p.parents():
        if parent.pid == os.getpid():
            return False
        if parent.pid in before and parent.name() == "java":
            return True
    return False


@pytest.fixture(autouse=True)
def no_process_left_behind():
    """Every process a test starts must be gone when it ends (this process's prefork server, which forks them,
    lives as long as it does; so does a Spark session a module's tests share, and its Python workers)."""
    me = psutil.Process(os.getpid())
    before = {p.pid for p in me.children(recursive=True)}
    yield
    deadline = time.monotonic() + 10.0
    while True:
        left = []
        for p in me.children(recursive=True):
            try:
                if p.pid not in before and p.pid != prefork.server_pid() and p.status() != psutil.STATUS_ZOMBIE \
                        and not _of_an_older_jvm(p, before):
                    left.append(f"{p.pid} {' '.join(p.cmdline()[:4])}")
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"processes left behind: {left}"


class Burners:
    """Processes burning CPU outside the cluster's groups (as any other work on the machine), stopped by pid:
    ``burner(n)`` starts ``n`` more (and returns them), ``burner.stop()`` stops them all (so does the test's end)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def __call__(self, n: int) -> list[subprocess.Popen]:
        started = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                    preexec_fn=functools.partial(die_with_parent, os.getpid())) for _ in range(n)]
        self.procs += started
        return started

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        self.procs.clear()


@pytest.fixture
def burner():
    burners = Burners()
    yield burners
    burners.stop()


_roots = itertools.count(1)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A real ZooKeeper server (Debian's package) on a free loopback port, shared by the session."""
    server = ZooKeeperServer(log_path=str(tmp_path_factory.mktemp("zookeeper") / "zookeeper.log"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def make_embedded(zookeeper, tmp_path, request):
    """Start EmbeddedClusters on the shared ZooKeeper, each under its own root; stopped after the test."""
    yield from _clusters(EmbeddedCluster, tmp_path, request,
                         lambda: {"zk": zookeeper.hosts, "root": f"/roq-test-{next(_roots)}"})


@pytest.fixture
def kz(zookeeper):
    """A kazoo client of the test's own, to look at (never to fake) what the cluster wrote."""
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The largest classes of the product, at the end of every whole run: a signal of where cohesion may be
    slipping, not a failure (:func:`test_structure.largest_classes`)."""
    if getattr(config, "workerinput", None) is not None or not any("unit" in str(a) or a == "tests"
                                                                     for a in config.args):
        return
    spec = importlib.util.spec_from_file_location("structure", Path(__file__).parent / "unit" / "test_structure.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    terminalreporter.write_sep("-", "largest classes of the product (lines)")
    for lines, name in module.largest_classes():
        terminalreporter.write_line(f"{lines:5d}  {name}")
    if _CPU_BY_MODULE:
        total = sum(_CPU_BY_MODULE.values())
        terminalreporter.write_sep("-", f"CPU seconds the tests spent, {total:,.0f} in all: the modules that spent most")
        for module_path, cpu in sorted(_CPU_BY_MODULE.items(), key=lambda kv: -kv[1])[:15]:
            terminalreporter.write_line(f"{cpu:7.1f}  {module_path}")
