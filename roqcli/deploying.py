"""``roq deploy up|status|down FILE``: a cluster file's processes as containers on its Docker hosts."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from roq.runtime import ExitCode

__all__ = ["deploy"]


def deploy(args: argparse.Namespace) -> int:
    from deploy import SPARK_PYTHON, Deployer, load_cluster_file

    cluster = load_cluster_file(args.file)
    deployer = Deployer(cluster, progress=lambda line: print(line, flush=True))
    try:
        if args.action == "up":
            rows = deployer.up(timeout=args.timeout, pull=args.pull)
            _print_containers(rows, args.json)
            creds = f" --credentials {deployer.credentials}" if deployer.credentials else ""
            print(f"up: ZooKeeper {cluster.zk} (root {cluster.deployment.root}); "
                  f"try: roq queue create demo --zk {cluster.zk}{creds}")
            for master in cluster.spark_masters:
                spark = f" --credentials {deployer.spark_credentials}" if deployer.spark_credentials else ""
                kpi = f" --kpi-queue {cluster.deployment.kpi_queue}" if cluster.deployment.kpi_queue else ""
                here = os.path.dirname(sys.executable)  # this Python's directory: python3 there has the project
                print(f"Spark: master {master.url} with {len(cluster.spark_workers)} worker(s), web UI {master.ui}; "
                      f"its tasks run {SPARK_PYTHON} from the PATH (the image's there, this one here): "
                      f"PATH={here}:$PATH PYSPARK_PYTHON={SPARK_PYTHON} roq kpi report --master "
                      f"{master.url}{kpi} --zk {cluster.zk}{spark}")
            return ExitCode.OK
        if args.action == "keys":
            print(f"keys copied to {deployer.keys_again()} container(s) of deployment {cluster.deployment.name!r}")
            return ExitCode.OK
        if args.action == "status":
            rows = deployer.status()
            _print_containers(rows, args.json)
            return ExitCode.OK if rows and all("error" not in r for r in rows) else ExitCode.FAILURE
        removed, errors = deployer.down()
        print(f"removed {removed} container(s) of deployment {cluster.deployment.name!r}")
        for error in errors:
            print(f"roq: {error}", file=sys.stderr)
        return ExitCode.FAILURE if errors else ExitCode.OK
    finally:
        deployer.close()


def _print_containers(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    if not rows:
        print("no containers")
    for r in rows:
        if "error" in r:
            print(f"{r['docker_host']:12} ERROR {r['error']}")
        else:
            print(f"{r['docker_host']:12} {r['role']:12} {r['address']:15} {r['id']:12} {r['status']:9} {r['health']}")
