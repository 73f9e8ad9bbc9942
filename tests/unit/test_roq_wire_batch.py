import struct

import pytest

from roq.wire import batch
from roq.errors import ProtocolError, RoQError

PUB = bytes(range(16))


def test_header_round_trip():
    frame = batch.pack_header(batch.DATA, PUB, 42, 3, epoch=7, key_prev=40, timestamp_ns=123456789)
    assert len(frame) == batch.HEADER_SIZE
    h = batch.parse_header(frame)
    assert (h.kind, h.publisher, h.first_seq, h.count, h.epoch, h.key_prev, h.timestamp_ns) == (
        batch.DATA, PUB, 42, 3, 7, 40, 123456789)
    assert h.last_seq == 44


@pytest.mark.parametrize(
    "frame, message",
    [
        (b"", "0 bytes, expected"),
        (b"\x01" * (batch.HEADER_SIZE - 1), "expected"),
        (batch.HEADER.pack(9, batch.DATA, 0, 1, PUB, 0, 1, 0, 0), "version 9"),
        (batch.HEADER.pack(1, 77, 0, 1, PUB, 0, 1, 0, 0), "unknown frame kind 77"),
        (batch.HEADER.pack(1, batch.DATA, 0, 0, PUB, 0, 1, 0, 0), "count 0"),
        (batch.HEADER.pack(1, batch.DATA, 0, 2, PUB, 0, 0, 0, 0), "first seq 0"),
    ],
)
def test_bad_headers_are_rejected_with_a_reason(frame, message):
    with pytest.raises(ProtocolError, match=message):
        batch.parse_header(frame)


def test_header_fields_out_of_range():
    with pytest.raises(ProtocolError):
        batch.pack_header(batch.DATA, PUB, -1, 1)
    with pytest.raises(ProtocolError):
        batch.pack_header(batch.DATA, b"short", 1, 1)


def test_body_round_trip_including_empty_records():
    payloads = [b"a", b"", b"x" * 1000, bytes(range(256))]
    body = batch.encode_body(payloads)
    assert body[:16] == struct.pack("<4I", 1, 0, 1000, 256)
    assert batch.decode_body(body, len(payloads)) == payloads


@pytest.mark.parametrize(
    "body, count",
    [
        (b"", 1),  # no room for the length table
        (struct.pack("<I", 5) + b"abc", 1),  # length says 5, 3 bytes follow
        (struct.pack("<I", 1) + b"ab", 1),  # trailing garbage
        (struct.pack("<2I", 1, 1) + b"a", 2),
    ],
)
def test_bad_bodies_are_rejected(body, count):
    with pytest.raises(ProtocolError):
        batch.decode_body(body, count)


def test_ack_round_trip_and_garbage():
    assert batch.decode_ack(batch.encode_ack(2**40)) == 2**40
    for junk in (b"", b"\x01\x04", batch.HEADER.pack(1, 1, 0, 1, PUB, 0, 1, 0, 0)[:10]):
        with pytest.raises(ProtocolError):
            batch.decode_ack(junk)
    assert issubclass(ProtocolError, RoQError)


def test_a_relayed_publishers_ack_names_it_and_is_not_taken_for_another_kind():
    frame = batch.encode_relayed_ack(PUB, 2**40)
    assert batch.decode_relayed_ack(frame) == (PUB, 2**40)
    for junk in (b"", batch.encode_ack(3), frame[:-1], b"\x01\x04" + frame[2:]):
        with pytest.raises(ProtocolError):
            batch.decode_relayed_ack(junk)
    with pytest.raises(ProtocolError):
        batch.decode_ack(frame)
    with pytest.raises(ProtocolError):
        batch.encode_relayed_ack(b"short", 1)


def test_the_header_check_takes_any_bytes_and_lets_through_only_what_holds_its_invariants():
    """Fuzzed: random frames, and valid headers with random fields; either a header whose every invariant
    holds comes back, or a BatchError with a reason: never another exception."""
    import random

    rng = random.Random(20261123)
    kinds = (batch.DATA, batch.MARKER, batch.BEACON, 0, 4, 255)
    accepted = refused = 0
    for i in range(20_000):
        if i % 3 == 0:
            frame = rng.randbytes(rng.choice((0, 1, batch.HEADER_SIZE - 1, batch.HEADER_SIZE, batch.HEADER_SIZE + 1, 200)))
        else:
            frame = batch.HEADER.pack(
                rng.choice((batch.VERSION, batch.VERSION, 0, 2, 255)), rng.choice(kinds),
                rng.getrandbits(16) & ~(batch.FLAG_COMPRESSED if i % 4 else 0),  # (a compressed one: a quarter)
                rng.choice((0, 1, 2, rng.getrandbits(32))), rng.randbytes(16), rng.getrandbits(32),
                rng.choice((0, 1, 2**64 - 1, rng.getrandbits(64))), rng.getrandbits(64), rng.getrandbits(63))
        key = rng.choice((b"k", batch.CONTROL_TOPIC, b"x" * (batch.MAX_KEY + 1)))
        body = rng.choice((b"", batch.encode_body([b"a", b"bc"]), rng.randbytes(rng.randrange(0, 64))))
        try:
            h = batch.check_incoming(key, frame, body, 1 << 20)
        except batch.BatchError as exc:
            assert exc.reason in ("bad header", "bad batch", "bad marker", "oversized batch", "oversized key")
            refused += 1
            continue
        if h.flags & batch.FLAG_COMPRESSED:  # the exchange takes it back first, and checks what it was
            try:
                _header, body, h = batch.inflate(key, frame, body, 1 << 20)
            except batch.BatchError as exc:
                assert exc.reason in ("bad compressed batch", "bad batch")
                refused += 1
                continue
            assert not h.flags & batch.FLAG_COMPRESSED
        accepted += 1
        assert h.version == batch.VERSION and h.kind in (batch.DATA, batch.MARKER)
        if h.kind == batch.DATA:
            assert h.count >= 1 and h.first_seq >= 1 and h.last_seq < batch.SEQ_LIMIT and len(body) >= 4 * h.count
            assert len(key) <= batch.MAX_KEY
        else:
            assert key == batch.CONTROL_TOPIC and not body and h.count == 0 and h.first_seq >= 1
    assert accepted > 100 and refused > 10_000


def test_a_journal_acknowledgement_carries_the_journal_end_and_garbage_is_refused():
    frame = batch.encode_journal_ack(7, [(PUB, 41), (bytes(16), 3)], 1_000_000)
    assert batch.decode_journal_ack(frame) == (7, 1_000_000, [(PUB, 41), (bytes(16), 3)])
    for bad in (frame[:-1], b"\x01\x06" + frame[2:3], b"garbage"):
        with pytest.raises(ProtocolError):
            batch.decode_journal_ack(bad)


def test_beacons_and_cuts_carry_a_journal_offset_and_a_subscription_may_name_the_cut_it_comes_back_from():
    beacon = batch.parse_header(batch.pack_beacon(PUB, 3, "x1", 42, 5)[1])
    assert (beacon.kind, beacon.first_seq, beacon.floor) == (batch.BEACON, 3, 42)
    assert batch.parse_header(batch.pack_beacon(PUB, 3, "x1", -1, 5)[1]).floor == -1  # no journal
    topic, header, body = batch.pack_cut(PUB, "x1", 0, 0xFFFFFFFF)
    cut = batch.parse_header(header)
    assert (topic, body, cut.kind, cut.epoch, cut.floor) == (batch.CONTROL_TOPIC, b"x1", batch.CUT,
                                                                         0xFFFFFFFF, 0)
    plain = batch.pack_subscription(PUB, b"k")
    back = batch.pack_subscription(PUB, b"k", rejoin=9)
    assert batch.check_subscription(back) == batch.check_subscription(plain) == (PUB, b"k")
    assert (batch.rejoins(plain), batch.replays(plain)) == (0, False)
    assert (batch.rejoins(back), batch.replays(back)) == (9, True)  # coming back marks a seam
    with pytest.raises(batch.BatchError, match="not accepted from publishers"):
        batch.check_incoming(batch.CONTROL_TOPIC, header, body, 1 << 20)


def test_a_delivery_mark_and_a_delivered_frame_round_trip():
    frames = batch.pack_delivery_mark(PUB, 42)
    h = batch.parse_header(frames[1])
    assert frames[0] == batch.CONTROL_TOPIC and h.kind == batch.DELIVERY_MARK and h.first_seq == 42
    assert batch.decode_delivered(batch.encode_delivered(2**40)) == 2**40
    assert batch.decode_delivered(batch.encode_ack(5)) is None  # an acknowledgement is another kind
    with pytest.raises(ProtocolError):
        batch.decode_delivered(batch.encode_delivered(5) + b"x")
    with pytest.raises(ProtocolError):
        batch.decode_delivered(b"\x09" + batch.encode_delivered(5)[1:])
    with pytest.raises(batch.BatchError, match="not accepted from publishers"):
        batch.check_incoming(frames[0], frames[1], b"", 1 << 20)  # a publisher cannot send one


def test_a_progress_report_is_told_apart_from_a_subscription_and_checked_on_decode():
    report = batch.pack_progress(PUB, 16)
    assert batch.progress_of(report) == (PUB, 16, 0)
    assert batch.progress_of(batch.pack_progress(PUB, 0)) == (PUB, 0, 0)  # still taking what it read before
    assert batch.progress_of(batch.pack_progress(PUB, 3, mark=7)) == (PUB, 3, 7)  # and the last delivery mark taken
    assert batch.progress_of(batch.pack_progress(PUB, 1 << 40))[1] == 0xFFFFFFFF  # saturates, never fails
    subscription = batch.pack_subscription(PUB, b"k")
    assert batch.progress_of(subscription) is None  # a subscription goes on to check_subscription
    assert batch.progress_of([b"x"]) is None and batch.progress_of([b"", b"", b""]) is None
    with pytest.raises(batch.BatchError, match="bad subscription"):
        batch.check_subscription(report)  # and a report is never taken for one
    topic, header, _ = report
    for bad in ([b"load", header, b""], [topic, header, b"prefix"],
                [topic, batch.pack_header(batch.PROGRESS, PUB, 5, 1, epoch=2), b""]):
        with pytest.raises(batch.BatchError, match="bad progress"):
            batch.progress_of(bad)
    with pytest.raises(batch.BatchError, match="bad header"):
        batch.progress_of([topic, b"\x09" + header[1:], b""])  # a progress report of another version
    with pytest.raises(batch.BatchError, match="not accepted from publishers"):
        batch.check_incoming(topic, header, b"", 1 << 20)
    with pytest.raises(ProtocolError):
        batch.pack_progress(b"short", 1)
