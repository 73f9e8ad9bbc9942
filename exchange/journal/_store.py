"""A queue's journal on disk: its directory of segments, appended to and read back by offset or time.

The directory holds ``journal.json`` (the format, the queue's name: a journal is never opened for another
queue; and its *generation*, how many times the queue's journal had been started anew after losing its host
when this one began) and the segments (:mod:`exchange.journal._segment`), named by their first offset. Appends go to the
last segment; once it holds ``segment_bytes`` it is sealed (synced, its index written whole) and a new one
begins, with the publishers' table (each publisher's highest seq journaled) beside it.

**One round at a time.** The owner :meth:`Store.append` s the batches it read, then :meth:`Store.write` s them
(one ``writev``: a process crash after it loses nothing) and, as its policy says, :meth:`Store.sync` s (one
``fdatasync`` covers every batch of the round: group commit). A write that fails (a full disk) leaves the
journal as it was before the round: the file cut back, the offsets and the publishers' table as before.

**Each publisher's records once, in order.** :meth:`Store.high` is the highest seq of a publisher journaled
(or queued in this round); the owner decides from it what to append (:mod:`exchange.journal._sequencer`).

**Recovery** (:meth:`Store.open`) reads the last segment whole and cuts its torn tail (a power failure
leaves whatever the disk got of the writes after the last sync); the bytes cut are kept beside it
(``.torn-N``). Sealed segments were synced when sealed and are read back only when asked for; a read that
meets bytes that do not check raises :class:`~roq.errors.CorruptJournalError` rather than serve them.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Iterator

from exchange.journal._format import (Entry, decode_publishers, encode_entry, encode_publishers, entry_size,
                                      segment_base, segment_name)
from exchange.journal._files import replace_synced, sync_directory, write_synced
from exchange.journal._segment import Scan, Segment
from roq.wire.batch import parse_header
from roq.errors import CorruptJournalError, JournalError

log = logging.getLogger(__name__)

__all__ = ["Store", "Recovery", "FORMAT", "META", "MAX_PUBLISHERS", "check_directory"]

FORMAT = 1
META = "journal.json"
#: the durable subscribers' positions (:class:`~exchange.journal._reads.Positions`)
POSITIONS = "positions.json"
#: publishers whose highest seq the journal keeps at most; the least recently written is forgotten first
MAX_PUBLISHERS = 65536


@dataclass
class Recovery:
    """What opening a journal found."""

    segments: int = 0
    entries_scanned: int = 0
    next_offset: int = 0
    torn_bytes: int = 0  # bytes cut off the last segment's tail
    damage: str = ""
    publishers: int = 0
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        torn = f", {self.torn_bytes} torn bytes cut ({self.damage})" if self.torn_bytes else ""
        return (f"{self.segments} segment(s), next offset {self.next_offset}, {self.publishers} publishers known"
                f"{torn}")


def check_directory(path: str) -> None:
    """Make the journal's directory if it is missing; refuse one this process does not own or cannot write.

    Raises:
        JournalError: naming the directory and what to do.
    """
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as exc:
        raise JournalError(f"journal directory {path}: {exc.strerror}") from exc
    if not os.path.isdir(path):
        raise JournalError(f"journal directory {path} is not a directory")
    if st.st_uid != os.geteuid():
        raise JournalError(f"journal directory {path} belongs to uid {st.st_uid}, and this process runs as uid "
                           f"{os.geteuid()}: give it to this user (chown) or choose another directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise JournalError(f"journal directory {path} is not writable by this process (chmod u+rwx)")


class Store:
    """The journal of ``queue`` in ``directory``. Use :meth:`open`."""

    def __init__(self, directory: str, queue: str, segment_bytes: int) -> None:
        self.directory = directory
        self.queue = queue
        self.segment_bytes = segment_bytes
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._highs: dict[bytes, int] = {}  # publisher -> highest seq journaled, least recently written first
        self._round: dict[bytes, int] = {}  # the same, for what this round queued
        self._round_start = (0, 0)  # the active segment's next offset and last time when the round began
        self.appended = 0  # entries appended since open
        self.generation = 0  # which of the queue's journals this is (journal.json)
        self._recent: collections.deque[Entry] | None = None  # the newest entries written, kept (keep_recent)
        self._recent_bytes = self._recent_max = 0
        self._pending: list[Entry] = []  # this round's, for the recent ones once written
        self.sync_log = ""  # a file that says, after each sync, where what is on the disk ends ("" none)
        self._sync_log_fd = -1

    def keep_recent(self, max_bytes: int) -> None:
        """Keep about the newest ``max_bytes`` of entries written in memory too, and read them from there: a
        leader's followers read what it just wrote, every round, and reading it back from the files cost the
        leader more than writing it."""
        self._recent, self._recent_max = collections.deque(), max_bytes

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, directory: str, queue: str, *, segment_bytes: int = 64 << 20) -> tuple[Store, Recovery]:
        """Open (or make) the journal of ``queue`` in ``directory``, recovering the last segment.

        Raises:
            JournalError: the directory is not ours, belongs to another queue or cannot be read.
            CorruptJournalError: a sealed segment does not read.
        """
        check_directory(directory)
        store = cls(directory, queue, segment_bytes)
        store._check_meta()
        bases = sorted(b for b in (segment_base(n) for n in os.listdir(directory)) if b is not None)
        rec = Recovery()
        if not bases:
            store._start(Segment.create(directory, 0))
        else:
            for base, after in zip(bases, bases[1:]):
                seg, _ = Segment.open(directory, base, active=False)
                # a sealed segment ends where the next begins, or where the next one's jump says it ended
                seg.next_offset = seg.written_offset = _jumped_from(directory, after)
                store._start(seg)
            seg, scan = Segment.open(directory, bases[-1], active=True)
            store._start(seg)
            assert scan is not None
            rec.entries_scanned = scan.entries
            rec.torn_bytes, rec.damage = store._torn(bases[-1], scan), scan.damage
            store._highs = _recover_publishers(store.segments, rec)
        rec.segments = len(store.segments)
        rec.next_offset = store.next_offset
        rec.publishers = len(store._highs)
        return store, rec

    def _check_meta(self) -> None:
        path = os.path.join(self.directory, META)
        try:
            with open(path) as f:
                meta = json.load(f)
        except FileNotFoundError:
            self._write_meta()
            return
        except (OSError, ValueError) as exc:
            raise JournalError(f"{path} does not read as a journal's description: {exc}") from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise JournalError(f"{path}: a journal of format {meta.get('format') if isinstance(meta, dict) else '?'}"
                               f", this version reads format {FORMAT}")
        if meta.get("queue") != self.queue:
            raise JournalError(f"{self.directory} is the journal of queue {meta.get('queue')!r}, not {self.queue!r}")
        generation = meta.get("generation", 0)
        if type(generation) is not int or generation < 0:
            raise JournalError(f"{path}: generation {generation!r} is not a whole number of 0 or more")
        self.generation = generation

    def _write_meta(self, generation: int = 0) -> None:
        path = os.path.join(self.directory, META)
        try:
            replace_synced(path, json.dumps({"format": FORMAT, "queue": self.queue, "generation": generation}).encode())
        except OSError as exc:
            raise JournalError(f"cannot write {path}: {exc.strerror}") from exc

    def _start(self, seg: Segment) -> None:
        self.segments.append(seg)
        self._bases.append(seg.base)

    def _torn(self, base: int, scan: Scan) -> int:
        path = os.path.join(self.directory, segment_name(base, f".log.torn-{scan.size}"))
        try:
            return os.path.getsize(path) if scan.damage else 0
        except OSError:
            return 0

    @property
    def empty(self) -> bool:
        """True while nothing was ever written here (a new journal, beginning at offset 0)."""
        seg = self.active
        return len(self.segments) == 1 and seg.base == seg.next_offset == 0 and not seg.size and not seg.pending

    def begin_generation(self, generation: int, base: int) -> str:
        """Make this the queue's journal of ``generation``, beginning at offset ``base``. What the directory holds of
        an earlier generation (the files of a journal whose host was lost, then came back and was given the
        journal again) is moved into a subdirectory ``superseded-<its generation>-<ns>``, for an operator to read;
        the durable subscribers' positions go with it. Returns that subdirectory's name ("" if nothing was there).
        If a step fails, what was moved is moved back and the store stays what it was; a crash in between
        leaves the old generation's name on disk, and the next start sets aside what is there again.

        Raises:
            JournalError: a file cannot be moved, or the new segment or ``journal.json`` cannot be written.
        """
        empty, moved, seg = self.empty, "", self.active
        try:
            if not empty:
                moved = f"superseded-{self.generation}-{time.time_ns()}"
                _move_files(self.directory, os.path.join(self.directory, moved))
            seg = _new_segment(self.directory, base, {}) if base or not empty else seg
            self._write_meta(generation)
        except JournalError:
            _undo(self.directory, moved, None if seg is self.active else seg)
            raise
        for old in self.segments:
            if old is seg:
                continue
            if empty:
                old.remove()  # the empty first segment at offset 0
            else:
                old.close()  # its files are set aside
        self.segments, self._bases, self._highs, self._round = [], [], {}, {}
        if self._recent is not None:
            self._recent.clear()
            self._recent_bytes = 0
        self._start(seg)
        self.generation = generation
        return moved

    def jump(self, base: int) -> None:
        """Give the next entries offsets from ``base`` on, past a gap (a new leader's epoch begins past every offset
        an older one may have given: :mod:`exchange.journal._replication`). The next segment begins there, and a
        ``<base>.from`` file beside it says where the one before ended, so that the gap reads as one and a sealed
        segment that ends short still reads as damage.

        Raises:
            JournalError: ``base`` is before the next offset, a round is queued, or a file cannot be written.
        """
        old = self.active
        if base == old.next_offset:
            return
        if base < old.next_offset or old.pending:
            raise JournalError(f"cannot jump to offset {base}: the journal's next offset is {old.next_offset}"
                               f"{' and a round is queued' if old.pending else ''}")
        empty = not old.size
        ended = self.segments[-2].written_offset if empty and len(self.segments) > 1 else old.written_offset
        path = os.path.join(self.directory, segment_name(base, ".from"))
        try:
            write_synced(path, str(ended).encode())
        except OSError as exc:
            raise JournalError(f"cannot write {path}: {exc.strerror}") from exc
        seg = _new_segment(self.directory, base, self._highs)
        if empty:  # an empty segment goes: the new one follows the one before it, past the gap
            old.remove()
            self.segments.pop()
            self._bases.pop()
        else:
            old.seal()
        self._start(seg)

    def truncate(self, end: int) -> None:
        """Cut the log back so that it ends at ``end``, where an entry begins (a follower replica's tail that the
        leader's log does not have: see :mod:`exchange.journal._replication`): later segments are removed, the one
        holding ``end`` is cut there and appended to from there on, the publishers' table is read again.

        Raises:
            JournalError: no entry begins at ``end``, a round is queued, or a file cannot be cut or opened.
        """
        if end >= self.end_offset:
            return
        if self.active.pending:
            raise JournalError("a round is queued: write it before cutting the log back")
        end = max(end, self.first_offset)
        i = bisect.bisect_right(self._bases, end) - 1
        keep = self.segments[i]
        at = keep.position_of_entry(end)
        for seg in self.segments[i + 1:]:
            seg.remove()
        keep.close()
        try:
            fd = os.open(keep.path, os.O_WRONLY)
            try:
                os.ftruncate(fd, at)
                os.fsync(fd)  # what was cut away stays away after a crash
            finally:
                os.close(fd)
        except OSError as exc:
            raise JournalError(f"cannot cut {keep.path} back to {at} bytes: {exc.strerror}") from exc
        seg, _ = Segment.open(self.directory, keep.base, active=True)
        del self.segments[i:], self._bases[i:]
        self._start(seg)
        self._highs = _recover_publishers(self.segments, Recovery())
        if self._recent is not None:
            while self._recent and self._recent[-1].offset >= end:
                self._recent_bytes -= self._recent.pop().size

    def cut_to_synced(self) -> None:
        """After a sync that failed: cut the log back to the end known to be on the disk. The kernel may have marked
        the pages it could not write clean, and a later sync then succeeds without them; what was written after the
        last good sync can no longer be trusted, and is cut away (its batches were not acknowledged: the exchanges
        send them again).

        Raises:
            JournalError: the file cannot be cut.
        """
        self.truncate(self.active.synced_offset)

    # ------------------------------------------------------------------ the extent

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def next_offset(self) -> int:
        """The offset the next record gets."""
        return self.active.next_offset

    @property
    def end_offset(self) -> int:
        """The offset after the last record written (what reads reach)."""
        return self.active.written_offset

    @property
    def first_offset(self) -> int:
        """The oldest offset kept."""
        return self.segments[0].base

    @property
    def size_bytes(self) -> int:
        return sum(seg.size for seg in self.segments) + self.active.pending

    @property
    def unsynced_bytes(self) -> int:
        return self.active.size + self.active.pending - self.active.synced

    def high(self, publisher: bytes) -> int | None:
        """The highest seq of ``publisher`` journaled or queued in this round; None if it is not known."""
        high = self._round.get(publisher)
        return self._highs.get(publisher) if high is None else high

    @property
    def publishers(self) -> int:
        return len(self._highs)

    # ------------------------------------------------------------------ a round

    def append(self, key: bytes, header: bytes, body: bytes, publisher: bytes, count: int, last_seq: int,
               time_ns: int) -> int:
        """Queue one batch of ``count`` records (``publisher``'s up to ``last_seq``); its offset."""
        seg = self.active
        if not self._round:
            self._round_start = (seg.next_offset, seg.last_time_ns)
        offset = seg.next_offset
        time_ns = max(time_ns, seg.last_time_ns)
        size = entry_size(key, body)
        seg.append(encode_entry(offset, time_ns, key, header, body), size, offset, count, time_ns)
        if self._recent is not None:
            self._pending.append(Entry(offset, time_ns, key, header, body, size))
        self._round[publisher] = last_seq
        self.appended += 1
        return offset

    def write(self) -> None:
        """Hand the round to the kernel; then it counts (:meth:`high`), and the segment rolls if full.

        Raises:
            JournalError: the write failed; the journal is as it was before the round.
        """
        seg = self.active
        try:
            seg.write()
        except JournalError:
            seg.rollback(*self._round_start)
            self._round.clear()
            self._pending.clear()
            raise
        recent = self._recent
        if recent is not None:
            recent.extend(self._pending)
            self._recent_bytes += sum(e.size for e in self._pending)
            self._pending.clear()
            while self._recent_bytes > self._recent_max and len(recent) > 1:
                self._recent_bytes -= recent.popleft().size
        highs = self._highs
        for publisher, seq in self._round.items():
            highs.pop(publisher, None)
            highs[publisher] = seq
        self._round.clear()
        while len(highs) > MAX_PUBLISHERS:
            del highs[next(iter(highs))]
        if seg.size >= self.segment_bytes:
            self._roll()

    def sync(self) -> None:
        """Put every written round on the disk (one ``fdatasync``).

        Raises:
            JournalError: the disk refused.
        """
        self.active.sync()
        if self.sync_log:
            self._log_synced()

    def log_syncs(self, path: str) -> None:
        """After each sync, say in the file ``path`` where what is on the disk ends (see :meth:`_log_synced`)."""
        self.sync_log = path

    def _log_synced(self) -> None:
        """Say where what is on the disk ends (the active segment and its bytes synced) in :attr:`sync_log`, for a
        fault-injection test that cuts the files back to it as a power loss would; not synced itself."""
        seg = self.active
        try:
            if self._sync_log_fd < 0:
                self._sync_log_fd = os.open(self.sync_log, os.O_WRONLY | os.O_CREAT, 0o600)
            # one write of a fixed size in place: a process killed at any moment leaves the old line or the new one
            os.pwrite(self._sync_log_fd, f"{os.path.basename(seg.path)} {seg.synced}".ljust(63).encode() + b"\n", 0)
        except OSError as exc:
            log.warning("cannot write %s: %s", self.sync_log, exc.strerror)

    @property
    def synced(self) -> bool:
        seg = self.active
        return seg.synced == seg.size

    @property
    def sync_failed(self) -> bool:
        """The last sync failed (also one of a segment sealed as it rolled): :meth:`cut_to_synced` is due."""
        return self.active.sync_failed

    def _roll(self) -> None:
        old = self.active
        old.seal()
        self._start(_new_segment(self.directory, old.next_offset, self._highs))

    # ------------------------------------------------------------------ reading

    def read(self, offset: int, max_bytes: int) -> list[Entry]:
        """The entries written from the one holding ``offset`` (whole: its first records may be before
        ``offset``), about ``max_bytes`` of them (at least one); [] at the end. An offset before the oldest
        kept reads from the oldest.

        Raises:
            CorruptJournalError: the bytes there do not check (nothing past them is read).
        """
        offset = max(offset, self.first_offset)
        recent = self._recent
        if recent and recent[0].offset <= offset:
            return _from_recent(recent, offset, max_bytes)
        out: list[Entry] = []
        got = 0
        while got < max_bytes:
            i = bisect.bisect_right(self._bases, offset) - 1
            seg = self.segments[i]
            if offset >= seg.written_offset:
                if i + 1 == len(self.segments):
                    break
                offset = self.segments[i + 1].base
                continue
            for entry in seg.entries(seg.position_of(offset)):
                end = entry.offset + entry.count
                if end <= offset:
                    continue
                out.append(entry)
                got += entry.size
                offset = end
                if got >= max_bytes:
                    break
            else:
                if offset < seg.written_offset:
                    raise CorruptJournalError(f"{seg.path} ends at offset {offset}, before {seg.written_offset}")
        return out

    def offset_at(self, time_ns: int) -> int:
        """The offset of the first record appended at or after ``time_ns`` (the end if none)."""
        for seg in self.segments:
            if seg.last_time_ns < time_ns:
                continue
            for entry in seg.entries(seg.position_at_time(time_ns)):
                if entry.time_ns >= time_ns:
                    return entry.offset
        return self.end_offset

    # ------------------------------------------------------------------ retention

    def retain(self, now_ns: int, max_bytes: int, max_age_ns: int) -> int:
        """Remove the oldest sealed segments while the journal is over ``max_bytes`` (0: no bound) or their
        newest record is older than ``max_age_ns`` (0: no bound); the segments removed."""
        removed = 0
        while len(self.segments) > 1:
            oldest, after = self.segments[0], self.segments[1]
            too_big = max_bytes and self.size_bytes - oldest.size >= max_bytes
            too_old = max_age_ns and after.first_time_ns and after.first_time_ns < now_ns - max_age_ns
            if not (too_big or too_old):
                break
            oldest.remove()
            self.segments.pop(0)
            self._bases.pop(0)
            removed += 1
        return removed

    def verify(self) -> Iterator[str]:
        """Read every segment whole: a line per problem (none for a sound journal)."""
        return verify(self.segments)

    def sealed(self) -> list[tuple[int, int]]:
        """Each sealed segment's (first offset, end): what a scrub reads, and a repair rewrites."""
        return [(seg.base, _jumped_from(self.directory, nxt.base)) for seg, nxt in zip(self.segments, self.segments[1:])]

    def check_segment(self, base: int, end: int) -> str:
        """Read the sealed segment at ``base`` whole: why it is not sound ("" it is: every entry checks, and they
        reach ``end``)."""
        seg = self.segments[self._bases.index(base)]
        reached = base
        try:
            for entry in seg.entries(0):
                reached = entry.offset + entry.count
        except (CorruptJournalError, JournalError) as exc:
            return str(exc)
        return "" if reached == end else f"{seg.path}: its entries end at offset {reached}, not {end}"

    def repair(self, base: int, entries: list[Entry]) -> None:
        """Rewrite the sealed segment at ``base`` from ``entries`` (another replica's copy of it, entry for entry:
        the same offsets, times and bytes), synced before it takes the damaged file's place; its index is rebuilt.

        Raises:
            JournalError: no sealed segment at ``base``, entries that do not cover it, or a write that failed (the
                damaged file stays).
        """
        i = self._bases.index(base) if base in self._bases else -1
        if i < 0 or i + 1 >= len(self.segments):
            raise JournalError(f"no sealed segment begins at offset {base}")
        end = _jumped_from(self.directory, self.segments[i + 1].base)
        expected = base
        for e in entries:
            if e.offset != expected:
                raise JournalError(f"the copy of segment {base} has offset {e.offset} where {expected} was due")
            expected = e.offset + parse_header(e.header).count
        if expected != end:
            raise JournalError(f"the copy of segment {base} ends at offset {expected}, not {end}")
        seg = self.segments[i]
        fresh = seg.path + ".repair"
        try:
            write_synced(fresh, b"".join(b"".join(encode_entry(e.offset, e.time_ns, e.key, e.header, e.body))
                                          for e in entries))
        except OSError as exc:
            raise JournalError(f"cannot write {fresh}: {exc.strerror}") from exc
        seg.close()
        try:
            os.replace(fresh, seg.path)
            try:
                os.unlink(seg.index_path)
            except FileNotFoundError:
                pass
            sync_directory(self.directory)
        except OSError as exc:
            raise JournalError(f"cannot put the repaired {seg.path} in place: {exc.strerror}") from exc
        self.segments[i], _ = Segment.open(self.directory, base, active=False)  # (its index rebuilt)

    def close(self) -> None:
        """Write and sync what is queued (no roll), and close every file."""
        try:
            self.active.write()
            self.active.sync()
        finally:
            for seg in self.segments:
                seg.close()
            if self._sync_log_fd >= 0:
                os.close(self._sync_log_fd)
                self._sync_log_fd = -1


def _new_segment(directory: str, base: int, highs: dict[bytes, int]) -> Segment:
    """A new segment at ``base``, with the publishers' table ``highs`` beside it (recovery reads from there)."""
    pub = os.path.join(directory, segment_name(base, ".pub"))
    try:
        write_synced(pub, encode_publishers(highs))
    except OSError as exc:
        log.warning("cannot write %s (%s): recovery will read older segments", pub, exc.strerror)
    return Segment.create(directory, base)


def _jumped_from(directory: str, base: int) -> int:
    """Where the segment before the one at ``base`` ended: ``base``, unless a jump's ``.from`` file says otherwise."""
    try:
        with open(os.path.join(directory, segment_name(base, ".from"))) as f:
            return int(f.read().strip())
    except FileNotFoundError:
        return base
    except (OSError, ValueError) as exc:
        raise JournalError(f"{segment_name(base, '.from')} in {directory} does not read: {exc}") from exc


def _move_files(source: str, target: str) -> None:
    """Move the segments' files and the positions from directory ``source`` into ``target`` (made if missing)."""
    try:
        os.makedirs(target, exist_ok=True)
        for name in os.listdir(source):
            if name == POSITIONS or (name[:20].isdigit() and name[20:21] == "."):
                os.rename(os.path.join(source, name), os.path.join(target, name))
        for d in {source, target, os.path.dirname(os.path.normpath(target))}:
            sync_directory(d)
    except OSError as exc:
        raise JournalError(f"cannot move the journal's files from {source} to {target}: {exc.strerror}") from exc


def _undo(directory: str, moved: str, made: Segment | None) -> None:
    """Put back what :meth:`Store.begin_generation` set aside in ``moved`` and remove the segment it ``made``."""
    if made is not None:
        made.remove()
    if moved:
        aside = os.path.join(directory, moved)
        try:
            _move_files(aside, directory)
            os.rmdir(aside)
        except (JournalError, OSError) as exc:
            log.error("the journal's files set aside in %s could not all be put back (%s): move them back by hand "
                      "before the journal starts again", aside, exc)


def _recover_publishers(segments: list[Segment], rec: Recovery) -> dict[bytes, int]:
    """The publishers' table: the newest ``.pub`` that reads, then the segments from it on."""
    start = 0
    highs: dict[bytes, int] = {}
    for i in range(len(segments) - 1, -1, -1):
        path = segments[i].path[:-4] + ".pub"
        try:
            with open(path, "rb") as f:
                highs = decode_publishers(f.read())
            start = i
            break
        except FileNotFoundError:
            continue
        except (OSError, CorruptJournalError) as exc:
            rec.notes.append(f"{path}: {exc}; read from an older table")
    else:
        if segments[0].base:
            rec.notes.append("no publishers' table reads: publishers seen only before the oldest segment kept are "
                             "not known (their resent batches could be journaled again)")
    for seg in segments[start:]:
        for entry in seg.entries(0):
            h = parse_header(entry.header)
            highs.pop(h.publisher, None)
            highs[h.publisher] = h.last_seq
    while len(highs) > MAX_PUBLISHERS:
        del highs[next(iter(highs))]
    return highs


def verify(segments: list[Segment]) -> Iterator[str]:
    """Read ``segments`` whole: a line per problem (a checksum that fails, offsets that do not follow on, except past
    a jump, time that goes back); none for a sound journal."""
    expected = segments[0].base if segments else 0
    last_time = 0
    for seg in segments:
        try:
            jumped = seg.base != expected and _jumped_from(seg.directory, seg.base) == expected  # past a gap
        except JournalError as exc:
            yield str(exc)
            jumped = False
        if seg.base != expected and not jumped:
            yield f"{seg.path}: begins at offset {seg.base}, expected {expected}"
        expected = seg.base
        try:
            for entry in seg.entries(0):
                if entry.offset != expected:
                    yield f"{seg.path}: offset {entry.offset} follows {expected - 1}"
                if entry.time_ns < last_time:
                    yield f"{seg.path}: time goes back at offset {entry.offset}"
                expected = entry.offset + entry.count
                last_time = entry.time_ns
        except CorruptJournalError as exc:
            yield str(exc)
            expected = seg.next_offset


def _from_recent(recent: collections.deque[Entry], offset: int, max_bytes: int) -> list[Entry]:
    """:meth:`Store.read` from the entries kept in memory (the first of them at or before ``offset``)."""
    lo, hi = 0, len(recent)  # the last entry that begins at or before offset (a deque: bisect by hand)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if recent[mid].offset <= offset:
            lo = mid
        else:
            hi = mid
    out: list[Entry] = []
    got = 0
    for entry in itertools.islice(recent, lo, None):
        if entry.offset + entry.count <= offset:
            continue  # (the first: it ends before offset)
        out.append(entry)
        got += entry.size
        if got >= max_bytes:
            break
    return out
