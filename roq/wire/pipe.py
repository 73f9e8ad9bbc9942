"""Control messages on a pipe: BSON documents back to back (a host manager's commands to its exchanges).

A BSON document begins with its length (int32, little-endian, counting itself and the NUL byte that ends
the document), so a stream of documents needs no framing of its own. :func:`send` writes one control
message without blocking, whole or not at all; a :class:`FrameReader` (sans-I/O: fed bytes, it gives the
frames complete in them) and a :class:`PipeReader` (the same on a file descriptor, for a poll loop) read them
back.

What is not a document is never fatal: a length out of bounds or a frame that does not end in NUL is
skipped one byte at a time until a plausible frame begins, and counted once per run of garbage. Garbage may
also announce a length that never comes: since frames are written whole, bytes that end with whole frames
prove such a head wrong at once (reading resumes at the first well-formed frame after it), and otherwise a
frame that stays incomplete for ``stale_after`` seconds is given up the same way. Whether a frame holds a
valid message is the decoder's business (:class:`roq.server.Dispatcher`).
"""

from __future__ import annotations

import os
import select
from typing import Callable

from roq.wire import control
from roq.wire.control import Message
from roq.errors import ProtocolError

__all__ = ["MAX_FRAME", "MIN_FRAME", "STALE_AFTER", "encode", "send", "FrameReader", "PipeReader"]

#: the longest frame read from a pipe (commands are a few dozen bytes)
MAX_FRAME = 64 << 10
#: the shortest BSON document: its length and its NUL
MIN_FRAME = 5
#: seconds an incomplete frame may wait for its end before it counts as garbage
STALE_AFTER = 1.0
#: a write of at most this many bytes reaches a pipe whole or not at all (POSIX)
ATOMIC_WRITE = getattr(select, "PIPE_BUF", 512)


def encode(msg: Message) -> bytes:
    """The frame of ``msg`` (its BSON document).

    Raises:
        ProtocolError: it cannot be encoded, or is too long to be written to a pipe in one piece.
    """
    frame = control.encode(msg)
    if len(frame) > min(MAX_FRAME, ATOMIC_WRITE):
        raise ProtocolError(f"{type(msg).__name__} of {len(frame)} bytes is too long for a command pipe")
    return frame


def send(fd: int, msg: Message) -> bool:
    """Write ``msg`` on the pipe ``fd`` without blocking; True if it went whole.

    False when the pipe is full (the reader does not read), broken (the reader is gone) or closed: the
    caller falls back on something that needs no cooperation from the reader. A write of this size is
    atomic, so a False never leaves half a frame behind.

    Raises:
        ProtocolError: ``msg`` cannot be encoded (see :func:`encode`).
    """
    frame = encode(msg)
    try:
        os.set_blocking(fd, False)
        return os.write(fd, frame) == len(frame)
    except OSError:  # full (BlockingIOError), the reader gone (BrokenPipeError), closed
        return False


class FrameReader:
    """Frames out of a byte stream (sans-I/O).

    Args:
        limit: the longest frame accepted (a longer announced length is garbage).
        stale_after: seconds an incomplete frame waits for the rest before it is given up.
        on_garbage: called with the number of bytes of each run of garbage skipped.
    """

    def __init__(self, *, limit: int = MAX_FRAME, stale_after: float = STALE_AFTER,
                 on_garbage: Callable[[int], None] | None = None) -> None:
        if limit < MIN_FRAME:
            raise ValueError(f"limit must be at least {MIN_FRAME}")
        self.limit = limit
        self.stale_after = stale_after
        self.on_garbage = on_garbage
        self.garbage_bytes = 0
        self.garbage_runs = 0
        self._buf = bytearray()
        self._waiting_since: float | None = None  # when the incomplete frame at the head was first seen
        self._run = 0  # bytes of garbage skipped since the last frame, not yet counted

    @property
    def pending(self) -> int:
        """Bytes held: the beginning of a frame not yet complete (less than ``limit``)."""
        return len(self._buf)

    def feed(self, data: bytes, now: float) -> list[bytes]:
        """The frames completed by ``data`` (which came in at ``now``)."""
        self._buf += data
        return self._split(now)

    def expire(self, now: float) -> list[bytes]:
        """Give up an incomplete frame that waited too long (skip a byte and look again); the frames found."""
        if self._waiting_since is None or now - self._waiting_since < self.stale_after:
            return []
        return self._split(now, skip_head=True)

    def _split(self, now: float, *, skip_head: bool = False) -> list[bytes]:
        buf, limit = self._buf, self.limit
        frames: list[bytes] = []
        pos = 0
        if skip_head:
            pos, self._run = 1, self._run + 1
        head = -1
        while len(buf) - pos >= 4:
            length = int.from_bytes(buf[pos:pos + 4], "little", signed=True)
            if not MIN_FRAME <= length <= limit:
                pos, self._run = pos + 1, self._run + 1
                continue
            if len(buf) - pos < length:
                later = self._next_frame(pos)
                if later < 0:
                    head = pos
                    break
                pos, self._run = later, self._run + later - pos
                continue
            if buf[pos + length - 1] != 0:
                pos, self._run = pos + 1, self._run + 1
                continue
            self._end_run()
            frames.append(bytes(buf[pos:pos + length]))
            pos += length
        del buf[:pos]
        if head < 0:
            if not buf:  # else the bytes left may be more of the same garbage: one run, counted once
                self._end_run()
            self._waiting_since = None
        elif head > 0 or self._waiting_since is None or skip_head:
            self._waiting_since = now  # a new incomplete frame at the head
        return frames

    def _next_frame(self, head: int) -> int:
        """Where to look again when the frame announced at ``head`` is incomplete: the first well-formed frame
        after it, if the bytes end with whole frames (-1: wait for more).

        Frames are written whole, so bytes that end with whole frames mean the incomplete frame announced at
        ``head`` is garbage: the frames after it need not wait for it to go stale.
        """
        buf, end = self._buf, len(self._buf)
        if end - head <= MIN_FRAME or buf[end - 1] != 0:
            return -1
        chains = bytearray(end - head + 1)  # chains[p - head]: whole frames run from p to the end
        chains[end - head] = 1
        whole = bytearray(end - head)  # whole[p - head]: a well-formed frame begins at p
        chained = -1
        for pos in range(end - MIN_FRAME, head, -1):
            length = int.from_bytes(buf[pos:pos + 4], "little", signed=True)
            if MIN_FRAME <= length <= min(self.limit, end - pos) and buf[pos + length - 1] == 0:
                whole[pos - head] = 1
                if chains[pos + length - head]:
                    chains[pos - head] = 1
                    chained = pos
        if chained < 0:
            return -1
        return head + whole.index(1, 1)

    def _end_run(self) -> None:
        count, self._run = self._run, 0
        if count:
            self.garbage_bytes += count
            self.garbage_runs += 1
            if self.on_garbage is not None:
                self.on_garbage(count)


class PipeReader:
    """A :class:`FrameReader` on the read end of a pipe, for a poll loop (register :attr:`fd`).

    :attr:`closed` turns True at the end of the stream (the writer is gone); a loop then stops watching.
    """

    def __init__(self, fd: int, **options: object) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.closed = False
        self.frames = FrameReader(**options)  # type: ignore[arg-type]

    def read(self, now: float) -> list[bytes]:
        """The frames completed by what is waiting on the pipe (reads without blocking)."""
        try:
            chunk = os.read(self.fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return self.frames.expire(now)
        except OSError:  # the descriptor went bad: nothing more will come
            self.closed = True
            return []
        if not chunk:
            self.closed = True
            return []
        return self.frames.feed(chunk, now)

    def expire(self, now: float) -> list[bytes]:
        """See :meth:`FrameReader.expire` (call it from the loop's timer)."""
        return self.frames.expire(now)
