"""Crash consistency of the journal process: ``kill -9`` at random moments under load, and power losses.

Each seeded trial runs a real journal process (``python -m exchange.journal``) fed by a driver that speaks to
its intake as exchanges do: several publishers' batches of random sizes, each publisher with a bounded number
of batches unacknowledged, every acknowledgement recorded. At a random moment the journal is killed with
SIGKILL; in a power-loss trial the last segment is then cut at a random point after the last acknowledged
record (what a disk holds after a power failure: everything synced, some of what was not) and random bytes
are added. The journal starts again (recovery), the driver sends every unacknowledged batch again, as
exchanges do when they see a new incarnation, and then more; the journal stops.

What must hold, read back with :class:`exchange.journal.Store`: with ``always`` (and with ``interval`` after
a process crash, which loses nothing the kernel had) every record the driver saw acknowledged is there,
each publisher's records are 1..n exactly once and in order, and every segment verifies: nothing corrupt is
ever served.

``make test`` runs :data:`TRIALS` trials; ``make crash`` runs 200 (``ROQ_CRASH_TRIALS``).
"""

from __future__ import annotations

import os
import random
import subprocess
import time

import pytest
import zmq

from exchange.journal import Store
from roq.wire import batch
from roq.wire.batch import EPOCH_KEY
from roq.process import spawn

TRIALS = int(os.environ.get("ROQ_CRASH_TRIALS", "20"))
PUBLISHERS = 4
IN_FLIGHT = 8  # batches a publisher may have unacknowledged
SEGMENT_BYTES = 256 << 10
QUEUE = "crash"


class Driver:
    """The exchanges' side of the intake: publishers' batches out, the journal's acknowledgements in."""

    def __init__(self, ctx: zmq.Context, endpoint: str, rng: random.Random) -> None:
        self.rng = rng
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IDENTITY, b"exchange-under-test")
        self.sock.connect(endpoint)
        self.publishers = [bytes([i + 1]) * 16 for i in range(PUBLISHERS)]
        self.sent: dict[bytes, list[tuple[int, list[bytes]]]] = {p: [] for p in self.publishers}  # batches
        self.next_seq = {p: 1 for p in self.publishers}
        self.acked = {p: 0 for p in self.publishers}
        self.incarnation = 0
        self.acks_seen = 0

    def reconnect(self, ctx: zmq.Context, endpoint: str) -> None:
        """A fresh socket with the same identity, to the journal started again."""
        self.sock.close()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, b"exchange-under-test")
        sock.connect(endpoint)
        self.sock = sock

    def _batch(self, publisher: bytes) -> None:
        first = self.next_seq[publisher]
        count = self.rng.randint(1, 24)
        payloads = [self.rng.randbytes(self.rng.choice((16, 300, 1024))) for _ in range(count)]
        header = batch.pack_header(batch.DATA, publisher, first, count, timestamp_ns=time.time_ns())
        frames = [b"key/" + publisher[:1], header, batch.encode_body(payloads)]
        self.sent[publisher].append((first + count - 1, frames))
        self.next_seq[publisher] = first + count
        self.sock.send_multipart(frames, zmq.NOBLOCK)

    def _read_acks(self, wait_ms: int) -> None:
        while self.sock.poll(wait_ms, zmq.POLLIN):
            wait_ms = 0
            incarnation, _end, pairs = batch.decode_journal_ack(self.sock.recv())
            self.incarnation = incarnation
            self.acks_seen += 1
            for publisher, seq in pairs:
                assert seq <= self.next_seq[publisher] - 1, "acknowledged a record never sent"
                self.acked[publisher] = max(self.acked[publisher], seq)

    def run(self, seconds: float, first_ack_within: float = 30.0) -> None:
        """Publish as fast as the acknowledgements allow, for ``seconds`` after the journal's first
        acknowledgement (a starved journal may take a while to give one: the kill comes under load, and after
        it has acknowledged something, however busy the machine)."""
        deadline = time.monotonic() + first_ack_within
        while not self.acks_seen and time.monotonic() < deadline:
            self._step()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._step()

    def _step(self) -> None:
        for p in self.publishers:
            waiting = sum(1 for last, _ in self.sent[p] if last > self.acked[p])
            if waiting < IN_FLIGHT:
                try:
                    self._batch(p)
                except zmq.Again:
                    pass
        self._read_acks(1)

    def drain(self) -> None:
        """Take in the acknowledgements already on their way (a dead journal sent them before it died)."""
        self._read_acks(100)

    def resend(self) -> None:
        """Send again every batch not acknowledged (an exchange does it when it sees a new incarnation)."""
        for p in self.publishers:
            for last, frames in self.sent[p]:
                if last > self.acked[p]:
                    self.sock.send_multipart(frames)

    def settle(self, timeout: float = 20.0) -> None:
        """Wait until everything sent is acknowledged."""
        deadline = time.monotonic() + timeout
        while any(self.acked[p] < self.next_seq[p] - 1 for p in self.publishers):
            assert time.monotonic() < deadline, f"not acknowledged in {timeout}s: {self.acked} of {self.next_seq}"
            self._read_acks(50)


def _start(directory: str, durability: str, stderr=None):
    child = spawn("journal", "exchange.journal", [
        "--queue", QUEUE, "--directory", directory, "--address", "127.0.0.1", "--durability", durability,
        "--sync-interval", "0.05", "--segment-bytes", str(SEGMENT_BYTES), "--log-level", "WARNING"], stderr=stderr)
    info = child.wait_ready(30)
    return child, info


def _power_loss(directory: str, acked: dict[bytes, int], rng: random.Random) -> tuple[int, int]:
    """Cut the last segment at a random point after the end of the last acknowledged record, add random
    bytes; (where it was cut, the bytes added)."""
    store, _ = Store.open(directory, QUEUE, segment_bytes=SEGMENT_BYTES)
    try:
        active = store.active
        need = 0  # the end of the last entry in the last segment holding an acknowledged record
        at = 0
        for entry in active.entries(0):
            h = batch.parse_header(entry.header)
            at += entry.size
            if h.first_seq <= acked.get(h.publisher, 0):
                need = at
        size = active.size
        path = active.path
    finally:
        store.close()
    cut = rng.randint(need, os.path.getsize(path)) if size else 0
    os.truncate(path, cut)
    extra = rng.randint(0, 4096)
    with open(path, "ab") as f:
        f.write(rng.randbytes(extra))
    return cut, extra


def _check(directory: str, driver: Driver, acked_at_kill: dict[bytes, int]) -> None:
    store, _ = Store.open(directory, QUEUE, segment_bytes=SEGMENT_BYTES)
    try:
        assert list(store.verify()) == []
        seen: dict[bytes, list[int]] = {p: [] for p in driver.publishers}
        payloads: dict[tuple[bytes, int], bytes] = {}
        offset = 0
        while True:
            entries = store.read(offset, 1 << 20)
            if not entries:
                break
            for e in entries:
                h = batch.parse_header(e.header)
                offset = e.offset + h.count
                if e.key == EPOCH_KEY:  # a replicated journal's new epoch began here (no publisher's records)
                    continue
                seen[h.publisher].extend(range(h.first_seq, h.last_seq + 1))
                for i, payload in enumerate(batch.decode_body(e.body, h.count)):
                    payloads[(h.publisher, h.first_seq + i)] = payload
        assert offset == store.end_offset
    finally:
        store.close()
    sent = {}
    for p in driver.publishers:
        for _last, frames in driver.sent[p]:
            h = batch.parse_header(frames[1])
            for i, payload in enumerate(batch.decode_body(frames[2], h.count)):
                sent[(p, h.first_seq + i)] = payload
    for p in driver.publishers:
        n = driver.next_seq[p] - 1
        assert seen[p] == list(range(1, n + 1)), (
            f"publisher {p[:1].hex()}: journaled {len(seen[p])} records, not 1..{n} once each in order "
            f"(acknowledged {acked_at_kill[p]} at the kill)")
    assert payloads == sent, "a record's bytes differ from what was sent"


def _trial(seed: int, tmp_path) -> str:
    rng = random.Random(seed)
    durability = "always" if seed % 2 == 0 else "interval"
    power_loss = durability == "always" and rng.random() < 0.6
    directory = str(tmp_path / f"trial-{seed}")
    ctx = zmq.Context()
    child, info = _start(directory, durability)
    try:
        driver = Driver(ctx, info.intake, rng)
        driver.run(rng.uniform(0.05, 0.35))
        child.kill()  # SIGKILL, reaped
        driver.drain()
        acked_at_kill = dict(driver.acked)
        assert driver.acks_seen, "the journal acknowledged nothing before it was killed"
        cut = ""
        if power_loss:
            at, extra = _power_loss(directory, acked_at_kill, rng)
            cut = f", cut at byte {at} + {extra} random bytes"
        child, info = _start(directory, durability)
        first = driver.incarnation
        driver.reconnect(ctx, info.intake)
        driver.resend()
        driver.run(rng.uniform(0.05, 0.15))
        driver.settle()
        assert driver.incarnation != first
        assert child.stop(20) == 0
        _check(directory, driver, acked_at_kill)
        total = sum(driver.next_seq[p] - 1 for p in driver.publishers)
        return f"seed {seed} {durability}: {sum(acked_at_kill.values())} acknowledged at the kill{cut}; {total} in all"
    finally:
        if child.alive():
            child.kill()
        ctx.destroy(linger=0)


@pytest.mark.timeout(60 + 3 * TRIALS)
def test_kill_9_and_power_loss_under_load_lose_no_acknowledged_record_and_duplicate_none(tmp_path):
    results = [_trial(seed, tmp_path) for seed in range(TRIALS)]
    print("\n".join(results))


def test_a_full_disk_acknowledges_nothing_it_could_not_write_and_goes_on_once_there_is_room(tmp_path):
    """The journal's directory on a tmpfs of 1 MiB: writes fail with ENOSPC. Nothing the journal could not write
    is acknowledged, it keeps serving (and says why in its heartbeat's error), and once the file system grows
    every record sent again is journaled once."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    ctx = zmq.Context()
    child = None
    try:
        directory = str(mount / "journal")
        log = tmp_path / "journal.log"
        with open(log, "ab") as err:
            child, info = _start(directory, "always", stderr=err)
        driver = Driver(ctx, info.intake, random.Random(1))
        deadline = time.monotonic() + 30
        while "the disk is full" not in log.read_text() and time.monotonic() < deadline:
            driver.run(0.2)
        assert "nothing of the last round is acknowledged" in log.read_text()
        acked = dict(driver.acked)
        assert sum(acked.values()) > 0
        sent = sum(driver.next_seq[p] - 1 for p in driver.publishers)
        assert sum(acked.values()) < sent  # what could not be written was not acknowledged
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
        driver.resend()  # as an exchange does when nothing is acknowledged for a second
        driver.settle(30)
        assert child.stop(20) == 0
        _check(directory, driver, acked)
    finally:
        if child is not None and child.alive():
            child.kill()
        ctx.destroy(linger=0)
        subprocess.run(["umount", str(mount)], check=False)

