"""A host's KPI shipper: each file of the host's KPI archive, once its writer put it in place, published to the
cluster's KPI queue, each line one record.

The archive is the buffer: a monitor or a host manager writes its records there whatever the cluster is doing
(:mod:`roq.kpi.archive`), and the shipper carries what is put in place. So the queue holds what a reader of the
archive files would read, a rotation later (``archive_rotate_s``, 30 s by default), and a Spark job reads the KPI
records of every host from the queue instead of a shared file system.

**Each line once.** A file is shipped by a publisher of its own whose id derives from the file's path
(:attr:`~roq.config.PublisherConfig.id_seed`), its lines numbered 1, 2, 3... in the file's order. Once the queue
acknowledged them all the file is written down as shipped (:class:`Shipped`, the hidden file ``.shipped-<host>``
of the archive). A
shipper that stopped in the middle of a file (killed, the queue unreachable) ships the file again from its first
line: the same publisher, the same numbers, and the queue's journal drops the records it holds already. The
record's key is the file's partition (its queue's name, or ``@hosts``), its payload the line as written.

The KPI queue is made (durable) by the first shipper that finds it missing.
"""

from __future__ import annotations

import logging
import os
import time
from client._connection import Connection, connect
from client._management import QueueManager
from roq.config import CurveClient, ShipperConfig
from roq.errors import BrokerTimeoutError, RoQError
from roq.kpi.archive import host_of, placed_files, safe_name
from roq.loop import Loop
from roq.runtime import DropCounter, SignalWakeup, run_main
from roq.wire.ready import ShipperReady
from roq.wire.status import JournalStatus

log = logging.getLogger("shipper")

__all__ = ["Shipper", "Shipped", "main"]

FULL_SCAN_S = 60.0  # between looks at every date of the archive (else: today's and yesterday's)
TICK_BUDGET_S = 2.0  # files shipped in one turn of the loop, for this long at most (a signal waits no longer)
RETRY_S = 5.0  # after the queue could not be reached

DESCRIPTION = ("A host's KPI shipper: publishes each file of the host's KPI archive, once put in place, to the "
               "cluster's KPI queue (made durable if missing); each line once, also across restarts. Run by a host "
               "manager with a KPI queue (--kpi-queue).")


class Shipped:
    """The archive files shipped and acknowledged (paths relative to the archive), kept in the hidden file ``path``:
    one path a line, appended as each file is shipped (a few bytes, whatever the archive holds), written anew only
    when files leave the archive. A line that is not a path of the archive (a torn last line, garbage) names
    nothing: at worst a file is shipped again, and the journal drops what it holds already."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.files: set[str] = set()
        try:
            with open(path, "rb") as f:
                self.files = {line for line in f.read().decode("utf-8", "replace").split("\n") if line}
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("%s: unreadable (%s); every file is shipped again (the queue drops what it holds)", path, exc)

    def add(self, relpath: str) -> None:
        self.files.add(relpath)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(relpath + "\n")

    def keep_only(self, existing: set[str]) -> None:
        """Forget files no longer in the archive (removed by its retention)."""
        if self.files - existing:
            self.files &= existing
            part = self.path + ".part"
            with open(part, "w", encoding="utf-8") as f:
                f.writelines(name + "\n" for name in sorted(self.files))
            os.replace(part, self.path)


class Shipper:
    """The process (``python -m client.shipper``): its loop looks at the archive every ``scan_s`` and ships the
    files of its host put in place since, oldest first."""

    def __init__(self, config: ShipperConfig) -> None:
        self.config = config
        self.host = safe_name(config.host)
        self.curve = CurveClient.of_cluster(config.cluster_key) if config.cluster_key else None  # ConfigError
        os.makedirs(config.archive, exist_ok=True)
        self.shipped = Shipped(os.path.join(config.archive, f".shipped-{self.host}"))
        self.drops = DropCounter(log, "shipper")
        self.files = 0  # shipped by this process
        self.records = 0
        self._conn: Connection | None = None
        self._retry_at = 0.0
        self._next_full = 0.0
        self._pending = 0

    def start(self) -> None:
        self._pending = len(self._todo(full=True))

    def ready_info(self) -> ShipperReady:
        return ShipperReady(pid=os.getpid(), host=self.config.host, queue=self.config.queue, pending=self._pending)

    def serve(self, wakeup: SignalWakeup) -> None:
        loop = Loop(f"shipper {self.config.host}", self.drops, idle=self.config.scan_s)
        loop.on_signal(wakeup, loop.stop)
        loop.every(self.config.scan_s, self._tick, "the archive", first=0.0)
        loop.run()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        log.info("shipper %s: %d files, %d records shipped", self.config.host, self.files, self.records)

    # ------------------------------------------------------------------ the work

    def _todo(self, full: bool) -> list[tuple[str, str, str]]:
        """(relative path, partition, full path) of this host's files put in place and not shipped, oldest first."""
        since = "" if full else time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400))
        out, existing = [], set()
        for partition, date, name in placed_files(self.config.archive, since_date=since):
            if host_of(name) != self.host:
                continue
            rel = f"queue={partition}/date={date}/{name}"
            existing.add(rel)
            if rel not in self.shipped.files:
                out.append((rel, partition, os.path.join(self.config.archive, rel)))
        if full:
            self.shipped.keep_only(existing)
        return out

    def _tick(self, now: float) -> None:
        if now < self._retry_at:
            return
        full = now >= self._next_full
        if full:
            self._next_full = now + FULL_SCAN_S
        todo = self._todo(full)
        if not todo:
            return
        try:
            conn = self._connection()
            ends = time.monotonic() + TICK_BUDGET_S
            for rel, partition, path in todo:
                self._ship(conn, rel, partition, path)
                if time.monotonic() >= ends:
                    break
        except RoQError as exc:
            log.warning("shipper %s: %d files wait: %s (again in %g s)", self.config.host, len(todo), exc, RETRY_S)
            self._retry_at = now + RETRY_S
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _ship(self, conn: Connection, rel: str, partition: str, path: str) -> None:
        try:
            with open(path, "rb") as f:
                lines = [line for line in f.read().split(b"\n") if line.strip()]
        except FileNotFoundError:  # removed by the archive's retention meanwhile
            return
        if lines:
            publisher = conn.publisher(id_seed=f"kpi/{rel}")
            try:
                publisher.send_many(partition.encode(), lines)
                publisher.flush(self.config.timeout)
            except BaseException:
                try:
                    publisher.close(timeout=0.1)
                except RoQError:  # what it holds is shipped again with the file
                    pass
                raise
            publisher.close()
        self.shipped.add(rel)
        self.files += 1
        self.records += len(lines)

    def _connection(self) -> Connection:
        """The connection to the KPI queue (made durable first if it does not exist), once its journal runs: a
        record acknowledged before then would not have been journaled.

        Raises:
            BrokerTimeoutError: the queue's journal is not running (yet), or not heard of in ``timeout``.
            ManagementError, BrokerConnectionError: the cluster or the queue cannot be reached.
        """
        if self._conn is None:
            c = self.config
            with QueueManager(c.zk, root=c.root, credentials=self.curve) as manager:
                if not manager.exists(c.queue):
                    manager.create(c.queue)
                    manager.set_rules(c.queue, {"durability": "interval"})
                    log.info("shipper %s: made the KPI queue %r (durable)", c.host, c.queue)
                deadline = time.monotonic() + c.timeout
                while not _journaled(manager.journal(c.queue)):
                    if time.monotonic() > deadline:
                        raise BrokerTimeoutError(f"the KPI queue {c.queue!r} has no running journal (is it durable?)")
                    time.sleep(0.2)
            self._conn = connect(zk=c.zk, queue=c.queue, root=c.root, credentials=self.curve, timeout=10.0)
        return self._conn


def _journaled(journal: JournalStatus | None) -> bool:
    return journal is not None and journal.durability != "none" and bool(journal.alive) and bool(journal.reads)


def main(argv: list[str] | None = None) -> int:
    return run_main("shipper", ShipperConfig, Shipper, argv, description=DESCRIPTION, module="client.shipper")
