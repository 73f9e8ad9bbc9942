"""The RoQ image's entrypoint: ``python -m deploy.node ROLE [ARGS...]``.

Roles: ``gcm``, ``hostmanager``, ``monitor``, ``exchange`` (each that component's own command line, e.g.
``hostmanager --zk 127.0.0.20:2181 --address 127.0.0.22``); ``zookeeper --address A --port P`` (a
standalone server from Debian's ``zookeeper`` package, for images built on a base that has it);
``health ROLE ...`` (exit 0 when that role serves: the containers' health check). SIGTERM stops a role
cleanly, its children with it.
"""

from __future__ import annotations

import argparse
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


def _health(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="deploy.node health", description="exit 0 when the role serves")
    p.add_argument("role", choices=("zookeeper", "gcm", "hostmanager"))
    p.add_argument("--address", required=True)
    p.add_argument("--port", type=int, default=0, help="zookeeper: its client port; gcm: its management port")
    p.add_argument("--zk", default="", help="hostmanager: ZooKeeper servers")
    p.add_argument("--root", default=defaults.ROOT)
    p.add_argument("--http-port", type=int, default=0,
                   help="gcm, hostmanager: the port of its HTTP health checks; asks its /readyz (0 = the older checks)")
    args = p.parse_args(argv)
    try:
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
