"""The processes as an operator meets them: help, bad flags, signals, and no orphans."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from roq.process import spawn
from roq.runtime import ExitCode
from simulation.audit import compare


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("module", ["exchange", "monitor", "simulation", "simulation.load"])
def test_every_command_explains_itself(module):
    done = run("-m", module, "--help")
    assert done.returncode == 0
    assert "usage:" in done.stdout and len(done.stdout) > 200


@pytest.mark.parametrize(
    "args, named",
    [
        (["-m", "exchange", "--monitor", "tcp://127.0.0.1:1", "--heartbeat-interval", "-1"], "heartbeat_interval"),
        (["-m", "exchange", "--monitor", "nonsense"], "tcp://HOST:PORT"),
        (["-m", "exchange", "--monitor", "tcp://127.0.0.1:1", "--backend-port", "99999"], "backend_port"),
        (["-m", "monitor", "--smoothing", "2"], "smoothing"),
        (["-m", "monitor", "--high-records-per-s", "0"], "high_records_per_s"),
    ],
)
def test_bad_flags_are_refused_with_the_name(args, named):
    done = run(*args)
    assert done.returncode == ExitCode.CONFIG
    assert named in done.stderr


def test_a_port_in_use_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.11", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run("-m", "monitor", "--address", "127.0.0.11", "--port", str(port))
    assert done.returncode == ExitCode.BIND
    assert "cannot bind" in done.stderr and str(port) in done.stderr


def test_sigterm_drains_an_exchange_and_moves_its_publishers_without_loss(make_cluster, loads):
    cluster = make_cluster(exchanges=2)
    m = cluster.monitor_endpoint
    sub = loads.start("subscribe", m, "--idle-exit", "4")
    pubs = [loads.start("publish", m, "--rate", "2000", "--duration", "60", "--keys", k) for k in ("a", "b")]
    cluster.wait_for(lambda s: len(s["publishers"]) == 2 and all(x["publishers"] == 1 for x in s["exchanges"]),
                     10, "one publisher per exchange")
    code = cluster.stop_exchange("x1")
    assert code == ExitCode.OK
    status = cluster.wait_for(lambda s: all(p["exchange"] == "x2" for p in s["publishers"]), 5, "all on x2")
    assert any(e["kind"] == "relocated" and e["reason"] == "drain" for e in status["events"])
    assert status["counters"]["exchanges_lost"] == 0
    sent = {}
    for pub in pubs:
        report = loads.report(pub, stop=True)
        sent[report["publisher"]] = report["keys"]
    audit = compare(loads.report(sub)["audit"], sent)
    assert (audit["lost"], audit["duplicated"], audit["reordered"]) == (0, 0, 0), audit


LAUNCHER = """
import json, sys, time
from simulation.cluster import LocalCluster
cluster = LocalCluster(address="127.0.0.13", exchanges=2, log_dir=sys.argv[1]).start()
print(json.dumps(cluster.pids()), flush=True)
time.sleep(600)
"""


def test_children_do_not_outlive_a_killed_launcher(tmp_path):
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(launcher.stdout.readline())
        assert len(pids) == 3 and all(psutil.pid_exists(p) for p in pids)
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 10
        while any(_running(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _running(p)]
    finally:
        launcher.kill()
        launcher.wait()
        launcher.stdout.close()


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_monitor_and_exchange_exit_zero_on_sigterm(tmp_path):
    monitor = spawn("monitor", "monitor", ["--address", "127.0.0.14", "--port", "0"])
    try:
        endpoint = monitor.wait_ready()["endpoint"]
        exchange = spawn("exchange", "exchange", ["--monitor", endpoint, "--address", "127.0.0.14"])
        try:
            info = exchange.wait_ready()
            assert info["frontend"].startswith("tcp://127.0.0.14:")
            exchange.signal(signal.SIGTERM)
            assert exchange.wait(10) == ExitCode.OK
        finally:
            exchange.stop()
        monitor.signal(signal.SIGTERM)
        assert monitor.wait(10) == ExitCode.OK
    finally:
        monitor.stop()
