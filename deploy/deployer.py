"""``roq deploy up / status / down``: a cluster file's processes as containers on its Docker hosts.

Everything goes through the Docker Engine API (the ``docker`` SDK). ``up`` first checks what it can
without starting anything: every Docker host answers, every image is there, the deployment has no
container yet. Then it starts ZooKeeper, the GCMs, the host managers, a Spark master and its workers (if the
file names them), in that order, each waiting for the ones before to be healthy (the containers' own health checks), with host networking (the addresses
are the Docker hosts'), ``--init`` as PID 1, and labels ``roq.deployment``, ``roq.role``,
``roq.address``. If anything fails, every container it created is removed before the error is raised:
nothing half-deployed stays running.

**Secure unless the cluster file says ``insecure = true``**: ``up`` makes the cluster's keys where they are
missing (:class:`roq.security.keys.ClusterKeys` in the deployment's ``keys`` directory: its pair, keyring, bearer
tokens, ZooKeeper identity, and the admin's credentials) and copies what the servers need (never a client's
secret) into each GCM and host manager container before it starts, under :data:`KEYS_IN_CONTAINER`, mode 0700;
they run with CURVE, permissions and ZooKeeper authentication. ``keys`` copies the keyring and the tokens
into the running containers again (``keys_again``), after ``roq keys client`` or ``revoke``. ``down`` stops and removes exactly the containers that carry the
deployment's label, in the reverse order (Spark's workers and master, the host managers, which stop their monitors
and exchanges, the GCMs, ZooKeeper); images are left alone. The Spark cluster has no authentication of its own: its
master and workers bind the addresses the file gives them.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from typing import Any, Callable

from deploy.cluster_file import ClusterFile
from roq.errors import RoQError
from roq.security.keys import ClusterKeys

__all__ = ["Deployer", "DeployError", "LABEL", "KEYS_IN_CONTAINER", "SPARK_PYTHON", "keys_of"]

LABEL = "roq.deployment"
#: where a secure deployment's GCM and host manager containers find the cluster's keys
KEYS_IN_CONTAINER = "/etc/roq/keys"
#: the Python a job's tasks on a deployed Spark cluster run, by name: found on the PATH, it is the image's there (its
#: /opt/roq/bin leads the PATH), and the project's where the driver plans the job (PySpark sends the driver's one
#: choice, ``PYSPARK_PYTHON``, with every task, and the driver runs it too, to plan a read of the roq data source)
SPARK_PYTHON = "python3"
#: where a host manager container keeps its host's KPI archive (with the deployment's ``kpi_queue``)
KPI_ARCHIVE_IN_CONTAINER = "/var/lib/roq/kpi"
#: the client whose credentials a secure deployment copies into its Spark workers, at the path they have here (a
#: job's ``credentials`` option names one directory, for the driver and every executor alike)
SPARK_CLIENT = "spark"
#: what of the keys directory the servers get (no client's secret)
_SERVER_KEYS = ("cluster.key", "cluster.key_secret", "zookeeper.secret", "keyring", "tokens")
ORDER = ("zookeeper", "gcm", "hostmanager", "spark-master", "spark-worker")
_SECOND = 1_000_000_000  # the Engine API counts health-check times in nanoseconds
#: one container to run: (Docker host, role, address, image, command, health check, environment)
Planned = tuple[str, str, str, str, list[str], list[str], dict[str, str]]


class DeployError(RoQError):
    """A deployment could not be done; the message names the Docker host and what failed."""


class Deployer:
    """Deploy ``cluster`` (see :mod:`deploy.cluster_file`).

    Args:
        progress: called with a line of progress at each step.
        client_factory: ``url -> DockerClient`` (default: the SDK's, with the API version negotiated).
    """

    def __init__(self, cluster: ClusterFile, *, progress: Callable[[str], None] = print,
                 client_factory: Callable[[str], Any] | None = None) -> None:
        self.cluster = cluster
        self.progress = progress
        self._factory = client_factory or _client
        self._clients: dict[str, Any] = {}
        self.keys = keys_of(cluster)
        self.credentials = ""  # the admin's, once up made them
        self.spark_credentials = ""  # the Spark jobs', once up made them (a secure deployment with Spark workers)

    # ------------------------------------------------------------------ the three commands

    def up(self, *, timeout: float = 120.0, pull: bool = False) -> list[dict[str, Any]]:
        """Start the cluster; return a row per container (host, role, address, id, state).

        Raises:
            DeployError: a Docker host is unreachable, an image missing, the deployment already has
                containers, or a process did not become healthy in ``timeout`` (all removed again).
        """
        c = self.cluster
        plan = self._plan()
        used = sorted({host for host, *_ in plan})
        for host in used:
            self._client(host)
        self._check_images(plan, pull)
        existing = self._existing()
        if existing:
            where = ", ".join(sorted({row["docker_host"] for row in existing}))
            raise DeployError(f"deployment {c.deployment.name!r} already has {len(existing)} container(s) on {where}: "
                              f"'roq deploy down' first")
        if self.keys is not None:
            made = self.keys.ensure()
            self.credentials = self.keys.client("admin")
            self.progress(f"keys in {self.keys.directory}{' (made now)' if made else ''}; the admin's credentials "
                          f"{self.credentials}")
            if c.spark_workers:
                self.spark_credentials = self.keys.client(SPARK_CLIENT)
                self.progress(f"Spark jobs' credentials {self.spark_credentials} (copied into each Spark worker; grant "
                              f"{SPARK_CLIENT!r} what the jobs read and write)")
        else:
            self.progress("INSECURE (insecure = true): no CURVE, no permissions, no ZooKeeper authentication")
        created: list[tuple[str, Any]] = []
        try:
            for role in ORDER:
                batch = []
                for host, r, address, image, command, health, env in plan:
                    if r != role:
                        continue
                    name = f"roq-{c.deployment.name}-{role}-{address}"
                    self.progress(f"starting {role} on {host} ({address}) from {image}")
                    container = self._run(host, name, role, address, image, command, health, env)
                    created.append((host, container))
                    batch.append((host, role, address, container))
                for host, r, address, container in batch:
                    self._await_healthy(host, r, address, container, timeout)
        except BaseException as exc:
            self.progress(f"failed ({exc}); removing the {len(created)} container(s) started")
            for host, container in reversed(created):
                _remove(container)
            raise
        return self.status()

    def status(self) -> list[dict[str, Any]]:
        """A row per container of the deployment on every reachable Docker host (unreachable ones: a row
        with ``error``)."""
        rows = []
        for host in self.cluster.docker_hosts:
            try:
                client = self._client(host.name)
            except DeployError as exc:
                rows.append({"docker_host": host.name, "error": str(exc)})
                continue
            for container in client.containers.list(all=True, filters={"label": f"{LABEL}={self.cluster.deployment.name}"}):
                rows.append(_row(host.name, container))
        return sorted(rows, key=lambda r: (ORDER.index(r["role"]) if r.get("role") in ORDER else 9,
                                           r["docker_host"], r.get("address", "")))

    def down(self, *, timeout: float = 30.0) -> tuple[int, list[str]]:
        """Stop and remove every container of the deployment; return (how many, errors per host)."""
        removed, errors = 0, []
        for host in self.cluster.docker_hosts:
            try:
                client = self._client(host.name)
                containers = client.containers.list(all=True,
                                                    filters={"label": f"{LABEL}={self.cluster.deployment.name}"})
            except Exception as exc:  # DeployError, or the daemon went away meanwhile
                errors.append(f"{host.name}: {exc}")
                continue
            containers.sort(key=lambda x: -ORDER.index(x.labels.get("roq.role", "hostmanager")))  # hosts first
            for container in containers:
                self.progress(f"stopping {container.labels.get('roq.role')} on {host.name} "
                              f"({container.labels.get('roq.address')})")
                try:
                    container.stop(timeout=int(timeout))
                except Exception as exc:  # already gone, or a daemon error: removal below says which
                    self.progress(f"  stop: {exc}")
                if _remove(container):
                    removed += 1
                else:
                    errors.append(f"{host.name}: container {container.name} not removed")
        return removed, errors

    def keys_again(self) -> int:
        """Copy the keyring and the bearer tokens into every running GCM and host manager container again (what
        ``roq keys client`` added and ``revoke`` removed: each process reads them again within a second);
        return how many containers.

        Raises:
            DeployError: the deployment is insecure, or a container could not be updated.
        """
        if self.keys is None:
            raise DeployError(f"deployment {self.cluster.deployment.name!r} is insecure: it has no keys")
        done = 0
        for row in self._existing():
            if row.get("role") not in ("gcm", "hostmanager") or row.get("status") != "running":
                continue
            container = self._client(row["docker_host"]).containers.get(row["id"])
            try:
                for part in ("keyring", "tokens"):  # replaced whole: a removed key must go
                    container.exec_run(["rm", "-rf", f"{KEYS_IN_CONTAINER}/{part}.new"])
                    container.put_archive("/", _archive(self.keys.directory, (part,), suffix=".new"))
                    container.exec_run(["sh", "-c", f"rm -rf {KEYS_IN_CONTAINER}/{part} && "
                                                    f"mv {KEYS_IN_CONTAINER}/{part}.new {KEYS_IN_CONTAINER}/{part}"])
            except Exception as exc:  # the SDK's APIError, a container gone meanwhile
                raise DeployError(f"{row['role']} on {row['docker_host']} ({row.get('address')}): the keys were "
                                  f"not copied: {_first_line(exc)}") from None
            self.progress(f"keys copied to {row['role']} on {row['docker_host']} ({row.get('address')})")
            done += 1
        return done

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    # ------------------------------------------------------------------ helpers

    def _plan(self) -> list[Planned]:
        """(docker host, role, address, image, command, health check, environment) per container."""
        c = self.cluster
        d = c.deployment
        zk = c.zk
        plan = []
        for z in c.zookeeper:
            if d.zookeeper_image == d.image:  # the RoQ image, on a base with Debian's zookeeper
                command = ["zookeeper", "--address", z.address, "--port", str(z.port)]
                health = ["CMD", "python3", "-m", "deploy.node", "health", "zookeeper", "--address", z.address,
                          "--port", str(z.port)]
                env: dict[str, str] = {}
            else:  # the official image: its entrypoint writes zoo.cfg from these
                command = []
                health = ["CMD-SHELL", "zkServer.sh status"]
                env = {"ZOO_PORT": str(z.port), "ZOO_CFG_EXTRA": f"clientPortAddress={z.address}",
                       "ZOO_ADMINSERVER_ENABLED": "false", "ZOO_4LW_COMMANDS_WHITELIST": "ruok,srvr"}
            plan.append((z.docker_host, "zookeeper", z.address, d.zookeeper_image, command, health, env))
        for i, g in enumerate(c.gcms):
            command = ["gcm", "--zk", zk, "--root", d.root, "--id", f"gcm{i + 1}", "--address", g.address,
                       "--lookup-port", str(g.lookup_port), "--management-port", str(g.management_port),
                       "--broadcast-port", str(g.broadcast_port), "--session-timeout", str(d.session_timeout),
                       "--http-address", g.address, "--http-port", str(g.http_port)]
            health = ["CMD", "python3", "-m", "deploy.node", "health", "gcm", "--address", g.address, "--port",
                      str(g.management_port), "--http-port", str(g.http_port)]
            if self.keys is not None:
                command += [*_secure_flags(), "--api-tokens", f"{KEYS_IN_CONTAINER}/tokens"]
            plan.append((g.docker_host, "gcm", g.address, d.image, command, health, {}))
        for h in c.hostmanagers:
            command = ["hostmanager", "--zk", zk, "--root", d.root, "--address", h.address, "--port", str(h.port),
                       "--max-exchanges", str(h.max_exchanges), "--session-timeout", str(d.session_timeout),
                       "--http-address", h.address, "--http-port", str(h.http_port)]
            health = ["CMD", "python3", "-m", "deploy.node", "health", "hostmanager", "--address", h.address,
                      "--zk", zk, "--root", d.root, "--http-port", str(h.http_port)]
            if d.kpi_queue:
                command += ["--kpi-archive", KPI_ARCHIVE_IN_CONTAINER, "--kpi-queue", d.kpi_queue, "--kpi-rotate-s",
                            str(d.kpi_rotate_s)]
            if self.keys is not None:
                command += _secure_flags()
            plan.append((h.docker_host, "hostmanager", h.address, d.image, command, health, {}))
        for m in c.spark_masters:
            command = ["spark-master", "--address", m.address, "--port", str(m.port), "--ui-port", str(m.ui_port)]
            health = ["CMD", "python3", "-m", "deploy.node", "health", "spark-master", "--address", m.address,
                      "--http-port", str(m.ui_port)]
            plan.append((m.docker_host, "spark-master", m.address, d.spark, command, health, {}))
        for w in c.spark_workers:
            master = c.spark_masters[0]
            command = ["spark-worker", "--address", w.address, "--master", master.url, "--cores", str(w.cores),
                       "--memory", w.memory, "--ui-port", str(w.ui_port)]
            health = ["CMD", "python3", "-m", "deploy.node", "health", "spark-worker", "--address", w.address,
                      "--master-ui", master.ui]
            plan.append((w.docker_host, "spark-worker", w.address, d.spark, command, health, {}))
        return plan

    def _client(self, name: str) -> Any:
        if name not in self._clients:
            url = self.cluster.host(name).url
            try:
                client = self._factory(url)
                client.ping()
            except Exception as exc:  # the SDK's DockerException, a socket error, a TLS error...
                raise DeployError(f"Docker host {name!r} ({url}) cannot be reached: {_first_line(exc)}") from None
            self._clients[name] = client
        return self._clients[name]

    def _check_images(self, plan: list[Planned], pull: bool) -> None:
        import docker.errors

        for host, image in sorted({(p[0], p[3]) for p in plan}):
            client = self._client(host)
            try:
                client.images.get(image)
            except docker.errors.ImageNotFound:
                if not pull:
                    raise DeployError(f"image {image!r} is missing on Docker host {host!r} "
                                      f"({self.cluster.host(host).url}): build or load it there (python -m "
                                      f"deploy.image; docker save | docker load), or use --pull") from None
                self.progress(f"pulling {image} on {host}")
                try:
                    client.images.pull(image)
                except docker.errors.APIError as exc:
                    raise DeployError(f"image {image!r} cannot be pulled on Docker host {host!r}: "
                                      f"{_first_line(exc)}") from None

    def _existing(self) -> list[dict[str, Any]]:
        rows = []
        for host in sorted({spec.docker_host for spec in self.cluster.specs}):
            for container in self._client(host).containers.list(
                    all=True, filters={"label": f"{LABEL}={self.cluster.deployment.name}"}):
                rows.append(_row(host, container))
        return rows

    def _run(self, host: str, name: str, role: str, address: str, image: str, command: list[str],
             health: list[str], env: dict[str, str]) -> Any:
        import docker.errors

        try:
            container = self._client(host).containers.create(
                image, command or None, name=name, detach=True, network_mode="host", init=True, environment=env,
                labels={LABEL: self.cluster.deployment.name, "roq.role": role, "roq.address": address},
                healthcheck={"test": health, "interval": _SECOND, "timeout": 5 * _SECOND, "retries": 3,
                             "start_period": 60 * _SECOND},
                stop_signal="SIGTERM")
        except docker.errors.APIError as exc:
            raise DeployError(f"{role} on Docker host {host!r}: the container was not made: "
                              f"{_first_line(exc)}") from None
        try:
            if self.keys is not None and role in ("gcm", "hostmanager"):
                container.put_archive("/", _archive(self.keys.directory, _SERVER_KEYS))
            if self.spark_credentials and role == "spark-worker":
                container.put_archive("/", _tree(self.spark_credentials))
            container.start()
            return container
        except docker.errors.APIError as exc:
            _remove(container)
            raise DeployError(f"{role} on Docker host {host!r}: the container did not start: "
                              f"{_first_line(exc)}") from None

    def _await_healthy(self, host: str, role: str, address: str, container: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            container.reload()
            state = container.attrs.get("State", {})
            health = (state.get("Health") or {}).get("Status", "")
            if health == "healthy":
                self.progress(f"{role} on {host} ({address}) healthy")
                return
            if state.get("Status") in ("exited", "dead"):
                logs = container.logs(tail=15).decode("utf-8", "replace")
                raise DeployError(f"{role} on Docker host {host!r} ({address}) exited with code "
                                  f"{state.get('ExitCode')}:\n{logs}")
            if time.monotonic() > deadline:
                logs = container.logs(tail=15).decode("utf-8", "replace")
                raise DeployError(f"{role} on Docker host {host!r} ({address}) not healthy after {timeout:g} s "
                                  f"(health {health or 'unknown'}):\n{logs}")
            time.sleep(0.5)


def keys_of(cluster: ClusterFile) -> ClusterKeys | None:
    """The keys of a secure deployment (None: ``insecure = true``)."""
    d = cluster.deployment
    if d.insecure:
        return None
    return ClusterKeys(os.path.expanduser(d.keys or os.path.join("~", ".roq", "deployments", d.name)))


def _secure_flags() -> list[str]:
    return ["--secret-key", f"{KEYS_IN_CONTAINER}/cluster.key_secret", "--keyring", f"{KEYS_IN_CONTAINER}/keyring",
            "--zk-auth", f"{KEYS_IN_CONTAINER}/zookeeper.secret"]


def _archive(directory: str, names: tuple[str, ...], suffix: str = "") -> bytes:
    """A tar of ``names`` under ``directory`` (each named with ``suffix`` added), placed at
    :data:`KEYS_IN_CONTAINER`, modes kept, owned by root."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        top = tarfile.TarInfo(KEYS_IN_CONTAINER.lstrip("/"))
        top.type, top.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(_owned(top))
        for name in names:
            path = os.path.join(directory, name)
            if os.path.exists(path):
                tar.add(path, arcname=f"{KEYS_IN_CONTAINER.lstrip('/')}/{name}{suffix}", filter=_owned)
    return buffer.getvalue()


def _owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _tree(directory: str) -> bytes:
    """A tar of ``directory``'s files at the same absolute path, modes kept, owned by root."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(directory, arcname=os.path.abspath(directory).lstrip("/"), filter=_owned)
    return buffer.getvalue()


def _client(url: str) -> Any:
    try:
        import docker
    except ImportError:
        raise DeployError("the Docker SDK is missing: pip install 'roq-py[deploy]'") from None
    return docker.DockerClient(base_url=url, version="auto", timeout=30)


def _row(host: str, container: Any) -> dict[str, Any]:
    state = container.attrs.get("State", {})
    return {"docker_host": host, "role": container.labels.get("roq.role", "?"),
            "address": container.labels.get("roq.address", "?"), "name": container.name,
            "id": container.short_id, "status": container.status,
            "health": (state.get("Health") or {}).get("Status", "")}


def _remove(container: Any) -> bool:
    try:
        container.remove(force=True)
        return True
    except Exception as exc:  # NotFound: gone already
        return "No such container" in str(exc) or getattr(exc, "status_code", 0) == 404


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc)
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
