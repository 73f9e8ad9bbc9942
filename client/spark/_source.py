"""The ``roq`` data source of Spark (PySpark 4's Python data source API): a batch read of a durable queue's journal.

On the driver, when the query is planned, the options are checked and the journal found (every error there, at
query start, names what is wrong); the offsets from ``startingOffsets`` to ``endingOffsets`` are split into
``partitions`` ranges. Each Spark task reads one range from the journal's reads port, so several workers read
one queue at once.
"""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from client.spark._journal import JournalReader, locate
from client.spark._options import SCHEMA, ReadOptions, parse_read, split

__all__ = ["RoqDataSource", "register", "read"]


class OffsetRange(InputPartition):
    """The records of one task: offsets ``start`` to ``end`` (excluded)."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


class RoqDataSource(DataSource):
    """``spark.read.format("roq")``: the records of a durable queue (see :data:`client.spark.OPTIONS`)."""

    @classmethod
    def name(cls) -> str:
        return "roq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return RoqReader(parse_read(self.options))


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
        """The partition's records, a fetch's worth at a time, as Arrow record batches (no Python object per
        record crosses to Spark)."""
        import pyarrow as pa

        assert isinstance(partition, OffsetRange)
        options = self.options
        schema = _arrow_schema()
        with JournalReader(self.endpoint, options.credentials, options.fetch_bytes) as journal:
            for c in journal.records(partition.start, partition.end, options.prefix):
                yield pa.RecordBatch.from_arrays([
                    pa.array(c.keys, pa.binary()), pa.array(c.payloads, pa.binary()),
                    pa.array(c.publishers, pa.string()), pa.array(c.seqs, pa.int64()),
                    pa.array(c.offsets, pa.int64()), pa.array(c.times, pa.timestamp("us", tz="UTC"))], schema=schema)


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("key", pa.binary()), ("payload", pa.binary()), ("publisher", pa.string()),
                      ("seq", pa.int64()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC"))])


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
