"""``roq cluster up``: an embedded cluster in the foreground, supervised, stopped whole on Ctrl-C or SIGTERM."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from typing import Any

from roq.errors import RoQError
from roq.wire.ready import GcmReady
from roq.runtime import ExitCode
from roqcli.keys import DEFAULT_CLUSTER_KEYS
from roq import defaults

__all__ = ["ClusterSettings", "cluster_up", "federation_args"]


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """``[cluster]``: what ``roq cluster up`` starts."""

    hosts: int = 3
    first_host: str = "127.0.0.11"
    zk: str = ""  # "" = start ZooKeeper on 127.0.0.1:zk_port
    zk_port: int = defaults.ZK_PORT
    gcms: int = 2
    root: str = defaults.ROOT
    session_timeout: float = defaults.SESSION_TIMEOUT
    max_exchanges: int = 4
    lookup_port: int = defaults.LOOKUP_PORT
    management_port: int = defaults.MANAGEMENT_PORT
    broadcast_port: int = defaults.BROADCAST_PORT
    http_port: int = defaults.HTTP_PORT  # the first GCM's HTTP API, metrics and dashboard (on 127.0.0.1); -1 = none
    log_dir: str = ""
    kpi_archive: str = ""  # "" = LOG_DIR/kpi-archive
    kpi_queue: str = ""  # the queue each host's archive is shipped to ("" = none)
    host_cpus: str = ""  # each host's CPU budget in cores: one for all (0.5) or one per host (0.5,1,2); "" = none
    host_bandwidth: str = ""  # each host's link rate (100mbit), one for all or one per host; "" = loopback hosts
    keys: str = ""  # the cluster's keys (made where missing); "" = ~/.roq/cluster
    insecure: bool = False  # no CURVE: anyone who reaches the cluster's ports may use it
    cluster_name: str = ""  # its name in a tree of clusters ("" = in no tree)
    cluster_role: str = "root"  # root, branch or leaf
    parent_zk: str = ""  # a branch's or leaf's parent cluster's ZooKeeper: linked queues get a link to it
    parent_root: str = defaults.ROOT
    parent_credentials: str = ""  # this cluster's credentials in its parent ("" = the parent is plaintext)


def federation_args(s: ClusterSettings) -> list[str]:
    """The GCMs' flags of the cluster's place in a tree of clusters (none outside a tree)."""
    if not s.cluster_name:
        return []
    args = ["--cluster-name", s.cluster_name, "--cluster-role", s.cluster_role]
    if s.parent_zk:
        args += ["--parent-zk", s.parent_zk, "--parent-root", s.parent_root]
        if s.parent_credentials:
            args += ["--parent-credentials", os.path.abspath(os.path.expanduser(s.parent_credentials))]
    return args


def cluster_up(s: ClusterSettings) -> int:
    import tempfile

    from roqcli.embedded import EmbeddedCluster
    from roqcli.emulation import parse_budgets

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Ctrl-C and SIGTERM both stop everything (SIGINT may arrive ignored when started in the background)
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    budgets = parse_budgets(s.hosts, s.host_cpus, s.host_bandwidth) if s.host_cpus or s.host_bandwidth else None
    log_dir = s.log_dir or tempfile.mkdtemp(prefix="roq-cluster-")
    archive = os.path.abspath(s.kpi_archive or os.path.join(log_dir, "kpi-archive"))
    keys = os.path.expanduser(s.keys or DEFAULT_CLUSTER_KEYS)
    cluster = EmbeddedCluster(
        hosts=s.hosts, first_host=s.first_host, zk=s.zk or None, zk_port=s.zk_port, gcms=s.gcms, root=s.root,
        session_timeout=s.session_timeout, max_exchanges=s.max_exchanges, log_dir=log_dir,
        gcm_ports=(s.lookup_port, s.management_port, s.broadcast_port), kpi_archive=archive,
        kpi_queue=s.kpi_queue or None, budgets=budgets,
        http_port=s.http_port, secure=not s.insecure, keys=keys, gcm_args=federation_args(s),
    )  # fmt: skip
    print(f"starting: {s.hosts} host(s) from {s.first_host}, {s.gcms} GCM(s); logs in {log_dir}; "
          f"KPI archive {archive}" + (f", shipped to queue {s.kpi_queue}" if s.kpi_queue else ""), flush=True)
    try:
        cluster.start()
        leader = cluster.manager.leader()
        print(f"zookeeper   {cluster.zk}{' (started here)' if not s.zk else ''}")
        for gid, child in cluster.gcms.items():
            info = child.ready_as(GcmReady)
            print(f"gcm         {gid} pid {child.pid}: look-up {info.lookup}, management {info.management}, "
                  f"broadcast {info.broadcast}, http {info.http or '-'}"
                  f"{' (leader)' if gid == leader['id'] else ''}")
        print(f"http api    dashboard and API at {cluster.http_url()}/ (writes need the bearer token in "
              f"{cluster.api_token_file})")
        if cluster.keys is not None:
            print(f"security    CURVE on every socket: the cluster's keys in {cluster.keys.directory} (keyring "
                  f"{cluster.keys.keyring}); the admin's credentials: {cluster.credentials}")
        else:
            print("security    INSECURE (--insecure): no CURVE, anyone who reaches the cluster's ports may use it")
        if s.cluster_name:
            parent = f", under the cluster of {s.parent_zk}{s.parent_root}" if s.parent_zk else ""
            print(f"federation  {s.cluster_name} ({s.cluster_role}){parent}: roq federation status")
        hosts = cluster.emulation.describe() if cluster.emulation is not None else cluster.addresses
        for line, child in zip(hosts, cluster.hostmanagers.values()):
            print(f"hostmanager {line} pid {child.pid}")
        creds = f" --credentials {cluster.credentials}" if cluster.credentials else ""
        print(f"ready. try: roq queue create demo --zk {cluster.zk}{creds}    (Ctrl-C stops everything)",
              flush=True)
        _status_loop(cluster)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
        print("\nstopping...", flush=True)
        cluster.stop()
        print("stopped", flush=True)
    return ExitCode.OK


def _status_loop(cluster: Any) -> None:
    """A status line every second; a GCM or host manager that exits is started again (and said so)."""
    tty = sys.stdout.isatty()
    last = ""
    while True:
        for line in cluster.supervise():
            print(("\n" if tty else "") + time.strftime("%H:%M:%S ") + line, flush=True)
        try:
            queues = cluster.manager.list()
            hosts = cluster.manager.hosts()
            line = (f"leader {cluster.leader()} | hosts {len(hosts)} | queues {len(queues)} "
                    f"({sum(q['State'] == 'running' for q in queues)} running) | "
                    f"exchanges {sum(len(q['Exchanges']) for q in queues)}")
        except RoQError as exc:
            line = f"cluster not answering: {exc}"
        if tty:
            print("\r" + line.ljust(100), end="", flush=True)
        elif line != last:
            print(time.strftime("%H:%M:%S ") + line, flush=True)
        last = line
        time.sleep(1.0)
