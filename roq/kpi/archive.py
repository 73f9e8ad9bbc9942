"""The KPI archive: every KPI record and topology event, as JSON lines, partitioned by queue and date.

Layout under the archive's root (Hive-style partitions, which Spark reads as columns)::

    queue=<queue>/date=<YYYY-MM-DD>/<writer>-<seq>.jsonl     a queue's records, written by its monitor
    queue=@hosts/date=<YYYY-MM-DD>/<writer>-<seq>.jsonl      host records, written by host managers

(``@`` cannot appear in a queue name.) Every line is one JSON object: a record of :mod:`roq.kpi.records`
with its ``kind`` and ``time`` (seconds since the epoch).

**Atomic files.** A writer appends to a hidden file (``.<writer>-<seq>.jsonl.part``: readers and Spark
skip names starting with a dot) and renames it into place when it rotates: by size, by age, at the
change of date, and on close. A reader therefore never sees a file being written, and a crash leaves
only a hidden part; the next writer of the partition recovers it (its complete lines, cut after the
last newline) once it is clearly abandoned.

**Retention.** Date partitions older than ``retention_days`` are removed by the writers.

**Cost.** :meth:`ArchiveWriter.append` serialises into memory; :meth:`ArchiveWriter.tick`, called by the
owner's loop, writes the buffer out about once a second. No fsync: a process crash loses nothing the
kernel has, a machine crash loses the last seconds (the archive is evidence, not a ledger).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import shutil
import time
from typing import Any, Callable

from roq.wire import shape
from roq.kpi.records import Record

log = logging.getLogger(__name__)

__all__ = ["ArchiveWriter", "HOSTS_PARTITION", "partition_dir", "writer_name", "host_of", "safe_name", "placed_files"]

HOSTS_PARTITION = "@hosts"
FLUSH_S = 1.0
ABANDONED_S = 120.0  # a hidden part untouched this long has no writer any more
_PART = re.compile(r"\.(?P<name>.+\.jsonl)\.part\Z")
_DATE_DIR = re.compile(r"date=(\d{4}-\d{2}-\d{2})\Z")
#: a file put in place: ``[recovered-]<role>-<host>-<pid>-<ms>-<seq>.jsonl`` (its writer's name, then the file's)
_PLACED = re.compile(r"(?:recovered-)?(?:monitor|host)-(?P<host>.+)-\d+-\d+-\d+\.jsonl\Z")


def partition_dir(root: str, queue: str, date: str) -> str:
    return os.path.join(root, f"queue={queue}", f"date={date}")


def safe_name(text: str) -> str:
    """``text`` as a part of a file's name (what is not ``A-Z a-z 0-9 _ . -`` becomes ``_``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def writer_name(role: str, host: str, pid: int) -> str:
    """The name of a writer of the archive: its ``role`` (``monitor`` or ``host``), its host's address and pid."""
    if role not in ("monitor", "host"):
        raise ValueError(f"a writer of the KPI archive is a monitor or a host, not {role!r}")
    return f"{role}-{safe_name(host)}-{pid}"


def host_of(name: str) -> str | None:
    """The host (as :func:`safe_name` wrote it) of a file put in place by a writer named by :func:`writer_name`;
    None for any other name (a hidden part, a file of an older archive)."""
    match = _PLACED.match(name)
    return match.group("host") if match else None


def placed_files(root: str, *, since_date: str = "") -> list[tuple[str, str, str]]:
    """The files put in place under ``root``, oldest date first: (partition, date, name) each; only the date
    partitions from ``since_date`` on ("" = all)."""
    out = []
    for entry in _list(root):
        if not entry.startswith("queue="):
            continue
        partition = entry[len("queue="):]
        for date_dir in _list(os.path.join(root, entry)):
            match = _DATE_DIR.match(date_dir)
            if not match or match.group(1) < since_date:
                continue
            for name in _list(os.path.join(root, entry, date_dir)):
                if name.endswith(".jsonl") and not name.startswith("."):
                    out.append((partition, match.group(1), name))
    out.sort(key=lambda f: (f[1], f[2]))
    return out


def _date(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d")


class ArchiveWriter:
    """Appends records of one partition (a queue, or :data:`HOSTS_PARTITION`) to the archive at ``root``.

    Args:
        root: the archive's directory (created if missing).
        queue: the partition: a queue's name or :data:`HOSTS_PARTITION`.
        writer: a name for this writer's files, unique among the partition's writers (e.g. host and pid).
        rotate_bytes, rotate_s: a file is put in place once it holds this many bytes or is this old.
        retention_days: date partitions older than this are removed (0 = kept forever).
        clock: wall clock (seconds since the epoch).
    """

    def __init__(self, root: str, queue: str, writer: str, *, rotate_bytes: int = 16 << 20, rotate_s: float = 30.0,
                 retention_days: float = 7.0, clock: Callable[[], float] = time.time) -> None:
        self.root, self.queue, self.writer = root, queue, safe_name(writer)
        self.rotate_bytes, self.rotate_s, self.retention_days = rotate_bytes, rotate_s, retention_days
        self.clock = clock
        self.records = 0  # appended
        self.files = 0  # put in place
        self.errors = 0  # writes that failed (the records of that buffer are lost; the owner keeps going)
        self._buffer: list[str] = []
        self._file: Any = None
        self._path = ""
        self._date = ""
        self._opened = 0.0
        self._size = 0
        self._seq = 0
        self._next_flush = 0.0
        self._next_prune = 0.0
        os.makedirs(os.path.join(root, f"queue={queue}"), exist_ok=True)
        self._recover()

    def append(self, record: Record, now: float | None = None) -> None:
        """Add one record (its ``kind`` and the ``time`` are set here)."""
        line = json.dumps({"kind": record.KIND, "time": round(self.clock() if now is None else now, 3),
                           **shape.to_document(record)}, separators=(",", ":"), default=str)
        self._buffer.append(line)
        self.records += 1

    def tick(self, now: float | None = None) -> None:
        """Write the buffer out if a second has passed, rotate and prune when due; cheap otherwise."""
        now = self.clock() if now is None else now
        if now < self._next_flush:
            return
        self._next_flush = now + FLUSH_S
        self.flush(now)
        if now >= self._next_prune:
            self._next_prune = now + 3600
            self._prune(now)

    def flush(self, now: float | None = None) -> None:
        """Write the buffer out now; rotate if the file is due."""
        now = self.clock() if now is None else now
        date = _date(now)
        if self._file is not None and (date != self._date or self._size >= self.rotate_bytes
                                       or now - self._opened >= self.rotate_s):
            self._rotate()
        if not self._buffer:
            return
        data = ("\n".join(self._buffer) + "\n").encode()
        self._buffer = []
        try:
            if self._file is None:
                self._open(date, now)
            self._file.write(data)
            self._file.flush()
            self._size += len(data)
        except OSError as exc:
            self.errors += 1
            log.warning("KPI archive %s: cannot write (%s); %d bytes of records lost", self.root, exc, len(data))
            self._close_quietly()

    def close(self) -> None:
        """Write what is buffered and put the current file in place."""
        self.flush()
        self._rotate()

    # ------------------------------------------------------------------ files

    def _open(self, date: str, now: float) -> None:
        directory = partition_dir(self.root, self.queue, date)
        os.makedirs(directory, exist_ok=True)
        self._seq += 1
        name = f"{self.writer}-{int(now * 1000)}-{self._seq}.jsonl"
        self._path = os.path.join(directory, name)
        self._file = open(os.path.join(directory, f".{name}.part"), "ab")
        self._date, self._opened, self._size = date, now, 0

    def _rotate(self) -> None:
        if self._file is None:
            return
        part = self._file.name
        self._file.close()
        self._file = None
        try:
            os.replace(part, self._path)
            self.files += 1
        except OSError as exc:
            self.errors += 1
            log.warning("KPI archive: cannot put %s in place: %s", part, exc)

    def _close_quietly(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    def _recover(self) -> None:
        """Put abandoned parts of this partition in place, cut after their last complete line."""
        base = os.path.join(self.root, f"queue={self.queue}")
        now = time.time()
        for date_dir in _list(base):
            directory = os.path.join(base, date_dir)
            for entry in _list(directory):
                match = _PART.match(entry)
                path = os.path.join(directory, entry)
                try:
                    if not match or now - os.stat(path).st_mtime < max(ABANDONED_S, 2 * self.rotate_s):
                        continue
                    with open(path, "rb+") as f:
                        data = f.read()
                        f.truncate(data.rfind(b"\n") + 1)
                    os.replace(path, os.path.join(directory, "recovered-" + match.group("name")))
                    log.info("KPI archive: recovered the complete lines of %s", path)
                except OSError as exc:
                    log.warning("KPI archive: cannot recover %s: %s", path, exc)

    def _prune(self, now: float) -> None:
        if not self.retention_days:
            return
        oldest = _date(now - self.retention_days * 86400)
        base = os.path.join(self.root, f"queue={self.queue}")
        for entry in _list(base):
            match = _DATE_DIR.match(entry)
            if match and match.group(1) < oldest and entry != f"date={self._date}":
                shutil.rmtree(os.path.join(base, entry), ignore_errors=True)
                log.info("KPI archive: removed %s/%s (retention %g days)", base, entry, self.retention_days)


def _list(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []
