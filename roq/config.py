"""Configuration of every component: frozen dataclasses with documented defaults.

They are built once, from flags (and later files), in the command-line layer and passed down; library
code never reads the environment. Every value is checked when the object is built and a bad one raises
:class:`~roq.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from roq.wire.batch import HEADER_SIZE, MAX_KEY
from roq.errors import ConfigError
from roq import defaults

__all__ = [
    "DEFAULT_SUBSCRIBER_QUEUE_BYTES",
    "MIN_SUBSCRIBER_HWM",
    "ExchangeConfig",
    "JournalConfig",
    "LinkConfig",
    "MAX_LINK_NAME",
    "ShipperConfig",
    "DURABILITIES",
    "check_curve_settings",
    "MonitorConfig",
    "PublisherConfig",
    "SubscriberConfig",
]

#: What an exchange may hold for one subscriber that does not keep up, in bytes.
DEFAULT_SUBSCRIBER_QUEUE_BYTES = 64 << 20
#: Fewest batches a subscriber's pipe at an exchange holds. ZeroMQ's PUB learns that a subscriber read its pipe
#: only from notices it takes in at most about once a millisecond while sending, once per half a pipe read: a
#: pipe of a few batches looks full within one burst even to a subscriber that keeps up, and ZeroMQ drops.
#: Measured with a subscriber that keeps up, bursts of 256 at 20,000 batches/s: 15 batches lost 94% of them,
#: 100 lost 54%, 300 lost 6%, 512 none. So the byte bound is exact for batches up to
#: ``subscriber_queue_bytes / MIN_SUBSCRIBER_HWM`` (128 KiB by default: the client library seals its batches
#: at that size); a subscriber behind on larger records (a batch is one record then) holds at most this many.
MIN_SUBSCRIBER_HWM = 512


def _positive(obj: Any, *names: str, allow_zero: bool = False) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise ConfigError(f"{type(obj).__name__}.{name} must be a number, got {value!r}")
        if value < 0 or (value == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise ConfigError(f"{type(obj).__name__}.{name} must be {bound}, got {value!r}")


def _port(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
            raise ConfigError(f"{type(obj).__name__}.{name} must be a port number 0..65535, got {value!r}")


def _endpoint(obj: Any, *names: str) -> None:
    from roq.sockets import check_endpoint

    for name in names:
        try:
            check_endpoint(getattr(obj, name))
        except ConfigError as exc:
            raise ConfigError(f"{type(obj).__name__}.{name}: {exc}") from None


def _text(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, str):
            raise ConfigError(f"{type(obj).__name__}.{name} must be text, got {value!r}")


def check_curve_settings(obj: Any) -> None:
    """Check a process's CURVE settings, ``secret_key`` and ``keyring``: text, and both or neither.

    Raises:
        ConfigError: which one is wrong or missing.
    """
    _text(obj, "secret_key", "keyring")
    if bool(obj.secret_key) != bool(obj.keyring):
        raise ConfigError(f"{type(obj).__name__}: secret_key and keyring go together (CURVE needs the server's "
                          "key and the keys that may connect), got only "
                          f"{'secret_key' if obj.secret_key else 'keyring'}")


def _curve(obj: Any) -> None:
    if obj.curve is not None and not isinstance(obj.curve, CurveClient):
        raise ConfigError(f"{type(obj).__name__}.curve must be a CurveClient or None, got {type(obj.curve).__name__}")


@dataclass(frozen=True)
class CurveClient:
    """A client's CURVE keys, for its sockets to the exchanges: the server's public key (the cluster's) and the
    client's own pair, each 40 characters of Z85 (as :mod:`roq.security.keys` reads them). Its publishers' and
    subscribers' ids then begin with its key's digest (:func:`roq.security.zap.identity_for`).
    """

    server_key: str
    public_key: str
    secret_key: str

    def __post_init__(self) -> None:
        for name in ("server_key", "public_key", "secret_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or len(value) != 40:
                shown = f"{len(value)} characters" if isinstance(value, str) else type(value).__name__
                raise ConfigError(f"CurveClient.{name} must be a key of 40 Z85 characters, got {shown}")

    def __repr__(self) -> str:  # never the secret
        return f"CurveClient(server_key={self.server_key!r}, public_key={self.public_key!r})"

    @classmethod
    def load(cls, credentials: str) -> CurveClient:
        """The keys of a credentials directory (:func:`roq.security.keys.load_credentials`).

        Raises:
            ConfigError: credentials that cannot be used (missing, several keys, a secret key others may read).
        """
        from roq.security.keys import load_credentials

        server, mine = load_credentials(credentials)
        return cls(server.decode(), mine.public.decode(), (mine.secret or b"").decode())

    @classmethod
    def of_cluster(cls, secret_key: str) -> CurveClient:
        """The keys of a cluster's own process speaking to its cluster as a client (the cluster's secret key file, a
        process's ``--secret-key``): the cluster's key pair is both ends.

        Raises:
            ConfigError: a key file that cannot be used.
        """
        from roq.security.keys import load_secret

        pair = load_secret(secret_key)
        public = pair.public.decode()
        return cls(public, public, (pair.secret or b"").decode())

    def apply(self, sock: Any) -> None:
        """Make the ZeroMQ socket ``sock`` a CURVE client with these keys; before it connects."""
        sock.curve_serverkey = self.server_key.encode()
        sock.curve_publickey = self.public_key.encode()
        sock.curve_secretkey = self.secret_key.encode()


@dataclass(frozen=True)
class ExchangeConfig:
    """An exchange process.

    Attributes:
        monitor: endpoint of the queue's monitor, e.g. tcp://127.0.0.11:5500.
        address: address to bind the frontend and backend to (a loopback alias works).
        frontend_port: port publishers send batches to (ROUTER); 0 = any free port.
        backend_port: port subscribers subscribe at and receive from (ROUTER); 0 = any free port.
        exchange_id: name of the exchange in the queue; "" = generated.
        heartbeat_interval: seconds between heartbeats to the monitor (also beacons to subscribers).
        kpi_period: seconds between KPI reports.
        max_batch_bytes: a batch body above this is dropped and counted.
        subscriber_queue_bytes: most bytes of batches the exchange holds for one subscriber; a subscriber
            further behind loses batches (it sees them as gaps), the exchange's memory does not grow. Exact for
            batches up to a 512th of it (see subscriber_hwm).
        backend_hwm: most batches held for one subscriber, whatever their size (see subscriber_hwm).
        subscriber_grace: how long the exchange waits for a subscriber's full pipe (holding the batch, reading
            no publisher meanwhile) before it sends past that subscriber, which then misses batches.
        drain_timeout: on SIGTERM, how long to keep forwarding while the monitor moves publishers away.
        delivery_hold: how long a subscriber may take no new delivery mark (leaving the next one untaken) and
            still be waited for before publishers are told their records were delivered (see
            :mod:`exchange._delivery`): what a stalled subscriber costs publishers of their buffer, at most.
        ack_interval: while publishers' batches wait to be read, their acknowledgements are coalesced over this
            many seconds (fewer of them save wake-ups on both sides); once the exchange has read everything
            waiting, they go out at once.
        commands: read the host manager's commands (control messages) on standard input.
        secret_key: the CURVE secret key file the frontend and backend serve with (the cluster's server
            key); "" = plaintext, anyone may connect.
        keyring: with ``secret_key``, the directory of the public keys that may connect (``NAME.key`` for
            the principal NAME, read again when it changes).
    """

    monitor: str
    address: str = "127.0.0.1"
    frontend_port: int = 0
    backend_port: int = 0
    exchange_id: str = field(default="", metadata={"flag": "--id"})
    heartbeat_interval: float = 0.25
    kpi_period: float = 1.0
    max_batch_bytes: int = 4 << 20
    subscriber_queue_bytes: int = DEFAULT_SUBSCRIBER_QUEUE_BYTES
    backend_hwm: int = 10_000
    subscriber_grace: float = 0.5
    drain_timeout: float = 5.0
    delivery_hold: float = 2.0
    ack_interval: float = 0.002
    commands: bool = field(default=False, metadata={"flag": "--commands-on-stdin"})
    secret_key: str = ""
    keyring: str = ""

    def __post_init__(self) -> None:
        _text(self, "monitor", "address", "exchange_id")
        check_curve_settings(self)
        _endpoint(self, "monitor")
        _port(self, "frontend_port", "backend_port")
        _positive(self, "heartbeat_interval", "kpi_period", "max_batch_bytes", "backend_hwm", "subscriber_queue_bytes",
                  "subscriber_grace", "delivery_hold")
        _positive(self, "drain_timeout", "ack_interval", allow_zero=True)

    @property
    def subscriber_hwm(self) -> int:
        """The ZeroMQ high-water mark of each subscriber's pipe, in batches: as many of the largest batch the
        exchange accepts as fit in ``subscriber_queue_bytes``, but never fewer than :data:`MIN_SUBSCRIBER_HWM`,
        and at most ``backend_hwm``.

        ZeroMQ bounds its pipes in messages, not bytes, and fixes a pipe's bound when the subscriber connects,
        so the byte bound assumes every batch may be the largest, down to the floor below which ZeroMQ drops
        batches of subscribers that keep up (:data:`MIN_SUBSCRIBER_HWM`).
        """
        largest = self.max_batch_bytes + MAX_KEY + HEADER_SIZE
        return min(self.backend_hwm, max(MIN_SUBSCRIBER_HWM, self.subscriber_queue_bytes // largest))


#: A queue's durability: "none" (no journal), "interval" (acknowledged once written; synced every
#: sync_interval), "always" (acknowledged once synced).
DURABILITIES = ("none", "interval", "always")


@dataclass(frozen=True)
class JournalConfig:
    """The journal process of one durable queue.

    Attributes:
        queue: the queue's name (its journal directory says whose it is, and is refused to another).
        directory: where its segments are; made (mode 0700) if missing, refused if another user owns it.
        monitor: the queue's monitor, which it reports to and takes its policy from ("" = none: the policy
            is the flags below).
        address: address to bind the intake to.
        intake_port: port its exchanges send their batches to (ROUTER); 0 = any free port.
        reads_port: port its readers fetch from (ROUTER); 0 = any free port.
        durability: until the monitor says otherwise: "always" (a batch is acknowledged once on disk: one
            fdatasync covers every batch waiting) or "interval" (once handed to the kernel: a crash of the
            process loses nothing acknowledged, a power failure at most sync_interval of it).
        sync_interval: with "interval", seconds between syncs.
        segment_bytes: a segment this large is sealed and the next one begun.
        retention_bytes: the oldest segments are removed while the journal is larger (0 = no bound).
        retention: segments whose records are all older than this many seconds are removed (0 = no bound).
        max_batch_bytes: a batch body above this is refused and counted.
        heartbeat_interval: seconds between heartbeats to the monitor.
        journal_id: its name in logs; "" = generated.
        generation: the queue's journal generation: how many times the queue's journal had been started anew
            after losing its host when this one was placed (its host manager reads it from the queue's document,
            after the GCM's transaction that placed it). A journal whose files are of an earlier generation (or
            none) begins anew, past the highest offset its monitor's first policy names.
        commands: read the host manager's commands (control messages) on standard input.
        secret_key: the CURVE secret key file the intake serves with; "" = plaintext.
        keyring: with ``secret_key``, the directory of the public keys that may connect.
        followers: the ids of the follower replicas of this journal, which leads (repeat the flag for each): it
            acknowledges a round once a majority of the replicas, itself included, hold it, and serves readers
            only that (see :mod:`exchange.journal._replication`).
        follow: the reads endpoint of the journal this one follows as a replica (its ``--id`` is its name
            there): it appends the leader's entries at the leader's offsets, synced under its durability, and
            takes no batch from exchanges.
        epoch: with ``followers``, the epoch this journal leads (its replica must not have promised a newer one).
        peers: ``name=reads endpoint`` of the other replicas (repeat the flag for each): with them this journal
            stands for ``epoch`` before it leads (their promises, the most advanced log of a majority), as a new
            leader does after the last one was lost.
        replicas: the queue's replica count (1-5; 1 = an unreplicated journal). Above 1 this journal is one
            replica, named by its ``--id`` and reporting to ``monitor``: it starts as a standby and leads or
            follows as its monitor tells it (:class:`~roq.wire.control.JournalRole`).
        learner: with ``replicas`` above 1, a replica new to the queue's replica set (in place of one lost with its
            host): it promises nothing in an election until a leader that counts it has told it a commit end its
            log reaches, so an empty log (or an old one, of a host that held a replica long ago) never outvotes
            one holding what was acknowledged. Its host manager gives it while the queue's document names the
            replica a learner.
        scrub_interval: seconds between two sealed segments read whole, in turn, to find damage (a bit flipped on
            the disk); a replica rewrites a damaged one from another replica's copy (0 = no scrub).
        sync_log: after each sync, write where what is on the disk ends (the active segment's name and its bytes
            synced) to ``<directory>/synced``: for fault-injection tests that cut the files back to it, as a power
            loss would; it costs a small write per sync.
    """

    queue: str
    directory: str
    monitor: str = ""
    address: str = "127.0.0.1"
    intake_port: int = 0
    reads_port: int = 0
    durability: str = "always"
    sync_interval: float = 0.1
    segment_bytes: int = 64 << 20
    retention_bytes: int = 0
    retention: float = 0.0
    max_batch_bytes: int = 4 << 20
    heartbeat_interval: float = 0.25
    journal_id: str = field(default="", metadata={"flag": "--id"})
    generation: int = 0
    commands: bool = field(default=False, metadata={"flag": "--commands-on-stdin"})
    secret_key: str = ""
    keyring: str = ""
    followers: tuple[str, ...] = ()
    follow: str = ""
    epoch: int = 1
    peers: tuple[str, ...] = ()
    replicas: int = 1
    learner: bool = False
    scrub_interval: float = 10.0
    sync_log: bool = False

    def __post_init__(self) -> None:
        _text(self, "queue", "directory", "monitor", "address", "durability", "journal_id", "follow")
        check_curve_settings(self)
        if not self.queue:
            raise ConfigError("JournalConfig.queue must name the queue")
        if not self.directory:
            raise ConfigError("JournalConfig.directory must name the journal's directory")
        if self.monitor:
            _endpoint(self, "monitor")
        if self.durability not in DURABILITIES[1:]:
            raise ConfigError(f"JournalConfig.durability must be 'interval' or 'always', got {self.durability!r}")
        _port(self, "intake_port", "reads_port")
        _positive(self, "sync_interval", "max_batch_bytes", "heartbeat_interval")
        _positive(self, "retention_bytes", "retention", "scrub_interval", allow_zero=True)
        if not isinstance(self.segment_bytes, int) or self.segment_bytes < 4096:
            raise ConfigError(f"JournalConfig.segment_bytes must be at least 4096, got {self.segment_bytes!r}")
        if self.follow:
            _endpoint(self, "follow")
            if self.followers:
                raise ConfigError("JournalConfig: a journal either leads (followers) or follows (follow), not both")
            if not self.journal_id:
                raise ConfigError("JournalConfig.follow needs the journal's id (--id): its leader counts it by name")
            if self.monitor:
                raise ConfigError("JournalConfig: a follower replica does not report to a monitor yet (the monitor "
                                  "would name it to the exchanges as the queue's journal)")
        names = [p.partition("=")[0] for p in self.peers]
        if self.peers and (sorted(names) != sorted(self.followers) or
                           not all(p.partition("=")[2].startswith("tcp://") for p in self.peers)):
            raise ConfigError(f"JournalConfig.peers must name each follower as name=tcp://host:port, got "
                              f"{list(self.peers)} for followers {list(self.followers)}")
        if not isinstance(self.replicas, int) or not 1 <= self.replicas <= 5:
            raise ConfigError(f"JournalConfig.replicas must be 1 to 5, got {self.replicas!r}")
        if self.replicas > 1 and (not self.monitor or not self.journal_id or self.follow or self.followers):
            raise ConfigError("JournalConfig.replicas above 1 needs a monitor (it says who leads) and the replica's "
                              "id (--id), and takes no followers nor follow (the monitor names them)")
        if self.learner and self.replicas < 2:
            raise ConfigError("JournalConfig.learner is for a replica of a replicated journal (replicas above 1)")
        if not isinstance(self.epoch, int) or self.epoch < 1:
            raise ConfigError(f"JournalConfig.epoch must be 1 or more, got {self.epoch!r}")
        if len(self.followers) > 4 or len(set(self.followers)) != len(self.followers) or \
                any(not f or f == self.journal_id for f in self.followers):
            raise ConfigError(f"JournalConfig.followers must be at most 4 distinct ids, none this journal's own, got "
                              f"{list(self.followers)}")


#: a link's name: its durable readers ``link.<name>`` and ``link.<name>.down`` are durable names (128 at most)
MAX_LINK_NAME = 118
_LINK_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,%d}\Z" % MAX_LINK_NAME)


@dataclass(frozen=True)
class LinkConfig:
    """A link's settings (the process: ``python -m client.link``, :mod:`client.link`).

    Attributes:
        name: the link's name (1-118 of A-Z a-z 0-9 _ . @ -): its durable reader in the source journal is
            ``link.<name>`` (``link.<name>.down`` in the parent's, with ``down``), and without CURVE its relayed
            ids are tagged with its digest.
        source: the source queue's monitor (this side; a durable queue).
        target: the target queue's monitor (the far side); "" with ``queue``: the parent's queue of that name,
            found and followed in the parent's ZooKeeper (``parent_zk``).
        queue: the queue's name in the parent cluster, when ``target`` is "".
        prefix: a key prefix wanted on the far side; repeated for several (none: every key).
        on_demand: carry, of those, only what the target queue wants (its subscribers' prefixes, and what links
            that read it want): with no subscriber beyond it, the link carries nothing.
        source_credentials: the link's credentials in the source cluster ("" = plaintext, or ``cluster_key``).
        cluster_key: the secret key file of the source cluster itself (a cluster process's ``--secret-key``): the
            link speaks CURVE there as the cluster, instead of with ``source_credentials``.
        target_credentials: the link's credentials in the target cluster ("" = plaintext).
        max_bytes: bytes of records on their way, unacknowledged, before the link stops reading the journal.
        rate_limit: bytes a second the link sends at most (0: no limit); 250000 is 2 Mbit/s.
        compress: squeeze what crosses to the far side's host (zstd's fastest level, where it makes a batch or an
            answer smaller): into the target queue's exchanges, and with ``down`` the answers of the target's journal.
            Worth it on a link slower than what one core compresses (about 450 MB/s of text here).
        connect_timeout: seconds to find the source queue's journal, and to be welcomed by the parent, at the start.
        cluster: the child cluster's name in its tree: the link is an edge of the tree, its records go by the
            tree's rules (up from the child, down with ``down``, never sideways); with ``parent_zk``, the link says
            hello to the parent cluster as this child, and carries records only while the parent welcomes it.
        role: the child's place in the tree: leaf (no children) or branch.
        parent_zk: the parent cluster's ZooKeeper ("" = no hello: the link carries records unannounced).
        parent_root: the parent cluster's ZooKeeper root.
        down: on a tree's edge (``cluster`` set): also carry the target queue's records (the parent's) into the
            source queue (down the tree), for the same prefixes; the target queue must be durable too.
        zk, root: the child cluster's own ZooKeeper and root ("" = not followed): the link follows the cluster's
            place there (the clusters of its subtree, as its GCM writes them), announces them to the parent, and
            carries the records addressed to them (down) or to any other cluster (up).
    """

    name: str
    source: str
    target: str = ""
    queue: str = ""
    prefix: tuple[str, ...] = ()
    on_demand: bool = False
    source_credentials: str = ""
    cluster_key: str = ""
    target_credentials: str = ""
    max_bytes: int = 16 << 20
    rate_limit: int = 0
    compress: bool = False
    connect_timeout: float = 30.0
    cluster: str = ""
    role: str = "leaf"
    parent_zk: str = ""
    parent_root: str = defaults.ROOT
    down: bool = False
    zk: str = ""
    root: str = defaults.ROOT

    def __post_init__(self) -> None:
        from roq.federation import check_name
        from roq.zk import Paths, check_hosts, check_queue_name

        if not isinstance(self.name, str) or not _LINK_NAME.fullmatch(self.name) or self.name in (".", ".."):
            raise ConfigError(f"LinkConfig.name must be 1-{MAX_LINK_NAME} of A-Z a-z 0-9 _ . @ -, got {self.name!r}")
        if not self.target and self.queue:
            check_queue_name(self.queue)
            if not self.parent_zk:
                raise ConfigError("LinkConfig.queue names the parent's queue: give the parent's ZooKeeper (parent_zk)")
        for field_name in ("source",) if not self.target and self.queue else ("source", "target"):
            value = getattr(self, field_name)
            if not isinstance(value, str) or not value.startswith("tcp://"):
                raise ConfigError(f"LinkConfig.{field_name} must be a monitor's tcp:// endpoint, got {value!r}"
                                  + (" (or give the parent's queue by name: queue)" if field_name == "target" else ""))
        if self.cluster_key and self.source_credentials:
            raise ConfigError("LinkConfig: the link speaks in its own cluster as the cluster (cluster_key) or with "
                              "credentials (source_credentials), not both")
        if self.source == self.target:
            raise ConfigError(f"LinkConfig: the source and the target are the same queue ({self.source})")
        if not all(isinstance(p, str) and p for p in self.prefix):
            raise ConfigError(f"LinkConfig.prefix must be non-empty key prefixes, got {list(self.prefix)!r}")
        if not isinstance(self.max_bytes, int) or self.max_bytes < 1 << 16:
            raise ConfigError(f"LinkConfig.max_bytes must be at least 65536, got {self.max_bytes!r}")
        if not isinstance(self.rate_limit, int) or self.rate_limit < 0:
            raise ConfigError(f"LinkConfig.rate_limit must be bytes a second, 0 or more, got {self.rate_limit!r}")
        if not self.connect_timeout > 0:
            raise ConfigError(f"LinkConfig.connect_timeout must be above 0, got {self.connect_timeout!r}")
        if self.down and not self.cluster:
            raise ConfigError("LinkConfig.down carries records down a tree's edge: name the child cluster (cluster)")
        if self.cluster or self.parent_zk:  # (a link that says hello to a parent names its child cluster)
            check_name(self.cluster)
        if self.zk:
            if not self.cluster:
                raise ConfigError("LinkConfig.zk follows the child cluster's place in its tree: name it (cluster)")
            check_hosts(self.zk)
            Paths(self.root)
        if self.parent_zk:
            check_hosts(self.parent_zk)
            Paths(self.parent_root)
            if self.role not in ("leaf", "branch"):
                raise ConfigError(f"LinkConfig.role must be leaf or branch (a cluster with a parent), got {self.role!r}")


@dataclass(frozen=True)
class ShipperConfig:
    """A host's KPI shipper's settings (the process: ``python -m client.shipper``, :mod:`client.shipper`; a host
    manager with a KPI queue runs one).

    Attributes:
        archive: the KPI archive directory the host's monitors and host manager write.
        host: the host's address: the shipper ships the files of this host's writers only (a shared archive
            directory holds other hosts' too, which their own shippers ship).
        queue: the cluster's KPI queue (made durable by the shipper if it does not exist).
        zk, root: the cluster's ZooKeeper and root.
        cluster_key: the cluster's secret key file (a cluster process's ``--secret-key``): the shipper speaks CURVE
            as the cluster ("" = plaintext).
        scan_s: seconds between looks at the archive for files put in place.
        timeout: seconds a file's records may take to be acknowledged before the shipper tries again later.
    """

    archive: str
    host: str
    queue: str
    zk: str
    root: str = defaults.ROOT
    cluster_key: str = ""
    scan_s: float = 1.0
    timeout: float = 30.0

    def __post_init__(self) -> None:
        from roq.zk import Paths, check_hosts, check_queue_name

        _text(self, "archive", "host", "queue", "zk", "root", "cluster_key")
        if not self.archive or not self.host:
            raise ConfigError("ShipperConfig: the archive and the host are required")
        check_queue_name(self.queue)
        check_hosts(self.zk)
        Paths(self.root)
        _positive(self, "scan_s", "timeout")


@dataclass(frozen=True)
class MonitorConfig:
    """The monitor of one logical queue.

    Attributes:
        address: address to bind the control endpoint to.
        port: control port (ROUTER) for exchanges, clients and operators; 0 = any free port.
        queue: name of the logical queue, for logs and events.
        kpi_period: seconds between evaluations of the relocation rule (and expected KPI period).
        heartbeat_timeout: an exchange silent for this long is declared dead.
        high_records_per_s: relocation high-water mark of one exchange, in records/s (smoothed).
        sustain: seconds an exchange must stay above the mark before a publisher is moved off it.
        cooldown: seconds a moved publisher stays put; moving it back sooner counts a flap.
        smoothing: weight of the newest KPI sample in the exponentially weighted moving average.
        prepare_timeout: seconds to wait for subscribers to confirm a relocation target.
        move_timeout: seconds to wait for a publisher to report a relocation done, counted from its last hello
            that says it is still carrying it out (its old exchange holds it back).
        subscriber_timeout: a subscriber silent for this long is no longer waited for.
        publisher_timeout: a publisher silent for this long is forgotten.
        relocation_rule: whether the rule moves publishers by itself (forced moves always work).
        zk: ZooKeeper servers ("" = a monitor on its own: its rules are the fields above and it cannot
            scale). With them, the queue's rules in ZooKeeper replace the fields above, and the monitor
            scales the queue out and in through the GCM.
        root: the cluster's ZooKeeper root.
        session_timeout: the ZooKeeper session timeout.
        kpi_archive: directory of the KPI archive this monitor appends to ("" = none; see
            :mod:`roq.kpi.archive`).
        archive_retention_days: days of the queue's archive kept (0 = all).
        archive_rotate_s: seconds a file of the archive is written before it is put in place (where readers, and
            the host's shipper to the KPI queue, see it).
        secret_key: the cluster's CURVE secret key file: the control port is served with CURVE, and the
            monitor connects to the GCM with it ("" = plaintext, anyone may connect).
        keyring: with ``secret_key``, the directory of the public keys that may connect.
        zk_auth: a file holding the cluster's ZooKeeper identity (``USER:PASSWORD``): the monitor
            authenticates with it ("" = none).
        durability: for a monitor without ZooKeeper, the queue's durability ("none", "interval", "always"; its
            journal reports to the monitor); in a cluster, the queue's rules.
    """

    address: str = "127.0.0.1"
    port: int = defaults.MONITOR_PORT
    queue: str = "default"
    kpi_period: float = 1.0
    heartbeat_timeout: float = 1.0
    high_records_per_s: float = 200_000.0
    sustain: float = 2.0
    cooldown: float = 10.0
    smoothing: float = 0.5
    prepare_timeout: float = 1.0
    move_timeout: float = 5.0
    subscriber_timeout: float = 3.0
    publisher_timeout: float = 5.0
    relocation_rule: bool = True
    zk: str = ""
    root: str = defaults.ROOT
    session_timeout: float = defaults.SESSION_TIMEOUT
    kpi_archive: str = ""
    archive_retention_days: float = 7.0
    archive_rotate_s: float = 30.0
    secret_key: str = ""
    keyring: str = ""
    zk_auth: str = ""
    durability: str = "none"

    def __post_init__(self) -> None:
        _text(self, "address", "queue", "zk", "root", "kpi_archive", "zk_auth", "durability")
        check_curve_settings(self)
        if self.durability not in DURABILITIES:
            raise ConfigError(f"MonitorConfig.durability must be one of {', '.join(DURABILITIES)}, got "
                              f"{self.durability!r}")
        _positive(self, "archive_retention_days", allow_zero=True)
        _positive(self, "session_timeout", "archive_rotate_s")
        _port(self, "port")
        _positive(
            self,
            "kpi_period",
            "heartbeat_timeout",
            "high_records_per_s",
            "prepare_timeout",
            "move_timeout",
            "subscriber_timeout",
            "publisher_timeout",
        )
        _positive(self, "sustain", "cooldown", allow_zero=True)
        if not 0 < self.smoothing <= 1:
            raise ConfigError(f"MonitorConfig.smoothing must be in (0, 1], got {self.smoothing!r}")


@dataclass(frozen=True)
class PublisherConfig:
    """A publisher of the client library.

    Attributes:
        linger: seconds a batch stays open for more records of the same key while an earlier batch waits for
            its acknowledgement (0 = send at once); with nothing on its way, a batch goes out at once.
        batch_records: a batch is sent when it holds this many records.
        batch_bytes: a batch is sent when its payloads reach this many bytes.
        buffer_bytes: bound of the retransmission buffer (payload bytes not yet safe to forget: not yet taken
            by every subscriber that reads, as the exchange says).
        full_policy: what ``send`` does when the buffer is full: "block" (wait for acknowledgements,
            at most ``send_timeout``) or "raise" (:class:`~roq.errors.BufferFullError` at once).
        send_timeout: longest wait in ``send`` under "block"; None = no limit.
        ack_timeout: an exchange that acknowledges nothing for this long while batches wait for it makes the
            publisher ask for another exchange (one that acknowledges slowly is busy, not dead).
        max_in_flight: batches sent and not yet acknowledged, at most; then sending waits for the exchange.
            It bounds the backlog a saturated exchange holds of each publisher, so the latency behind it
            and the time a move off it takes.
        connect_timeout: how long ``publisher()`` waits for the monitor to assign an exchange.
        heartbeat_interval: seconds between hellos to the monitor.
        max_pending_batches: batches handed to the sender thread and not yet sent, before ``send`` waits.
        curve: CURVE keys for the exchanges' sockets (None = plaintext).
        to: the cluster of a tree of clusters the records are for ("" = this one): each record's key is
            addressed to it (:func:`roq.federation.address`), and the queue of that name there receives it,
            carried by the links between (:func:`client.connect` with ``queue="store-417/orders"`` sets it).
        id_seed: the publisher's id derives from this ("" = a new random id): started again with the same seed,
            a publisher is the same publisher, numbering its records from 1 again, and a durable queue's journal
            drops those it holds already (a retried Spark task writes each record once). Two publishers running
            at once must not share a seed.
    """

    linger: float = 0.0005
    batch_records: int = 1024
    batch_bytes: int = 128 << 10  # a 512th of an exchange's default subscriber_queue_bytes (MIN_SUBSCRIBER_HWM)
    buffer_bytes: int = 64 << 20
    full_policy: str = "block"
    send_timeout: float | None = 30.0
    ack_timeout: float = 1.5
    max_in_flight: int = 256
    connect_timeout: float = 5.0
    heartbeat_interval: float = 1.0
    max_pending_batches: int = 8
    curve: CurveClient | None = None
    to: str = ""
    id_seed: str = ""

    def __post_init__(self) -> None:
        _curve(self)
        if not isinstance(self.id_seed, str) or len(self.id_seed) > 1024:
            raise ConfigError(f"PublisherConfig.id_seed must be a string of at most 1,024 characters, got "
                              f"{self.id_seed!r:.80}")
        if self.to:
            from roq.federation import check_name  # (roq.federation reads the wire, which reads this module)
            check_name(self.to)
        _positive(self, "linger", allow_zero=True)
        _positive(
            self,
            "batch_records",
            "batch_bytes",
            "buffer_bytes",
            "ack_timeout",
            "max_in_flight",
            "connect_timeout",
            "heartbeat_interval",
            "max_pending_batches",
        )
        if self.send_timeout is not None:
            _positive(self, "send_timeout", allow_zero=True)
        if self.full_policy not in ("block", "raise"):
            raise ConfigError(f"PublisherConfig.full_policy must be 'block' or 'raise', got {self.full_policy!r}")
        if self.buffer_bytes < self.batch_bytes:
            raise ConfigError("PublisherConfig.buffer_bytes must be at least batch_bytes")


@dataclass(frozen=True)
class SubscriberConfig:
    """A subscriber of the client library.

    Attributes:
        hold_timeout: seconds records of a moved publisher are held waiting for the old exchange's
            marker; then they are released and any hole is counted as a gap.
        max_held_batches: bound of held batches per publisher (beyond it they are released).
        heartbeat_interval: seconds between hellos to the monitor (sent from ``recv``).
        rcvhwm: ZeroMQ receive high-water mark per exchange, in batches (up to ``batch_records`` records
            each). It bounds a slow subscriber's memory; beyond it batches are lost and counted as gaps.
        latency_samples: how many recent batch latencies ``stats()`` summarises.
        connect_timeout: how long ``subscriber()`` waits to hear every exchange of the queue.
        curve: CURVE keys for the exchanges' sockets (None = plaintext).
    """

    hold_timeout: float = 2.0
    max_held_batches: int = 10_000
    heartbeat_interval: float = 1.0
    rcvhwm: int = 1000
    latency_samples: int = 10_000
    connect_timeout: float = 5.0
    curve: CurveClient | None = None

    def __post_init__(self) -> None:
        _curve(self)
        _positive(
            self, "hold_timeout", "max_held_batches", "heartbeat_interval", "rcvhwm", "latency_samples"
        )
        _positive(self, "connect_timeout", allow_zero=True)


def replace(config: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` that reports an unknown option by name.

    Raises:
        ConfigError: an option the configuration does not have, or a bad value.
    """
    known = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ConfigError(f"unknown {type(config).__name__} option(s): {', '.join(unknown)}")
    return dataclasses.replace(config, **changes)
