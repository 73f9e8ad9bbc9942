"""The GCM's settings: one frozen dataclass, from ``--config``'s ``[gcm]`` table and the flags."""

from __future__ import annotations

import dataclasses

from roq.security.acl import Rule
from roq.config import check_curve_settings
from roq.errors import ConfigError
from roq.federation import Tree
from roq.zk import Paths, check_hosts
from roq import defaults

__all__ = ["GcmConfig"]


@dataclasses.dataclass(frozen=True)
class GcmConfig:
    """A GCM.

    Attributes:
        zk: ZooKeeper servers, host:port[,host:port...]
        address: address to bind the three ports to
        lookup_port: client look-up port (0 = any free port; the real endpoints are published in ZooKeeper)
        management_port: management API port (0 = any free port)
        broadcast_port: configuration broadcast port (0 = any free port)
        root: ZooKeeper root of the cluster
        session_timeout: ZooKeeper session timeout, seconds; a dead leader is replaced this long after it died
        broadcast_period: seconds between periodic broadcasts (changes are broadcast at once)
        ready_timeout: longest wait, seconds, of create and start for the queue's processes before answering
            UNAVAILABLE
        stop_timeout: longest wait, seconds, of stop and remove for the queue's processes to go
        host_grace: seconds a host holding exchanges or monitors of running queues may be unregistered (as
            seen by the leader) before they are moved to other hosts
        gcm_id: a name for this GCM in logs, replies and the election ("" = generated)
        http_address: address of the HTTP API, metrics and health checks (loopback by default: exposing
            them is a decision, see docs/http.md)
        http_port: its port (0 = any free port, -1 = no HTTP server)
        api_token_file: a file holding the bearer token that writes over HTTP need (readable by its owner
            only); "" = writes over HTTP are refused
        census_period: seconds between the leader's rounds of asking every running queue's monitor for its
            status (what the metrics, the queue list and the dashboard show)
        metrics_top: series kept per queue for publishers and for subscribers in the metrics (the busiest;
            the others are summed into one series labelled ``other``)
        secret_key: the cluster's CURVE secret key file: the look-up, management and broadcast ports are served
            with CURVE, and the GCM asks the monitors with it ("" = plaintext, anyone may connect)
        keyring: with ``secret_key``, the directory of the public keys that may connect
        admin: with ``secret_key``, the principal a cluster without permissions yet starts with as its
            administrator (allowed to administer, publish and subscribe; nobody else anything)
        api_tokens: a directory of bearer tokens for the HTTP API, ``NAME.token`` for the principal NAME (read again
            when it changes); ``api_token_file`` is the ``admin``'s ("" = none)
        cluster_name: the cluster's name in its tree of clusters (1-64 of A-Z a-z 0-9 _ . -; "" = in no tree):
            child clusters' links say hello to it (:mod:`gcm._federation`)
        cluster_role: its place there: root, branch (it has a parent and children) or leaf (no children)
        parent_zk: a branch's or a leaf's parent cluster's ZooKeeper: the GCM places a link for each queue whose
            rules say ``link = "parent"`` ("" = no parent: no links are placed; links may be started by hand)
        parent_root: the parent cluster's ZooKeeper root
        parent_credentials: a directory of this cluster's credentials in the parent cluster, the same path on
            every host ("" = the parent is plaintext)
        zk_auth: a file holding the cluster's ZooKeeper identity (``USER:PASSWORD``, its owner's only): the GCM
            authenticates with it and the nodes it creates may be changed by it alone ("" = none)
    """

    zk: str
    address: str = "127.0.0.1"
    lookup_port: int = defaults.LOOKUP_PORT
    management_port: int = defaults.MANAGEMENT_PORT
    broadcast_port: int = defaults.BROADCAST_PORT
    root: str = defaults.ROOT
    session_timeout: float = defaults.SESSION_TIMEOUT
    broadcast_period: float = 2.0
    ready_timeout: float = 15.0
    stop_timeout: float = 15.0
    host_grace: float = 2.0
    gcm_id: str = dataclasses.field(default="", metadata={"flag": "--id"})
    http_address: str = "127.0.0.1"
    http_port: int = defaults.HTTP_PORT
    api_token_file: str = ""
    census_period: float = 1.0
    metrics_top: int = 10
    secret_key: str = ""
    keyring: str = ""
    admin: str = "admin"
    zk_auth: str = ""
    api_tokens: str = ""
    cluster_name: str = ""
    cluster_role: str = "root"
    parent_zk: str = ""
    parent_root: str = defaults.ROOT
    parent_credentials: str = ""

    def __post_init__(self) -> None:
        check_hosts(self.zk)
        if self.cluster_name:
            Tree(self.cluster_name, self.cluster_role)  # a cluster's name and role, or ConfigError saying why
        elif self.cluster_role != "root":
            raise ConfigError(f"cluster_role {self.cluster_role!r} needs a cluster_name")
        if self.parent_zk:
            check_hosts(self.parent_zk)
            Paths(self.parent_root)
            if not self.cluster_name or self.cluster_role == "root":
                raise ConfigError("parent_zk names a parent cluster: give this cluster a cluster_name and the "
                                  "cluster_role branch or leaf")
        elif self.parent_credentials:
            raise ConfigError("parent_credentials are this cluster's credentials in its parent: give parent_zk too")
        check_curve_settings(self)
        Rule(self.admin, "admin")  # a principal's name
        Paths(self.root)
        for name in ("lookup_port", "management_port", "broadcast_port"):
            if not 0 <= getattr(self, name) < 65536:
                raise ConfigError(f"{name} must be between 0 and 65535, got {getattr(self, name)}")
        if not -1 <= self.http_port < 65536:
            raise ConfigError(f"http_port must be between -1 (no HTTP server) and 65535, got {self.http_port}")
        if not 0 <= self.metrics_top <= 1000:
            raise ConfigError(f"metrics_top must be between 0 and 1000, got {self.metrics_top}")
        for name in ("session_timeout", "broadcast_period", "ready_timeout", "stop_timeout", "host_grace",
                     "census_period"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
