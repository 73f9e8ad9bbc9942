"""Records per key and minute of a durable queue, written back to another queue: Spark reads RoQ-Py and writes it.

    python docs/examples/spark_per_minute.py --zk 127.0.0.1:2181 --source orders --target orders-per-minute

Reads every record of the durable queue ``--source`` through the ``roq`` data source, counts them and sums their
payloads' bytes per key and minute, prints the table, and publishes one record per (minute, key) to ``--target``
(key: the source's key; payload: ``minute count bytes``, as text). The target queue must exist; if it is durable,
the write is exactly once even when Spark runs a task again (``--seed`` makes a rerun of the same job write nothing
twice). ``--master`` is any Spark master: ``local[2]`` (default), or ``spark://127.0.0.1:7077`` from ``roq spark up``.
"""

from __future__ import annotations

import argparse

from pyspark.sql import functions as F

from client import spark as roq_spark
from roqcli.kpi import job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zk", default="127.0.0.1:2181", help="the cluster's ZooKeeper servers")
    parser.add_argument("--root", default="/roq", help="the cluster's ZooKeeper root")
    parser.add_argument("--source", required=True, help="the durable queue read")
    parser.add_argument("--target", required=True, help="the queue the counts are published to")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--seed", default="", help="publisherSeed of the write (a rerun writes nothing twice)")
    args = parser.parse_args()

    spark = job.spark_session(args.master, app="roq-per-minute")
    try:
        records = roq_spark.read(spark, zk=args.zk, root=args.root, queue=args.source, startingOffsets="earliest")
        per_minute = (records.groupBy(F.window("timestamp", "1 minute").alias("minute"), "key")
                      .agg(F.count("*").alias("records"), F.sum(F.length("payload")).alias("bytes"))
                      .orderBy("minute", "key"))
        per_minute.select(F.col("minute.start").alias("minute"), F.col("key").cast("string").alias("key"),
                          "records", "bytes").show(50, truncate=False)
        out = per_minute.select("key", F.concat_ws(" ", F.date_format("minute.start", "yyyy-MM-dd'T'HH:mm'Z'"),
                                                   "records", "bytes").alias("payload"))
        options = {"zk": args.zk, "root": args.root, "queue": args.target}
        if args.seed:
            options["publisherSeed"] = args.seed
        out.write.format("roq").mode("append").options(**options).save()
        print(f"{out.count()} records published to {args.target}")
    finally:
        job.stop_session(spark)


if __name__ == "__main__":
    main()
