"""A standalone Spark cluster from the installed PySpark: one master and N workers, each its own JVM
(``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), on a loopback address. ``roq spark
up`` runs one in the foreground; tests start one and stop it; ``roq kpi ... --master spark://HOST:PORT`` and any
Spark job use it.

Every process is started in a session of its own and stopped by its pid (SIGTERM, then SIGKILL): nothing is left
behind. A worker registers with the master by itself; :meth:`SparkCluster.start` returns once the master's status
(its web UI's ``/json``) counts every worker alive.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from roq import defaults
from roq.errors import ConfigError, RoQError

__all__ = ["SparkCluster", "master_url", "web_ui", "spark_home", "spark_env", "master_command", "worker_command",
           "master_status", "alive_workers", "spark_up", "START_TIMEOUT_S", "worker_group", "remove_group"]

#: seconds the master and its workers have to start and register
START_TIMEOUT_S = 90.0


def spark_home() -> str:
    """The installed PySpark's directory (where ``bin/spark-class`` is).

    Raises:
        ConfigError: PySpark is not installed, or has no ``spark-class``.
    """
    try:
        import pyspark
    except ImportError as exc:
        raise ConfigError("PySpark is not installed: pip install 'roq-py[kpi]'") from exc
    home = os.path.dirname(pyspark.__file__)
    if not os.access(os.path.join(home, "bin", "spark-class"), os.X_OK):
        raise ConfigError(f"{home}/bin/spark-class is missing or not executable: PySpark's installation is broken")
    return home


def spark_env(address: str, java_options: str = "") -> dict[str, str]:
    """The environment of a master or a worker bound to ``address``: in the foreground (no daemon), its Python
    workers running this Python, its JVM's options ``java_options`` (none given: this environment's
    ``SPARK_DAEMON_JAVA_OPTS``, which Spark's own scripts read).

    Raises:
        ConfigError: as :func:`spark_home`.
    """
    return {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": address, "PYSPARK_PYTHON": sys.executable,
            "SPARK_DAEMON_JAVA_OPTS": java_options or os.environ.get("SPARK_DAEMON_JAVA_OPTS", ""),
            "SPARK_NO_DAEMONIZE": "1"}


def master_command(address: str, port: int, ui_port: int) -> list[str]:
    """The command line of a master on ``address:port``, its web UI on ``ui_port``."""
    return [os.path.join(spark_home(), "bin", "spark-class"), "org.apache.spark.deploy.master.Master", "--host",
            address, "--port", str(port), "--webui-port", str(ui_port)]


def worker_command(address: str, master: str, *, cores: int, memory: str, workdir: str, ui_port: int) -> list[str]:
    """The command line of a worker on ``address`` offering ``cores`` and ``memory`` to the master at ``master``
    (``spark://HOST:PORT``), its scratch in ``workdir``, its web UI on ``ui_port`` (0: any free port)."""
    return [os.path.join(spark_home(), "bin", "spark-class"), "org.apache.spark.deploy.worker.Worker", "--host",
            address, "--cores", str(cores), "--memory", memory, "--work-dir", workdir, "--webui-port", str(ui_port),
            master]


def master_status(ui: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """The status of the master whose web UI is at ``ui`` (``http://HOST:PORT``: its ``/json``), or None while it
    does not answer."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(ui + "/json/", timeout=timeout) as answer:
            status = json.loads(answer.read())
            return status if isinstance(status, dict) else None
    except (OSError, urllib.error.URLError, ValueError):
        return None


def alive_workers(status: dict[str, Any]) -> list[dict[str, Any]]:
    """The workers a master's ``status`` counts alive (each with its ``host``, ``cores``...)."""
    workers = status.get("workers", [])
    return [w for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE"] if isinstance(workers, list) \
        else []


def master_url(address: str, port: int) -> str:
    """The URL jobs and workers reach a standalone master at."""
    return f"spark://{address}:{port}"


def web_ui(address: str, port: int) -> str:
    """A master's or a worker's web UI."""
    return f"http://{address}:{port}"


@dataclasses.dataclass
class SparkCluster:
    """A master and ``workers`` workers on ``address``.

    Args:
        workdir: where their logs and the workers' scratch go (made if missing).
        address: the loopback address they bind (127.0.0.0/8).
        port: the master's port (the cluster's URL is ``spark://address:port``).
        ui_port: the master's web UI.
        workers: how many workers.
        cores: cores each worker offers.
        memory: memory each worker offers (``1g``).
        java_options: for every JVM (``SPARK_DAEMON_JAVA_OPTS``; none: the environment's).
        worker_cpus: each worker, and the executors and Python workers it starts, in a cgroup of its own with this
            CPU quota in cores, as on a host of its own of that many cores (emulated hosts, as ``roq cluster up
            --host-cpus``; needs root); 0 = none.
    """

    workdir: str
    address: str = "127.0.0.1"
    port: int = defaults.SPARK_PORT
    ui_port: int = defaults.SPARK_UI_PORT
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    java_options: str = ""
    worker_cpus: float = 0.0
    procs: list[subprocess.Popen] = dataclasses.field(default_factory=list)
    groups: list[str] = dataclasses.field(default_factory=list)

    @property
    def url(self) -> str:
        return master_url(self.address, self.port)

    @property
    def ui(self) -> str:
        return web_ui(self.address, self.ui_port)

    def start(self, timeout: float = START_TIMEOUT_S) -> SparkCluster:
        """Start the master and the workers; return once every worker is registered.

        Raises:
            ConfigError: a bad setting, or PySpark missing. RoQError: they did not start in time (their logs say
                why; what started is stopped).
        """
        if not 0 <= self.worker_cpus <= 1024:
            raise ConfigError(f"worker_cpus must be 0 (none) to 1024 cores, got {self.worker_cpus}")
        if not self.address.startswith("127.") or self.workers < 1 or self.cores < 1:
            raise ConfigError(f"a Spark cluster on a loopback address (127.x.y.z), with at least one worker of at "
                              f"least one core: got {self.address}, {self.workers} workers of {self.cores} cores")
        os.makedirs(self.workdir, exist_ok=True)
        env = spark_env(self.address, self.java_options)
        try:
            self._run("master", env, master_command(self.address, self.port, self.ui_port))
            self._wait(lambda status: True, timeout, "the master")
            for i in range(self.workers):
                scratch = os.path.join(self.workdir, f"worker{i + 1}")
                os.makedirs(scratch, exist_ok=True)
                self._run(f"worker{i + 1}", env, worker_command(self.address, self.url, cores=self.cores,
                                                                memory=self.memory, workdir=scratch, ui_port=0))
                if self.worker_cpus:
                    self.groups.append(worker_group(self.procs[-1].pid, self.worker_cpus))
            self._wait(lambda status: self.alive(status) >= self.workers, timeout, f"{self.workers} workers")
        except BaseException:
            self.stop()
            raise
        return self

    def _run(self, name: str, env: dict[str, str], command: list[str]) -> None:
        with open(os.path.join(self.workdir, f"{name}.log"), "ab") as log:
            self.procs.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                               stderr=subprocess.STDOUT, start_new_session=True))

    def status(self) -> dict[str, Any] | None:
        """The master's status (its web UI's ``/json``), or None while it does not answer."""
        return master_status(self.ui)

    @staticmethod
    def alive(status: dict[str, Any]) -> int:
        """Workers the master counts alive in ``status``."""
        return len(alive_workers(status))

    def _wait(self, ready: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RoQError(f"a Spark process exited ({proc.returncode}) before {what} were up: see the logs "
                                   f"in {self.workdir}")
            status = self.status()
            if status is not None and ready(status):
                return
            time.sleep(0.2)
        raise RoQError(f"{what} of the Spark cluster at {self.url} not up within {timeout:.0f}s: see the logs in "
                       f"{self.workdir}")

    def stop(self, timeout: float = 20.0) -> None:
        """Stop every process started (workers first), each by its pid and its session: SIGTERM, then SIGKILL."""
        for proc in reversed(self.procs):
            _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)
                proc.wait(5)
            _signal(proc, signal.SIGKILL)  # whatever it left in its session (spark-class's own children)
        self.procs.clear()
        for name in self.groups:
            remove_group(name)
        self.groups.clear()

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: where the groups of workers on hosts of their own are (below each CPU hierarchy's mount)
CGROUP_BASE = "roq-spark"


def worker_group(pid: int, cores: float, name: str = "") -> str:
    """Put process ``pid`` (and what it starts from now on) in a group of ``cores`` cores, made if missing (named
    after this process and ``pid`` unless ``name``); the group's name.

    Raises:
        ConfigError: no CPU controller. OSError: not root.
    """
    from roq.cgroups import Controller

    cpu = Controller(CGROUP_BASE)
    name = name or f"{os.getpid()}-{pid}"
    cpu.create(name, cores)
    cpu.join(name, pid)
    return name


def remove_group(name: str) -> None:
    """Remove a group of :func:`worker_group` (its processes gone; one still there keeps it)."""
    from roq.cgroups import Controller

    try:
        Controller(CGROUP_BASE).remove(name)
    except OSError:
        pass


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # its session's group: spark-class execs java in it
    except (ProcessLookupError, PermissionError):
        pass


def spark_up(args: Any) -> int:
    """``roq spark up``: a cluster in the foreground until Ctrl-C (or SIGTERM)."""
    cluster = SparkCluster(workdir=args.dir, address=args.address, port=args.port, ui_port=args.ui_port,
                           workers=args.workers, cores=args.cores, memory=args.memory,
                           worker_cpus=getattr(args, "worker_cpus", 0.0))
    print(f"starting a Spark master and {args.workers} workers on {args.address} (logs in {args.dir})", flush=True)
    stop = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with cluster:
            print(f"Spark master {cluster.url} with {cluster.workers} workers of {cluster.cores} cores; web UI "
                  f"{cluster.ui}\nrun jobs with --master {cluster.url}; Ctrl-C stops the cluster", flush=True)
            while all(proc.poll() is None for proc in cluster.procs):
                time.sleep(0.5)
            print("a Spark process exited: stopping the cluster (its logs are in " + args.dir + ")", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("stopping the Spark cluster", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, stop)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the cluster as Ctrl-C does
