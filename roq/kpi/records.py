"""The records of the KPI archive: one shape per kind, shared by their writers and by the Spark schema.

Monitors write :class:`ExchangeRecord`, :class:`PublisherRecord`, :class:`SubscriberRecord` and
:class:`EventRecord`; host managers write :class:`HostRecord` (through
:meth:`roq.kpi.archive.ArchiveWriter.append`, which adds ``kind`` and ``time``). The Spark jobs read the
archive with the schema :func:`columns` derives from the same classes, so a field added here is written and
read alike.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar

__all__ = ["Record", "ExchangeRecord", "PublisherRecord", "SubscriberRecord", "HostRecord", "EventRecord",
           "RECORDS", "KINDS", "columns"]


class Record:
    """Base of the archive's records; ``KIND`` names the kind in the archive's lines."""

    KIND: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # every kind of record is a dataclass


@dataclasses.dataclass(frozen=True)
class ExchangeRecord(Record):
    """An exchange's KPI period, as its monitor received it."""

    KIND: ClassVar[str] = "exchange"
    exchange: str
    host: str
    period: float
    records_in: int
    bytes_in: int
    records_out: int
    bytes_out: int
    publishers: int
    cpu_percent: float
    rss_bytes: int
    busy: float
    dropped: int


@dataclasses.dataclass(frozen=True)
class PublisherRecord(Record):
    """One publisher's share of an exchange's KPI period."""

    KIND: ClassVar[str] = "publisher"
    publisher: str
    exchange: str
    host: str
    period: float
    records: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class SubscriberRecord(Record):
    """A subscriber's period, from its hello: records delivered, latency, and its counters since it started."""

    KIND: ClassVar[str] = "subscriber"
    subscriber: str
    prefix: str
    period: float
    records: int
    latency_p50_ms: float
    latency_p99_ms: float
    gaps: int
    lost: int
    duplicates: int


@dataclasses.dataclass(frozen=True)
class HostRecord(Record):
    """A host's KPI period, as its host manager measured it."""

    KIND: ClassVar[str] = "host"
    host: str
    cpu_percent_now: float  # this period's
    cpu_percent: float  # the mean the host reports for placement
    memory_percent: float
    net_bytes_per_s: float
    cpus: float = 0.0  # the CPU budget (cores) the percentages are of; 0 = unknown (older archives)
    link_bytes_per_s: float = 0.0  # the rate of the host's link; 0 = unknown or not limited


@dataclasses.dataclass(frozen=True)
class EventRecord(Record):
    """A topology event of a queue (relocation, scale-out...); ``fields`` holds its kind's own numbers."""

    KIND: ClassVar[str] = "event"
    event: str
    text: str
    exchange: str | None = None
    publisher: str | None = None
    reason: str | None = None
    fields: dict = dataclasses.field(default_factory=dict)


RECORDS: tuple[type[Record], ...] = (ExchangeRecord, PublisherRecord, SubscriberRecord, HostRecord, EventRecord)
KINDS: tuple[str, ...] = tuple(r.KIND for r in RECORDS)

_COLUMN_TYPES = {str: "string", float: "double", int: "long"}


def columns() -> tuple[tuple[str, str], ...]:
    """Every column a record may have, with its Spark type (``string``, ``double``, ``long``): ``kind`` and
    ``time``, then the fields of every record kind in order (a name shared by kinds has one type). Document
    fields (an event's ``fields``) stay in the JSON only."""
    out: dict[str, str] = {"kind": "string", "time": "double"}
    for record in RECORDS:
        hints = typing.get_type_hints(record)
        for f in dataclasses.fields(record):
            hint: Any = hints[f.name]
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            kind = _COLUMN_TYPES.get(args[0] if args else hint)
            if kind is None:
                continue
            if out.setdefault(f.name, kind) != kind:
                raise TypeError(f"column {f.name!r} is {out[f.name]} in one record and {kind} in {record.__name__}")
    return tuple(out.items())
