"""Cluster files (TOML): which Docker hosts run which RoQ processes. Pure.

A cluster file reads like this (``roq deploy up cluster.toml``)::

    [deployment]
    name = "prod"                      # every container is labelled roq.deployment=prod
    image = "roq:latest"               # the RoQ image (deploy/Dockerfile), on every Docker host used
    zookeeper_image = "zookeeper:3.9"  # the official image by default; or a RoQ image (role "zookeeper")
    root = "/roq"                      # the cluster's ZooKeeper root
    keys = "~/.roq/deployments/prod"   # the cluster's keys, made where missing (the default: this, by name)
    insecure = false                   # true: no CURVE, no permissions, no ZooKeeper authentication
    kpi_queue = "roq.kpi"              # KPI records through the broker (roq kpi ... --kpi-queue); default: none

    [[docker_hosts]]
    name = "a"
    url = "unix:///var/run/docker.sock"   # or tcp://host:2375

    [[zookeeper]]                      # one server (a quorum of several is not deployed yet)
    docker_host = "a"
    address = "127.0.0.20"
    port = 2181

    [[gcm]]                            # the first is the leader, others standbys
    docker_host = "a"
    address = "127.0.0.21"
    lookup_port = 5000
    management_port = 5003
    broadcast_port = 5005
    http_port = 5080                   # the HTTP API, metrics and dashboard (bound to this address)

    [[hostmanager]]
    docker_host = "a"
    address = "127.0.0.22"             # the address it advertises; its monitors and exchanges bind it
    max_exchanges = 4
    http_port = 5081                   # health checks of it and of its processes (the container's too)

    [[spark_master]]                   # optional: a standalone Spark cluster for the KPI jobs and the roq data
    docker_host = "a"                  # source (at most one master; its workers need it)
    address = "127.0.0.24"
    port = 7077                        # jobs run with --master spark://127.0.0.24:7077
    ui_port = 8080                     # its web UI

    [[spark_worker]]
    docker_host = "a"
    address = "127.0.0.25"
    cores = 1
    memory = "1g"
    ui_port = 8081

The Spark roles run from ``spark_image`` (default: ``image``), which needs PySpark and a Java runtime: an image
built with ``python -m deploy.image --extras kpi``.

Every container runs with host networking, so the addresses are the Docker hosts' own. A mistake (an
unknown key, a wrong type, an unknown Docker host, two processes on one address and port) is refused with a
:class:`~roq.errors.ConfigError` naming the file, the table entry and the key.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any

from roq.errors import ConfigError
from roq.settings import check_table, missing_keys, parse_toml, read_text
from roq.zk import Paths, check_queue_name
from roq import defaults
from roqcli.sparkcluster import master_url, web_ui

__all__ = ["ClusterFile", "Deployment", "DockerHost", "ZooKeeperSpec", "GcmSpec", "HostManagerSpec", "SparkMasterSpec",
           "SparkWorkerSpec", "load_cluster_file", "parse_cluster_file", "OFFICIAL_ZOOKEEPER"]

OFFICIAL_ZOOKEEPER = "zookeeper:3.9"
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}\Z")


@dataclasses.dataclass(frozen=True)
class Deployment:
    name: str
    image: str = "roq:latest"
    zookeeper_image: str = OFFICIAL_ZOOKEEPER
    root: str = defaults.ROOT
    session_timeout: float = defaults.SESSION_TIMEOUT
    keys: str = ""  # "" = ~/.roq/deployments/NAME
    insecure: bool = False
    spark_image: str = ""  # "" = image (it needs PySpark and Java: python -m deploy.image --extras kpi)
    kpi_queue: str = ""  # the host managers ship their hosts' KPI records to this durable queue ("" = none)
    kpi_rotate_s: float = 30.0  # seconds a KPI archive file is written before it is put in place (and shipped)

    @property
    def spark(self) -> str:
        """The image the Spark master and workers run from."""
        return self.spark_image or self.image


@dataclasses.dataclass(frozen=True)
class DockerHost:
    name: str
    url: str


@dataclasses.dataclass(frozen=True)
class ZooKeeperSpec:
    docker_host: str
    address: str
    port: int = defaults.ZK_PORT


@dataclasses.dataclass(frozen=True)
class GcmSpec:
    docker_host: str
    address: str
    lookup_port: int = defaults.LOOKUP_PORT
    management_port: int = defaults.MANAGEMENT_PORT
    broadcast_port: int = defaults.BROADCAST_PORT
    http_port: int = defaults.HTTP_PORT


@dataclasses.dataclass(frozen=True)
class HostManagerSpec:
    docker_host: str
    address: str
    max_exchanges: int = 4
    port: int = 0  # its control port (0 = any free one)
    http_port: int = 5081  # its health checks and its processes' (the container's health check asks it)


@dataclasses.dataclass(frozen=True)
class SparkMasterSpec:
    docker_host: str
    address: str
    port: int = defaults.SPARK_PORT
    ui_port: int = defaults.SPARK_UI_PORT

    @property
    def url(self) -> str:
        return master_url(self.address, self.port)

    @property
    def ui(self) -> str:
        return web_ui(self.address, self.ui_port)


@dataclasses.dataclass(frozen=True)
class SparkWorkerSpec:
    docker_host: str
    address: str
    cores: int = 1
    memory: str = "1g"
    ui_port: int = defaults.SPARK_WORKER_UI_PORT


@dataclasses.dataclass(frozen=True)
class ClusterFile:
    deployment: Deployment
    docker_hosts: tuple[DockerHost, ...]
    zookeeper: tuple[ZooKeeperSpec, ...]
    gcms: tuple[GcmSpec, ...]
    hostmanagers: tuple[HostManagerSpec, ...]
    source: str = ""
    spark_masters: tuple[SparkMasterSpec, ...] = ()  # none or one
    spark_workers: tuple[SparkWorkerSpec, ...] = ()

    @property
    def zk(self) -> str:
        """The ZooKeeper connection string of the deployed cluster."""
        return ",".join(f"{z.address}:{z.port}" for z in self.zookeeper)

    @property
    def specs(self) -> tuple[Any, ...]:
        """Every process's spec, in the order they start."""
        return (*self.zookeeper, *self.gcms, *self.hostmanagers, *self.spark_masters, *self.spark_workers)

    def host(self, name: str) -> DockerHost:
        return next(h for h in self.docker_hosts if h.name == name)


def load_cluster_file(path: str) -> ClusterFile:
    """Read and check the cluster file at ``path``.

    Raises:
        ConfigError: it cannot be read, is not TOML, or describes no possible cluster.
    """
    return parse_cluster_file(read_text(path), path)


def parse_cluster_file(text: str, source: str = "<cluster file>") -> ClusterFile:
    """Check the cluster file in ``text`` (``source`` names it in messages).

    Raises:
        ConfigError: as :func:`load_cluster_file`.
    """
    doc = parse_toml(text, source)
    known = ("deployment", "docker_hosts", *_ROLES)
    for key in doc:
        if key not in known:
            raise ConfigError(f"{source}: unknown table {key!r}; known: {', '.join(known)}")

    def fail(table: str, index: int | None, key: str, message: str) -> ConfigError:
        entry = f"[[{table}]] #{index + 1}" if index is not None else f"[{table}]"
        return ConfigError(f"{source}: {entry}{' key ' + repr(key) if key else ''}: {message}")

    def table(cls: type, name: str, index: int | None, value: Any) -> Any:
        try:
            values = check_table(cls, value, "")
        except ConfigError as exc:
            key = getattr(exc, "key", "")
            raise fail(name, index, key, str(exc).strip().replace(f"unknown key {key!r}", "unknown key", 1)
                       .removeprefix(f"key {key!r} ")) from None
        for key in missing_keys(cls, values):
            raise fail(name, index, "", f"missing key {key!r}")
        return cls(**values)

    def entries(name: str) -> list[Any]:
        value = doc.get(name, [])
        if not isinstance(value, list):
            raise ConfigError(f"{source}: [{name}] must be an array of tables ([[{name}]])")
        return value

    if "deployment" not in doc:
        raise ConfigError(f"{source}: missing table [deployment] (name, image)")
    deployment = table(Deployment, "deployment", None, doc["deployment"])
    if not _NAME.match(deployment.name):
        raise fail("deployment", None, "name", f"{deployment.name!r}: use 1 to 40 of a-z 0-9 _ . - (a container "
                                               f"name and label)")
    for key in ("image", "zookeeper_image"):
        if not getattr(deployment, key):
            raise fail("deployment", None, key, "must name an image")
    try:
        Paths(deployment.root)
    except ConfigError as exc:
        raise fail("deployment", None, "root", str(exc)) from None
    if deployment.kpi_queue:
        try:
            check_queue_name(deployment.kpi_queue)
        except ConfigError as exc:
            raise fail("deployment", None, "kpi_queue", str(exc)) from None
    if not 0 < deployment.kpi_rotate_s <= 86_400:
        raise fail("deployment", None, "kpi_rotate_s", f"{deployment.kpi_rotate_s:g}: from more than 0 to 86400 s")
    hosts = [table(DockerHost, "docker_hosts", i, v) for i, v in enumerate(entries("docker_hosts"))]
    names = [h.name for h in hosts]
    for i, h in enumerate(hosts):
        if h.name in names[:i]:
            raise fail("docker_hosts", i, "name", f"{h.name!r} is named twice")
        if not re.match(r"^(unix|tcp|ssh)://.+", h.url):
            raise fail("docker_hosts", i, "url", f"{h.url!r}: expected unix:///path, tcp://host:port or ssh://...")
    specs: dict[str, list[Any]] = {}
    for name, cls in _ROLES.items():
        specs[name] = [table(cls, name, i, v) for i, v in enumerate(entries(name))]
        if not specs[name] and not name.startswith("spark"):
            raise ConfigError(f"{source}: at least one [[{name}]] is needed")
        for i, spec in enumerate(specs[name]):
            if spec.docker_host not in names:
                raise fail(name, i, "docker_host", f"no [[docker_hosts]] named {spec.docker_host!r} "
                                                   f"(known: {', '.join(names) or 'none'})")
            try:
                ipaddress.ip_address(spec.address)
            except ValueError:
                raise fail(name, i, "address", f"{spec.address!r} is not an IP address") from None
            for f in dataclasses.fields(spec):
                if f.name.endswith("port") and not (0 <= getattr(spec, f.name) < 65536):
                    raise fail(name, i, f.name, f"{getattr(spec, f.name)} is not a port")
    if len(specs["zookeeper"]) > 1:
        raise fail("zookeeper", 1, "", "one ZooKeeper server only: deploying a quorum is not supported yet")
    if len(specs["spark_master"]) > 1:
        raise fail("spark_master", 1, "", "one Spark master only (its workers register with it)")
    if specs["spark_worker"] and not specs["spark_master"]:
        raise fail("spark_worker", 0, "", "a worker needs a master: add a [[spark_master]]")
    for i, worker in enumerate(specs["spark_worker"]):
        if worker.cores < 1:
            raise fail("spark_worker", i, "cores", f"{worker.cores}: at least 1")
        if not re.match(r"[1-9][0-9]*[kmgt]?\Z", worker.memory, re.IGNORECASE):
            raise fail("spark_worker", i, "memory", f"{worker.memory!r}: an amount as Spark writes it, e.g. 1g or "
                                                    f"512m")
    taken: dict[tuple[str, str, int], str] = {}
    for name in _ROLES:
        for i, spec in enumerate(specs[name]):
            for f in dataclasses.fields(spec):
                port = getattr(spec, f.name) if f.name.endswith("port") else None
                if not port:
                    continue
                where = (spec.docker_host, spec.address, port)
                if where in taken:
                    raise fail(name, i, f.name, f"{spec.address}:{port} on {spec.docker_host} is also {taken[where]}")
                taken[where] = f"[[{name}]] #{i + 1} {f.name}"
    addresses = [h.address for h in specs["hostmanager"]]
    for i, address in enumerate(addresses):
        if address in addresses[:i]:
            raise fail("hostmanager", i, "address", f"{address} has a host manager already")
    return ClusterFile(deployment, tuple(hosts), tuple(specs["zookeeper"]), tuple(specs["gcm"]),
                       tuple(specs["hostmanager"]), source, tuple(specs["spark_master"]), tuple(specs["spark_worker"]))


#: the cluster file's tables of processes (array of tables each), in the order they start
_ROLES: dict[str, type] = {"zookeeper": ZooKeeperSpec, "gcm": GcmSpec, "hostmanager": HostManagerSpec,
                           "spark_master": SparkMasterSpec, "spark_worker": SparkWorkerSpec}
