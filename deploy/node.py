"""The RoQ image's entrypoint: ``python -m deploy.node ROLE [ARGS...]``.

Roles: ``gcm``, ``hostmanager``, ``monitor``, ``exchange`` (each that component's own command line, e.g.
``hostmanager --zk 127.0.0.20:2181 --address 127.0.0.22``); ``zookeeper --address A --port P`` (a
standalone server from Debian's ``zookeeper`` package, for images built on a base that has it);
``spark-master --address A [--port P] [--ui-port U]`` and ``spark-worker --address A --master spark://M:P`` (a
standalone Spark master or worker from the installed PySpark, for images built with ``--extras kpi`` on a base
with a Java runtime); ``health ROLE ...`` (exit 0 when that role serves: the containers' health check). SIGTERM
stops a role cleanly, its children with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from typing import Callable
from roq import defaults

__all__ = ["main", "ROLES"]


def _component(module: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        main = getattr(__import__(f"{module}.__main__", fromlist=["main"]), "main")
        return int(main(argv) or 0)

    return run


def _zookeeper(argv: list[str]) -> int:
    from roq.runtime import setup_logging
    from roqcli.zkserver import ZooKeeperServer

    p = argparse.ArgumentParser(prog="deploy.node zookeeper", description="a standalone ZooKeeper server")
    p.add_argument("--address", default="127.0.0.1", help="address of its client port (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=defaults.ZK_PORT, help=f"client port (default {defaults.ZK_PORT})")
    p.add_argument("--data-dir", default="/var/lib/roq/zookeeper", help="data directory")
    args = p.parse_args(argv)
    setup_logging("INFO")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    server = ZooKeeperServer(address=args.address, port=args.port, data_dir=args.data_dir,
                             log_path=f"{args.data_dir}/zookeeper.log").start(60)
    print(f"READY zookeeper {server.hosts}", flush=True)
    try:
        while not stop and server.alive():
            time.sleep(0.5)
    finally:
        server.stop()
    return 0 if stop else 1


def _spark(role: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        from roq.errors import ConfigError
        from roqcli import sparkcluster

        what = "master" if role == "spark-master" else "worker"
        p = argparse.ArgumentParser(prog=f"deploy.node {role}",
                                    description=f"a standalone Spark {what} (this process becomes its JVM)")
        p.add_argument("--address", required=True, help="the address it binds and advertises")
        p.add_argument("--ui-port", type=int, help="its web UI",
                       default=defaults.SPARK_UI_PORT if role == "spark-master" else defaults.SPARK_WORKER_UI_PORT)
        if role == "spark-master":
            p.add_argument("--port", type=int, default=defaults.SPARK_PORT,
                           help="the port jobs and workers reach it on")
        else:
            p.add_argument("--master", required=True, help="the master's URL, spark://HOST:PORT")
            p.add_argument("--cores", type=int, default=1, help="cores it offers (default 1)")
            p.add_argument("--memory", default="1g", help="memory it offers (default 1g)")
            p.add_argument("--work-dir", default="/var/lib/roq/spark", help="its executors' scratch")
        args = p.parse_args(argv)
        try:
            if not shutil.which("java"):
                raise ConfigError("no Java runtime in this image (Spark needs 17 or newer): build it on a base that "
                                  "has one, or online (python -m deploy.image --extras kpi installs one)")
            env = sparkcluster.spark_env(args.address)
            if role == "spark-master":
                command = sparkcluster.master_command(args.address, args.port, args.ui_port)
            else:
                os.makedirs(args.work_dir, exist_ok=True)
                command = sparkcluster.worker_command(args.address, args.master, cores=args.cores, memory=args.memory,
                                                      workdir=args.work_dir, ui_port=args.ui_port)
        except ConfigError as exc:  # PySpark missing: an image built without --extras kpi
            print(f"deploy.node {role}: {exc} (build the image with python -m deploy.image --extras kpi)",
                  file=sys.stderr)
            return 2
        sys.stdout.flush()
        os.execve(command[0], command, env)  # spark-class execs the JVM: SIGTERM reaches it

    return run


def _health(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="deploy.node health", description="exit 0 when the role serves")
    p.add_argument("role", choices=("zookeeper", "gcm", "hostmanager", "spark-master", "spark-worker"))
    p.add_argument("--address", required=True)
    p.add_argument("--port", type=int, default=0, help="zookeeper: its client port; gcm: its management port")
    p.add_argument("--zk", default="", help="hostmanager: ZooKeeper servers")
    p.add_argument("--root", default=defaults.ROOT)
    p.add_argument("--http-port", type=int, default=0,
                   help="gcm, hostmanager: the port of its HTTP health checks; asks its /readyz (0 = the older checks); "
                        "spark-master: its web UI's")
    p.add_argument("--master-ui", default="", help="spark-worker: its master's web UI, http://HOST:PORT")
    args = p.parse_args(argv)
    try:
        if args.role.startswith("spark-"):
            from roqcli.sparkcluster import alive_workers, master_status

            ui = f"http://{args.address}:{args.http_port}" if args.role == "spark-master" else args.master_ui
            status = master_status(ui)
            if status is None:
                print(f"unhealthy: the Spark master's web UI {ui} does not answer", file=sys.stderr)
                return 1
            if args.role == "spark-master":
                return 0 if status.get("status") == "ALIVE" else 1
            hosts = [w.get("host") for w in alive_workers(status)]
            if args.address not in hosts:
                print(f"unhealthy: the master at {ui} counts no worker of {args.address} alive (alive: {hosts})",
                      file=sys.stderr)
                return 1
            return 0
        if args.role != "zookeeper" and args.http_port:
            url = f"http://{args.address}:{args.http_port}/readyz"
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                with opener.open(url, timeout=2) as r:
                    return 0 if r.status == 200 else 1
            except urllib.error.HTTPError as exc:
                print(f"unhealthy: {url} answered {exc.code}: {exc.read()[:200]!r}", file=sys.stderr)
                return 1
        if args.role == "zookeeper":
            with socket.create_connection((args.address, args.port), timeout=2) as s:
                s.sendall(b"ruok")
                return 0 if s.recv(16) == b"imok" else 1
        if args.role == "gcm":
            with socket.create_connection((args.address, args.port), timeout=2):
                return 0
        from roq.zk import Paths, Session

        session = Session(args.zk, timeout=3).start(timeout=3)
        try:
            return 0 if session.exists(Paths(args.root).host(args.address)) else 1
        finally:
            session.close()
    except Exception as exc:  # anything wrong: not healthy, and why
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1


ROLES: dict[str, Callable[[list[str]], int]] = {
    "gcm": _component("gcm"),
    "hostmanager": _component("hostmanager"),
    "monitor": _component("monitor"),
    "exchange": _component("exchange"),
    "zookeeper": _zookeeper,
    "spark-master": _spark("spark-master"),
    "spark-worker": _spark("spark-worker"),
    "health": _health,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in ROLES:
        print(__doc__, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return ROLES[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
