"""roq deploy on a real Docker engine (the tests' own dockerd): a cluster of one ZooKeeper, one GCM and two
host managers, each on its own loopback address with host networking, used from this machine through the
management API and the client library, then torn down to nothing; failures that leave nothing behind; the
compose file."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

import client
from roqcli.zkserver import free_port
from simulation.runner import Runner
from simulation.scenario import parse_scenario

SHORT = """
[scenario]
name = "on-compose"
duration_s = 5

[[queue]]
name = "short"
rules = { host_cpu_percent = 100 }

[[subscribers]]
prefix = ""

[[publishers]]
count = 2
rate = 400
"""

ZK_ADDRESS, GCM_ADDRESS, HOST_A, HOST_B = "127.0.0.20", "127.0.0.21", "127.0.0.22", "127.0.0.23"
pytestmark = pytest.mark.timeout(900)  # the first test also waits for debootstrap and the image build


def cluster_toml(sock: str, image: str, *, name: str = "t", extra_host: str = "", hostmanager_image: str = "",
                 hm_port: int = 0, keys: str = "") -> str:
    zk = free_port(ZK_ADDRESS)
    lookup, management, broadcast = (free_port(GCM_ADDRESS) for _ in range(3))
    return f"""
[deployment]
name = "{name}"
image = "{hostmanager_image or image}"
zookeeper_image = "{image}"   # ZooKeeper from the RoQ image: its base has Debian's zookeeper
session_timeout = 4.0
{f'keys = "{keys}"' if keys else 'insecure = true'}

[[docker_hosts]]
name = "here"
url = "{sock}"
{extra_host}
[[zookeeper]]
docker_host = "here"
address = "{ZK_ADDRESS}"
port = {zk}

[[gcm]]
docker_host = "here"
address = "{GCM_ADDRESS}"
lookup_port = {lookup}
management_port = {management}
broadcast_port = {broadcast}

[[hostmanager]]
docker_host = "here"
address = "{HOST_A}"
port = {hm_port}

[[hostmanager]]
docker_host = "{'far' if extra_host else 'here'}"
address = "{HOST_B}"
"""


def roq(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "roqcli", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    print(f"$ roq {' '.join(args)}\n{done.stdout}{done.stderr}")
    return done


def labelled(client_: object, name: str) -> list:
    return client_.containers.list(all=True, filters={"label": f"roq.deployment={name}"})  # type: ignore[attr-defined]


def no_roq_processes() -> list[str]:
    return [" ".join(p.info["cmdline"]) for p in psutil.process_iter(["cmdline"])
            if "deploy.node" in " ".join(p.info["cmdline"] or [])]


def test_a_cluster_deployed_on_docker_serves_this_machine_and_goes_away_whole(dockerd, roq_image, tmp_path):
    sock, docker_client = dockerd
    path = tmp_path / "cluster.toml"
    keys = tmp_path / "keys"
    path.write_text(cluster_toml(sock, roq_image, keys=str(keys)))
    up = roq("deploy", "up", str(path))
    assert up.returncode == 0, up.stderr
    assert up.stdout.count("healthy") >= 8  # 4 progress lines and 4 rows
    zk = next(line.split("ZooKeeper ")[1].split()[0] for line in up.stdout.splitlines() if line.startswith("up:"))
    admin = str(keys / "clients" / "admin")  # secure by default: the keys made, the admin's credentials printed
    assert f"--credentials {admin}" in up.stdout and oct((keys / "cluster.key_secret").stat().st_mode & 0o777) == "0o600"

    # from this machine: the management API, then records through the deployed cluster
    def lookup(credentials: str | None) -> str:
        with client.QueueManager(zk, timeout=5, credentials=credentials) as m:
            return m.lookup("orders", timeout=5) if credentials else str(m.hosts())

    with pytest.raises(client.BrokerTimeoutError, match="answers only clients with credentials"):
        lookup(None)
    with client.QueueManager(zk, timeout=30, credentials=admin) as qm:
        assert {h["Address"] for h in qm.hosts()} == {HOST_A, HOST_B}
        qm.create("orders", HOST_B, exchanges=1)
        # a client made after the deployment: its key reaches the containers with roq deploy keys
        assert roq("keys", "client", "bob", "--keys", str(keys)).returncode == 0
        bob = str(keys / "clients" / "bob")
        with pytest.raises(client.BrokerConnectionError, match="refused this client's key"):
            lookup(bob)
        copied = roq("deploy", "keys", str(path))
        assert copied.returncode == 0 and "copied to 3 container(s)" in copied.stdout, copied.stderr
        qm.grant("bob", "subscribe", "orders")
        deadline = time.monotonic() + 10
        while True:  # every process reads its keyring again within a second
            try:
                assert lookup(bob)
                break
            except client.BrokerConnectionError:
                assert time.monotonic() < deadline, "bob's key not admitted after roq deploy keys"
                time.sleep(0.2)
    with client.connect(zk=zk, queue="orders", credentials=admin) as conn:
        sub = conn.subscriber(prefix=b"orders.")
        pub = conn.publisher()
        for i in range(2000):
            pub.send(b"orders.eu" if i % 2 else b"stock.us", i.to_bytes(4, "big"))
        pub.flush(timeout=30)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 1000 and time.monotonic() < deadline:
            msg = sub.recv(timeout=1.0)
            if msg is not None:
                got.append(int.from_bytes(msg.payload, "big"))
    assert got == list(range(1, 2000, 2))  # every orders. record, once, in order

    status = roq("deploy", "status", str(path), "--json")
    assert status.returncode == 0
    rows = __import__("json").loads(status.stdout)
    assert sorted((r["role"], r["address"], r["status"], r["health"]) for r in rows) == [
        ("gcm", GCM_ADDRESS, "running", "healthy"), ("hostmanager", HOST_A, "running", "healthy"),
        ("hostmanager", HOST_B, "running", "healthy"), ("zookeeper", ZK_ADDRESS, "running", "healthy")]

    down = roq("deploy", "down", str(path))
    assert down.returncode == 0 and "removed 4 container(s)" in down.stdout
    assert labelled(docker_client, "t") == [] and docker_client.containers.list(all=True) == []
    deadline = time.monotonic() + 10
    while no_roq_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert no_roq_processes() == []
    assert roq("deploy", "status", str(path)).returncode != 0  # nothing deployed any more


SPARK_MASTER, SPARK_WORKERS = "127.0.0.33", ("127.0.0.34", "127.0.0.35")


def test_a_deployment_with_spark_reports_from_its_kpi_queue_on_its_own_workers(dockerd, roq_image, tmp_path):
    # A secure deployment whose host managers ship their KPI records to a queue, with a Spark master and two workers
    # in containers: roq kpi report from this machine runs its job on them (their Python, the Spark client's
    # credentials copied in) and reads the queue through the roq data source. No shared file system anywhere.
    sock, docker_client = dockerd
    keys = tmp_path / "keys"
    port, ui = free_port(SPARK_MASTER), free_port(SPARK_MASTER)
    spark = f"""
[[spark_master]]
docker_host = "here"
address = "{SPARK_MASTER}"
port = {port}
ui_port = {ui}
""" + "".join(f"""
[[spark_worker]]
docker_host = "here"
address = "{address}"
ui_port = {free_port(address)}
""" for address in SPARK_WORKERS)
    path = tmp_path / "spark.toml"
    path.write_text(cluster_toml(sock, roq_image, name="s", keys=str(keys)).replace(
        "session_timeout = 4.0", 'session_timeout = 4.0\nkpi_queue = "roq.kpi"\nkpi_rotate_s = 1.0') + spark)
    up = roq("deploy", "up", str(path))
    assert up.returncode == 0, up.stderr
    master = f"spark://{SPARK_MASTER}:{port}"
    credentials = str(keys / "clients" / "spark")
    assert f"Spark: master {master} with 2 worker(s), web UI http://{SPARK_MASTER}:{ui}" in up.stdout
    assert f"--credentials {credentials}" in up.stdout and "PYSPARK_PYTHON=python3 roq kpi report" in up.stdout
    zk = next(line.split("ZooKeeper ")[1].split()[0] for line in up.stdout.splitlines() if line.startswith("up:"))
    admin = str(keys / "clients" / "admin")
    try:
        with client.QueueManager(zk, timeout=30, credentials=admin) as qm:
            qm.create("orders", HOST_A, exchanges=1)
            qm.grant("spark", "subscribe", "roq.kpi")
            deadline = time.monotonic() + 60
            while not (qm.exists("roq.kpi") and (journal := qm.journal("roq.kpi")) is not None and journal.alive):
                assert time.monotonic() < deadline, "the host managers' shippers did not make the KPI queue"
                time.sleep(0.2)
        with client.connect(zk=zk, queue="orders", credentials=admin) as conn:
            pub = conn.publisher()
            for i in range(2000):
                pub.send(b"orders.eu", i.to_bytes(4, "big"))
            pub.flush(timeout=30)
        # the exchange's period with those records, shipped (in order: what came before it is there too)
        with client.connect(zk=zk, queue="roq.kpi", credentials=admin) as conn:
            sub = conn.subscriber(prefix=b"", start="earliest")
            hosts, traffic, deadline = set(), 0, time.monotonic() + 90
            while not (traffic and hosts == {HOST_A, HOST_B}):
                assert time.monotonic() < deadline, f"KPI records shipped: traffic {traffic}, hosts {hosts}"
                msg = sub.recv(timeout=1.0)
                if msg is None:
                    continue
                line = __import__("json").loads(msg.payload)
                if msg.key == b"@hosts":
                    hosts.add(line.get("host"))
                elif msg.key == b"orders" and line.get("kind") == "exchange":
                    traffic += line.get("records_in", 0)
        out = tmp_path / "report"
        report = roq("kpi", "report", "--kpi-queue", "roq.kpi", "--master", master, "--zk", zk, "--credentials",
                     credentials, "--queue", "orders", "--out", str(out),
                     env={"PYSPARK_PYTHON": "python3",
                          "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"})
        assert report.returncode == 0, report.stderr[-3000:]
        doc = __import__("json").loads((out / "report.json").read_text())
        assert sum(e["records_in"] for e in doc["queues"]["orders"]["exchanges"]) >= traffic > 0
        assert {h["host"] for h in doc["hosts"]} == {HOST_A, HOST_B}
        # the job ran on the deployed cluster, its executors on its workers
        from roqcli.sparkcluster import master_status
        deadline = time.monotonic() + 30
        while True:
            status = master_status(f"http://{SPARK_MASTER}:{ui}") or {}
            if [app["name"] for app in status.get("completedapps", [])] == ["roq-kpi"]:
                break
            assert time.monotonic() < deadline, f"no completed roq-kpi application on the master: {status}"
            time.sleep(0.5)
        assert {w["host"] for w in status["workers"]} == set(SPARK_WORKERS)
    finally:
        down = roq("deploy", "down", str(path))
    assert down.returncode == 0 and "removed 7 container(s)" in down.stdout
    assert labelled(docker_client, "s") == []


def test_an_unreachable_docker_host_or_a_missing_image_is_named_and_nothing_starts(dockerd, roq_image, tmp_path):
    sock, docker_client = dockerd
    far = '[[docker_hosts]]\nname = "far"\nurl = "unix:///nonexistent/roq/docker.sock"\n'
    path = tmp_path / "far.toml"
    path.write_text(cluster_toml(sock, roq_image, name="far", extra_host=far))
    done = roq("deploy", "up", str(path))
    assert done.returncode != 0 and "Docker host 'far' (unix:///nonexistent/roq/docker.sock) cannot be reached" in done.stderr
    assert labelled(docker_client, "far") == []

    path.write_text(cluster_toml(sock, roq_image, name="missing", hostmanager_image="roq-missing:none"))
    done = roq("deploy", "up", str(path))
    assert done.returncode != 0 and "image 'roq-missing:none' is missing on Docker host 'here'" in done.stderr
    assert labelled(docker_client, "missing") == []


def test_a_process_that_fails_after_others_started_takes_them_all_away(dockerd, roq_image, tmp_path):
    sock, docker_client = dockerd
    taken = socket.socket()
    taken.bind((HOST_A, 0))  # the first host manager's control port is in use: it cannot start
    taken.listen()
    try:
        path = tmp_path / "broken.toml"
        path.write_text(cluster_toml(sock, roq_image, name="broken", hm_port=taken.getsockname()[1]))
        done = roq("deploy", "up", str(path), "--timeout", "60")
    finally:
        taken.close()
    assert done.returncode != 0 and "hostmanager on Docker host 'here' (127.0.0.22) exited" in done.stderr
    assert "removing the" in done.stdout
    assert labelled(docker_client, "broken") == []


def test_the_compose_file_starts_a_healthy_cluster(dockerd, roq_image, tmp_path):
    sock, docker_client = dockerd
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for address, port in ((ZK_ADDRESS, 2181), (GCM_ADDRESS, 5000), (GCM_ADDRESS, 5003), (GCM_ADDRESS, 5005)):
        with socket.socket() as s:  # the compose file's fixed ports must be free here
            try:
                s.bind((address, port))
            except OSError:
                pytest.fail(f"{address}:{port} is in use on this machine: the compose file needs it")
    env = {**os.environ, "DOCKER_HOST": sock, "ROQ_IMAGE": roq_image}
    files = ["-f", os.path.join(repo, "deploy", "compose.yaml"),
             "-f", os.path.join(repo, "deploy", "compose.zookeeper-from-roq.yaml")]
    compose = ["docker-compose", "-p", "roqtest", *files]
    try:
        up = subprocess.run([*compose, "up", "-d"], env=env, capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        deadline = time.monotonic() + 120
        while True:
            states = {c.name: (c.attrs["State"].get("Health") or {}).get("Status") for c in
                      docker_client.containers.list(all=True, filters={"label": "com.docker.compose.project=roqtest"})}
            if len(states) == 4 and set(states.values()) == {"healthy"}:
                break
            assert time.monotonic() < deadline, f"not healthy: {states}"
            time.sleep(1)
        with client.QueueManager(f"{ZK_ADDRESS}:2181", timeout=30) as qm:
            assert {h["Address"] for h in qm.hosts()} == {HOST_A, HOST_B}
        # the simulation runs on it as on its own cluster (python -m simulation run FILE --zk ...)
        summary = Runner(parse_scenario(SHORT, "short.toml"), str(tmp_path / "run"), progress=lambda line: None,
                         zk=f"{ZK_ADDRESS}:2181").run()
        assert summary["keep_up_audit"]["clean"] and summary["published"] > 1000, summary["keep_up_audit"]
    finally:
        down = subprocess.run([*compose, "down"], env=env, capture_output=True, text=True, timeout=300)
    assert down.returncode == 0, down.stderr
    assert docker_client.containers.list(all=True) == []
