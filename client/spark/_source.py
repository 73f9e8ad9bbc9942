"""The ``roq`` data source of Spark (PySpark 4's Python data source API): a batch or a streaming read of a durable
queue's journal.

On the driver, when the query is planned, the options are checked and the journal found (every error there, at
query start, names what is wrong); the offsets from ``startingOffsets`` to ``endingOffsets`` are split into
``partitions`` ranges. Each Spark task reads one range from the journal's reads port, so several workers read
one queue at once.

A streaming read (``spark.readStream.format("roq")``) has the journal's offsets as its own: each micro-batch is
the range from where the last one ended to the journal's end then (what a reader is served: what a majority of a
replicated journal's replicas hold), and Spark's checkpoint keeps them, so a query started again from its
checkpoint goes on exactly where its last committed batch ended. A range of a journal's offsets always holds the
same records, so a batch read again after a failure is the same batch.
"""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter,
                                    DataSourceWriter, InputPartition)

from client.spark._journal import JournalReader, Piece, locate
from roq.errors import BrokerTimeoutError, ConfigError, ProtocolError
from client.spark._options import COLUMNS, SCHEMA, ReadOptions, parse_read, parse_write, split
from client.spark._sink import RoqStreamWriter, RoqWriter, check_schema, check_target

__all__ = ["RoqDataSource", "RoqStreamReader", "register", "read", "read_stream", "arrow_batch", "arrow_schema"]


class OffsetRange(InputPartition):
    """The records of one task: offsets ``start`` to ``end`` (excluded), from the journal at ``endpoint``
    ("": the reader's)."""

    def __init__(self, start: int, end: int, endpoint: str = "") -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end
        self.endpoint = endpoint


class RoqDataSource(DataSource):
    """``spark.read.format("roq")``: the records of a durable queue (see :data:`client.spark.OPTIONS`)."""

    @classmethod
    def name(cls) -> str:
        return "roq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return RoqReader(parse_read(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        if any(str(name).lower() == "endingoffsets" for name in self.options):
            raise ConfigError("roq data source: option 'endingOffsets' is for a batch read; a streaming read goes "
                              "on as the journal grows")
        return RoqStreamReader(parse_read(self.options))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return RoqWriter(self._write_options(schema, overwrite))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return RoqStreamWriter(self._write_options(schema, overwrite))

    def _write_options(self, schema: Any, overwrite: bool) -> Any:
        """The write's options, its rows' columns and its queue checked on the driver, at query start."""
        if overwrite:
            raise ConfigError("roq sink: a queue is published to, never overwritten (use mode 'append')")
        options = parse_write(self.options)
        check_schema(schema)
        check_target(options)
        return options


class RoqReader(DataSourceReader):
    """Found and split on the driver; each partition read in a task. It holds only what pickles (names and
    numbers): each task makes its own socket."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.endpoint = locate(options)
        with JournalReader(self.endpoint, options.credentials, options.fetch_bytes) as journal:
            first, end = journal.bounds()
            self.start = journal.offset(options.starting, first, end)
            self.end = journal.offset(options.ending, first, end)

    def partitions(self) -> list[InputPartition]:
        return [OffsetRange(a, b) for a, b in split(self.start, self.end, self.options.partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The partition's records, a fetch's worth at a time, as Arrow record batches: no Python object is made
        per record (the payloads are cut out of the batches' bodies by their length tables)."""
        assert isinstance(partition, OffsetRange)
        return _read(partition.endpoint or self.endpoint, self.options, partition)


def _read(endpoint: str, options: ReadOptions, partition: OffsetRange) -> Iterator[Any]:
    schema = arrow_schema()
    with JournalReader(endpoint, options.credentials, options.fetch_bytes) as journal:
        for pieces in journal.records(partition.start, partition.end, options.prefix):
            yield arrow_batch(pieces, schema)


class RoqStreamReader(DataSourceStreamReader):
    """``spark.readStream.format("roq")``: the journal's offsets are the stream's (``{"offset": n}``), kept in
    Spark's checkpoint. Planned on the driver (where the journal is found again when it moved: a new leader of a
    replicated journal, a journal started anew on another host), each range read in a task.

    Raises:
        ConfigError, NotFoundError, BrokerConnectionError, BrokerTimeoutError: as :class:`RoqReader`.
    """

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.endpoint = locate(options)
        first, end = self._bounds()
        with JournalReader(self.endpoint, options.credentials, options.fetch_bytes) as journal:
            self.start = journal.offset(options.starting, first, end)

    def _bounds(self) -> tuple[int, int]:
        """The journal's first offset and end; where it is found again when it did not answer where it was."""
        try:
            with JournalReader(self.endpoint, self.options.credentials, self.options.fetch_bytes) as journal:
                return journal.bounds()
        except BrokerTimeoutError:
            if self.options.journal:
                raise
        self.endpoint = locate(self.options)  # the journal moved (a new leader, another host)
        with JournalReader(self.endpoint, self.options.credentials, self.options.fetch_bytes) as journal:
            return journal.bounds()

    def initialOffset(self) -> dict:
        return {"offset": self.start}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """The journal's end now (never before ``start``); with a limit of rows (Spark's ``ReadMaxRows``), at most
        that many offsets past ``start``."""
        _, end = self._bounds()
        at = int(start["offset"]) if start else self.start
        most = getattr(limit, "maxRows", None)
        if most is not None:
            end = min(end, at + int(most))
        return {"offset": max(end, at)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [OffsetRange(a, b, self.endpoint)
                for a, b in split(int(start["offset"]), int(end["offset"]), self.options.partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, OffsetRange)
        return _read(partition.endpoint or self.endpoint, self.options, partition)

    def commit(self, end: dict) -> None:
        """Spark committed the batches up to ``end`` (its checkpoint holds it: nothing is kept in the journal)."""


def arrow_batch(pieces: list[Piece], schema: Any = None) -> Any:
    """The records of ``pieces`` as one Arrow record batch of ``schema`` (:func:`arrow_schema`'s, by default).

    Raises:
        ProtocolError: a body whose length table does not add up to it.
    """
    import numpy as np
    import pyarrow as pa

    n = sum(p.records for p in pieces)
    data: list[Any] = []
    starts: list[Any] = []
    base = 0
    for p in pieces:
        table = 4 * p.total
        if len(p.body) < table:
            raise ProtocolError(f"a batch of {p.total} records whose body of {len(p.body)} bytes does not hold them")
        lengths: Any = np.frombuffer(p.body, dtype="<u4", count=p.total)
        ends: Any = np.cumsum(lengths, dtype=np.int64)
        if int(ends[-1]) + table != len(p.body):
            raise ProtocolError(f"a batch of {p.total} records whose body of {len(p.body)} bytes does not hold them")
        first = int(ends[p.skip - 1]) if p.skip else 0
        last = int(ends[p.skip + p.records - 1])
        data.append(memoryview(p.body)[table + first:table + last])
        starts.append(ends[p.skip:p.skip + p.records] - lengths[p.skip:p.skip + p.records] - first + base)
        base += last - first
    payloads = np.concatenate([*starts, np.array([base], dtype=np.int64)])
    keys = _repeated([p.key for p in pieces], [p.records for p in pieces])
    publishers = _repeated([p.publisher.hex().encode() for p in pieces], [p.records for p in pieces])
    counts = np.array([p.records for p in pieces], dtype=np.int64)
    within = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)  # 0, 1... in each piece
    seqs = np.repeat(np.array([p.seq for p in pieces], dtype=np.int64), counts) + within
    offsets = np.repeat(np.array([p.offset for p in pieces], dtype=np.int64), counts) + within
    times: Any = np.repeat(np.array([p.time_us for p in pieces], dtype=np.int64), counts)
    return pa.RecordBatch.from_arrays([
        pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(keys[0]), pa.py_buffer(keys[1])]),
        pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(payloads.astype(np.int32)),
                                               pa.py_buffer(b"".join(data))]),
        pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(publishers[0]), pa.py_buffer(publishers[1])]),
        pa.array(seqs, pa.int64()), pa.array(offsets, pa.int64()),
        pa.array(times, pa.int64()).cast(pa.timestamp("us", tz="UTC"))], schema=schema or arrow_schema())


def arrow_schema() -> Any:
    """:data:`client.spark._options.COLUMNS` as an Arrow schema (timestamps in microseconds, UTC)."""
    import pyarrow as pa

    types = {"binary": pa.binary(), "string": pa.string(), "long": pa.int64(),
             "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS])


def _repeated(values: list[bytes], counts: list[int]) -> tuple[Any, bytes]:
    """A binary column of each value repeated its count of times: (int32 offsets, data)."""
    import numpy as np

    sizes: Any = np.repeat(np.array([len(v) for v in values], dtype=np.int64), counts)
    offsets = np.concatenate([np.array([0], dtype=np.int64), np.cumsum(sizes)]).astype(np.int32)
    return offsets, b"".join(v * c for v, c in zip(values, counts))


def register(spark: Any) -> None:
    """Make ``format("roq")`` known to the session ``spark``."""
    spark.dataSource.register(RoqDataSource)


def read(spark: Any, **options: Any) -> Any:
    """``spark.read.format("roq")`` with ``options`` (registered first), checked here before Spark plans it: a bad
    option, a queue that does not exist or is not durable is raised as is, not inside Spark's error.

    Raises:
        ConfigError, NotFoundError, BrokerConnectionError, BrokerTimeoutError: see :func:`parse_read` and
            :func:`client.spark._journal.locate`.
    """
    strings = {name: str(value) for name, value in options.items()}
    RoqReader(parse_read(strings))
    register(spark)
    return spark.read.format("roq").options(**strings).load()


def read_stream(spark: Any, **options: Any) -> Any:
    """``spark.readStream.format("roq")`` with ``options``, checked here first as :func:`read`'s."""
    strings = {name: str(value) for name, value in options.items()}
    RoqStreamReader(parse_read(strings))
    register(spark)
    return spark.readStream.format("roq").options(**strings).load()
