"""A journal process on files that are wrong: a directory of another owner, a sealed segment whose bytes do not
check and one whose index is gone. Each gives a clear error, nothing corrupt is served, what checks is served,
and the journal goes on taking batches."""

from __future__ import annotations

import os
import subprocess
import sys

import zmq

from exchange.journal import Store, segment_name
from roq.wire import batch, control
from roq.process import spawn

PUB = b"P" * 16
SEGMENT = 64 << 10  # small segments: a few records each


def _journal_files(directory: str, records: int) -> list[int]:
    """A journal of ``records`` 1 KB records of one publisher, one a batch; the bases of its segments."""
    store, _ = Store.open(directory, "q", segment_bytes=SEGMENT)
    try:
        for seq in range(1, records + 1):
            key, header, body = b"k", batch.pack_header(batch.DATA, PUB, seq, 1, timestamp_ns=1), \
                batch.encode_body([b"%06d" % seq + b"r" * 1000])
            store.append(key, header, body, PUB, 1, seq, seq)
            store.write()
        return [seg.base for seg in store.segments]
    finally:
        store.close()


def _intake(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    """A DEALER to a journal's intake, as an exchange's."""
    intake = ctx.socket(zmq.DEALER)
    intake.setsockopt(zmq.IDENTITY, b"x-test")
    intake.setsockopt(zmq.LINGER, 0)
    intake.connect(endpoint)
    return intake


def test_a_directory_of_another_owner_is_refused_with_exit_code_5_and_what_to_do(tmp_path):
    directory = tmp_path / "theirs"
    directory.mkdir()
    os.chown(directory, 65534, 65534)
    done = subprocess.run([sys.executable, "-m", "exchange.journal", "--queue", "q", "--directory", str(directory),
                           "--address", "127.0.0.1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 5, done.stderr
    assert "belongs to uid 65534" in done.stderr and "chown" in done.stderr


def test_a_corrupt_segment_stops_reads_there_with_its_name_and_a_missing_index_is_rebuilt(tmp_path):
    directory = str(tmp_path / "j")
    bases = _journal_files(directory, 400)
    assert len(bases) >= 5
    os.unlink(os.path.join(directory, segment_name(bases[1], ".idx")))  # a missing index: rebuilt from the log
    corrupt = os.path.join(directory, segment_name(bases[2], ".log"))
    with open(corrupt, "r+b") as f:  # a flipped byte in the middle of a sealed segment
        f.seek(os.path.getsize(corrupt) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    child = spawn("journal", "exchange.journal", ["--queue", "q", "--directory", directory, "--address",
                                                  "127.0.0.1", "--durability", "always", "--segment-bytes",
                                                  str(SEGMENT)])
    ctx = zmq.Context()
    try:
        info = child.wait_ready(30)
        reader = ctx.socket(zmq.DEALER)
        reader.setsockopt(zmq.LINGER, 0)
        reader.connect(info.reads)
        seqs, offset, error = [], 0, ""
        while not error:
            reader.send(control.encode(control.Fetch(offset=offset, max_bytes=1 << 16)))
            assert reader.poll(10_000), "the journal did not answer a fetch"
            frames = reader.recv_multipart()
            answer = control.decode(frames[0])
            assert isinstance(answer, control.Fetched)
            for i in range(answer.count):
                h = batch.parse_header(frames[2 + 3 * i])
                payload = batch.decode_body(frames[3 + 3 * i], h.count)[0]
                assert payload == b"%06d" % h.first_seq + b"r" * 1000  # what is served is what was written
                seqs.append(h.first_seq)
            error, offset = answer.error, answer.next_offset
            assert answer.count or error, "a fetch that neither served nor failed"
        # everything before the damaged entry, in order, then a clear error naming the file; nothing after it
        assert seqs == list(range(1, len(seqs) + 1)) and bases[2] <= len(seqs) < bases[3]
        assert segment_name(bases[2], ".log") in error
        reader.send(control.encode(control.Verify()))
        assert reader.poll(30_000)
        verdict = control.decode(reader.recv())
        assert isinstance(verdict, control.Reply) and verdict.comment == "1 problem(s)", verdict
        assert segment_name(bases[2], ".log") in verdict.data["problems"][0]

        intake = _intake(ctx, info.intake)  # and it goes on journaling
        intake.send_multipart([b"k", batch.pack_header(batch.DATA, PUB, 401, 1), batch.encode_body([b"more"])])
        assert intake.poll(10_000), "the journal did not acknowledge a new batch"
        _incarnation, end, pairs = batch.decode_journal_ack(intake.recv())
        assert pairs == [(PUB, 401)] and end == 401
    finally:
        ctx.destroy(linger=0)
        child.stop()


def _heartbeat(monitor: zmq.Socket, journal: str) -> tuple[bytes, control.JournalHeartbeat]:
    """The next heartbeat ``journal`` sends its monitor (this test plays the monitor)."""
    while True:
        assert monitor.poll(10_000), f"journal {journal} sent its monitor nothing"
        ident, data = monitor.recv_multipart()
        msg = control.decode(data)
        if isinstance(msg, control.JournalHeartbeat) and msg.journal == journal:
            return ident, msg


def test_the_files_of_a_lost_host_that_comes_back_are_set_aside_and_the_journal_begins_past_the_queues_offsets(
        tmp_path):
    """The host of a queue's first journal (generation 0) was lost, and the queue's journal started anew
    elsewhere, twice. The host comes back and is given the journal again: its host manager starts it with
    generation 2. The journal reads no batch before its monitor's first policy (which names the highest offset
    heard); then it sets its old files (and the durable subscribers' positions) aside, begins past every offset
    the queue's journals gave, and journals. Started again in place, it goes on from its files."""
    directory = str(tmp_path / "j")
    old_bases = _journal_files(directory, 10)
    with open(os.path.join(directory, "positions.json"), "w") as f:
        f.write('{"audit": 7}')
    ctx = zmq.Context()
    monitor = ctx.socket(zmq.ROUTER)
    monitor.setsockopt(zmq.LINGER, 0)
    port = monitor.bind_to_random_port("tcp://127.0.0.1")
    args = ["--queue", "q", "--directory", directory, "--address", "127.0.0.1", "--durability", "always",
            "--segment-bytes", str(SEGMENT), "--monitor", f"tcp://127.0.0.1:{port}", "--generation", "2"]
    child = spawn("journal", "exchange.journal", args)
    last_heard = 5 << 60  # the highest offset the monitor heard of the queue's journals
    try:
        info = child.wait_ready(30)
        ident, hb = _heartbeat(monitor, info.id)
        assert hb.policy == "" and hb.next_offset == 10  # not told yet: still the old files
        intake = _intake(ctx, info.intake)
        other = b"Q" * 16
        intake.send_multipart([b"k", batch.pack_header(batch.DATA, other, 1, 1), batch.encode_body([b"one"])])
        assert not intake.poll(500), "the journal took a batch before its monitor's first policy"
        monitor.send_multipart([ident, control.encode(control.JournalPolicy(last=last_heard))])
        assert intake.poll(10_000), "the journal did not acknowledge the batch once told"
        _incarnation, end, pairs = batch.decode_journal_ack(intake.recv())
        assert pairs == [(other, 1)] and end == last_heard + 2  # offsets past every one the queue's journals gave
        aside = [d for d in os.listdir(directory) if d.startswith("superseded-")]
        assert len(aside) == 1 and aside[0].startswith("superseded-0-")
        kept = os.listdir(os.path.join(directory, aside[0]))
        assert all(segment_name(b, ".log") in kept for b in old_bases) and "positions.json" in kept
        assert not os.path.exists(os.path.join(directory, "positions.json"))
        store, _ = Store.open(directory, "q")  # (read beside the running journal: only to look)
        assert store.generation == 2 and store.first_offset == last_heard + 1
        store.close()
    finally:
        child.stop()
    child = spawn("journal", "exchange.journal", args)  # the same journal started again in place
    try:
        info = child.wait_ready(30)
        ident, hb = _heartbeat(monitor, info.id)
        monitor.send_multipart([ident, control.encode(control.JournalPolicy(last=last_heard + 1))])
        intake = _intake(ctx, info.intake)
        intake.send_multipart([b"k", batch.pack_header(batch.DATA, other, 2, 1), batch.encode_body([b"two"])])
        assert intake.poll(10_000), "the journal started again did not acknowledge"
        _incarnation, end, pairs = batch.decode_journal_ack(intake.recv())
        assert pairs == [(other, 2)] and end == last_heard + 3  # on from its files
        assert len([d for d in os.listdir(directory) if d.startswith("superseded-")]) == 1
    finally:
        ctx.destroy(linger=0)
        child.stop()
    store, rec = Store.open(directory, "q")
    assert rec.notes == [] and store.high(other) == 2  # its publishers' table began with it
    store.close()
