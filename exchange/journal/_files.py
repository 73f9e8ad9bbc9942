"""The small files a journal keeps beside its segments (a replica's promise, durable subscribers' positions, the
journal's format), made durable: written whole to a new file, synced, renamed into place, and the rename synced
too (the directory's entry): a rename not synced can be undone by a power loss, and a replica would then forget
a promise it answered, or a subscriber a position the journal confirmed. Files written once (beside a new
segment, a repaired segment's copy) are written synced by :func:`write_synced`."""

from __future__ import annotations

import os

__all__ = ["replace_synced", "sync_directory", "write_synced"]


def sync_directory(directory: str) -> None:
    """Sync ``directory``'s entries: files made, renamed or removed in it are on the disk after this.

    Raises:
        OSError: it cannot be opened or synced.
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: str, data: bytes) -> None:
    """``data`` in the file ``path``, on the disk before this returns (its directory entry not synced).

    Raises:
        OSError: it is not.
    """
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def replace_synced(path: str, data: bytes) -> None:
    """Put ``data`` in the file ``path`` in place of what it held, on the disk before this returns: whole, or (a
    crash meanwhile) not at all.

    Raises:
        OSError: it could not be written (``path`` then holds what it held before), or its rename could not be
            synced (``path`` holds ``data``, which a power loss may undo).
    """
    fresh = path + ".new"
    write_synced(fresh, data)
    os.replace(fresh, path)
    sync_directory(os.path.dirname(path) or ".")
