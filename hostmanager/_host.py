"""This host in the cluster: its KPIs, and the ephemeral znodes its host manager keeps in ZooKeeper.

* :class:`HostSampler` measures the host (its CPU against its own budget over the last few periods, see
  :mod:`hostmanager._cpu`; memory and network with psutil), makes
  the :class:`~roq.wire.documents.HostDoc` the GCM places by, and appends a
  :class:`~roq.kpi.records.HostRecord` to the KPI archive if there is one.
* :class:`Registration` writes the nodes of the host manager's session: ``hosts/<address>`` (capacity and
  KPIs) and, for each ready child, ``queues/<q>/monitor`` or ``queues/<q>/exchanges/<slot>``. A node left by
  a previous session of the same host (a host manager restarted before its old session expired) is
  replaced, never merely rewritten: it would vanish with that session.
"""

from __future__ import annotations

import collections
import logging
import os
import time

import psutil

from hostmanager._cpu import CpuMeter
from roq.wire.documents import Assignment, Document, HostDoc, HostKpis
from roq.errors import NodeExistsError, NodeMissingError, VersionConflictError, ZooKeeperError
from roq.kpi.archive import ArchiveWriter
from roq.kpi.records import HostRecord
from roq.zk import Paths, Session

__all__ = ["HostSampler", "Registration", "CPU_WINDOW"]

log = logging.getLogger("hostmanager")

CPU_WINDOW = 5  # the host's CPU % is the mean of this many KPI periods


class HostSampler:
    """Measures the host each KPI period.

    Args:
        address: the host's address.
        max_exchanges: the capacity published.
        archive: where host KPIs are archived (None = nowhere); closed by :meth:`close`.
        cpus: the host's CPU budget in cores (0 = its cgroup's quota, else the machine's cores).
        link: the rate of the host's link in bytes/s (0 = unknown); with one, the network counted is that of
            its interfaces but loopback, and ``net_percent`` is the busier direction's share of the rate.
    """

    def __init__(self, address: str, max_exchanges: int, archive: ArchiveWriter | None = None, cpus: float = 0.0,
                 link: float = 0.0) -> None:
        self.address = address
        self.max_exchanges = max_exchanges
        self.archive = archive
        self.cpu = CpuMeter(cpus)
        self.link = link
        self.endpoint = ""  # the host manager's control endpoint, once bound
        self.started = time.time()
        self._net_last: tuple[float, int, int] | None = None  # when, bytes sent, bytes received
        # placement acts on the CPU of the last few reports, not on one busy second (a process starting)
        self._cpu: collections.deque[float] = collections.deque(maxlen=CPU_WINDOW)


    def bound(self, endpoint: str) -> None:
        """The host manager's control endpoint, once bound: what the host's node names."""
        self.endpoint = endpoint
    def kpis(self) -> HostKpis:
        """This period's KPIs (and its archive record)."""
        now = time.monotonic()
        sent, received = self._net_counters()
        out = into = 0.0
        if self._net_last is not None and now > self._net_last[0]:
            then, sent0, received0 = self._net_last
            out, into = max(0.0, (sent - sent0) / (now - then)), max(0.0, (received - received0) / (now - then))
        self._net_last = (now, sent, received)
        self._cpu.append(round(self.cpu.percent(), 1))
        kpis = HostKpis(cpu_percent=round(sum(self._cpu) / len(self._cpu), 1),
                        memory_percent=psutil.virtual_memory().percent, net_bytes_per_s=round(out + into, 1),
                        net_percent=round(100.0 * max(out, into) / self.link, 1) if self.link else 0.0)
        if self.archive is not None:
            self.archive.append(HostRecord(host=self.address, cpu_percent_now=self._cpu[-1],
                                           cpu_percent=kpis.cpu_percent, memory_percent=kpis.memory_percent,
                                           net_bytes_per_s=kpis.net_bytes_per_s, cpus=self.cpu.cores,
                                           link_bytes_per_s=self.link))
            self.archive.tick()
        return kpis

    def _net_counters(self) -> tuple[int, int]:
        """Bytes sent and received so far: on every interface, or (with a link) on all but loopback."""
        if not self.link:
            net = psutil.net_io_counters()
            return net.bytes_sent, net.bytes_recv
        nics = [c for name, c in psutil.net_io_counters(pernic=True).items() if name != "lo"]
        return sum(c.bytes_sent for c in nics), sum(c.bytes_recv for c in nics)

    def doc(self, *, exchanges: int, monitors: int) -> HostDoc:
        """The host's node: where its host manager answers, its capacity, this period's KPIs."""
        return HostDoc(address=self.address, endpoint=self.endpoint, pid=os.getpid(),
                       max_exchanges=self.max_exchanges, cpus=self.cpu.cores, link_bytes_per_s=self.link,
                       memory_bytes=psutil.virtual_memory().total, started=self.started, kpis=self.kpis(),
                       exchanges=exchanges, monitors=monitors)

    def close(self) -> None:
        if self.archive is not None:
            self.archive.close()


class Registration:
    """The ephemeral nodes of a host manager's session.

    Every method raises :class:`~roq.errors.ZooKeeperError` when ZooKeeper does not answer (the caller
    tries again later), unless it says otherwise.
    """

    def __init__(self, session: Session, paths: Paths, address: str) -> None:
        self.session = session
        self.paths = paths
        self.address = address
        self.registered = False

    def register(self, doc: HostDoc) -> None:
        """Write the host's node (and make sure its parent, its assignments' parent and the queues' exist)."""
        self.session.ensure(self.paths.hosts, self.paths.host_assignments(self.address), self.paths.queues)
        if self._put_own(self.paths.host(self.address), doc):
            log.warning("host manager %s: replaced the node of a previous session", self.address)
        self.registered = True
        log.info("host manager %s registered in ZooKeeper (session %#x)", self.address, self.session.session_id)

    def lost(self) -> None:
        """The session went, and the host's node with it: register again once connected."""
        self.registered = False

    def report(self, doc: HostDoc) -> None:
        """Rewrite the host's node with ``doc`` (register again if someone deleted it). Never raises."""
        if not self.registered:
            return
        try:
            try:
                self.session.set(self.paths.host(self.address), doc.encode())
            except NodeMissingError:  # deleted by someone: be there again
                self.registered = False
                self.register(doc)
        except ZooKeeperError as exc:
            log.debug("host KPI update failed: %s", exc)

    def publish(self, assignment: Assignment, doc: Document, take: bool = True) -> bool:
        """Make a ready child known: write its node (``take``: in place of another session's; else, one of a
        replicated journal's replicas, only where none is). False if its queue is gone (the child should stop)."""
        try:
            self._put_own(self._path(assignment), doc, take)
        except NodeMissingError:
            return False
        return True

    def unpublish(self, assignment: Assignment) -> None:
        """Delete a child's node if this session wrote it. Never raises."""
        path = self._path(assignment)
        try:
            found = self.session.get(path)
            if found is not None and self.session.owns(found[1]):
                self.session.delete(path, version=found[1].version)
        except ZooKeeperError as exc:  # an ephemeral node: it goes with the session anyway
            log.debug("removing %s failed: %s", path, exc)

    def _path(self, a: Assignment) -> str:
        if a.role == "exchange":
            return self.paths.exchange(a.queue, a.slot)
        return self.paths.monitor(a.queue) if a.role == "monitor" else self.paths.journal(a.queue)

    def _put_own(self, path: str, doc: Document, take: bool = True) -> bool:
        """Create ``path`` holding ``doc`` in this session, or rewrite it if this session holds it already;
        True if it replaced a node of another session (never without ``take``)."""
        data = doc.encode()
        for _ in range(3):  # the node may come and go between the calls
            try:
                self.session.create(path, data, ephemeral=True)
                return False
            except NodeExistsError:
                pass
            found = self.session.get(path)
            if found is None:
                continue
            if self.session.owns(found[1]):
                self.session.set(path, data)
                return False
            if not take:
                return False
            try:
                self.session.delete(path, version=found[1].version)
                self.session.create(path, data, ephemeral=True)
                return True
            except (NodeExistsError, VersionConflictError):
                continue
        raise ZooKeeperError(f"{path} keeps changing; retry")
