"""The roq data source's options and the split of a journal's offsets (pure: no Spark, no socket)."""

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
