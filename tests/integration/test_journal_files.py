"""A journal process on files that are wrong: a directory of another owner, a sealed segment whose bytes do not
check and one whose index is gone. Each gives a clear error, nothing corrupt is served, what checks is served,
and the journal goes on taking batches."""

from __future__ import annotations

import os
import subprocess
import sys

import zmq

from exchange.journal import Store, segment_name
from roq import batch, control
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
        reader.connect(info["reads"])
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

        intake = ctx.socket(zmq.DEALER)  # and it goes on journaling
        intake.setsockopt(zmq.IDENTITY, b"x-test")
        intake.setsockopt(zmq.LINGER, 0)
        intake.connect(info["intake"])
        intake.send_multipart([b"k", batch.pack_header(batch.DATA, PUB, 401, 1), batch.encode_body([b"more"])])
        assert intake.poll(10_000), "the journal did not acknowledge a new batch"
        _incarnation, end, pairs = batch.decode_journal_ack(intake.recv())
        assert pairs == [(PUB, 401)] and end == 401
    finally:
        ctx.destroy(linger=0)
        child.stop()
