"""Data-plane frames: batches, markers, beacons and acknowledgements (sans-I/O).

A batch is one ZeroMQ message of three frames ``[key, header, body]``:

* ``key``: the routing key shared by every record of the batch; subscribers filter on its prefix.
* ``header``: :data:`HEADER`, a fixed little-endian ``struct`` (see :class:`Header`).
* ``body``: ``count`` little-endian uint32 record lengths, then the record payloads back to back.

Exchanges read the header only (``struct.unpack_from``) and forward the three frames untouched.
Markers and beacons use the same three-frame shape with the key :data:`CONTROL_TOPIC` and an empty
body, so that they travel in order with the data on the same ZeroMQ pipes.
"""

from __future__ import annotations

import struct
import sys
from itertools import accumulate
from typing import NamedTuple, Sequence

from roq.errors import ProtocolError

__all__ = [
    "VERSION",
    "DATA",
    "MARKER",
    "BEACON",
    "CONTROL_TOPIC",
    "HEADER",
    "HEADER_SIZE",
    "ACK",
    "Header",
    "pack_header",
    "parse_header",
    "encode_body",
    "decode_body",
    "encode_ack",
    "decode_ack",
]

VERSION = 1

#: Header kinds.
DATA = 1  # count >= 1 records in the body
MARKER = 2  # the publisher's stream through this exchange ends before ``first_seq`` (epoch ``epoch`` ends)
BEACON = 3  # sent by an exchange on its backend: "your subscription to me is live"

#: Flag bits.
FLAG_RETRANSMIT = 0x1  # resent after a failover (subscribers may have it already)
FLAG_ACK_NOW = 0x2  # the publisher waits for this acknowledgement (flush): do not coalesce it

#: Sequence numbers stay below this (they are u64 on the wire).
SEQ_LIMIT = 1 << 64

#: Key of markers and beacons. Every subscriber subscribes to it besides its own prefix.
CONTROL_TOPIC = b"\x00roq"

#: version u8, kind u8, flags u16, count u32, publisher 16s, epoch u32, first_seq u64,
#: key_prev u64 (seq of the publisher's previous record with the same key, 0 = none/unknown),
#: timestamp i64 (ns since the epoch, when the batch's first record was sent).
HEADER = struct.Struct("<BBHI16sIQQq")
HEADER_SIZE = HEADER.size

#: Acknowledgement from exchange to publisher: version u8, kind u8 (= ACK_KIND), highest seq u64.
ACK = struct.Struct("<BBQ")
ACK_KIND = 4

_LITTLE = sys.byteorder == "little"


class Header(NamedTuple):
    version: int
    kind: int
    flags: int
    count: int
    publisher: bytes
    epoch: int
    first_seq: int
    key_prev: int
    timestamp_ns: int

    @property
    def last_seq(self) -> int:
        """Highest seq covered: for a marker, the last seq sent before it."""
        return self.first_seq + self.count - 1


def pack_header(
    kind: int,
    publisher: bytes,
    first_seq: int,
    count: int,
    *,
    epoch: int = 0,
    key_prev: int = 0,
    timestamp_ns: int = 0,
    flags: int = 0,
) -> bytes:
    """Encode a header.

    Raises:
        ProtocolError: a field does not fit its slot.
    """
    if len(publisher) != 16:
        raise ProtocolError(f"publisher id must be 16 bytes, got {len(publisher)}")
    try:
        return HEADER.pack(VERSION, kind, flags, count, publisher, epoch, first_seq, key_prev, timestamp_ns)
    except struct.error as exc:
        raise ProtocolError(f"cannot encode header: {exc}") from exc


def parse_header(frame: bytes) -> Header:
    """Decode and validate a header frame.

    Raises:
        ProtocolError: wrong size, unknown version or kind, or a data batch with no records.
    """
    if len(frame) != HEADER_SIZE:
        raise ProtocolError(f"header of {len(frame)} bytes, expected {HEADER_SIZE}")
    header = Header._make(HEADER.unpack(frame))
    if header.version != VERSION:
        raise ProtocolError(f"unsupported protocol version {header.version}")
    if header.kind == DATA:
        if header.count == 0:
            raise ProtocolError("data batch with no records")
        if header.first_seq == 0:
            raise ProtocolError("sequence numbers start at 1")
    elif header.kind not in (MARKER, BEACON):
        raise ProtocolError(f"unknown frame kind {header.kind}")
    return header


def encode_body(payloads: Sequence[bytes]) -> bytes:
    """Encode record payloads as a batch body: the lengths, then the payloads."""
    return struct.pack(f"<{len(payloads)}I", *map(len, payloads)) + b"".join(payloads)


def decode_body(body: bytes, count: int) -> list[bytes]:
    """Split a batch body into its ``count`` record payloads.

    Raises:
        ProtocolError: the body is shorter than its length table or its lengths do not add up.
    """
    table = 4 * count
    if len(body) < table:
        raise ProtocolError(f"body of {len(body)} bytes cannot hold {count} record lengths")
    if _LITTLE:
        lengths = memoryview(body)[:table].cast("I").tolist()
    else:  # pragma: no cover - big-endian hosts
        lengths = list(struct.unpack_from(f"<{count}I", body))
    offsets = list(accumulate(lengths, initial=table))
    if offsets[-1] != len(body):
        raise ProtocolError(f"record lengths add up to {offsets[-1] - table}, body holds {len(body) - table}")
    return [body[start:end] for start, end in zip(offsets, offsets[1:])]


def encode_ack(seq: int) -> bytes:
    """Encode a cumulative acknowledgement: every record up to ``seq`` was handed to the backend.

    Raises:
        ProtocolError: ``seq`` does not fit in 64 bits.
    """
    try:
        return ACK.pack(VERSION, ACK_KIND, seq)
    except struct.error as exc:
        raise ProtocolError(f"cannot encode ack {seq}: {exc}") from exc


def decode_ack(frame: bytes) -> int:
    """Decode an acknowledgement and return its seq.

    Raises:
        ProtocolError: not an acknowledgement frame.
    """
    if len(frame) != ACK.size:
        raise ProtocolError(f"ack of {len(frame)} bytes, expected {ACK.size}")
    version, kind, seq = ACK.unpack(frame)
    if version != VERSION or kind != ACK_KIND:
        raise ProtocolError(f"not an ack (version {version}, kind {kind})")
    return seq
