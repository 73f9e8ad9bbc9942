"""Bytes squeezed for a slow link between clusters (zstd, a library made for it), and taken back with a bound.

Only links compress (``python -m client.link --compress``): a batch's body on its way into the far cluster's
exchanges (:data:`roq.wire.batch.FLAG_COMPRESSED`, which the exchange takes off before anything else sees the
batch), and a journal's answer to a link's fetch (:attr:`roq.wire.control.Fetch.compressed`: the entries' frames
in one compressed frame). Whatever is taken back is bounded before it is allocated: a frame that says it holds
more than its reader allows, that is not zstd, or that does not hold what it says is refused
(:class:`~roq.errors.ProtocolError`), as any other malformed frame.
"""

from __future__ import annotations

import struct

import zstandard

from roq.errors import ProtocolError

__all__ = ["LEVEL", "compress", "decompress", "pack_frames", "unpack_frames"]

#: zstd's level: its fastest, about 450 MB/s a core here; a link that needs more squeeze than speed is rare
LEVEL = 1
_LENGTH = struct.Struct("<I")
_compressor = zstandard.ZstdCompressor(level=LEVEL)
_decompressor = zstandard.ZstdDecompressor()


def compress(data: bytes) -> bytes:
    """``data`` as one zstd frame that says its size."""
    return _compressor.compress(data)


def decompress(data: bytes, limit: int) -> bytes:
    """What :func:`compress` made of it.

    Raises:
        ProtocolError: not one zstd frame that says its size, a size over ``limit`` bytes, or not what it says.
    """
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise ProtocolError(f"not a compressed frame: {exc}") from None
    if size < 0:
        raise ProtocolError("a compressed frame that does not say its size")
    if size > limit:
        raise ProtocolError(f"a compressed frame of {size} bytes, over {limit}")
    try:
        out = _decompressor.decompress(data, max_output_size=limit)
    except zstandard.ZstdError as exc:
        raise ProtocolError(f"a compressed frame that does not decompress: {exc}") from None
    if len(out) != size:
        raise ProtocolError(f"a compressed frame of {len(out)} bytes that said {size}")
    return out


def pack_frames(frames: list[bytes]) -> bytes:
    """Several frames as one compressed frame (each behind its length, u32)."""
    parts: list[bytes] = []
    for frame in frames:
        parts += (_LENGTH.pack(len(frame)), frame)
    return compress(b"".join(parts))


def unpack_frames(data: bytes, limit: int) -> list[bytes]:
    """The frames :func:`pack_frames` packed.

    Raises:
        ProtocolError: see :func:`decompress`, or lengths that do not add up to what it holds.
    """
    blob = decompress(data, limit)
    view = memoryview(blob)
    frames: list[bytes] = []
    at, end = 0, len(blob)
    while at < end:
        if at + 4 > end:
            raise ProtocolError("packed frames end inside a length")
        (size,) = _LENGTH.unpack_from(blob, at)
        at += 4
        if at + size > end:
            raise ProtocolError(f"a packed frame of {size} bytes where {end - at} are left")
        frames.append(bytes(view[at:at + size]))
        at += size
    return frames
