"""What a journal's files hold, byte for byte (sans-I/O): entries, index entries, the publishers' table.

A segment (``<first offset, 20 digits>.log``) is entries back to back. An entry is one batch as its publisher
sent it, behind a prefix of its own::

    size u32 | crc u32 | offset u64 | time_ns i64 | header (roq.wire.batch.HEADER) | key length u32 | key | body

* ``size``: the bytes after the 8 bytes of ``size`` and ``crc``, the prefix's ``offset`` and ``time_ns``
  included; an entry whose size is below :data:`MIN_SIZE` or above :data:`MAX_SIZE` is not an entry;
* ``crc``: CRC-32 (zlib's) of those ``size`` bytes: a torn or flipped byte anywhere in them fails it;
* ``offset``: the offset of the batch's first record (records are numbered from the journal's first, 0,
  without gaps: the next entry's offset is this one's plus the header's ``count``);
* ``time_ns``: when the journal appended it (nanoseconds since the epoch), never below the previous entry's;
  ``start=datetime`` looks it up.

The index (``.idx`` beside its segment) is a cache: one :data:`INDEX` entry (offset, position in the segment,
time) every :data:`INDEX_INTERVAL` bytes of log; whatever it says is checked against the log before it is
believed, and it is rebuilt from the log when it is missing or wrong.

The publishers' table (``.pub`` beside a segment) is what the journal knew when that segment began: each
publisher's highest seq journaled before it. Recovery reads the last segment's table and the last segment,
not the whole journal.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from roq.wire import batch
from roq.errors import CorruptJournalError, ProtocolError

__all__ = ["PREFIX", "PREFIX_SIZE", "MIN_SIZE", "MAX_SIZE", "INDEX", "INDEX_INTERVAL", "Entry", "encode_entry",
           "decode_entry", "entry_size", "encode_publishers", "decode_publishers", "segment_name", "segment_base",
           "EPOCH_PUBLISHER", "epoch_entry", "POSITION_PUBLISHER", "position_entry", "read_position"]

#: size u32, crc u32, offset u64, time_ns i64
PREFIX = struct.Struct("<IIQq")
PREFIX_SIZE = PREFIX.size
_KEY_LEN = struct.Struct("<I")
_COVERED = PREFIX_SIZE - 8  # offset and time_ns are under the crc
#: the smallest entry: an empty key and a body of one empty record
MIN_SIZE = _COVERED + batch.HEADER_SIZE + _KEY_LEN.size + 4
#: the largest entry recovery believes (a batch is at most 16 MiB by the exchange's bounds, a key 64 KiB)
MAX_SIZE = 64 << 20
#: offset u64, position u64, time_ns i64
INDEX = struct.Struct("<QQq")
#: bytes of log between two index entries
INDEX_INTERVAL = 4096

#: The publisher id of the entry a replicated journal's new leader writes first in its epoch (its seq is the epoch;
#: its key :data:`roq.wire.batch.EPOCH_KEY`).
EPOCH_PUBLISHER = bytes(16)
#: The publisher id of a durable subscriber's position entry (its seq grows with each; its key
#: :data:`roq.wire.batch.POSITION_KEY`).
POSITION_PUBLISHER = bytes(15) + b"\x01"
_PUB = struct.Struct("<16sQ")
_PUB_HEAD = struct.Struct("<II")  # crc, count


class Entry(NamedTuple):
    """One entry read back: the batch's three frames and where the journal put it."""

    offset: int
    time_ns: int
    key: bytes
    header: bytes
    body: bytes
    size: int  # bytes the entry takes in its segment, prefix included

    @property
    def count(self) -> int:
        return batch.parse_header(self.header).count


def encode_entry(offset: int, time_ns: int, key: bytes, header: bytes, body: bytes) -> list[bytes]:
    """The buffers of one entry, to be written in order (``os.writev``): the body is not copied."""
    tail = _KEY_LEN.pack(len(key)) + key
    size = _COVERED + len(header) + len(tail) + len(body)
    stamp = struct.pack("<Qq", offset, time_ns)
    crc = zlib.crc32(body, zlib.crc32(tail, zlib.crc32(header, zlib.crc32(stamp))))
    return [struct.pack("<II", size, crc) + stamp, header, tail, body]


def entry_size(key: bytes, body: bytes) -> int:
    """Bytes an entry of this key and body takes in a segment."""
    return PREFIX_SIZE + batch.HEADER_SIZE + _KEY_LEN.size + len(key) + len(body)


def decode_entry(data: bytes | memoryview, at: int = 0) -> Entry | None:
    """The entry at ``at`` in ``data``; None if ``data`` ends before it does (a torn tail, or more to read).

    Raises:
        CorruptJournalError: the bytes there are not a whole entry: a size out of range, a checksum that fails,
            or a layout that does not add up.
    """
    end = len(data)
    if end - at < PREFIX_SIZE:
        return None
    size, crc, offset, time_ns = PREFIX.unpack_from(data, at)
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise CorruptJournalError(f"entry at byte {at}: size {size} out of range")
    stop = at + 8 + size
    if stop > end:
        return None
    view = memoryview(data)[at + 8:stop]
    if zlib.crc32(view) != crc:
        raise CorruptJournalError(f"entry at byte {at}: checksum fails")
    h_at = PREFIX_SIZE - 8
    header = bytes(view[h_at:h_at + batch.HEADER_SIZE])
    k_at = h_at + batch.HEADER_SIZE
    (key_len,) = _KEY_LEN.unpack_from(view, k_at)
    body_at = k_at + _KEY_LEN.size + key_len
    if body_at > size:
        raise CorruptJournalError(f"entry at byte {at}: a key of {key_len} bytes does not fit its entry")
    try:
        h = batch.parse_header(header)
    except batch.BatchError as exc:
        raise CorruptJournalError(f"entry at byte {at}: {exc}") from None
    if h.kind != batch.DATA:
        raise CorruptJournalError(f"entry at byte {at}: holds a frame of kind {h.kind}, not records")
    return Entry(offset, time_ns, bytes(view[k_at + _KEY_LEN.size:body_at]), header, bytes(view[body_at:]),
                 8 + size)


def encode_publishers(highs: dict[bytes, int]) -> bytes:
    """A publishers' table: each publisher's highest seq journaled, checksummed."""
    body = b"".join(_PUB.pack(p, s) for p, s in sorted(highs.items()))
    return _PUB_HEAD.pack(zlib.crc32(body), len(highs)) + body


def decode_publishers(data: bytes) -> dict[bytes, int]:
    """The table :func:`encode_publishers` wrote.

    Raises:
        CorruptJournalError: cut short, or its checksum fails.
    """
    if len(data) < _PUB_HEAD.size:
        raise CorruptJournalError(f"publishers' table of {len(data)} bytes")
    crc, count = _PUB_HEAD.unpack_from(data)
    body = data[_PUB_HEAD.size:]
    if len(body) != count * _PUB.size or zlib.crc32(body) != crc:
        raise CorruptJournalError("publishers' table does not check")
    return {p: s for p, s in _PUB.iter_unpack(body)}


def segment_name(base: int, suffix: str) -> str:
    """The file name of the segment whose first offset is ``base`` (``.log``, ``.idx``, ``.pub``)."""
    return f"{base:020d}{suffix}"


def segment_base(name: str) -> int | None:
    """The first offset a segment's file name says; None for a name that is not a segment's log."""
    stem, dot, suffix = name.partition(".")
    if suffix != "log" or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def position_entry(name: str, offset: int, seq: int) -> tuple[bytes, bytes, bytes]:
    """The key, header and body of the entry keeping durable subscriber ``name``'s position ``offset``."""
    header = batch.pack_header(batch.DATA, POSITION_PUBLISHER, seq, 1)
    return batch.POSITION_KEY, header, batch.encode_body([b"%s %d" % (name.encode(), offset)])


def read_position(body: bytes) -> tuple[str, int]:
    """The name and offset a position entry's ``body`` keeps.

    Raises:
        ProtocolError: not a position entry's body.
    """
    try:
        (payload,) = batch.decode_body(body, 1)
        name, offset = payload.decode().split(" ")
        return name, int(offset)
    except (ValueError, UnicodeDecodeError, batch.BatchError) as exc:
        raise ProtocolError(f"not a position entry: {exc}") from exc


def epoch_entry(epoch: int) -> tuple[bytes, bytes, bytes]:
    """The key, header and body of the entry that begins ``epoch`` (see :data:`roq.wire.batch.EPOCH_KEY`)."""
    header = batch.pack_header(batch.DATA, EPOCH_PUBLISHER, epoch, 1)
    return batch.EPOCH_KEY, header, batch.encode_body([b"epoch %d" % epoch])
