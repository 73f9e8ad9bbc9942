"""A durable queue's processes on one loopback "site", without a GCM: its monitor, its journal, its exchanges."""

from __future__ import annotations

from typing import Any, Callable

from exchange.journal import Store
from roq.process import spawn
from roq.wire import batch
from roqcli.zkserver import free_port

__all__ = ["DurableQueue", "stop_tree"]


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
