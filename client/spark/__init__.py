"""Spark reads and writes RoQ-Py queues: the data source and sink ``roq``.

::

    from client import spark as roq_spark
    df = roq_spark.read(spark, zk="127.0.0.1:2181", queue="orders", startingOffsets="earliest")
    # or, once registered (roq_spark.register(spark)): spark.read.format("roq").option("zk", ...)...load(),
    # spark.readStream.format("roq")..., df.write.format("roq")..., df.writeStream.format("roq")...

A batch or streaming read of a durable queue's journal, one Spark partition per range of offsets, with the columns
of :data:`SCHEMA` (the options are :data:`OPTIONS`); a write publishes rows (key, payload), each task a publisher a
task run again is the same as, so a durable queue takes each row once (:data:`WRITE_OPTIONS`). Needs PySpark 4 (its
Python data source API); importing this package imports PySpark, nothing else of the client library does.
"""

from client.spark._options import OPTIONS, SCHEMA, WRITE_OPTIONS, ReadOptions, WriteOptions, parse_read, parse_write
from client.spark._source import RoqDataSource, read, read_stream, register

__all__ = ["read", "read_stream", "register", "RoqDataSource", "SCHEMA", "OPTIONS", "ReadOptions", "parse_read", "WRITE_OPTIONS",
           "WriteOptions", "parse_write"]
