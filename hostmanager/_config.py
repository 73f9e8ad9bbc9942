"""A host manager's settings, and the settings objects of the children it starts.

A child is started as ``python -m <module>`` with the flags of its config object
(:func:`roq.settings.to_args`): a :class:`~roq.config.MonitorConfig`, an :class:`~roq.config.ExchangeConfig`
or a :class:`~roq.config.JournalConfig` made from what the host manager knows (its address, ZooKeeper, the
ports it allocated, the monitor's endpoint) and the operator's ``exchange_options`` / ``monitor_options`` /
``link_options`` (``KEY=VALUE``, checked when the host manager starts, so that a bad one stops it with a clear message
instead of making every child die at start). The module comes from :data:`MODULES`, never from ZooKeeper.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any, TypedDict

from roq.config import (MAX_LINK_NAME, ExchangeConfig, JournalConfig, LinkConfig, MonitorConfig, ShipperConfig,
                        check_curve_settings)
from roq.wire.documents import FederationDoc
from roq.errors import ConfigError
from roq.settings import parse_assignments, parse_rate
from roq.zk import Paths, check_hosts, check_queue_name
from roq import defaults

__all__ = ["HostManagerConfig", "ChildSettings", "MODULES"]

#: role -> the module run for it
MODULES = {"monitor": "monitor", "exchange": "exchange", "journal": "exchange.journal", "link": "client.link",
           "shipper": "client.shipper"}
#: fields the host manager sets itself (an option may not)
_OWN_MONITOR_FIELDS = ("address", "port", "queue", "zk", "root", "session_timeout", "kpi_archive", "archive_rotate_s",
                       "secret_key",
                       "keyring", "zk_auth")
_OWN_EXCHANGE_FIELDS = ("monitor", "address", "frontend_port", "backend_port", "exchange_id", "commands",
                        "secret_key", "keyring")
_OWN_LINK_FIELDS = ("name", "source", "target", "queue", "cluster", "role", "parent_zk", "parent_root",
                    "target_credentials", "source_credentials", "on_demand", "down", "cluster_key", "zk", "root")
#: a syntactically valid endpoint to check exchange options against, before any monitor is known
_OWN_JOURNAL_FIELDS = ("queue", "directory", "monitor", "address", "intake_port", "reads_port", "journal_id",
                       "generation", "commands", "secret_key", "keyring", "followers", "follow", "epoch", "peers",
                       "replicas", "learner")
_ANY_MONITOR = "tcp://127.0.0.1:1"


@dataclasses.dataclass(frozen=True)
class HostManagerConfig:
    """A host manager.

    Attributes:
        zk: ZooKeeper connection string.
        address: the host's address: children bind to it and it names the host in ZooKeeper.
        port: the host manager's control port (Ping, Status); 0 = any free port.
        root: ZooKeeper root of the cluster.
        max_exchanges: how many exchanges this host accepts (capacity published in ZooKeeper).
        cpus: the host's CPU budget in cores, which its CPU % is of (0 = the quota of the host manager's cgroup,
            as in a container run with --cpus or on an emulated host; else the machine's cores).
        link_rate: the rate of the host's link, as tc writes it (100mbit, 1gbit; "" = unknown): its network
            use is reported against it.
        kpi_period: seconds between host KPI updates in ZooKeeper.
        session_timeout: ZooKeeper session timeout: this host vanishes this long after a crash.
        port_low, port_high: the port range for children (both 0 = any free port).
        log_dir: directory for the children's logs ("" = inherit this process's stderr).
        exchange_options: settings of every exchange started, KEY=VALUE each (fields of the exchange's
            config, e.g. backend_hwm=100; repeatable).
        monitor_options: settings of every monitor started, KEY=VALUE each (fields of the monitor's config,
            e.g. sustain=1; repeatable).
        link_options: settings of every link to the parent cluster started, KEY=VALUE each (fields of the
            link's config, e.g. compress=true or rate_limit=250000; repeatable).
        journal_options: settings of every journal started, KEY=VALUE each (fields of the journal's config, e.g.
            segment_bytes=1048576 or scrub_interval=1; repeatable).
        kpi_archive: KPI archive directory: its host KPIs go there, and its monitors archive their queues'
            ("" = none).
        kpi_rotate_s: seconds a file of the archive (its own, its monitors') is written before it is put in place.
        kpi_queue: the cluster's KPI queue: with ``kpi_archive``, the host manager runs a shipper
            (:mod:`client.shipper`) that publishes the host's archive files there as they are put in place ("" = none).
        http_address: address of its health checks over HTTP (its own and its processes')
        http_port: their port (-1 = none, 0 = any free port)
        secret_key: the cluster's CURVE secret key file: its control port is served with CURVE, and so are its
            monitors' and exchanges', which it starts with the same key and keyring ("" = plaintext)
        keyring: with ``secret_key``, the directory of the public keys that may connect
        zk_auth: a file holding the cluster's ZooKeeper identity (``USER:PASSWORD``): the host manager and its
            monitors authenticate with it ("" = none)
        journal_dir: where the journals of the durable queues it runs keep their files, one directory per
            queue under ``<journal_dir>/<address>/`` ("" = ~/.roq/journals)
    """

    zk: str
    address: str = "127.0.0.1"
    port: int = 0
    root: str = defaults.ROOT
    max_exchanges: int = 4
    cpus: float = 0.0
    link_rate: str = ""
    kpi_period: float = 1.0
    session_timeout: float = defaults.SESSION_TIMEOUT
    port_low: int = 0
    port_high: int = 0
    log_dir: str = ""
    exchange_options: tuple[str, ...] = dataclasses.field(default=(), metadata={"flag": "--exchange-option"})
    monitor_options: tuple[str, ...] = dataclasses.field(default=(), metadata={"flag": "--monitor-option"})
    link_options: tuple[str, ...] = dataclasses.field(default=(), metadata={"flag": "--link-option"})
    journal_options: tuple[str, ...] = dataclasses.field(default=(), metadata={"flag": "--journal-option"})
    kpi_archive: str = ""
    kpi_rotate_s: float = 30.0
    kpi_queue: str = ""
    http_address: str = "127.0.0.1"
    http_port: int = -1
    secret_key: str = ""
    keyring: str = ""
    zk_auth: str = ""
    journal_dir: str = ""

    @property
    def link_bytes_per_s(self) -> float:
        """The rate of ``link_rate`` in bytes/s (0 = unknown)."""
        return parse_rate(self.link_rate) if self.link_rate else 0.0

    def __post_init__(self) -> None:
        check_hosts(self.zk)
        Paths(self.root)
        check_curve_settings(self)
        if not -1 <= self.http_port < 65536:
            raise ConfigError(f"http_port must be between -1 (none) and 65535, got {self.http_port}")
        if self.max_exchanges < 0:
            raise ConfigError(f"max_exchanges must be 0 or more, got {self.max_exchanges}")
        if not 0 <= self.cpus <= 4096:
            raise ConfigError(f"cpus must be between 0 (its cgroup's quota or the machine's) and 4096, got {self.cpus}")
        self.link_bytes_per_s  # a bad rate is refused here
        if self.kpi_period <= 0 or self.session_timeout <= 0 or not self.kpi_rotate_s > 0:
            raise ConfigError("kpi_period, kpi_rotate_s and session_timeout must be positive")
        if self.kpi_queue:
            check_queue_name(self.kpi_queue)
            if not self.kpi_archive:
                raise ConfigError("kpi_queue: the KPI queue is fed from the host's archive: give kpi_archive too")


class _CurveFiles(TypedDict, total=False):
    """A child's CURVE files (none: plaintext)."""

    secret_key: str
    keyring: str


class ChildSettings:
    """The config objects of the children of one host manager.

    Raises:
        ConfigError: an option is not KEY=VALUE, names no field of the child's config or one the host
            manager sets itself, or has a value the child's config refuses.
    """

    def __init__(self, config: HostManagerConfig) -> None:
        self.config = config
        # the children's CURVE: the host manager's own, wherever they run from
        self._curve: _CurveFiles = ({"secret_key": os.path.abspath(config.secret_key), "keyring": os.path.abspath(config.keyring)}
                       if config.secret_key else {})
        self.monitor_options = _options(MonitorConfig, config.monitor_options, "--monitor-option",
                                        _OWN_MONITOR_FIELDS)
        self.exchange_options = _options(ExchangeConfig, config.exchange_options, "--exchange-option",
                                         _OWN_EXCHANGE_FIELDS)
        self.link_options = _options(LinkConfig, config.link_options, "--link-option", _OWN_LINK_FIELDS)
        self.journal_options = _options(JournalConfig, config.journal_options, "--journal-option", _OWN_JOURNAL_FIELDS)
        # the values, not only their types: what a child would refuse at start
        _check("--monitor-option", lambda: self.monitor("q", 1))
        _check("--link-option", lambda: LinkConfig(name="c@q", source=_ANY_MONITOR, queue="q", cluster="c",
                                                   parent_zk=defaults.ZK, **self.link_options))
        _check("--exchange-option", lambda: self.exchange(_ANY_MONITOR, 1, 2, "x1"))
        _check("--journal-option", lambda: self.journal("q", _ANY_MONITOR, 1))

    def monitor(self, queue: str, port: int) -> MonitorConfig:
        """The settings of the monitor of ``queue`` on ``port``."""
        c = self.config
        return MonitorConfig(address=c.address, port=port, queue=queue, zk=c.zk, root=c.root,
                             session_timeout=c.session_timeout, kpi_archive=c.kpi_archive,
                             archive_rotate_s=c.kpi_rotate_s, **self._curve,
                             zk_auth=os.path.abspath(c.zk_auth) if c.zk_auth else "", **self.monitor_options)

    def journal(self, queue: str, monitor: str, port: int, generation: int = 0, replicas: int = 1,
                learner: bool = False) -> JournalConfig:
        """The settings of the journal of ``queue`` on ``port``, reporting to ``monitor``, taking commands on
        stdin, of the queue's journal ``generation``; its files in ``<journal_dir>/<address>/<queue>``; one of
        ``replicas``, named by this host's address, a ``learner`` if it replaces one lost with its host."""
        c = self.config
        base = os.path.abspath(os.path.expanduser(c.journal_dir or "~/.roq/journals"))
        return JournalConfig(queue=queue, directory=os.path.join(base, c.address, queue), monitor=monitor,
                             address=c.address, intake_port=port, generation=generation, commands=True,
                             replicas=replicas, journal_id=c.address if replicas > 1 else "", learner=learner,
                             **self.journal_options, **self._curve)

    def link(self, queue: str, monitor: str, federation: FederationDoc) -> LinkConfig:
        """The settings of the link of ``queue`` (whose monitor is ``monitor``) to the parent's queue of the same
        name, from the cluster's place in its tree: both ways, on demand; in this cluster as the cluster itself
        (its key) with CURVE, in the parent with the cluster's credentials there."""
        name = f"{federation.name}@{queue}"
        if len(name) > MAX_LINK_NAME:  # (a durable reader's name has a bound; the queue's digest stays unique)
            name = f"{federation.name}@{hashlib.blake2b(queue.encode(), digest_size=16).hexdigest()}"
        return LinkConfig(name=name, source=monitor, queue=queue, cluster=federation.name, role=federation.role,
                          parent_zk=federation.parent_zk, parent_root=federation.parent_root,
                          target_credentials=federation.parent_credentials, on_demand=True, down=True,
                          cluster_key=self._curve.get("secret_key", ""), zk=self.config.zk, root=self.config.root,
                          **self.link_options)

    def shipper(self) -> ShipperConfig | None:
        """The settings of the host's KPI shipper (None: no KPI queue, or no archive)."""
        c = self.config
        if not (c.kpi_queue and c.kpi_archive):
            return None
        return ShipperConfig(archive=os.path.abspath(c.kpi_archive), host=c.address, queue=c.kpi_queue, zk=c.zk,
                             root=c.root, cluster_key=self._curve.get("secret_key", ""))

    def exchange(self, monitor: str, frontend_port: int, backend_port: int, name: str) -> ExchangeConfig:
        """The settings of an exchange named ``name`` reporting to ``monitor``, taking commands on stdin."""
        return ExchangeConfig(monitor=monitor, address=self.config.address, frontend_port=frontend_port,
                              backend_port=backend_port, exchange_id=name, commands=True, **self._curve,
                              **self.exchange_options)


def _check(where: str, make: Any) -> None:
    try:
        make()
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _options(cls: type, pairs: tuple[str, ...], where: str, own: tuple[str, ...]) -> dict[str, Any]:
    values = parse_assignments(cls, pairs, where)
    taken = sorted(set(values) & set(own))
    if taken:
        raise ConfigError(f"{where}: {', '.join(taken)} is set by the host manager itself")
    return values
