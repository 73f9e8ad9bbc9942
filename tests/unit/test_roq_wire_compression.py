import os

import pytest
import zstandard

from roq.errors import ProtocolError
from roq.wire import batch, compression

PUB = bytes(range(16))
TEXT = [b'{"store": "store-%d", "sku": %d, "qty": 3, "note": "restock"}' % (i % 40, i) for i in range(200)]


def _batch(payloads: list[bytes], flags: int = 0) -> list[bytes]:
    header = batch.pack_header(batch.DATA, PUB, 7, len(payloads), epoch=3, timestamp_ns=5, flags=flags)
    return [b"orders.eu", header, batch.encode_body(payloads)]


def test_a_batch_compressed_and_inflated_is_the_batch_it_was():
    frames = _batch(TEXT, flags=batch.FLAG_RELAYED)
    squeezed = batch.compress(frames)
    assert len(squeezed[2]) * 4 < len(frames[2])
    h = batch.check_incoming(*squeezed, max_body=1 << 20)
    assert h.flags == batch.FLAG_RELAYED | batch.FLAG_COMPRESSED
    header, body, h = batch.inflate(*squeezed, max_body=1 << 20)
    assert [squeezed[0], header, body] == frames
    assert h.flags == batch.FLAG_RELAYED and batch.decode_body(body, h.count) == TEXT


def test_what_would_not_shrink_goes_as_it_is():
    tiny = _batch([b"x"])
    assert batch.compress(tiny) is tiny
    noise = _batch([os.urandom(4096)])
    assert batch.compress(noise) is noise
    marker = [batch.CONTROL_TOPIC, batch.pack_header(batch.MARKER, PUB, 9, 0), b""]
    assert batch.compress(marker) is marker


@pytest.mark.parametrize("body, why", [
    (b"not zstd at all", "not a compressed frame"),
    (zstandard.ZstdCompressor().compress(b"\x00" * 5000), "over 4096"),  # a bomb: says more than allowed
    (zstandard.ZstdCompressor(write_content_size=False).compress(b"ab" * 100), "does not say its size"),
    (compression.compress(batch.encode_body([b"a", b"b"]))[:-3], "does not decompress"),
    (compression.compress(b"ab"), "cannot hold 1 record lengths"),  # decompresses to no batch body
])
def test_a_compressed_batch_that_is_not_one_is_refused_by_name(body, why):
    header = batch.pack_header(batch.DATA, PUB, 7, 1, flags=batch.FLAG_COMPRESSED)
    with pytest.raises(batch.BatchError, match=why) as caught:
        batch.inflate(b"k", header, body, max_body=4096)
    assert caught.value.reason in ("bad compressed batch", "bad batch")


def test_frames_packed_come_back_whole_and_a_bad_pack_is_refused():
    frames = [b"", b"k" * 10, bytes(1000), b"\x00roq"]
    assert compression.unpack_frames(compression.pack_frames(frames), 1 << 20) == frames
    with pytest.raises(ProtocolError, match="where 2 are left"):
        compression.unpack_frames(compression.compress(b"\x09\x00\x00\x00ab"), 1 << 20)
    with pytest.raises(ProtocolError, match="inside a length"):
        compression.unpack_frames(compression.compress(b"\x01\x00"), 1 << 20)
    with pytest.raises(ProtocolError, match="over 100"):
        compression.unpack_frames(compression.pack_frames([bytes(200)]), 100)
