"""The ``roq`` sink of Spark: a DataFrame's rows (``key``, ``payload``) published to a queue, from a batch write
(``df.write.format("roq")``) or a streaming query (``writeStream.format("roq")``).

Each Spark task is a publisher whose id derives from the write (``publisherSeed``, or a name made for the write on
the driver; for a streaming query its id and the micro-batch) and the task's partition. A task Spark runs again
(it failed, or its micro-batch is run again after the query was started from its checkpoint) is the same
publisher: it numbers its records from 1 again, and a durable queue's journal drops those it holds already
(:mod:`exchange.journal._sequencer`). So a durable queue receives each row once, if the rows of a partition come
in the same order each time (Spark's own guarantee for a deterministic query). A task returns once the queue
acknowledged every row it sent: its records are on disk (on a majority of the replicas) when the write commits.

A publisher's batch holds records of one key, so a task publishes the rows of each Arrow batch Spark hands it (ten
thousand rows, by default) grouped by key, each key's in their order: rows of keys that alternate would otherwise
go one per batch, and a journal takes batches, not records, a second.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from client.spark._options import WriteOptions
from roq.errors import BrokerTimeoutError, ConfigError, NotFoundError

__all__ = ["RoqWriter", "RoqStreamWriter", "check_schema", "check_target"]

def check_target(options: WriteOptions) -> None:
    """On the driver, before any task runs: the queue exists (and the client may ask of it).

    Raises:
        NotFoundError: no such queue. BrokerConnectionError, BrokerTimeoutError: the cluster cannot be reached.
        ForbiddenError: the credentials may not look the queue up, or may not publish to it.
    """
    from client._connection import connect
    from client._management import QueueManager

    credentials = options.credentials or None
    with QueueManager(options.zk, root=options.root, credentials=credentials) as qm:
        if not qm.exists(options.queue):
            raise NotFoundError(f"roq sink: no queue {options.queue!r} in the cluster at {options.zk}{options.root}")
        monitor = qm.lookup(options.queue)
    # a publisher's hello, once: one without the permission to publish is refused here, not in every task
    with connect(monitor, credentials=credentials, timeout=10.0) as conn:
        conn.publisher().close()


def check_schema(schema: Any) -> None:
    """Raises: ConfigError: ``schema`` (Spark's) has no ``key`` or no ``payload`` column of binary or string."""
    kinds = {field.name: field.dataType.typeName() for field in schema.fields}
    for column in ("key", "payload"):
        if kinds.get(column) not in ("binary", "string"):
            found = f"a {kinds[column]}" if column in kinds else "none"
            raise ConfigError(f"roq sink: the rows need a column {column!r} of binary or string, found {found} "
                              f"(columns: {', '.join(kinds) or 'none'})")


@dataclasses.dataclass(frozen=True)
class Sent(WriterCommitMessage):
    """What one task published: its partition and how many rows."""

    partition: int
    rows: int


def _publish(options: WriteOptions, seed: str, batches: Iterator[Any]) -> Sent:
    """Publish the rows of ``batches`` (Arrow record batches) as the publisher of ``seed`` and this task's
    partition; once the queue acknowledged all of them."""
    from pyspark import TaskContext

    import client

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    rows = 0
    with client.connect(zk=options.zk, queue=options.queue, root=options.root,
                        credentials=options.credentials or None) as conn:
        pub = conn.publisher(id_seed=f"{seed}:{partition}")
        for records in batches:
            by_key: dict[Any, list[bytes]] = {}  # a batch holds one key's records: a key's rows go together
            for key, payload in zip(records.column("key").to_pylist(), records.column("payload").to_pylist()):
                by_key.setdefault(key, []).append(payload if isinstance(payload, bytes) else str(payload).encode())
            for key, payloads in by_key.items():
                pub.send_many(key if isinstance(key, bytes) else str(key).encode(), payloads)
            rows += records.num_rows
        try:
            pub.flush(options.flush_timeout)
        except BrokerTimeoutError as exc:
            stats = pub.stats()
            raise BrokerTimeoutError(f"roq sink, partition {partition} (publisher {pub.name}): {exc}; sent "
                                     f"{stats['sent']}, acknowledged {stats['acked']}, through {stats['exchange']}")
        pub.close()
    return Sent(partition, rows)


class RoqWriter(DataSourceArrowWriter):
    """A batch write: every task a publisher of the write's seed (made here, on the driver, unless given)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.seed = options.seed or f"write-{uuid.uuid4()}"

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _publish(self.options, self.seed, iterator)


class RoqStreamWriter(DataSourceStreamArrowWriter):
    """A streaming write: every task of a micro-batch a publisher of the query's id (or the seed given) and the
    micro-batch's number, so a micro-batch run again after a restart from the checkpoint writes nothing twice."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        query = context.getLocalProperty("sql.streaming.queryId") if context is not None else None
        batch = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        if not batch:
            raise ConfigError("roq sink: a streaming task that does not know its micro-batch (Spark's local "
                              "property streaming.sql.batchId)")
        return _publish(self.options, f"{self.options.seed or query}:{batch}", iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task of the micro-batch returned: its rows are acknowledged by the queue already."""
