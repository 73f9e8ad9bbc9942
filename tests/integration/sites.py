"""A durable queue's processes on one loopback "site", without a GCM: its monitor, its journal, its exchanges; and
what the tests of trees of sites look at: a subscriber that counts what it hears, an emulated host's interface."""

from __future__ import annotations

import collections
import json
import subprocess
import time
from typing import Any, Callable

import client
from tests.integration.zkhelp import wait_until

from exchange.journal import Store
from roq.process import spawn
from roq.wire import batch
from roqcli.zkserver import free_port

__all__ = ["DurableQueue", "stop_tree", "Listener", "Tree", "interface_bytes", "publish_paced"]


class DurableQueue:
    """A durable queue's processes on one loopback address: its monitor, its journal, its exchanges."""

    def __init__(self, address: str, directory: str, exchanges: int,
                 enter: Callable[[], None] | None = None) -> None:
        """``enter``: what each process runs before it starts (an emulated host's network namespace, whose address
        ``address`` is: its journal's intake then takes any free port)."""
        self.directory = directory
        self.children = []
        monitor = spawn("monitor", "monitor", ["--address", address, "--port", "0", "--queue", "q",
                                               "--durability", "always"], enter=enter)
        self.children.append(monitor)
        self.monitor = monitor.wait_ready().endpoint
        journal = spawn("journal", "exchange.journal",
                        ["--queue", "q", "--directory", directory, "--address", address,
                         "--intake-port", str(free_port(address) if enter is None else 0), "--monitor", self.monitor],
                        enter=enter)
        self.children.insert(0, journal)
        self.reads = journal.wait_ready(30).reads
        started = [spawn("exchange", "exchange", ["--monitor", self.monitor, "--address", address], enter=enter)
                   for _ in range(exchanges)]
        self.children.extend(started)
        self.exchanges = {x.wait_ready().id: x for x in started}

    def journaled(self) -> dict[bytes, list[int]]:
        """Each publisher's seqs in the journal, in journal order."""
        out: dict[bytes, list[int]] = {}
        for _, h in self._entries():
            out.setdefault(h.publisher, []).extend(range(h.first_seq, h.last_seq + 1))
        return out

    def keys(self) -> list[bytes]:
        """The key of every batch in the journal, in journal order."""
        return [e.key for e, _ in self._entries()]

    def records_by_key(self) -> dict[bytes, int]:
        """How many records of each key the journal holds."""
        out: dict[bytes, int] = {}
        for e, h in self._entries():
            out[e.key] = out.get(e.key, 0) + h.count
        return out

    def chains(self) -> list[tuple[bytes, bytes, int, int, int]]:
        """Every batch in journal order: (publisher, key, the seq of its key's previous record, first seq, last)."""
        return [(h.publisher, e.key, h.key_prev, h.first_seq, h.last_seq) for e, h in self._entries()]

    def arrivals(self) -> list[tuple[int, int]]:
        """When each batch was journaled (ns since the epoch) and its size as it was sent (key, header, body)."""
        return [(e.time_ns, len(e.key) + len(e.header) + len(e.body)) for e, _ in self._entries()]

    def _entries(self) -> list[tuple[Any, batch.Header]]:  # (the store's entry, its header)
        store, _ = Store.open(self.directory, "q")
        try:
            out = []
            offset = 0
            while found := store.read(offset, 1 << 22):
                for e in found:
                    h = batch.parse_header(e.header)
                    out.append((e, h))
                    offset = e.offset + h.count
            return out
        finally:
            store.close()

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()


def stop_tree(links: list[Any], conns: dict[str, Any], sites: dict[str, DurableQueue]) -> None:
    """Stop a tree of sites: its link processes first, then the test's connections, then the sites' processes."""
    for link in links:
        link.stop()
    for conn in conns.values():
        conn.close()
    for site in sites.values():
        site.stop()


class Listener:
    """A subscriber, every record it took counted by key, and how many it took twice (by publisher and seq)."""

    def __init__(self, conn: client.Connection, prefix: bytes) -> None:
        self.sub = conn.subscriber(prefix)
        self.keys: collections.Counter[bytes] = collections.Counter()
        self.seen: set[tuple[str, int]] = set()
        self.twice = 0

    def take(self) -> None:
        for b in self.sub.recv_many(timeout=0.05):
            self.keys[b.key] += len(b.payloads)
            for i in range(len(b.payloads)):
                mark = (b.publisher, b.first_seq + i)
                self.twice += mark in self.seen
                self.seen.add(mark)

    def until(self, want: dict[bytes, int], what: str, timeout: float = 60) -> None:
        def done() -> bool:
            self.take()
            return all(self.keys[k] >= n for k, n in want.items())
        wait_until(done, timeout, f"{what} (heard {dict(self.keys)})")


def interface_bytes(device: str) -> int:
    """Bytes an emulated host's interface (the bridge's end of its veth) sent and received so far (``ip -s link``)."""
    shown = json.loads(subprocess.run(["ip", "-s", "-j", "link", "show", "dev", device], check=True,
                                      capture_output=True, text=True).stdout)[0]["stats64"]
    return shown["rx"]["bytes"] + shown["tx"]["bytes"]


def publish_paced(pub: client.Publisher, key: bytes, payload: bytes, rate: float, seconds: float) -> tuple[int, float]:
    """Publish ``rate`` records a second under ``key`` for ``seconds``, then flush: (records sent, seconds taken)."""
    started, sent = time.monotonic(), 0
    while time.monotonic() < started + seconds:
        due = int((time.monotonic() - started) * rate) - sent
        for _ in range(max(0, due)):
            pub.send(key, payload)
        sent += max(0, due)
        time.sleep(0.005)
    pub.flush(30)
    return sent, time.monotonic() - started


class Tree:
    """A tree of queues seen from their clients, by site name: a publisher at each site, what each monitor counted
    of its interest messages, and the links each monitor hears."""

    def __init__(self, conns: dict[str, client.Connection], per_site: int) -> None:
        self.conns = conns
        self.per_site = per_site
        self.pubs = {name: conn.publisher() for name, conn in conns.items()}

    def publish(self, phase: str, names: Any = None, count: int | None = None) -> None:
        """``count`` records (default: ``per_site``) at each of ``names`` (default: every site), keyed
        ``<site>.<phase>``, each site's flushed."""
        for name in names if names is not None else self.conns:
            pub = self.pubs[name]
            for i in range(self.per_site if count is None else count):
                pub.send(f"{name}.{phase}".encode(), b"%d" % i)
            pub.flush(30)

    def adverts(self) -> dict[str, int]:
        """Interest messages each site's monitor sent a link because what it wants changed."""
        return {name: conn.status().count("interest_adverts") for name, conn in self.conns.items()}

    def reads(self, name: str, side: str, way: str, wants: list[str]) -> Callable[[], bool]:
        """Whether the monitor of ``name`` hears the link of ``side`` read its queue ``way``, wanting ``wants``."""
        return lambda: any(x.side == side and x.way == way and x.reads and x.wants == wants
                           for x in self.conns[name].status().links or [])
