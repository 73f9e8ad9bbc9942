"""A real ZooKeeper from Debian's package: standalone, crash and restart, and a 3-member ensemble losing its leader."""

from __future__ import annotations

import os
import time

import psutil

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError

from roqcli.zkserver import ZooKeeperEnsemble, ZooKeeperServer

FAILOVER_DEADLINE_S = 20.0


def _client(hosts: str) -> KazooClient:
    zk = KazooClient(
        hosts=hosts,
        timeout=10.0,
        connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5},
    )
    zk.start(timeout=10.0)
    return zk


def _close(zk: KazooClient) -> None:
    zk.stop()
    zk.close()


def test_standalone_serves_and_stops_clean():
    server = ZooKeeperServer().start()
    try:
        pid, data_dir = server.pid, server.data_dir
        assert server.alive() and pid is not None and os.path.isdir(data_dir)
        assert server.hosts == f"127.0.0.1:{server.port}"
        assert server.mode() == "standalone"
        zk = _client(server.hosts)
        try:
            zk.create("/roq/hello", b"world", makepath=True)
            assert zk.get("/roq/hello")[0] == b"world"
        finally:
            _close(zk)
    finally:
        server.stop()
    assert not server.alive() and server.pid is None
    assert not psutil.pid_exists(pid)
    assert not os.path.exists(data_dir)
    server.stop()  # idempotent


def test_kill_then_restart_keeps_data():
    with ZooKeeperServer() as server:
        hosts = server.hosts
        zk = _client(hosts)
        try:
            zk.create("/roq/durable", b"kept", makepath=True)
        finally:
            _close(zk)
        pid = server.pid
        server.kill()
        assert not server.alive() and not psutil.pid_exists(pid)
        assert os.path.isdir(server.data_dir)

        server.restart()
        assert server.hosts == hosts and server.pid != pid
        zk = _client(hosts)
        try:
            assert zk.get("/roq/durable")[0] == b"kept"
        finally:
            _close(zk)


def _write_until(zk: KazooClient, path: str, value: bytes, deadline: float) -> None:
    """Create ``path`` (retrying through connection loss and the election) and read it back."""
    while True:
        try:
            try:
                zk.create(path, value, makepath=True)
            except NodeExistsError:  # a create whose reply was lost with the connection
                pass
            assert zk.get(path)[0] == value
            return
        except KazooException:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def test_ensemble_survives_its_leader_crash(tmp_path):
    ensemble = ZooKeeperEnsemble(3, log_dir=str(tmp_path))
    assert len(ensemble.servers) == 3
    assert len(set(ensemble.hosts.split(","))) == 3
    ensemble.start()
    try:
        pids = [server.pid for server in ensemble.servers]
        modes = [server.mode() for server in ensemble.servers]
        assert sorted(modes) == ["follower", "follower", "leader"]

        zk = _client(ensemble.hosts)
        try:
            zk.create("/roq/before", b"1", makepath=True)
            leader = ensemble.servers[modes.index("leader")]
            leader.kill()
            assert not leader.alive()

            deadline = time.monotonic() + FAILOVER_DEADLINE_S
            _write_until(zk, "/roq/after", b"2", deadline)
            assert zk.get("/roq/before")[0] == b"1"
            survivors = [server.mode() for server in ensemble.servers if server is not leader]
            assert sorted(survivors) == ["follower", "leader"]
        finally:
            _close(zk)
    finally:
        ensemble.stop()
    assert not any(psutil.pid_exists(pid) for pid in pids)
    assert all(not server.alive() for server in ensemble.servers)
    assert sorted(os.listdir(tmp_path)) == ["zookeeper-1.log", "zookeeper-2.log", "zookeeper-3.log"]
