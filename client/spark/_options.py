"""What a Spark query asks of the ``roq`` data source, checked (pure): its options (a read's and a write's), and the
split of a journal's offsets into the query's partitions.

Every option is a string, as Spark passes them; a name Spark lower-cased is matched all the same. A bad one is a
:class:`~roq.errors.ConfigError` naming the option, raised on the driver when the query is planned.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Mapping, Union

from roq import defaults
from roq.errors import ConfigError
from roq.wire import batch, control

__all__ = ["COLUMNS", "SCHEMA", "ReadOptions", "Position", "parse_read", "split", "OPTIONS", "WriteOptions",
           "parse_write", "WRITE_OPTIONS"]

#: The columns of a read, with their Spark types: each record's key and payload, the publisher (its id, hex) and
#: its seq, the journal's offset of the record, and the publisher's time of its batch.
COLUMNS = (("key", "binary"), ("payload", "binary"), ("publisher", "string"), ("seq", "long"), ("offset", "long"),
           ("timestamp", "timestamp"))
#: :data:`COLUMNS` as Spark's DDL.
SCHEMA = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)

#: Where a read begins or ends: "earliest", "latest", an offset, or a time (seconds since the epoch).
Position = Union[str, int, float]

#: Each option, and what it says (``--help`` of the connector, and its errors).
OPTIONS = {
    "zk": "ZooKeeper servers of the cluster (host:port,...): the queue's journal is found through its GCM",
    "root": f"the cluster's ZooKeeper root (default {defaults.ROOT})",
    "queue": "the durable queue to read (with zk)",
    "journal": "or: a journal's reads endpoint (tcp://host:port), read directly",
    "credentials": "the client's credentials directory, for a cluster with CURVE (on every worker too)",
    "prefix": "read only the records whose key starts with this (default: all)",
    "startingOffsets": "earliest (default), latest, an offset, or an ISO 8601 time with its zone",
    "endingOffsets": "latest (default: the journal's end when the query is planned), an offset, or a time",
    "partitions": "how many ranges of offsets the read is split into, read in parallel (default 4)",
    "fetchBytes": "what one fetch asks the journal for, bytes (default 4 MiB, at most 16 MiB)",
}
MAX_PARTITIONS = 10_000


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """A read's options, checked."""

    zk: str = ""
    root: str = defaults.ROOT
    queue: str = ""
    journal: str = ""
    credentials: str = ""
    prefix: bytes = b""
    starting: Position = "earliest"
    ending: Position = "latest"
    partitions: int = 4
    fetch_bytes: int = 4 << 20


def parse_read(options: Mapping[str, str]) -> ReadOptions:
    """The options of ``spark.read.format("roq")``, checked.

    Raises:
        ConfigError: an unknown option, a value of the wrong kind, neither ``zk`` and ``queue`` nor ``journal``.
    """
    values = _named(options, OPTIONS, "roq data source")
    zk, queue, journal = values.get("zk", ""), values.get("queue", ""), values.get("journal", "")
    if journal and (zk or queue):
        raise ConfigError("roq data source: give either option 'journal' or options 'zk' and 'queue', not both")
    if not journal and not (zk and queue):
        raise ConfigError("roq data source: options 'zk' and 'queue' (or 'journal') are required")
    prefix = values.get("prefix", "").encode()
    if len(prefix) > batch.MAX_KEY:
        raise ConfigError(f"roq data source: option 'prefix' is {len(prefix)} bytes, at most {batch.MAX_KEY}")
    return ReadOptions(
        zk=zk, root=values.get("root", defaults.ROOT), queue=queue, journal=journal,
        credentials=values.get("credentials", ""), prefix=prefix,
        starting=_position("startingOffsets", values.get("startingOffsets", "earliest")),
        ending=_position("endingOffsets", values.get("endingOffsets", "latest")),
        partitions=_count("partitions", values.get("partitions", "4"), 1, MAX_PARTITIONS),
        fetch_bytes=_count("fetchBytes", values.get("fetchBytes", str(4 << 20)), 1024, control.MAX_FETCH_BYTES))


#: Each option of a write, and what it says.
WRITE_OPTIONS = {
    "zk": "ZooKeeper servers of the cluster (host:port,...)",
    "root": f"the cluster's ZooKeeper root (default {defaults.ROOT})",
    "queue": "the queue to publish to (durable, for each row to be kept once)",
    "credentials": "the client's credentials directory, for a cluster with CURVE (on every worker too)",
    "publisherSeed": "what the tasks' publisher ids derive from, with their partition: the same write run again "
                     "with the same seed and the same rows publishes nothing twice (default: one per write; a "
                     "streaming query's id)",
    "flushTimeout": "seconds a task waits for the queue to acknowledge its rows (default 120)",
}


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """A write's options, checked."""

    zk: str
    queue: str
    root: str = defaults.ROOT
    credentials: str = ""
    seed: str = ""
    flush_timeout: float = 120.0


def parse_write(options: Mapping[str, str]) -> WriteOptions:
    """The options of ``df.write.format("roq")``, checked.

    Raises:
        ConfigError: an unknown option, a value of the wrong kind, no ``zk`` or no ``queue``.
    """
    values = _named(options, WRITE_OPTIONS, "roq sink")
    if not values.get("zk") or not values.get("queue"):
        raise ConfigError("roq sink: options 'zk' and 'queue' are required")
    try:
        timeout = float(values.get("flushTimeout", "120"))
    except ValueError:
        raise ConfigError(f"roq sink: option 'flushTimeout' is {values['flushTimeout']!r}: a number of seconds is "
                          "wanted") from None
    if not 0 < timeout <= 86_400:
        raise ConfigError(f"roq sink: option 'flushTimeout' is {timeout:g}: from more than 0 to 86400 seconds")
    seed = values.get("publisherSeed", "")
    if len(seed) > 256:
        raise ConfigError(f"roq sink: option 'publisherSeed' is {len(seed)} characters, at most 256")
    return WriteOptions(zk=values["zk"], queue=values["queue"], root=values.get("root", defaults.ROOT),
                        credentials=values.get("credentials", ""), seed=seed, flush_timeout=timeout)


def _named(options: Mapping[str, str], known: Mapping[str, str], what: str) -> dict[str, str]:
    """``options`` by their names in ``known`` (matched whatever their case: Spark lower-cases them), as strings.

    Raises:
        ConfigError: a name ``known`` does not have.
    """
    by_lower = {name.lower(): name for name in known}
    values: dict[str, str] = {}
    for name, value in options.items():
        found = by_lower.get(str(name).lower())
        if found is None:
            raise ConfigError(f"{what}: unknown option {name!r} (known: {', '.join(known)})")
        values[found] = str(value)
    return values


def _position(name: str, value: str) -> Position:
    text = value.strip()
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"roq data source: option {name!r} is {value!r}: earliest, latest, an offset (a whole "
                          "number) or an ISO 8601 time with its zone (2026-11-28T15:00:00+00:00)") from None
    if when.tzinfo is None:
        raise ConfigError(f"roq data source: option {name!r} is the time {value!r} without a zone: add one "
                          "(+00:00 for UTC)")
    return when.timestamp()


def _count(name: str, value: str, low: int, high: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"roq data source: option {name!r} is {value!r}: a whole number is wanted") from None
    if not low <= number <= high:
        raise ConfigError(f"roq data source: option {name!r} is {number}: from {low} to {high}")
    return number


def split(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``[start, end)`` in at most ``parts`` ranges of offsets, adjacent, of about one size (none when empty).
    A journal's offsets jump where an epoch or a generation begins: a range across a jump holds fewer records."""
    if end <= start:
        return []
    parts = min(parts, end - start)
    step, extra = divmod(end - start, parts)
    out, at = [], start
    for i in range(parts):
        width = step + (1 if i < extra else 0)
        out.append((at, at + width))
        at += width
    return out
