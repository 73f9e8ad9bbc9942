"""roq.wire.pipe: control messages as BSON frames on a pipe; garbage skipped and counted, never fatal (fuzzed)."""

from __future__ import annotations

import os
import random

import bson
import pytest

from roq.wire import control, pipe
from roq.errors import ProtocolError
from roq.wire.pipe import MAX_FRAME, FrameReader, PipeReader

RETARGET = control.Retarget(monitor="tcp://127.0.0.1:5500")


def test_frames_come_back_whole_however_the_bytes_are_cut():
    frames = [control.encode(RETARGET), control.encode(control.Shutdown("bye")), bson.encode({})]
    stream = b"".join(frames)
    for cut in range(1, len(stream)):
        reader = FrameReader()
        assert reader.feed(stream[:cut], 0.0) + reader.feed(stream[cut:], 0.0) == frames
        assert reader.pending == 0 and reader.garbage_runs == 0


def test_garbage_before_a_frame_is_skipped_and_counted_once():
    runs = []
    reader = FrameReader(on_garbage=runs.append)
    frame = control.encode(RETARGET)
    assert reader.feed(b"\xff\xfe not bson\n" + frame, 0.0) == [frame]
    assert runs == [len(b"\xff\xfe not bson\n")] and reader.garbage_bytes == runs[0]


@pytest.mark.parametrize("length", [0, 4, -1, MAX_FRAME + 1, 1 << 30])
def test_a_length_out_of_bounds_is_garbage(length):
    reader = FrameReader()
    frame = control.encode(RETARGET)
    assert reader.feed(length.to_bytes(4, "little", signed=True) + frame, 0.0) == [frame]
    assert reader.garbage_runs == 1


def test_a_frame_not_ending_in_nul_is_garbage():
    reader = FrameReader()
    frame = control.encode(RETARGET)
    assert reader.feed(b"\x06\x00\x00\x00\x01\x02" + frame, 0.0) == [frame]
    assert reader.garbage_runs == 1


def test_garbage_announcing_a_frame_that_never_ends_is_given_up_when_stale():
    reader = FrameReader(stale_after=1.0)
    assert reader.feed((100).to_bytes(4, "little") + b"garbage", 10.0) == []
    assert reader.expire(10.5) == [] and reader.pending == 11  # it may yet end
    assert reader.expire(11.0) == [] and reader.pending < 4
    frame = control.encode(RETARGET)
    assert reader.feed(frame, 11.1) == [frame]
    assert (reader.garbage_runs, reader.garbage_bytes) == (1, 11)


def test_a_frame_after_garbage_announcing_a_longer_one_arrives_at_once():
    reader = FrameReader(stale_after=1.0)
    frame = control.encode(RETARGET)
    # three bytes of garbage whose length, read across the next frame, announces a frame that never ends
    assert reader.feed(b"\x05\x00\x00" + frame[:10], 10.0) == []
    assert reader.feed(frame[10:], 10.1) == [frame]
    assert reader.garbage_bytes == 3 and reader.pending == 0


def test_a_partial_frame_is_not_stale_while_its_head_is_new():
    reader = FrameReader(stale_after=1.0)
    frame = control.encode(RETARGET)
    assert reader.feed(frame[:10], 0.0) == []
    assert reader.feed(frame[10:20], 0.9) == []
    assert reader.expire(0.95) == []
    assert reader.feed(frame[20:], 0.99) == [frame]
    assert reader.garbage_runs == 0


@pytest.mark.parametrize("seed", range(40))
def test_random_bytes_never_raise_stay_bounded_and_the_next_frame_arrives(seed):
    rng = random.Random(seed)
    reader = FrameReader(limit=4096, stale_after=1.0)
    now = 0.0
    for _ in range(20):
        chunk = bytes(rng.randrange(256) for _ in range(rng.choice((1, 3, 50, 700, 5000))))
        for frame in reader.feed(chunk, now):
            assert pipe.MIN_FRAME <= len(frame) <= 4096 and frame[-1] == 0
            assert int.from_bytes(frame[:4], "little") == len(frame)
        assert reader.pending < 4096
        now += rng.random()
        reader.expire(now)
    frame = control.encode(RETARGET)
    got = reader.feed(frame, now)
    for _ in range(4200):  # at worst every byte held is given up in turn
        if frame in got:
            break
        now += 1.0
        got = reader.expire(now)
    assert frame in got


def test_send_and_read_through_a_pipe_and_the_end_is_seen():
    r, w = os.pipe()
    try:
        reader = PipeReader(r)
        assert reader.read(0.0) == []  # nothing yet: no blocking
        assert pipe.send(w, RETARGET)
        assert [control.decode(f) for f in reader.read(0.0)] == [RETARGET]
        os.close(w)
        w = -1
        assert reader.read(0.0) == [] and reader.closed
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_send_never_blocks_and_never_writes_half_a_frame():
    r, w = os.pipe()
    try:
        sent = 0
        while pipe.send(w, RETARGET):  # until the pipe is full
            sent += 1
        assert sent > 10
        reader = PipeReader(r)
        got = []
        while True:
            frames = reader.read(0.0)
            if not frames:
                break
            got += frames
        assert len(got) == sent and reader.frames.garbage_runs == 0
    finally:
        os.close(r)
        os.close(w)


def test_send_to_a_reader_that_is_gone_is_false():
    r, w = os.pipe()
    os.close(r)
    try:
        assert not pipe.send(w, RETARGET)
    finally:
        os.close(w)


def test_a_message_too_long_for_a_pipe_is_refused():
    with pytest.raises(ProtocolError, match="too long"):
        pipe.encode(control.Retarget(monitor="tcp://" + "h" * MAX_FRAME + ":1"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(40))
def test_frames_mixed_with_garbage_come_through_and_garbage_never_stalls_the_reader(seed):
    rng = random.Random(seed)
    reader = FrameReader(limit=4096, stale_after=1.0)
    sent, got, now = [], [], 0.0
    for i in range(30):
        if rng.random() < 0.5:
            frame = control.encode(control.Retarget(monitor=f"tcp://127.0.0.1:{i + 1}"))
            sent.append(frame)
            data = frame
        else:
            data = bytes(rng.randrange(256) for _ in range(rng.choice((1, 3, 9, 200, 3000))))
        while data:  # written in pieces, as a pipe may deliver them
            cut = rng.randint(1, len(data))
            got += reader.feed(data[:cut], now)
            data = data[cut:]
            now += rng.random() * 0.3
            got += reader.expire(now)
            assert reader.pending < 4096
    for _ in range(4200):
        now += 1.0
        got += reader.expire(now)
    wanted = set(sent)
    assert all(pipe.MIN_FRAME <= len(f) <= 4096 for f in got)
    # a frame written right after garbage can be taken for the garbage's end, but most arrive
    assert len(wanted & set(got)) >= len(wanted) // 2
