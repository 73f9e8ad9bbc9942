"""A link's relay into a real durable queue: a monitor, a journal, two exchanges, a subscriber (real processes).

Batches of three origin publishers with sparse seqs (only some of their keys cross) enter the queue through
an :class:`~client.link.Outlet`; the exchange it sends through is killed with SIGKILL half-way, the monitor
fails the outlet over, and what was on its way goes again. Each relayed record must land once, in its
publisher's order, in the journal and at the subscriber, with no gap counted.
"""

from __future__ import annotations

import os
import time

import pytest
import zmq

import client
from client.link import Outlet
from exchange.journal import Store
from roq.federation import Entry, Prefixes, Relay, relay_id
from roq.loop import Loop
from roq.process import spawn
from roq.runtime import DropCounter
from roq.wire import batch
from roqcli.zkserver import free_port

ADDRESS = "127.0.0.16"
TAG = os.urandom(8)


@pytest.fixture
def durable(tmp_path):
    journal_dir = str(tmp_path / "journal")
    monitor = spawn("monitor", "monitor", ["--address", ADDRESS, "--port", "0", "--queue", "q",
                                           "--durability", "always"])
    children = [monitor]
    try:
        endpoint = monitor.wait_ready().endpoint
        journal = spawn("journal", "exchange.journal",
                        ["--queue", "q", "--directory", journal_dir, "--address", ADDRESS,
                         "--intake-port", str(free_port(ADDRESS)), "--monitor", endpoint])
        children.insert(0, journal)
        journal.wait_ready(30)
        exchanges = [spawn("exchange", "exchange", ["--monitor", endpoint, "--address", ADDRESS]) for _ in range(2)]
        children.extend(exchanges)
        readies = [x.wait_ready() for x in exchanges]
        yield {"monitor": endpoint, "journal_dir": journal_dir,
               "exchanges": {r.id: x for r, x in zip(readies, exchanges)}}
    finally:
        for child in reversed(children):
            child.stop()


def _source(n: int) -> tuple[list[Entry], list[tuple[bytes, int]]]:
    """A source journal of ``n`` batches from three origins over four keys, and the records that cross
    (keys ``eu.*``), in order: (relayed id, seq)."""
    origins = [bytes([65 + i]) * 16 for i in range(3)]
    keys = [b"eu.fr", b"us.ny", b"eu.de", b"asia.jp"]
    seqs = dict.fromkeys(origins, 0)
    entries, crossing, offset = [], [], 0
    for i in range(n):
        origin, key = origins[i % 3], keys[(i // 3) % 4]
        first, count = seqs[origin] + 1, 1 + i % 3
        seqs[origin] += count
        header = batch.pack_header(batch.DATA, origin, first, count, epoch=1, timestamp_ns=time.time_ns())
        entries.append(Entry(offset, key, header, batch.encode_body([b"%d" % (first + j) for j in range(count)])))
        if key.startswith(b"eu."):
            crossing.extend((relay_id(TAG, origin), first + j) for j in range(count))
        offset += count
    return entries, crossing


def test_relayed_batches_land_once_and_in_order_through_a_fail_over(durable):
    entries, crossing = _source(3000)
    relay = Relay(TAG, epoch=100, max_bytes=256 << 10)
    relay.wanted = Prefixes.of([b"eu."])
    relay.start(0)
    loop = Loop("link", DropCounter(None, "test"))
    outlet = Outlet(zmq.Context.instance(), durable["monitor"], relay, TAG + os.urandom(8), ack_timeout=1.0)
    outlet.attach(loop)
    conn = client.connect(durable["monitor"])
    sub = conn.subscriber(b"")
    got: dict[bytes, list[int]] = {}

    def drain() -> None:
        for b in sub.recv_many(timeout=0):
            got.setdefault(bytes.fromhex(b.publisher), []).extend(range(b.first_seq, b.first_seq + len(b.payloads)))

    try:
        deadline = time.monotonic() + 30
        while sub.stats().exchanges < 2:  # it hears both exchanges before anything is sent: it misses nothing
            assert time.monotonic() < deadline, sub.stats()
            assert sub.recv_many(timeout=0.05) == []
        deadline = time.monotonic() + 60
        fed = 0
        killed = None
        while relay.position() < entries[-1].offset + 1 or relay.on_the_way():
            assert time.monotonic() < deadline, (relay.position(), relay.on_the_way(), outlet.exchange)
            while fed < len(entries) and not relay.full and outlet.exchange:
                frames = relay.take(entries[fed])
                if frames is not None:
                    outlet.send(frames)
                fed += 1
            if killed is None and fed > len(entries) // 2 and outlet.exchange:
                killed = outlet.exchange
                durable["exchanges"][killed].kill()  # SIGKILL under load: the monitor fails the outlet over
            loop.turn()
            drain()
        assert killed is not None and outlet.exchange != killed and outlet.moves >= 1
        deadline = time.monotonic() + 20
        while sum(map(len, got.values())) < len(crossing):
            assert time.monotonic() < deadline, sum(map(len, got.values()))
            drain()
            loop.turn()
        expected: dict[bytes, list[int]] = {}
        for publisher, seq in crossing:
            expected.setdefault(publisher, []).append(seq)
        assert got == expected  # once each, in each publisher's order, nothing of us.* or asia.*
        stats = sub.stats()
        assert stats.gaps == 0 and stats.lost == 0
        store, _ = Store.open(durable["journal_dir"], "q")
        try:
            journaled: dict[bytes, list[int]] = {}
            offset = 0
            while found := store.read(offset, 1 << 22):
                for e in found:
                    h = batch.parse_header(e.header)
                    journaled.setdefault(h.publisher, []).extend(range(h.first_seq, h.last_seq + 1))
                    offset = e.offset + h.count
        finally:
            store.close()
        assert journaled == expected  # the journal wrote every jump at once, and each record once
    finally:
        outlet.close()
        conn.close()
