"""The ``roq`` command line as an operator meets it: a cluster in the foreground, queue commands, config errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest
from zkhelp import gone, wait_until

from roq.process import spawn
from roq.runtime import ExitCode


def pid_in(line: str) -> int:
    """The number after the first "pid" of a line of ``roq cluster up``'s output."""
    return int(line.split("pid ", 1)[1].split(":")[0].split(")")[0].split()[0])


def roq(*args: str, timeout: float = 60, credentials: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if credentials is not None:
        env["ROQ_CREDENTIALS"] = credentials
    return subprocess.run([sys.executable, "-m", "roqcli", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_cluster_up_serves_the_queue_commands_and_stops_on_ctrl_c(tmp_path):
    keys = tmp_path / "keys"
    up = spawn("roq cluster up", "roqcli", [
        "cluster", "up", "--hosts", "2", "--zk-port", "0", "--lookup-port", "0", "--management-port", "0",
        "--broadcast-port", "0", "--http-port", "0", "--session-timeout", "4", "--log-dir", str(tmp_path / "logs"),
        "--keys", str(keys),
    ], stderr=open(tmp_path / "up.err", "wb"))  # fmt: skip
    try:
        out = b""
        import select

        def ready() -> bool:
            nonlocal out
            if select.select([up.stdout_fd], [], [], 0.1)[0]:
                out += os.read(up.stdout_fd, 65536)
            return b"ready." in out

        wait_until(ready, 60, "the cluster up and ready")
        text = out.decode()
        zk = next(line.split()[1] for line in text.splitlines() if line.startswith("zookeeper"))
        assert text.count("hostmanager 127.0.0.1") == 2 and text.count("gcm ") == 2 and "(leader)" in text
        pids = [pid_in(line) for line in text.splitlines() if " pid " in line]
        leader = next(pid_in(line) for line in text.splitlines() if "(leader)" in line)
        host2 = next(pid_in(line) for line in text.splitlines() if line.startswith("hostmanager 127.0.0.12"))
        # secure by default: the keys it made, with safe modes, and the admin's credentials, printed
        admin = next(line.rsplit("credentials: ", 1)[1] for line in text.splitlines() if line.startswith("security"))
        assert admin == str(keys / "clients" / "admin") and f"--credentials {admin}" in text
        assert oct((keys / "cluster.key_secret").stat().st_mode & 0o777) == "0o600"
        assert oct((keys / "clients" / "admin" / "admin.key_secret").stat().st_mode & 0o777) == "0o600"
        stranger = roq("queue", "create", "orders", "--zk", zk, "--timeout", "3")
        assert stranger.returncode == ExitCode.FAILURE and "only clients with credentials" in stranger.stderr
        os.environ["ROQ_CREDENTIALS"] = admin  # for every roq below
        bob = roq("keys", "client", "bob", "--keys", str(keys))
        assert bob.returncode == 0 and str(keys / "clients" / "bob") in bob.stdout, bob.stderr
        as_bob = str(keys / "clients" / "bob")
        # admitted by the keyring (within a second), but allowed nothing: a clear refusal, until granted
        wait_until(lambda: "bob may not admin" in roq("queue", "list", "--zk", zk, "--timeout", "3",
                                                      credentials=as_bob).stderr, 30, "bob's key admitted")
        granted = roq("acl", "grant", "bob", "admin", "--zk", zk)
        assert granted.returncode == 0 and "allow admin     to bob" in granted.stdout, granted.stderr
        assert roq("queue", "list", "--zk", zk, credentials=as_bob).returncode == 0
        audit = roq("audit", "--zk", zk)
        assert audit.returncode == 0 and "admin" in audit.stdout and "Grant" in audit.stdout, audit.stderr
        assert "bob" in audit.stdout and "ListQueues -> FORBIDDEN" in audit.stdout, audit.stdout
        listed = roq("acl", "list", "--zk", zk, "--json")
        assert {"principal": "bob", "permission": "admin", "queues": "*", "allow": True, "prefixes": []} in json.loads(
            listed.stdout)
        assert roq("keys", "revoke", "bob", "--keys", str(keys)).returncode == 0
        wait_until(lambda: "refused this client's key" in roq("queue", "list", "--zk", zk, "--timeout", "3",
                                                               credentials=as_bob).stderr, 30, "bob's key refused")

        made = roq("queue", "create", "orders", "--host", "127.0.0.11", "--zk", zk, "--exchanges", "2")
        assert made.returncode == 0, made.stderr
        assert "orders" in made.stdout and "running" in made.stdout
        listed = json.loads(roq("queue", "list", "--zk", zk, "--json").stdout)
        assert [q["Name"] for q in listed] == ["orders"] and len(listed[0]["Exchanges"]) == 2
        hosts = roq("hosts", "--zk", zk)
        assert hosts.returncode == 0 and "127.0.0.11" in hosts.stdout and "127.0.0.12" in hosts.stdout
        status = roq("status", "--zk", zk)
        assert status.returncode == 0, status.stderr
        assert "hosts    2   queues 1 (1 running)" in status.stdout and "orders" in status.stdout, status.stdout
        summary = json.loads(roq("status", "--zk", zk, "--json").stdout)
        assert [q["exchanges"] for q in summary["queues"]] == [2] and summary["leader"]["http"].startswith("http://")
        dashboard = next(line.split(" at ", 1)[1].split("/ ", 1)[0] for line in text.splitlines()
                         if line.startswith("http api"))
        with urllib.request.urlopen(dashboard + "/readyz", timeout=10) as r:
            assert r.status == 200
        watched = roq("watch", "--count", "1", "--json", "--zk", zk)
        assert watched.returncode == 0, watched.stderr
        broadcast = json.loads(watched.stdout.splitlines()[-1])
        assert broadcast["Queues"][0]["Name"] == "orders" and len(broadcast["Hosts"]) == 2
        refused = roq("queue", "rules", "orders", "max_exchanges=-1", "--zk", zk)
        assert refused.returncode == ExitCode.FAILURE and "max_exchanges" in refused.stderr and "1102" in refused.stderr
        missing = roq("queue", "stop", "nothing", "--zk", zk)
        assert missing.returncode == ExitCode.FAILURE and "no queue named 'nothing'" in missing.stderr
        assert roq("queue", "remove", "orders", "--zk", zk).returncode == 0

        # a GCM or a host manager that dies is started again, and the cluster serves on
        os.kill(leader, signal.SIGKILL)
        os.kill(host2, signal.SIGKILL)
        wait_until(lambda: ready() and out.count(b"exited with code") >= 2, 60, "both restarts reported")
        restarts = [line for line in out.decode().splitlines() if "exited with code" in line]
        assert any(line.split()[1] == "gcm" for line in restarts) and any("127.0.0.12" in line for line in restarts)
        pids += [int(line.rsplit("(pid ", 1)[1].rstrip(")")) for line in restarts]  # the ones started again
        again = roq("queue", "create", "again", "--zk", zk, "--host", "127.0.0.12")  # the new leader, the new host manager
        assert again.returncode == 0, again.stderr
        assert roq("queue", "remove", "again", "--zk", zk).returncode == 0

        up.signal(signal.SIGINT)  # Ctrl-C
        assert up.wait(60) == 0
        assert all(gone(p) for p in pids)
    finally:
        os.environ.pop("ROQ_CREDENTIALS", None)
        up.stop()


@pytest.mark.parametrize(
    "toml, named",
    [
        ("[cluster]\nhost = 3\n", "unknown key 'host' (did you mean 'hosts'?)"),
        ("[cluster]\nhosts = \"three\"\n", "key 'hosts' must be an integer"),
        ("[cluster]\nsession_timeout = true\n", "key 'session_timeout' must be a number"),
        ("[cluster\n", "not valid TOML"),
    ],
)
def test_cluster_config_errors_name_the_key(tmp_path, toml, named):
    path = tmp_path / "roq.toml"
    path.write_text(toml)
    done = roq("--config", str(path), "cluster", "up")
    assert done.returncode == ExitCode.CONFIG
    assert named in done.stderr and str(path) in done.stderr


def test_client_config_file_is_strict_too(tmp_path):
    path = tmp_path / "roq.toml"
    path.write_text("[client]\nzookeeper = '127.0.0.1:2181'\n")
    done = roq("--config", str(path), "queue", "list")
    assert done.returncode == ExitCode.CONFIG and "unknown key 'zookeeper'" in done.stderr


@pytest.mark.parametrize("module", ["gcm", "hostmanager", "roqcli"])
def test_control_plane_commands_explain_themselves(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "usage:" in done.stdout and len(done.stdout) > 300


@pytest.mark.parametrize(
    "args, named",
    [
        (["-m", "gcm"], "missing key 'zk'"),
        (["-m", "hostmanager", "--zk", "localhost"], "bad ZooKeeper address"),
        (["-m", "hostmanager", "--zk", "127.0.0.1:1", "--max-exchanges", "-2"], "max_exchanges"),
        (["-m", "gcm", "--zk", "127.0.0.1:1", "--session-timeout", "0"], "session_timeout"),
    ],
)
def test_control_plane_bad_flags_are_named(args, named):
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == ExitCode.CONFIG, done.stderr
    assert named in done.stderr


def test_keys_new_writes_a_pair_with_safe_modes_and_refuses_to_overwrite_it(tmp_path):
    made = roq("keys", "new", "client-1", "--dir", str(tmp_path / "keys"))
    assert made.returncode == 0, made.stderr
    secret = tmp_path / "keys" / "client-1.key_secret"
    assert str(secret) in made.stdout and oct(secret.stat().st_mode & 0o777) == "0o600"
    again = roq("keys", "new", "client-1", "--dir", str(tmp_path / "keys"))
    assert again.returncode == ExitCode.CONFIG and "exists" in again.stderr
    assert roq("keys", "new", "client-1", "--dir", str(tmp_path / "keys"), "--force").returncode == 0
    bad = roq("keys", "new", "../up", "--dir", str(tmp_path / "keys"))
    assert bad.returncode == ExitCode.CONFIG and "a key's name" in bad.stderr
