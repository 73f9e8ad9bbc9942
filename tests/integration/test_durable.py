"""A durable queue end to end, with real processes: a monitor, an exchange, a journal, the client library.

The publisher's ``flush()`` returns only once the journal has its records; the journal killed with SIGKILL
under load and started again on the same port loses none that was acknowledged and duplicates none (the
exchange sends it again what it had not acknowledged); the subscriber meanwhile gets every record.
"""

from __future__ import annotations

import time

import pytest

import client
from exchange.journal import Store
from roq import batch
from roq.config import PublisherConfig
from roq.process import spawn
from roqcli.zkserver import free_port

ADDRESS = "127.0.0.16"


def _journal(directory: str, port: int, durability: str = "always"):
    child = spawn("journal", "exchange.journal", ["--queue", "q", "--directory", directory, "--address", ADDRESS,
                                                  "--intake-port", str(port), "--durability", durability])
    child.wait_ready(30)
    return child


def _journaled(directory: str) -> dict[str, list[int]]:
    """Each publisher's seqs in the journal, in journal order."""
    store, _ = Store.open(directory, "q")
    try:
        assert list(store.verify()) == []
        out: dict[str, list[int]] = {}
        offset = 0
        while entries := store.read(offset, 1 << 22):
            for e in entries:
                h = batch.parse_header(e.header)
                out.setdefault(h.publisher.hex(), []).extend(range(h.first_seq, h.last_seq + 1))
                offset = e.offset + h.count
        return out
    finally:
        store.close()


@pytest.fixture
def durable(tmp_path):
    port = free_port(ADDRESS)
    journal_dir = str(tmp_path / "journal")
    journal = _journal(journal_dir, port)
    monitor = spawn("monitor", "monitor", ["--address", ADDRESS, "--port", "0", "--queue", "q",
                                           "--journal", f"tcp://{ADDRESS}:{port}", "--durability", "always"])
    children = [journal, monitor]
    try:
        endpoint = monitor.wait_ready()["endpoint"]
        exchange = spawn("exchange", "exchange", ["--monitor", endpoint, "--address", ADDRESS])
        children.append(exchange)
        exchange.wait_ready()
        yield {"monitor": endpoint, "journal_dir": journal_dir, "port": port, "children": children}
    finally:
        for child in reversed(children):
            child.stop()


def test_flush_returns_once_the_journal_has_the_records_and_a_killed_journal_loses_no_acknowledged_one(durable):
    children = durable["children"]
    conn = client.connect(durable["monitor"], publisher_config=PublisherConfig(max_in_flight=8))
    try:
        sub = conn.subscriber(b"")
        pub = conn.publisher()
        for i in range(2000):
            pub.send(b"k", b"%d" % i)
        pub.flush(10)
        seqs = _journaled(durable["journal_dir"])
        assert seqs == {pub.id.hex(): list(range(1, 2001))}  # flush returned: all on disk already

        # the journal killed under load, and started again on the same port
        stop = time.monotonic() + 0.6
        sent = 2000
        while time.monotonic() < stop:
            pub.send(b"k", b"%d" % sent)
            sent += 1
        children[0].kill()
        killed_at = sent
        for _ in range(3000):
            pub.send(b"k", b"%d" % sent)
            sent += 1
        children[0] = _journal(durable["journal_dir"], durable["port"])
        pub.flush(20)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < sent and time.monotonic() < deadline:
            got.extend(int(p) for b in sub.recv_many(timeout=1.0) for p in b.payloads)
        assert got == list(range(sent)), "the subscriber missed or repeated records"
    finally:
        conn.close()
    children[0].stop()
    seqs = _journaled(durable["journal_dir"])
    assert seqs == {pub.id.hex(): list(range(1, sent + 1))}, (
        f"the journal holds {len(seqs.get(pub.id.hex(), []))} records, not 1..{sent} once each "
        f"(killed after {killed_at} sent)")
