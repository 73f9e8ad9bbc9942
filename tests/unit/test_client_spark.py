"""The roq data source's pure parts: its options, the split of a journal's offsets, records as Arrow columns."""

from __future__ import annotations

import datetime

import pytest

from client.spark._options import ReadOptions, parse_read, split
from roq.errors import ConfigError


def test_the_defaults_and_every_option_read():
    assert parse_read({"zk": "127.0.0.1:2181", "queue": "q"}) == ReadOptions(zk="127.0.0.1:2181", queue="q")
    opts = parse_read({"journal": "tcp://127.0.0.1:5000", "prefix": "a.", "startingOffsets": "120",
                       "endingOffsets": "2026-11-28T15:00:00+00:00", "partitions": "8", "fetchBytes": "65536",
                       "credentials": "/keys"})
    assert (opts.journal, opts.prefix, opts.starting, opts.partitions, opts.fetch_bytes, opts.credentials) == (
        "tcp://127.0.0.1:5000", b"a.", 120, 8, 65536, "/keys")
    assert opts.ending == datetime.datetime(2026, 11, 28, 15, tzinfo=datetime.timezone.utc).timestamp()


def test_names_spark_lower_cased_are_known():
    opts = parse_read({"zk": "h:1", "queue": "q", "startingoffsets": "latest", "fetchbytes": "2048"})
    assert (opts.starting, opts.fetch_bytes) == ("latest", 2048)


@pytest.mark.parametrize("options, named", [
    ({"zk": "h:1", "queue": "q", "bogus": "1"}, "'bogus'"),
    ({"zk": "h:1", "queue": "q", "partitions": "four"}, "'partitions'"),
    ({"zk": "h:1", "queue": "q", "partitions": "0"}, "'partitions'"),
    ({"zk": "h:1", "queue": "q", "fetchBytes": "10"}, "'fetchBytes'"),
    ({"zk": "h:1", "queue": "q", "fetchBytes": str(32 << 20)}, "'fetchBytes'"),  # more than a journal serves
    ({"zk": "h:1", "queue": "q", "startingOffsets": "yesterday"}, "'startingOffsets'"),
    ({"zk": "h:1", "queue": "q", "endingOffsets": "2026-11-28T15:00:00"}, "without a zone"),
    ({"zk": "h:1", "queue": "q", "prefix": "x" * 70_000}, "'prefix'"),
    ({"zk": "h:1"}, "'queue'"),
    ({}, "required"),
    ({"journal": "tcp://127.0.0.1:1", "queue": "q"}, "not both"),
])
def test_a_bad_option_is_an_error_that_names_it(options, named):
    with pytest.raises(ConfigError, match=named):
        parse_read(options)


def test_the_split_covers_the_range_once_in_adjacent_parts_of_about_one_size():
    parts = split(10, 1_000_013, 4)
    assert parts[0][0] == 10 and parts[-1][1] == 1_000_013
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
    sizes = [b - a for a, b in parts]
    assert max(sizes) - min(sizes) <= 1 and len(parts) == 4


def test_a_small_or_empty_range_is_split_in_fewer_parts_or_none():
    assert split(5, 7, 4) == [(5, 6), (6, 7)]
    assert split(7, 7, 4) == [] and split(9, 7, 4) == []


def test_records_become_arrow_columns_cut_out_of_the_batch_bodies():
    from client.spark._journal import Piece
    from client.spark._source import arrow_batch
    from roq.errors import ProtocolError
    from roq.wire import batch

    first = [b"p%d" % i * (i + 1) for i in range(6)]  # payloads of different lengths
    second = [b"", b"x", b"yz"]
    pieces = [Piece(b"k.1", batch.encode_body(first), 6, 2, 3, b"\x01" * 16, 12, 1000, 1_700_000_000_000_000),
              Piece(b"key.2", batch.encode_body(second), 3, 0, 3, b"\x02" * 16, 1, 1005, 1_700_000_000_000_001)]
    table = arrow_batch(pieces).to_pydict()
    assert table["payload"] == first[2:5] + second
    assert table["key"] == [b"k.1"] * 3 + [b"key.2"] * 3
    assert table["publisher"] == ["01" * 16] * 3 + ["02" * 16] * 3
    assert table["seq"] == [12, 13, 14, 1, 2, 3] and table["offset"] == [1000, 1001, 1002, 1005, 1006, 1007]
    assert table["timestamp"][0].timestamp() == 1_700_000_000.0
    torn = Piece(b"k", batch.encode_body(first)[:-1], 6, 0, 6, b"\x01" * 16, 1, 0, 0)
    with pytest.raises(ProtocolError, match="does not hold them"):
        arrow_batch([torn])


def test_a_writes_options_are_read_and_a_bad_one_named():
    from client.spark._options import WriteOptions, parse_write

    assert parse_write({"zk": "h:1", "queue": "q"}) == WriteOptions(zk="h:1", queue="q")
    opts = parse_write({"zk": "h:1", "queue": "q", "publisherseed": "nightly", "flushTimeout": "30"})
    assert (opts.seed, opts.flush_timeout) == ("nightly", 30.0)
    for options, named in (({"zk": "h:1"}, "'queue'"), ({"zk": "h:1", "queue": "q", "partitions": "2"}, "'partitions'"),
                           ({"zk": "h:1", "queue": "q", "flushTimeout": "-1"}, "'flushTimeout'"),
                           ({"zk": "h:1", "queue": "q", "publisherSeed": "x" * 300}, "'publisherSeed'")):
        with pytest.raises(ConfigError, match=named):
            parse_write(options)


def test_a_write_needs_a_key_and_a_payload_column_of_bytes_or_text():
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    from client.spark._sink import check_schema

    check_schema(StructType([StructField("key", StringType()), StructField("payload", BinaryType()),
                             StructField("other", LongType())]))
    with pytest.raises(ConfigError, match="'payload' of binary or string, found a long"):
        check_schema(StructType([StructField("key", StringType()), StructField("payload", LongType())]))
    with pytest.raises(ConfigError, match="'key' of binary or string, found none"):
        check_schema(StructType([StructField("payload", BinaryType())]))


def test_a_seeded_publisher_id_is_the_same_each_time_and_owned_by_its_key_under_curve():
    from roq.security.zap import TAG_BYTES, identity_for, owns, seeded_id

    assert seeded_id(b"w:1") == seeded_id(b"w:1") != seeded_id(b"w:2") and len(seeded_id(b"w:1")) == 16
    key = bytes(range(32))
    a, b = identity_for(key, b"w:1"), identity_for(key, b"w:1")
    assert a == b and owns(key, a) and a[TAG_BYTES:] == seeded_id(b"w:1")[:16 - TAG_BYTES]
    assert identity_for(key) != identity_for(key) and owns(key, identity_for(key))
