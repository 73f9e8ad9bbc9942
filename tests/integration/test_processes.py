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
import zmq

from roq.wire import control
from roq.wire.documents import ExchangeDoc, MonitorDoc
from roq.process import spawn
from roq.runtime import ExitCode
from roq.zk import Paths
from simulation.audit import compare
from tests.integration.zkhelp import wait_until


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
        (["-m", "exchange", "--monitor", "tcp://127.0.0.1:1", "--subscriber-queue-bytes", "0"], "subscriber_queue_bytes"),
        # a host manager checks its children's settings before it starts any
        (["-m", "hostmanager", "--zk", "127.0.0.1:1", "--exchange-option", "backend_hwm=0"], "backend_hwm"),
        (["-m", "hostmanager", "--zk", "127.0.0.1:1", "--monitor-option", "sustian=1"], "did you mean 'sustain'"),
        (["-m", "hostmanager", "--zk", "127.0.0.1:1", "--exchange-option", "monitor=tcp://127.0.0.1:1"],
         "set by the host manager"),
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
    cluster.wait_for(lambda s: len(s.publishers) == 2 and all(x.publishers == 1 for x in s.exchanges),
                     10, "one publisher per exchange")
    code = cluster.stop_exchange("x1")
    assert code == ExitCode.OK
    status = cluster.wait_for(lambda s: all(p.exchange == "x2" for p in s.publishers), 5, "all on x2")
    assert any(e["kind"] == "relocated" and e["reason"] == "drain" for e in status.events)
    assert status.count("exchanges_lost") == 0
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
        endpoint = monitor.wait_ready().endpoint
        exchange = spawn("exchange", "exchange", ["--monitor", endpoint, "--address", "127.0.0.14"])
        try:
            info = exchange.wait_ready()
            assert info.frontend.startswith("tcp://127.0.0.14:")
            exchange.signal(signal.SIGTERM)
            assert exchange.wait(10) == ExitCode.OK
        finally:
            exchange.stop()
        monitor.signal(signal.SIGTERM)
        assert monitor.wait(10) == ExitCode.OK
    finally:
        monitor.stop()


def test_a_host_manager_runs_its_assignments_from_their_settings_and_tells_an_exchange_its_monitor_moved(
        zookeeper, kz, tmp_path):
    root, address = f"/roq-hm-{time.monotonic_ns()}", "127.0.0.15"
    paths = Paths(root)
    kz.ensure_path(paths.exchanges("q"))
    log = tmp_path / "hostmanager.log"
    err = log.open("ab")
    hm = spawn("hostmanager", "hostmanager", [
        "--zk", zookeeper.hosts, "--root", root, "--address", address, "--session-timeout", "4",
        "--log-dir", str(tmp_path), "--exchange-option", "backend_hwm=100", "--exchange-option", "heartbeat_interval=0.1",
    ], stderr=err)
    ctx = zmq.Context()
    stand_in = ctx.socket(zmq.ROUTER)
    stand_in.setsockopt(zmq.LINGER, 0)
    try:
        hm.wait_ready(15)
        for name in ("q@monitor", "q@x1", "not an assignment"):
            kz.create(f"{paths.host_assignments(address)}/{name}")

        def node(path, cls):
            found = kz.exists(path) and kz.get(path)
            return cls.decode(found[0]) if found else None

        monitor = wait_until(lambda: node(paths.monitor("q"), MonitorDoc), 20, "the monitor published")
        x1 = wait_until(lambda: node(paths.exchange("q", "x1"), ExchangeDoc), 20, "the exchange published")
        assert x1.name.startswith("x1-") and x1.host == address
        wait_until(lambda: "ignoring the assignment 'not an assignment'" in log.read_text(), 10, "a bad name skipped")
        args = psutil.Process(x1.pid).cmdline()
        assert {"--backend-hwm=100", "--commands-on-stdin", f"--monitor={monitor.endpoint}", f"--id={x1.name}"} <= set(args)

        # the monitor moves (here: to a stand-in of the test's): the exchange is told, not restarted
        kz.delete(f"{paths.host_assignments(address)}/q@monitor")
        wait_until(lambda: not kz.exists(paths.monitor("q")), 20, "the monitor stopped and unpublished")
        endpoint = f"tcp://127.0.0.1:{stand_in.bind_to_random_port('tcp://127.0.0.1')}"
        for garbage, said in ((b"not json", "holds no valid document"),
                              (MonitorDoc(endpoint="tcp://h:" + "9" * 5000).encode(), "ignoring its monitor's node"),
                              (MonitorDoc(endpoint="nowhere").encode(), "ignoring its monitor's node: endpoint")):
            seen = log.read_text().count(said)
            kz.create(paths.monitor("q"), garbage, ephemeral=True)
            wait_until(lambda: log.read_text().count(said) > seen, 10, f"the host manager to say {said!r}")
            kz.delete(paths.monitor("q"))
        assert hm.alive() and psutil.Process(x1.pid).is_running()
        kz.create(paths.monitor("q"), MonitorDoc(endpoint=endpoint, host="elsewhere").encode(), ephemeral=True)
        assert stand_in.poll(15_000), "no heartbeat at the monitor's new endpoint"
        beat = control.decode(stand_in.recv_multipart()[1])
        assert isinstance(beat, control.Heartbeat) and (beat.exchange, beat.pid) == (x1.name, x1.pid)

        kz.delete(f"{paths.host_assignments(address)}/q@x1")
        wait_until(lambda: not kz.exists(paths.exchange("q", "x1")), 20, "the exchange stopped and unpublished")
        assert not psutil.pid_exists(x1.pid) or psutil.Process(x1.pid).status() == psutil.STATUS_ZOMBIE
        hm.signal(signal.SIGTERM)
        assert hm.wait(15) == ExitCode.OK
    finally:
        hm.stop(5)
        err.close()
        stand_in.close()
        ctx.term()
