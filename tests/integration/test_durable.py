"""A durable queue end to end, with real processes: a monitor, an exchange, a journal, the client library.

The publisher's ``flush()`` returns only once the journal has its records; the journal killed with SIGKILL
under load and started again on the same port loses none that was acknowledged and duplicates none (the
exchange sends it again what it had not acknowledged); the subscriber meanwhile gets every record.
"""

from __future__ import annotations

import pathlib
import time

import pytest

import client
from exchange.journal import Store
from roq.wire import batch
from roq.config import PublisherConfig
from roq.errors import BrokerTimeoutError
from roq.process import spawn
from roqcli.zkserver import free_port

ADDRESS = "127.0.0.16"


def _journal(directory: str, port: int, monitor: str):
    child = spawn("journal", "exchange.journal", ["--queue", "q", "--directory", directory, "--address", ADDRESS,
                                                  "--intake-port", str(port), "--monitor", monitor])
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
    # these tests are about the journal, not failure detection: on a busy machine, a second without a heartbeat
    # from a starved exchange was taken for its death, and the failovers it set off made the test about them
    monitor = spawn("monitor", "monitor", ["--address", ADDRESS, "--port", "0", "--queue", "q",
                                           "--durability", "always", "--heartbeat-timeout", "3"])
    children = [monitor]
    try:
        endpoint = monitor.wait_ready().endpoint
        children.insert(0, _journal(journal_dir, port, endpoint))
        children.append(_exchange(endpoint, tmp_path / "x1.log"))
        yield {"monitor": endpoint, "journal_dir": journal_dir, "port": port, "children": children,
               "logs": tmp_path}
    finally:
        for child in reversed(children):
            child.stop()


def _exchange(monitor: str, log: pathlib.Path):
    """An exchange of the queue, its log in ``log``."""
    with open(log, "ab") as out:
        child = spawn("exchange", "exchange", ["--monitor", monitor, "--address", ADDRESS], stderr=out)
    child.wait_ready()
    return child


def _cut_off_logged(logs: pathlib.Path) -> bool:
    """Whether an exchange logged that it cut a subscriber off."""
    return any("cut off, it reads the journal" in p.read_text(errors="replace") for p in logs.glob("x*.log"))


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
        children[0] = _journal(durable["journal_dir"], durable["port"], durable["monitor"])
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


def test_an_exchange_that_joined_before_the_journal_reads_its_publishers_once_the_journal_is_heard_of(tmp_path):
    """The exchange joins a durable queue whose journal is not up yet: told "durable, no journal", it reads no
    publisher; once the monitor names the journal it reads them again, and a flush returns."""
    # these tests are about the journal, not failure detection: on a busy machine, a second without a heartbeat
    # from a starved exchange was taken for its death, and the failovers it set off made the test about them
    monitor = spawn("monitor", "monitor", ["--address", ADDRESS, "--port", "0", "--queue", "q",
                                           "--durability", "always", "--heartbeat-timeout", "3"])
    children = [monitor]
    try:
        endpoint = monitor.wait_ready().endpoint
        exchange = spawn("exchange", "exchange", ["--monitor", endpoint, "--address", ADDRESS])
        children.append(exchange)
        exchange.wait_ready()
        with client.connect(endpoint) as conn:
            pub = conn.publisher()
            for i in range(100):
                pub.send(b"k", b"%d" % i)
            with pytest.raises(BrokerTimeoutError):
                pub.flush(1.0)  # no journal: nothing is acknowledged
            journal_dir = str(tmp_path / "journal")
            children.append(_journal(journal_dir, free_port(ADDRESS), endpoint))
            pub.flush(15)
        children[-1].stop()
        assert _journaled(journal_dir) == {pub.id.hex(): list(range(1, 101))}
    finally:
        for child in reversed(children):
            child.stop()


def test_a_queue_made_durable_in_a_secure_cluster_gets_a_journal_that_a_kill_9_loses_nothing_of(make_embedded, kz):
    """Through the management API: the rules make the queue durable, the GCM places its journal beside its
    monitor, the host manager runs it (CURVE) and starts it again after a SIGKILL, on its port of before;
    nothing acknowledged is lost and nothing journaled twice. Made not durable again, the journal stops and
    the exchanges acknowledge by themselves."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from roq.errors import NotFoundError
    from roq.zk import Paths

    cluster = make_embedded(hosts=1, secure=True)
    qm = cluster.manager
    qm.create("d", exchanges=1)
    rules = qm.set_rules("d", {"durability": "always"})
    assert rules["durability"] == "always"
    path = Paths(cluster.root).journal("d")
    doc = cluster.wait_for(lambda: kz.exists(path) and json.loads(kz.get(path)[0]), 30, "the journal registered")
    journal_dir = os.path.join(cluster.journal_dir, cluster.addresses[0], "d")

    def journal_status():
        journal = qm.journal("d")
        return journal if journal is not None and journal.intake else None

    status = cluster.wait_for(journal_status, 10, "the monitor hears the journal")
    assert status.durability == "always" and status.intake == doc["intake"]
    with cluster.connect("d") as conn:
        sub = conn.subscriber()
        pub = conn.publisher()
        for i in range(1000):
            pub.send(b"k", b"%d" % i)
        pub.flush(10)
        sent = 1000
        os.kill(doc["pid"], signal.SIGKILL)
        for _ in range(2000):
            pub.send(b"k", b"%d" % sent)
            sent += 1
        pub.flush(30)  # the host manager starts the journal again; the exchange sends it what it lost
        got = []
        deadline = time.monotonic() + 20
        while len(got) < sent and time.monotonic() < deadline:
            got.extend(int(p) for b in sub.recv_many(timeout=1.0) for p in b.payloads)
        assert got == list(range(sent))
        again = json.loads(kz.get(path)[0])
        assert again["pid"] != doc["pid"] and again["intake"] == doc["intake"]
        stats = cluster.wait_for(lambda: (lambda j: j if j and j.next_offset == sent else None)(qm.journal("d")), 10,
                                 "the monitor hears the journal's offsets")  # (it reports every 250 ms)
        assert stats.write_failures == 0 and stats.alive and stats.size_bytes > 0
        assert qm.verify_journal("d", timeout=30)["problems"] == []
        cli = subprocess.run([sys.executable, "-m", "roqcli", "journal", "verify", "d", "--zk", cluster.zk, "--root",
                              cluster.root, "--credentials", cluster.credentials], capture_output=True, text=True,
                             timeout=60)
        assert cli.returncode == 0 and f"offsets 0..{sent}" in cli.stdout and "sound" in cli.stdout, cli.stderr
        qm.set_rules("d", {"durability": None})
        cluster.wait_for(lambda: not kz.exists(path), 20, "the journal stopped")
        with pytest.raises(NotFoundError, match="no journal running"):
            qm.verify_journal("d")
        for i in range(100):
            pub.send(b"k", b"%d" % (sent + i))
        pub.flush(10)
    store, _ = Store.open(journal_dir, "d")
    try:
        assert list(store.verify()) == []
        assert store.end_offset == sent  # every record once; none of those after it stopped
    finally:
        store.close()


def _publishers(conn, n: int, stop, counts: list[int], pad: bytes = b"", slow=None) -> list:
    """``n`` threads publishing "<i>:<seq>:<pad>" as fast as they may (at most a thousand a second each while
    ``slow`` is set: a reader catching up gains on them however busy the machine) until ``stop`` is set;
    ``counts`` their totals."""
    import threading

    def run(i: int) -> None:
        pub = conn.publisher()
        seq = 0
        while not stop.is_set():
            pub.send(b"k%d" % i, b"%d:%d:%s" % (i, seq, pad))
            seq += 1
            if slow is not None and slow.is_set() and seq % 10 == 0:
                time.sleep(0.01)
            elif seq % 200 == 0:
                time.sleep(0.001)
        pub.flush(20)
        counts[i] = seq

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return threads


def _each_once_in_order(got: list[bytes], counts: list[int], since: list[int] | None = None) -> None:
    per: dict[int, list[int]] = {}
    for payload in got:
        i, seq = map(int, payload.split(b":")[:2])
        per.setdefault(i, []).append(seq)
    for i, total in enumerate(counts):
        first = since[i] if since else 0
        assert per.get(i, []) == list(range(first, total)), (
            f"publisher {i}: {len(per.get(i, []))} records, not {first}..{total - 1} once each in order")


def test_a_subscriber_from_earliest_while_publishers_run_gets_every_record_once_across_the_seam(durable):
    import threading

    stop, counts = threading.Event(), [0, 0]
    conn = client.connect(durable["monitor"])
    try:
        threads = _publishers(conn, 2, stop, counts)
        time.sleep(0.3)  # a journal to replay, and publishers that keep going
        sub = conn.subscriber(start="earliest")
        late = conn.subscriber(start=0, prefix=b"k1")
        time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join(30)
        got, got_late = [], []
        deadline = time.monotonic() + 30
        while (len(got) < sum(counts) or len(got_late) < counts[1]) and time.monotonic() < deadline:
            got += [p for b in sub.recv_many(timeout=0.2) for p in b.payloads]
            got_late += [p for b in late.recv_many(timeout=0.01) for p in b.payloads]
        _each_once_in_order(got, counts)
        _each_once_in_order(got_late, [0, counts[1]], [0, 0])
        assert sub.stats().duplicates >= 0 and sub.stats().gaps == 0
    finally:
        stop.set()
        conn.close()


@pytest.mark.measured  # gigabytes through the exchange and the journal, and a bound on its memory
def test_a_subscriber_that_falls_behind_is_cut_off_reads_what_it_missed_from_the_journal_and_catches_up(durable):
    """Two exchanges, two publishers of 4 KB records; a subscriber reads nothing until an exchange logged that it
    cut it off (its pipes filled), then reads as fast as it can while the publishers go on more slowly: it catches up
    with the journal and is back on the live stream, it gets every record once, in each publisher's order, and
    the exchanges' memory stays within their bounds (the subscriber's pipe, and what waits for the journal)."""
    import threading

    import psutil

    from exchange import MAX_UNCONFIRMED_BYTES
    from roq.config import DEFAULT_SUBSCRIBER_QUEUE_BYTES

    durable["children"].append(_exchange(durable["monitor"], durable["logs"] / "x2.log"))
    exchanges = [psutil.Process(c.pid) for c in durable["children"][2:]]
    # its bounds: the subscriber's pipe, and what waits for the journal's acknowledgement
    limit = DEFAULT_SUBSCRIBER_QUEUE_BYTES + MAX_UNCONFIRMED_BYTES + (100 << 20)
    stop, slow, counts = threading.Event(), threading.Event(), [0, 0]
    conn = client.connect(durable["monitor"])
    try:
        sub = conn.subscriber(rcvhwm=20)
        deadline = time.monotonic() + 20
        while sub.stats().exchanges < 2 and time.monotonic() < deadline:
            assert sub.recv(timeout=0.1) is None
        assert sub.stats().exchanges == 2, "the subscriber did not hear both exchanges"
        threads = _publishers(conn, 2, stop, counts, pad=b"x" * 4000, slow=slow)
        peak = 0
        deadline = time.monotonic() + 60  # the subscriber reads nothing meanwhile
        while not _cut_off_logged(durable["logs"]):
            assert time.monotonic() < deadline, "no exchange cut off the subscriber that read nothing for 60 s"
            peak = max([peak] + [x.memory_info().rss for x in exchanges])
            time.sleep(0.1)
        slow.set()
        got = []
        deadline = time.monotonic() + 60
        cut, live = 0, None  # when it was back on the live stream
        while time.monotonic() < deadline and (live is None or time.monotonic() < live + 1):
            got += [p for b in sub.recv_many(timeout=0.1) for p in b.payloads]
            peak = max([peak] + [x.memory_info().rss for x in exchanges])
            stats = sub.stats()
            cut = max(cut, stats.cut_off)
            if live is None and cut and not stats.replaying:
                live = time.monotonic()
        assert live is not None, f"not back on the live stream within 60 s: {sub.stats()}"
        stop.set()
        for t in threads:
            t.join(30)
        deadline = time.monotonic() + 30
        while len(got) < sum(counts) and time.monotonic() < deadline:
            got += [p for b in sub.recv_many(timeout=0.5) for p in b.payloads]
        stats = sub.stats()
        sent = sum(counts) * 4000
        print(f"published {sum(counts):,} records ({sent >> 20} MiB); received {len(got):,}; {stats}; exchange RSS "
              f"peak {peak >> 20} MiB (limit {limit >> 20} MiB)")
        _each_once_in_order(got, counts)
        assert stats.cut_off >= 1, "no exchange cut the subscriber off: it did not fall behind"
        assert (stats.gaps, stats.lost) == (0, 0)
        assert peak < limit
    finally:
        stop.set()
        conn.close()


def test_start_at_a_time_or_on_a_queue_that_is_not_durable(durable, tmp_path):
    import datetime

    with client.connect(durable["monitor"]) as conn:
        pub = conn.publisher()
        for i in range(100):
            pub.send(b"k", b"0:%d" % i)
        pub.flush(10)
        middle = datetime.datetime.now(datetime.timezone.utc)
        time.sleep(0.05)
        for i in range(100, 200):
            pub.send(b"k", b"0:%d" % i)
        pub.flush(10)
        sub = conn.subscriber(start=middle)
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 100 and time.monotonic() < deadline:
            got += [p for b in sub.recv_many(timeout=0.2) for p in b.payloads]
        _each_once_in_order(got, [200], [100])
        with pytest.raises(ValueError, match="start must be"):
            conn.subscriber(start="yesterday")
    monitor = spawn("monitor", "monitor", ["--address", ADDRESS, "--port", "0", "--queue", "plain"])
    try:
        endpoint = monitor.wait_ready().endpoint
        exchange = spawn("exchange", "exchange", ["--monitor", endpoint, "--address", ADDRESS])
        try:
            exchange.wait_ready()
            with client.connect(endpoint) as conn:
                with pytest.raises(client.BrokerConnectionError, match="not durable"):
                    conn.subscriber(start="earliest")
        finally:
            exchange.stop()
    finally:
        monitor.stop()


_DURABLE_READER = r'''
import sys, time
import client
monitor, out, stop_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
with client.connect(monitor) as conn, open(out, "a") as f:
    sub = conn.subscriber(durable="reader")
    got = 0
    print("READY", flush=True)
    while True:
        batches = sub.recv_many(max_records=50, timeout=2)
        if not batches:
            break
        for b in batches:
            f.write("".join(p.decode() + "\n" for p in b.payloads))
        got += sum(len(b) for b in batches)
        f.flush()
        f.write(f"committed {sub.commit()}\n")
        f.flush()
        if got >= stop_after:
            time.sleep(60)  # waits to be killed
'''


def test_a_durable_subscriber_killed_and_started_again_misses_nothing_and_repeats_only_after_its_commit(durable,
                                                                                                    tmp_path):
    import subprocess
    import sys

    with client.connect(durable["monitor"]) as conn:
        pub = conn.publisher()
        for i in range(3000):
            pub.send(b"k", b"%d" % i)
        pub.flush(10)
    out = tmp_path / "read.txt"
    reader = subprocess.Popen([sys.executable, "-c", _DURABLE_READER, durable["monitor"], str(out), "1200"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "READY"
        deadline = time.monotonic() + 20
        while out.read_text().count("\n") < 1200 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        reader.kill()  # SIGKILL: no goodbye, no last commit
        reader.wait()
    lines = out.read_text().splitlines()
    commits = [int(x.split()[1]) for x in lines if x.startswith("committed")]
    assert commits and commits[-1] >= 1000
    again = subprocess.Popen([sys.executable, "-c", _DURABLE_READER, durable["monitor"], str(out), "100000"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert again.wait(60) == 0
    finally:
        again.kill()
    records = [int(x) for x in out.read_text().splitlines() if not x.startswith("committed")]
    first_run = [int(x) for x in lines if not x.startswith("committed")]
    assert sorted(set(records)) == list(range(3000)), "a record was missed"
    second = records[len(first_run):]
    # it goes on from the last commit it saw confirmed, or from the one the journal kept as the kill came, before
    # the reader could write the confirmation down (its records were all written by then)
    assert first_run == list(range(len(first_run)))
    assert second[0] in (commits[-1], len(first_run)), "the restart did not go on from the last commit"
    assert second == list(range(second[0], 3000))  # duplicates only of what came after the last commit

