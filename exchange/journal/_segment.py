"""One segment of a journal: a log file of whole entries and its index (see :mod:`exchange.journal._format`).

A :class:`Segment` is either sealed (every entry is on disk, nothing more will be written) or the active one,
which the store appends to: :meth:`Segment.write` hands the entries to the kernel in one ``writev`` (a process
crash loses nothing after it), :meth:`Segment.sync` puts them on the disk (``fdatasync``; a power failure
loses nothing before it). Only entries that were written are read back.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Iterator

from exchange.journal._files import sync_directory
from exchange.journal._format import Entry, decode_entry, segment_name
from exchange.journal._index import Index
from roq.errors import CorruptJournalError, JournalError

log = logging.getLogger(__name__)

__all__ = ["Segment", "Scan", "READ_CHUNK", "walk"]

#: bytes read from a segment at a time
READ_CHUNK = 1 << 20
_IOV_MAX = 1024


class Scan:
    """What reading a segment from its start found: its whole entries' extent and what followed them."""

    def __init__(self) -> None:
        self.size = 0  # bytes of whole entries from the start
        self.next_offset = -1  # the offset after the last whole entry (-1: no entry)
        self.entries = 0
        self.damage = ""  # why the bytes after ``size`` are not entries ("" = the file ends there)


class Segment:
    """The log file ``<base>.log`` in ``directory`` and its index.

    Attributes:
        base: the offset of its first record.
        size: bytes of whole entries written (to the kernel).
        synced: bytes known to be on the disk.
        synced_offset: the offset after the last entry known to be on the disk.
        sync_failed: its last sync failed (what was written after :attr:`synced` cannot be trusted).
        next_offset: the offset its next entry gets.
        written_offset: the offset after the last entry written (what reads reach).
        first_time_ns: the time of its first entry (0: none yet).
        last_time_ns: the time of its last entry (0: none yet).
    """

    def __init__(self, directory: str, base: int) -> None:
        self.directory = directory
        self.base = base
        self.path = os.path.join(directory, segment_name(base, ".log"))
        self.index_path = os.path.join(directory, segment_name(base, ".idx"))
        self.size = self.synced = 0
        self.next_offset = self.written_offset = self.synced_offset = base
        self.sync_failed = False
        self.first_time_ns = self.last_time_ns = 0
        self.index = Index(self.index_path, base)
        self._wfd = -1
        self._rfd = -1
        self._pending: list[bytes] = []
        self._pending_size = 0

    # ------------------------------------------------------------------ opening

    @classmethod
    def create(cls, directory: str, base: int) -> Segment:
        """A new, empty active segment (its file made and its directory entry synced).

        Raises:
            JournalError: the file exists already or cannot be made.
        """
        seg = cls(directory, base)
        try:
            seg._wfd = os.open(seg.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
            with open(seg.index_path, "wb"):
                pass
            sync_directory(directory)
        except OSError as exc:
            raise JournalError(f"cannot create segment {seg.path}: {exc.strerror}") from exc
        return seg

    @classmethod
    def open(cls, directory: str, base: int, *, active: bool) -> tuple[Segment, Scan | None]:
        """An existing segment. The active one (``active``) is read whole: its torn tail, if any, is moved to
        ``<base>.log.torn-<size>`` and cut off (see :class:`Scan`); a sealed one is trusted up to its size and
        its index loaded (rebuilt when missing or wrong).

        Raises:
            JournalError: the file cannot be opened or cut.
            CorruptJournalError: a sealed segment's first entry does not read.
        """
        seg = cls(directory, base)
        try:
            seg._rfd = os.open(seg.path, os.O_RDONLY)
            file_size = os.fstat(seg._rfd).st_size
        except OSError as exc:
            raise JournalError(f"cannot open segment {seg.path}: {exc.strerror}") from exc
        scan = None
        if active:
            scan = seg._scan(file_size)
            if scan.size < file_size:
                seg._quarantine(scan, file_size)
            try:
                seg._wfd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
            except OSError as exc:
                raise JournalError(f"cannot open segment {seg.path} to append: {exc.strerror}") from exc
            try:  # what a killed process wrote and never synced may be in the kernel's memory only: on the disk
                os.fdatasync(seg._wfd)  # before it counts as held (the exchanges' resends of it are then dropped)
            except OSError as exc:
                raise JournalError(f"cannot sync segment {seg.path}: {exc.strerror}") from exc
            seg.index.save()
        else:
            seg.size = seg.synced = file_size
            if not seg._load_index():
                log.warning("segment %s: its index is missing or wrong; rebuilding it from the log", seg.path)
                scan = seg._scan(file_size)
                seg.index.save()
                if scan.damage:  # it was synced when it was sealed: not a torn write but damage
                    seg.size = file_size  # so that a read reaches the bytes that do not check, and says so
                    log.error("segment %s: %s; reads stop there with an error (roq journal verify)", seg.path,
                              scan.damage)
                scan = None
        seg.synced = seg.size
        seg.written_offset = seg.synced_offset = seg.next_offset
        return seg, scan

    def _scan(self, file_size: int) -> Scan:
        """Read every entry from the start; the index and the extent are rebuilt from them."""
        self.index.reset()
        self.first_time_ns = self.last_time_ns = 0
        scan = Scan()
        expected = self.base
        for at, entry, damage in self._walk(0, file_size):
            if entry is None:
                scan.damage = damage
                break
            if entry.offset != expected:
                scan.damage = f"entry at byte {at} has offset {entry.offset}, expected {expected}"
                break
            self._note(at, entry.offset, entry.time_ns)
            expected = entry.offset + entry.count
            scan.size = at + entry.size
            scan.entries += 1
        self.size = scan.size
        self.next_offset = expected
        scan.next_offset = expected if scan.entries else -1
        return scan

    def _quarantine(self, scan: Scan, file_size: int) -> None:
        """Keep the bytes after the last whole entry in a file of their own, then cut them off."""
        torn = f"{self.path}.torn-{scan.size}"
        try:
            with open(self.path, "rb") as src, open(torn, "wb") as dst:
                src.seek(scan.size)
                dst.write(src.read())
            os.truncate(self.path, scan.size)
            sync_directory(self.directory)
        except OSError as exc:
            raise JournalError(f"cannot cut the torn tail of {self.path}: {exc.strerror}") from exc
        log.warning("segment %s: %d bytes after its last whole entry (%s) moved to %s and cut off",
                    self.path, file_size - scan.size, scan.damage or "cut short", torn)

    # ------------------------------------------------------------------ the index

    def _note(self, at: int, offset: int, time_ns: int, pending: bool = False) -> None:
        """Count the entry at byte ``at`` (its time, and in the index)."""
        if not self.first_time_ns:
            self.first_time_ns = time_ns
        self.last_time_ns = time_ns
        self.index.note(at, offset, time_ns, pending)

    def _load_index(self) -> bool:
        """Read the index; False if it is missing or does not fit the log (then it is rebuilt)."""
        index = self.index
        if not index.load(self.size):
            return False
        self.first_time_ns = index.times[0]
        try:  # the extent and the last time: the entries after the last index entry
            last = None
            for _at, entry, _damage in self._walk(index.last, self.size):
                if entry is None:
                    return False
                last = entry
        except CorruptJournalError:
            return False
        if last is None or (index.last == 0 and last.offset != self.base):
            return False
        self.next_offset = last.offset + last.count
        self.last_time_ns = last.time_ns
        return True

    # ------------------------------------------------------------------ appending

    def append(self, buffers: list[bytes], size: int, offset: int, count: int, time_ns: int) -> None:
        """Queue one entry (the buffers of :func:`~exchange.journal._format.encode_entry`, ``size`` bytes)."""
        self._note(self.size + self._pending_size, offset, time_ns, pending=True)
        self._pending.extend(buffers)
        self._pending_size += size
        self.next_offset = offset + count

    @property
    def pending(self) -> int:
        """Bytes queued and not yet written."""
        return self._pending_size

    def write(self) -> None:
        """Hand what is queued to the kernel.

        Raises:
            JournalError: the write failed (e.g. the disk is full); the file is cut back to its last whole
                entry, and the caller must forget what it queued (:meth:`rollback`).
        """
        if not self._pending:
            return
        try:
            pending = self._pending
            for i in range(0, len(pending), _IOV_MAX):
                chunk = pending[i:i + _IOV_MAX]
                want = sum(map(len, chunk))
                done = os.writev(self._wfd, chunk)
                if done != want:  # a short write: finish it, or learn why not
                    data = b"".join(chunk)[done:]
                    while data:
                        data = data[os.write(self._wfd, data):]
        except OSError as exc:
            self._cut_back()
            reason = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror
            raise JournalError(f"cannot write to {self.path}: {reason}") from exc
        self.size += self._pending_size
        self.written_offset = self.next_offset
        self._pending.clear()
        self._pending_size = 0
        self.index.flush()

    def _cut_back(self) -> None:
        try:
            os.ftruncate(self._wfd, self.size)
        except OSError as exc:
            log.error("segment %s: cannot cut back to %d bytes after a failed write: %s", self.path, self.size,
                      exc.strerror)

    def rollback(self, next_offset: int, last_time_ns: int) -> None:
        """Forget what was queued since the last :meth:`write` (it failed)."""
        self._pending.clear()
        self._pending_size = 0
        self.index.cut(self.size)
        self.next_offset = next_offset
        self.last_time_ns = last_time_ns
        if not self.index.positions:
            self.first_time_ns = 0

    def sync(self) -> None:
        """Put what was written on the disk.

        Raises:
            JournalError: the disk refused (nothing after :attr:`synced` can be trusted).
        """
        if self.synced == self.size:
            return
        try:
            os.fdatasync(self._wfd)
        except OSError as exc:
            self.sync_failed = True
            raise JournalError(f"cannot sync {self.path}: {exc.strerror}") from exc
        self.synced = self.size
        self.synced_offset = self.written_offset
        self.sync_failed = False

    def seal(self) -> None:
        """No more appends: sync, write the whole index, keep only the read side open."""
        self.write()
        self.sync()
        self.index.save()
        if self._wfd >= 0:
            os.close(self._wfd)
            self._wfd = -1

    # ------------------------------------------------------------------ reading

    def position_of(self, offset: int) -> int:
        """Where to start reading for ``offset``."""
        return self.index.position_of(offset)

    def position_at_time(self, time_ns: int) -> int:
        """Where to start reading for the first record at or after ``time_ns``."""
        return self.index.position_at_time(time_ns)

    def entries(self, position: int, limit: int | None = None) -> Iterator[Entry]:
        """The entries from byte ``position`` up to the bytes written (or ``limit``).

        Raises:
            CorruptJournalError: bytes that are not a whole entry where one should be (the message names
                the file and the byte).
        """
        end = self.size if limit is None else min(limit, self.size)
        for at, entry, damage in self._walk(position, end):
            if entry is None:
                raise CorruptJournalError(f"{self.path}: {damage}")
            yield entry

    def position_of_entry(self, offset: int) -> int:
        """The byte at which the entry beginning at ``offset`` lies (the bytes written, when ``offset`` is where the
        segment's entries end).

        Raises:
            JournalError: no entry begins there.
            CorruptJournalError: the bytes on the way do not check.
        """
        if offset == self.written_offset:
            return self.size
        for at, entry, damage in self._walk(self.position_of(offset), self.size):
            if entry is None:
                raise CorruptJournalError(f"{self.path}: {damage}")
            if entry.offset >= offset:
                if entry.offset == offset:
                    return at
                break
        raise JournalError(f"{self.path}: no entry begins at offset {offset}")

    def _walk(self, position: int, end: int) -> Iterator[tuple[int, Entry | None, str]]:
        return walk(self._read_fd(), position, end)

    def _read_fd(self) -> int:
        if self._rfd < 0:
            try:
                self._rfd = os.open(self.path, os.O_RDONLY)
            except OSError as exc:
                raise JournalError(f"cannot read segment {self.path}: {exc.strerror}") from exc
        return self._rfd

    # ------------------------------------------------------------------ the end

    def close(self) -> None:
        for fd in (self._wfd, self._rfd):
            if fd >= 0:
                os.close(fd)
        self._wfd = self._rfd = -1

    def remove(self) -> None:
        """Close and delete its files (retention)."""
        self.close()
        for path in (self.path, self.index_path, self.path[:-4] + ".pub", self.path[:-4] + ".from"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def walk(fd: int, position: int, end: int) -> Iterator[tuple[int, Entry | None, str]]:
    """(byte, entry, "") for each whole entry of the file ``fd`` from ``position`` to ``end``; then (byte, None,
    why) if what follows up to ``end`` is not a whole entry."""
    buf = b""
    buf_at = position  # the file position of buf[0]
    at = position
    while at < end:
        rel = at - buf_at
        try:
            entry = decode_entry(buf, rel)
        except CorruptJournalError as exc:
            yield at, None, str(exc)
            return
        if entry is None:
            if buf_at + len(buf) >= end:
                yield at, None, f"{end - at} bytes at byte {at} are cut short"
                return
            want = max(READ_CHUNK, 2 * (len(buf) - rel))
            more = os.pread(fd, min(want, end - (buf_at + len(buf))), buf_at + len(buf))
            if not more:
                yield at, None, f"the file ends at byte {buf_at + len(buf)}, before {end}"
                return
            buf = buf[rel:] + more
            buf_at = at
            continue
        yield at, entry, ""
        at += entry.size
