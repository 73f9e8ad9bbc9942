"""A streaming query of the tests, run as its own process (``python -m tests.integration.spark_stream``): a durable
queue's records through the ``roq`` source into a Parquet file sink, one micro-batch a second, with a checkpoint.
Killed and started again with the same checkpoint, it goes on from the last batch it committed."""

from __future__ import annotations

import argparse

from client import spark as roq_spark
from roqcli.kpi import job
from tests.integration.sparkjvm import QUICK_JVM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--zk", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--out", required=True, help="the Parquet sink's directory")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--log", required=True, help="the JVM's log")
    parser.add_argument("--tmp", required=True, help="the JVM's temporary directory (Spark's local directories in it: "
                        "a driver killed with kill -9 leaves them, and the test's own directory is removed in time)")
    args = parser.parse_args()
    spark = job.spark_session("local[2]", app="roq-stream-test", jvm_log=args.log,
                              settings={"spark.driver.extraJavaOptions": f"{QUICK_JVM} -Djava.io.tmpdir={args.tmp}"})
    roq_spark.register(spark)
    records = (spark.readStream.format("roq").option("zk", args.zk).option("root", args.root)
               .option("queue", args.queue).option("partitions", "2").load())
    query = (records.writeStream.format("parquet").option("path", args.out)
             .option("checkpointLocation", args.checkpoint).trigger(processingTime="1 second").start())
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
