"""A segment's offset index: where to start reading for an offset or a time (a cache of the log).

One entry (offset, position in the segment, time) for the first entry of the segment and then for the first
entry at least :data:`~exchange.journal._format.INDEX_INTERVAL` bytes after the previous one. It is appended
to its file as the log is written, never synced: whatever the file says is checked against the log before it
is believed (:meth:`Index.load`), and it is rebuilt from the log when it does not fit.
"""

from __future__ import annotations

import bisect
import logging

from exchange.journal._format import INDEX, INDEX_INTERVAL

log = logging.getLogger(__name__)

__all__ = ["Index"]


class Index:
    """The index of the segment whose first offset is ``base``, kept in ``path``."""

    def __init__(self, path: str, base: int) -> None:
        self.path = path
        self.base = base
        self.offsets: list[int] = []
        self.positions: list[int] = []
        self.times: list[int] = []
        self._last_at = -INDEX_INTERVAL  # position of the last entry
        self._pending: list[bytes] = []

    def reset(self) -> None:
        self.offsets, self.positions, self.times = [], [], []
        self._last_at = -INDEX_INTERVAL
        self._pending.clear()

    def note(self, at: int, offset: int, time_ns: int, pending: bool = False) -> None:
        """The entry at byte ``at`` of the log; it becomes an index entry if it is far enough from the last
        one (``pending``: and it is queued for the file's next :meth:`flush`)."""
        if at - self._last_at < INDEX_INTERVAL:
            return
        self._last_at = at
        self.offsets.append(offset)
        self.positions.append(at)
        self.times.append(time_ns)
        if pending:
            self._pending.append(INDEX.pack(offset, at, time_ns))

    def flush(self) -> None:
        """Append the queued entries to the file (a failure only costs a rebuild later)."""
        if not self._pending:
            return
        try:
            with open(self.path, "ab") as f:
                f.write(b"".join(self._pending))
        except OSError:
            pass
        self._pending.clear()

    def cut(self, size: int) -> None:
        """Forget the entries at or after byte ``size`` (their log entries were not written)."""
        self._pending.clear()
        while self.positions and self.positions[-1] >= size:
            self.positions.pop()
            self.offsets.pop()
            self.times.pop()
        self._last_at = self.positions[-1] if self.positions else -INDEX_INTERVAL

    def save(self) -> None:
        """Write the file whole."""
        try:
            with open(self.path, "wb") as f:
                f.write(b"".join(INDEX.pack(*row) for row in zip(self.offsets, self.positions, self.times)))
        except OSError as exc:
            log.warning("index %s: cannot write it (%s); it will be rebuilt", self.path, exc.strerror)
        self._pending.clear()

    def load(self, log_size: int) -> bool:
        """Read the file; False (and nothing changed) if it is missing or cannot be the index of a log of
        ``log_size`` bytes beginning at :attr:`base`."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError:
            return False
        if not data or len(data) % INDEX.size:
            return False
        rows = list(INDEX.iter_unpack(data))
        offsets = [r[0] for r in rows]
        positions = [r[1] for r in rows]
        if (offsets[0] != self.base or positions[0] != 0 or positions[-1] >= log_size
                or any(b <= a for a, b in zip(positions, positions[1:]))
                or any(b <= a for a, b in zip(offsets, offsets[1:]))):
            return False
        self.offsets, self.positions, self.times = offsets, positions, [r[2] for r in rows]
        self._last_at = positions[-1]
        return True

    def position_of(self, offset: int) -> int:
        """The position of the index entry at or before ``offset`` (0: from the start)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.positions[i] if i >= 0 else 0

    def position_at_time(self, time_ns: int) -> int:
        """The position of the last index entry before ``time_ns`` (0: from the start)."""
        i = bisect.bisect_left(self.times, time_ns) - 1
        return self.positions[i] if i >= 0 else 0

    @property
    def last(self) -> int:
        """The position of the last entry (0: none)."""
        return self.positions[-1] if self.positions else 0
