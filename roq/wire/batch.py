"""Data-plane frames: batches, markers, beacons and acknowledgements (sans-I/O).

A batch is one ZeroMQ message of three frames ``[key, header, body]``:

* ``key``: the routing key shared by every record of the batch; subscribers filter on its prefix.
* ``header``: :data:`HEADER`, a fixed little-endian ``struct`` (see :class:`Header`).
* ``body``: ``count`` little-endian uint32 record lengths, then the record payloads back to back.

Exchanges read the header only and forward the three frames untouched (but for a body a link compressed,
:data:`FLAG_COMPRESSED`: the exchange takes it back, :func:`inflate`, and forwards what it was). Markers and beacons use the same
three-frame shape with the key :data:`CONTROL_TOPIC`, so that they travel in order with the data on the same
ZeroMQ pipes. So does a subscription, the one frame a subscriber sends an exchange: the header names the
subscriber, the body is the key prefix it wants (:func:`pack_subscription`, :func:`check_subscription`); and
so does its progress report, "I took batches since my last one" (:func:`pack_progress`, :func:`progress_of`),
which tells the exchange that a subscriber whose pipe is full is still reading it, and names the last *delivery
mark* the subscriber took (:func:`pack_delivery_mark`: a number an exchange sends in order after batches). Once
every subscriber that reads took a mark, the exchange tells publishers that what it had acknowledged then is
*delivered* (:func:`encode_delivered`): they may forget it.

This module is the one place the header's layout is known: publishers build headers with
:func:`pack_header`, the exchange checks what it forwards with :func:`check_incoming` and subscribers read
with :func:`parse_header`, on their hot paths. Nothing else indexes the header by position.
"""

from __future__ import annotations

import struct
import sys
from itertools import accumulate
from typing import NamedTuple, Sequence

from roq.errors import ProtocolError
from roq.wire import compression

__all__ = [
    "BatchError",
    "check_incoming",
    "MAX_KEY",
    "VERSION",
    "DATA",
    "MARKER",
    "BEACON",
    "SUBSCRIBE",
    "SEAM",
    "CUT",
    "FLAG_REPLAY",
    "FLAG_RELAYED",
    "FLAG_COMPRESSED",
    "compress",
    "inflate",
    "FLAG_DESCENDED",
    "FLAG_ADDRESSED",
    "ADDRESSED",
    "is_addressed",
    "pack_seam",
    "pack_beacon",
    "pack_cut",
    "replays",
    "rejoins",
    "CONTROL_TOPIC",
    "EPOCH_KEY",
    "POSITION_KEY",
    "REPLICA_KEYS",
    "HEADER",
    "HEADER_SIZE",
    "ACK",
    "Header",
    "pack_header",
    "parse_header",
    "pack_subscription",
    "check_subscription",
    "PROGRESS",
    "pack_progress",
    "progress_of",
    "encode_body",
    "decode_body",
    "DELIVERY_MARK",
    "pack_delivery_mark",
    "encode_ack",
    "decode_ack",
    "encode_delivered",
    "decode_delivered",
    "DELIVERED_KIND",
    "encode_relayed_ack",
    "decode_relayed_ack",
    "encode_journal_ack",
    "decode_journal_ack",
    "MAX_JOURNAL_ACKS",
]

VERSION = 1

#: Header kinds.
DATA = 1  # count >= 1 records in the body
MARKER = 2  # the publisher's stream through this exchange ends before ``first_seq`` (epoch ``epoch`` ends)
BEACON = 3  # sent by an exchange on its backend: "your subscription to me is live"
SUBSCRIBE = 5  # sent by a subscriber to an exchange's backend: "send me the keys starting with the body"
SEAM = 8  # sent by an exchange to its journal: "subscriber <publisher> is live here from now on" (body: my id)
CUT = 9  # sent by an exchange of a durable queue to a subscriber it stopped sending to: "read the journal" (body: my id)
PROGRESS = 10  # sent by a subscriber to an exchange's backend: "I took batches since my last report" (count: how many)
DELIVERY_MARK = 11  # sent by an exchange to a subscriber after batches: "say when you took mark ``first_seq``"

#: Flag bits.
FLAG_RETRANSMIT = 0x1  # resent after a failover (subscribers may have it already)
FLAG_ACK_NOW = 0x2  # the publisher waits for this acknowledgement (flush): do not coalesce it
FLAG_REPLAY = 0x4  # on a subscription: the subscriber replays the journal; mark its seam there (SEAM)
#: relayed from another cluster by a link (:mod:`roq.federation.relay`): only the records whose keys the far side
#: wanted crossed, so the publisher's seqs are sparse; each key's chain (``key_prev``) is whole
FLAG_RELAYED = 0x8
#: relayed *down* a tree of clusters, from a parent (with :data:`FLAG_RELAYED`): it goes on down to the children
#: that want it and never back up; a relayed record without it came up from a child, and never goes down again
FLAG_DESCENDED = 0x10
#: arrived, by a link, at the cluster its record was addressed to (its key's address taken off,
#: :data:`ADDRESSED`): it is delivered there and no link carries it further
FLAG_ADDRESSED = 0x20
#: the body is compressed (:mod:`roq.wire.compression`), as a link with ``--compress`` sends it into the far
#: cluster's exchanges; an exchange takes it back (:func:`inflate`) before anything else sees the batch
FLAG_COMPRESSED = 0x40

#: Sequence numbers stay below this (they are u64 on the wire).
SEQ_LIMIT = 1 << 64

#: Longest key, in bytes.
MAX_KEY = 1 << 16

#: Key of markers, beacons and subscriptions. Every subscriber gets it besides its own prefix.
CONTROL_TOPIC = b"\x00roq"

#: Key of the entry a replicated journal's new leader writes first in its epoch: it commits the log taken over once
#: it is on a majority. The journal's replicas copy it; no reader is served it (``exchange/journal/_format.py``).
EPOCH_KEY = CONTROL_TOPIC + b"/epoch"
#: Key of the entry in which a replicated journal's leader keeps a durable subscriber's committed position: the
#: replicas copy it and keep the position too, so it survives the leader's host; no reader is served it.
POSITION_KEY = CONTROL_TOPIC + b"/position"
#: the entries of a replicated journal that are its replicas' only
REPLICA_KEYS = (EPOCH_KEY, POSITION_KEY)

#: How the key of a record *addressed* to another cluster of a tree begins (then the cluster's name and ``/``:
#: :func:`roq.federation.address`). Such a record passes through the queues on its way as it is, heard by no
#: subscriber there (an exchange sends it to none, a journal hands it only to a fetch that names an address);
#: links carry it toward its cluster, where its key loses the address (:data:`FLAG_ADDRESSED`).
ADDRESSED = b"\x00@"


def is_addressed(key: bytes) -> bool:
    """Whether ``key`` is a record's addressed to another cluster (:data:`ADDRESSED`)."""
    return key[:2] == ADDRESSED

#: version u8, kind u8, flags u16, count u32, publisher 16s, epoch u32, first_seq u64,
#: key_prev u64 (seq of the publisher's previous record with the same key, 0 = none/unknown),
#: timestamp i64 (ns since the epoch, when the batch's first record was sent).
HEADER = struct.Struct("<BBHI16sIQQq")
HEADER_SIZE = HEADER.size
#: Where the publisher id is in a header (an exchange checks whose it is before the header is parsed).
PUBLISHER_OFFSET = 8

#: Acknowledgement from exchange to publisher: version u8, kind u8 (= ACK_KIND), highest seq u64.
ACK = struct.Struct("<BBQ")
ACK_KIND = 4
#: Acknowledgement of a relayed publisher (a link sends many on one connection): version u8, kind u8
#: (= RELAYED_ACK_KIND), highest seq u64, publisher 16s.
RELAYED_ACK = struct.Struct("<BBQ16s")
RELAYED_ACK_KIND = 7
#: "Every subscriber that reads took your records up to seq": the :data:`ACK` layout, kind DELIVERED_KIND.
DELIVERED_KIND = 12

#: Acknowledgement from a journal to an exchange: version u8, kind u8 (= JOURNAL_ACK_KIND), count u16, the
#: journal's incarnation u64, the offset its next record gets u64; then ``count`` times publisher 16s, highest seq
#: journaled u64.
JOURNAL_ACK = struct.Struct("<BBHQQ")
JOURNAL_ACK_ENTRY = struct.Struct("<16sQ")
JOURNAL_ACK_KIND = 6
#: Publishers in one journal acknowledgement, at most.
MAX_JOURNAL_ACKS = 4096

_KIND_AT = 1  # the kind's byte in HEADER: a message's kind, before it is known to be a header at all
_FLAGS_AT = 2  # the flags' u16 in HEADER
_FLAGS = struct.Struct("<H")
#: a body shorter than this is sent as it is (zstd's frame costs more than it could save)
_WORTH_COMPRESSING = 64
_LITTLE = sys.byteorder == "little"
_unpack = HEADER.unpack
_new_tuple = tuple.__new__


class BatchError(ProtocolError):
    """A frame that is not a valid batch; ``reason`` is a short name to count it under."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


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

    @property
    def floor(self) -> int:
        """The journal offset a beacon or a cut carries (-1: none)."""
        return self.key_prev - 1


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
        BatchError: wrong size, unknown version or kind, a data batch with no records or beyond the seq
            space, or a marker before seq 1.
    """
    if len(frame) != HEADER_SIZE:
        raise BatchError("bad header", f"{len(frame)} bytes, expected {HEADER_SIZE}")
    values = _unpack(frame)
    version, kind, _flags, count, _publisher, _epoch, first, _prev, _ts = values
    if version != VERSION:
        raise BatchError("bad header", f"protocol version {version}")
    if kind == DATA:
        if count == 0 or first == 0 or first + count > SEQ_LIMIT:
            raise BatchError("bad batch", f"count {count}, first seq {first}")
    elif kind == MARKER:
        if first == 0 or count:
            raise BatchError("bad marker", f"first seq {first}, count {count}")
    elif (kind != BEACON and kind != SUBSCRIBE and kind != SEAM and kind != CUT and kind != PROGRESS
          and kind != DELIVERY_MARK):
        raise BatchError("bad header", f"unknown frame kind {kind}")
    header = _new_tuple(Header, values)  # the fields are checked: skip NamedTuple._make's own length check
    return header


def check_incoming(key: bytes, header: bytes, body: bytes, max_body: int) -> Header:
    """Check a batch or marker a publisher sent, before an exchange forwards it; its header.

    Raises:
        BatchError: a bad header (:func:`parse_header`), a data body that cannot hold its record lengths or
            is over ``max_body`` bytes, a key over :data:`MAX_KEY`, a marker that is not an empty frame on
            the control topic, or a beacon (exchanges send those, publishers do not).
    """
    h = parse_header(header)
    if h.kind == DATA:
        size = len(body)
        if size < 4 * h.count and not h.flags & FLAG_COMPRESSED:
            raise BatchError("bad batch", f"body of {size} bytes cannot hold {h.count} record lengths")
        if size > max_body:
            raise BatchError("oversized batch", f"body {size} bytes > {max_body}")
        if len(key) > MAX_KEY:
            raise BatchError("oversized key", f"{len(key)} bytes > {MAX_KEY}")
    elif h.kind == MARKER:
        if key != CONTROL_TOPIC or body:
            raise BatchError("bad marker", f"key {key[:16]!r}, body {len(body)} bytes")
    else:
        raise BatchError("bad header", f"frame kind {h.kind} not accepted from publishers")
    return h


def compress(frames: list[bytes]) -> list[bytes]:
    """A data batch's frames (``[key, header, body]``) with the body compressed and :data:`FLAG_COMPRESSED` set;
    the frames as they are when that would not make them smaller (or they are not a data batch)."""
    key, header, body = frames
    if len(header) != HEADER_SIZE or header[_KIND_AT] != DATA or len(body) < _WORTH_COMPRESSING:
        return frames
    squeezed = compression.compress(body)
    if len(squeezed) >= len(body):
        return frames
    return [key, _with_flags(header, _FLAGS.unpack_from(header, _FLAGS_AT)[0] | FLAG_COMPRESSED), squeezed]


def inflate(key: bytes, header: bytes, body: bytes, max_body: int) -> tuple[bytes, bytes, Header]:
    """A batch with :data:`FLAG_COMPRESSED` (its header checked by :func:`check_incoming`) as it was before
    :func:`compress`: its header without the flag, its body, the header parsed and checked again.

    Raises:
        BatchError: the body does not decompress to at most ``max_body`` bytes, or what it holds is no batch.
    """
    try:
        body = compression.decompress(body, max_body)
    except ProtocolError as exc:
        raise BatchError("bad compressed batch", str(exc)) from None
    header = _with_flags(header, _FLAGS.unpack_from(header, _FLAGS_AT)[0] & ~FLAG_COMPRESSED)
    return header, body, check_incoming(key, header, body, max_body)


def _with_flags(header: bytes, flags: int) -> bytes:
    """``header`` (checked to be one) with its flags replaced."""
    return header[:_FLAGS_AT] + _FLAGS.pack(flags) + header[_FLAGS_AT + 2:]


def pack_subscription(subscriber: bytes, prefix: bytes, replay: bool = False, rejoin: int = 0) -> list[bytes]:
    """The frames of a subscription: ``subscriber`` (16 bytes, also the socket's routing id) wants every key
    starting with ``prefix`` (b"" = every key); ``replay``: it replays the journal first (the exchange marks
    where the live stream takes over, :data:`SEAM`); ``rejoin``: the tag of the :data:`CUT` it answers (it read
    the journal since, and comes back), 0 none.

    Raises:
        ProtocolError: the id is not 16 bytes or the prefix is longer than :data:`MAX_KEY`.
    """
    if len(prefix) > MAX_KEY:
        raise ProtocolError(f"prefix of {len(prefix)} bytes > {MAX_KEY}")
    flags = FLAG_REPLAY if replay or rejoin else 0
    return [CONTROL_TOPIC, pack_header(SUBSCRIBE, subscriber, 0, 0, flags=flags, epoch=rejoin), prefix]


def pack_beacon(beacon_id: bytes, count: int, exchange: str, floor: int, timestamp_ns: int) -> list[bytes]:
    """The frames (after the routing id) of an exchange's beacon, its ``count``-th: "your subscription to
    ``exchange`` is live". On a durable queue ``floor`` is an offset of the journal at or before every batch the
    exchange sends after it (-1: no journal, or not known yet): see :attr:`Header.floor`."""
    return [CONTROL_TOPIC, pack_header(BEACON, beacon_id, count, 0, key_prev=floor + 1, timestamp_ns=timestamp_ns),
            exchange.encode()]


def pack_cut(beacon_id: bytes, exchange: str, floor: int, tag: int) -> list[bytes]:
    """The frames (after the routing id) an exchange of a durable queue sends a subscriber it cut off: it sends
    it nothing more, and everything it did not send it is in the journal from offset ``floor``. The subscriber
    reads the journal and comes back with a subscription that names ``tag`` (:func:`pack_subscription`)."""
    return [CONTROL_TOPIC, pack_header(CUT, beacon_id, 0, 0, epoch=tag, key_prev=floor + 1), exchange.encode()]


def pack_delivery_mark(beacon_id: bytes, mark: int) -> list[bytes]:
    """The frames (after the routing id) of delivery mark ``mark`` (from 1, one more each time), which an exchange
    sends every subscriber after batches: its progress reports name the last one it took (:func:`pack_progress`),
    and so that it took everything the exchange sent it before."""
    return [CONTROL_TOPIC, pack_header(DELIVERY_MARK, beacon_id, mark, 0), b""]


def pack_seam(subscriber: bytes, exchange: str) -> list[bytes]:
    """The frames an exchange sends its journal when ``subscriber``'s subscription that asked to replay is live
    there: everything it sent the journal before comes before them."""
    return [CONTROL_TOPIC, pack_header(SEAM, subscriber, 0, 0), exchange.encode()[:256]]


def check_subscription(frames: list[bytes]) -> tuple[bytes, bytes]:
    """Check what a subscriber sent an exchange (the frames after its routing id); its id and prefix (whether it
    replays: :func:`replays`).

    Raises:
        BatchError: not three frames, not on the control topic, not a subscription, or a prefix over
            :data:`MAX_KEY`.
    """
    if len(frames) != 3:
        raise BatchError("bad subscription", f"{len(frames)} frames, expected 3")
    key, header, prefix = frames
    h = parse_header(header)
    if key != CONTROL_TOPIC or h.kind != SUBSCRIBE or h.count or h.first_seq:
        raise BatchError("bad subscription", f"key {key[:16]!r}, kind {h.kind}, count {h.count}")
    if len(prefix) > MAX_KEY:
        raise BatchError("bad subscription", f"prefix of {len(prefix)} bytes > {MAX_KEY}")
    return h.publisher, prefix


def pack_progress(subscriber: bytes, taken: int, mark: int = 0) -> list[bytes]:
    """The frames of a progress report: ``subscriber`` (its 16-byte id, as its subscription names it) handed its
    application batches since its last report, and read ``taken`` messages from this exchange's socket
    meanwhile (0: none came from it, but it still takes what it read before; more than 32 bits' worth counts
    as the most they hold); ``mark``: the last delivery mark it took from this exchange (0: none).

    Raises:
        ProtocolError: the id is not 16 bytes.
    """
    return [CONTROL_TOPIC, pack_header(PROGRESS, subscriber, mark, min(taken, 0xFFFFFFFF)), b""]


def progress_of(frames: list[bytes]) -> tuple[bytes, int, int] | None:
    """What a subscriber sent an exchange (the frames after its routing id), if it is a progress report
    (:func:`pack_progress`): its id, the batches it took and the last delivery mark it took; None if it is not
    one (a subscription, say).

    Raises:
        BatchError: a progress report of the wrong shape (not three frames, not on the control topic, a body, an
            epoch or a key_prev).
    """
    if len(frames) != 3 or len(frames[1]) != HEADER_SIZE or frames[1][_KIND_AT] != PROGRESS:
        return None
    key, header, body = frames
    h = parse_header(header)
    if key != CONTROL_TOPIC or body or h.epoch or h.key_prev:
        raise BatchError("bad progress", f"key {key[:16]!r}, body of {len(body)} bytes, epoch {h.epoch}")
    return h.publisher, h.count, h.first_seq


def replays(frames: list[bytes]) -> bool:
    """Whether a subscription (checked by :func:`check_subscription`) asks to replay the journal first."""
    return bool(parse_header(frames[1]).flags & FLAG_REPLAY)


def rejoins(frames: list[bytes]) -> int:
    """The tag of the cut a subscription (checked by :func:`check_subscription`) comes back from; 0 none."""
    return parse_header(frames[1]).epoch


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
    return _pack_ack(ACK_KIND, seq)


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


def encode_delivered(seq: int) -> bytes:
    """Encode "every subscriber that reads took your records up to ``seq``": the publisher may forget them (an
    acknowledgement only says the exchange handed them on).

    Raises:
        ProtocolError: ``seq`` does not fit in 64 bits.
    """
    return _pack_ack(DELIVERED_KIND, seq)


def _pack_ack(kind: int, seq: int) -> bytes:
    try:
        return ACK.pack(VERSION, kind, seq)
    except struct.error as exc:
        raise ProtocolError(f"cannot encode an acknowledgement of kind {kind}, seq {seq}: {exc}") from exc


def decode_delivered(frame: bytes) -> int | None:
    """The seq of a delivered frame (:func:`encode_delivered`); None if ``frame`` is of another kind (an
    acknowledgement, say).

    Raises:
        ProtocolError: a delivered frame of the wrong size or version.
    """
    if len(frame) < 2 or frame[_KIND_AT] != DELIVERED_KIND:
        return None
    if len(frame) != ACK.size:
        raise ProtocolError(f"delivered frame of {len(frame)} bytes, expected {ACK.size}")
    version, _, seq = ACK.unpack(frame)
    if version != VERSION:
        raise ProtocolError(f"delivered frame of protocol version {version}")
    return seq


def encode_relayed_ack(publisher: bytes, seq: int) -> bytes:
    """Encode the acknowledgement of a relayed publisher (:data:`FLAG_RELAYED`): its records up to ``seq``.

    Raises:
        ProtocolError: ``seq`` does not fit in 64 bits, or the id is not 16 bytes.
    """
    if len(publisher) != 16:
        raise ProtocolError(f"publisher id must be 16 bytes, got {len(publisher)}")
    try:
        return RELAYED_ACK.pack(VERSION, RELAYED_ACK_KIND, seq, publisher)
    except struct.error as exc:
        raise ProtocolError(f"cannot encode ack {seq}: {exc}") from exc


def decode_relayed_ack(frame: bytes) -> tuple[bytes, int]:
    """Decode the acknowledgement of a relayed publisher: (its id, its highest seq acknowledged).

    Raises:
        ProtocolError: not such an acknowledgement.
    """
    if len(frame) != RELAYED_ACK.size:
        raise ProtocolError(f"relayed ack of {len(frame)} bytes, expected {RELAYED_ACK.size}")
    version, kind, seq, publisher = RELAYED_ACK.unpack(frame)
    if version != VERSION or kind != RELAYED_ACK_KIND:
        raise ProtocolError(f"not a relayed ack (version {version}, kind {kind})")
    return publisher, seq


def encode_journal_ack(incarnation: int, acks: Sequence[tuple[bytes, int]], end: int = 0) -> bytes:
    """Encode a journal's acknowledgement to an exchange: each publisher's records up to its seq are journaled
    (on disk, or written to the kernel, as the queue's durability says) by the journal ``incarnation``, whose
    next record gets the offset ``end``.

    Raises:
        ProtocolError: more than :data:`MAX_JOURNAL_ACKS` publishers, or a field that does not fit.
    """
    if len(acks) > MAX_JOURNAL_ACKS:
        raise ProtocolError(f"{len(acks)} publishers in one journal acknowledgement > {MAX_JOURNAL_ACKS}")
    try:
        return JOURNAL_ACK.pack(VERSION, JOURNAL_ACK_KIND, len(acks), incarnation, end) + b"".join(
            JOURNAL_ACK_ENTRY.pack(p, s) for p, s in acks)
    except struct.error as exc:
        raise ProtocolError(f"cannot encode a journal acknowledgement: {exc}") from exc


def decode_journal_ack(frame: bytes) -> tuple[int, int, list[tuple[bytes, int]]]:
    """Decode a journal's acknowledgement: its incarnation, its end (the offset its next record gets) and
    (publisher, seq) pairs.

    Raises:
        ProtocolError: not a journal acknowledgement, or its length does not match its count.
    """
    if len(frame) < JOURNAL_ACK.size:
        raise ProtocolError(f"journal acknowledgement of {len(frame)} bytes")
    version, kind, count, incarnation, end = JOURNAL_ACK.unpack_from(frame)
    if version != VERSION or kind != JOURNAL_ACK_KIND:
        raise ProtocolError(f"not a journal acknowledgement (version {version}, kind {kind})")
    if len(frame) != JOURNAL_ACK.size + count * JOURNAL_ACK_ENTRY.size:
        raise ProtocolError(f"journal acknowledgement of {len(frame)} bytes for {count} publishers")
    return incarnation, end, list(JOURNAL_ACK_ENTRY.iter_unpack(frame[JOURNAL_ACK.size:]))
