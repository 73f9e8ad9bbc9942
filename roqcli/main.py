"""``roq``: the operator's command line.

    roq cluster up --hosts 3            an embedded cluster in the foreground (Ctrl-C stops all of it)
    roq queue create orders [--host 127.0.0.12] [--exchanges 2]
    roq queue remove|stop|start|stats orders
    roq queue list
    roq queue rules orders [min_exchanges=2 cooldown_s= ...]   (KEY= or KEY=none unsets)
    roq events orders [--follow]        the queue's topology events, from its monitor and the GCM
    roq hosts
    roq watch                           print configuration broadcasts as they arrive
    roq kpi report --archive DIR        throughput, latency, events per queue / exchange / host (PySpark)
    roq kpi tune --archive DIR [--follow]   thresholds from each exchange's measured capacity
    roq deploy up|status|down cluster.toml  containers on Docker hosts (see deploy/)

Settings come from a TOML file (``--config``: a ``[cluster]`` table for ``cluster up``, a ``[client]``
table for the others) overridden by flags; an unknown key or a value of the wrong type is an error naming
it. ``--zk`` defaults to ``$ROQ_ZK`` or 127.0.0.1:2181.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from typing import Any

from roq.errors import ManagementError, ProtocolError, RoQError
from roq.rules import RULE_DOCS
from roq.runtime import ExitCode, setup_logging
from roq.settings import build, read_toml
from roqcli.kpi.command import add_parsers as kpi_parsers, run as run_kpi

__all__ = ["main"]


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """``[cluster]``: what ``roq cluster up`` starts."""

    hosts: int = 3
    first_host: str = "127.0.0.11"
    zk: str = ""  # "" = start ZooKeeper on 127.0.0.1:zk_port
    zk_port: int = 2181
    gcms: int = 1
    root: str = "/roq"
    session_timeout: float = 6.0
    max_exchanges: int = 4
    lookup_port: int = 5000
    management_port: int = 5003
    broadcast_port: int = 5005
    log_dir: str = ""
    kpi_archive: str = ""  # "" = LOG_DIR/kpi-archive


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    """``[client]``: where the other commands find the cluster."""

    zk: str = "127.0.0.1:2181"
    root: str = "/roq"
    timeout: float = 30.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="roq", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n")[1])
    p.add_argument("--config", help="TOML settings file ([cluster] and [client] tables)")
    p.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING... (default WARNING)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def client_flags(q: argparse.ArgumentParser) -> None:
        q.add_argument("--zk", help="ZooKeeper servers (default $ROQ_ZK or 127.0.0.1:2181)")
        q.add_argument("--root", help="ZooKeeper root of the cluster (default /roq)")
        q.add_argument("--timeout", type=float, help="seconds to wait for the cluster (default 30)")
        q.add_argument("--json", action="store_true", help="print JSON instead of text")

    cluster = sub.add_parser("cluster", help="run an embedded local cluster")
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = csub.add_parser("up", help="start ZooKeeper (unless --zk), GCMs and one host manager per loopback host; "
                         "runs in the foreground until Ctrl-C, then stops everything it started")
    up.add_argument("--hosts", type=int, help="host managers on 127.0.0.11, 127.0.0.12, ... (default 3)")
    up.add_argument("--first-host", help="address of the first host (default 127.0.0.11)")
    up.add_argument("--zk", help="use this ZooKeeper instead of starting one")
    up.add_argument("--zk-port", type=int, help="port of the ZooKeeper it starts (default 2181; 0 = any free)")
    up.add_argument("--gcms", type=int, help="GCMs: one leader, the rest standbys (default 1)")
    up.add_argument("--root", help="ZooKeeper root (default /roq)")
    up.add_argument("--session-timeout", type=float, help="ZooKeeper session timeout, seconds (default 6)")
    up.add_argument("--max-exchanges", type=int, help="exchanges per host (default 4)")
    up.add_argument("--lookup-port", type=int, help="first GCM's look-up port (default 5000; 0 = any free)")
    up.add_argument("--management-port", type=int, help="first GCM's management port (default 5003)")
    up.add_argument("--broadcast-port", type=int, help="first GCM's broadcast port (default 5005)")
    up.add_argument("--log-dir", help="directory for every process's log (default: a temporary directory)")
    up.add_argument("--kpi-archive", help="directory of the KPI archive the host managers and monitors append to, "
                    "read by 'roq kpi' (default LOG_DIR/kpi-archive)")

    queue = sub.add_parser("queue", help="manage queues")
    qsub = queue.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = qsub.add_parser("create", help="create a queue (idempotent); returns once it accepts publishers")
    create.add_argument("name")
    create.add_argument("--host", help="host of its monitor and exchanges (default: the one with most headroom)")
    create.add_argument("--exchanges", type=int, default=1, help="exchanges to start with (default 1)")
    client_flags(create)
    for action, text in (("remove", "stop every process of a queue and delete it"),
                         ("stop", "stop a queue's processes, keeping its definition"),
                         ("start", "start a stopped queue"),
                         ("stats", "a queue's topology, rules and monitor status")):
        a = qsub.add_parser(action, help=text)
        a.add_argument("name")
        client_flags(a)
    client_flags(qsub.add_parser("list", help="every queue"))
    rules = qsub.add_parser("rules", help="show the rules in force for a queue, or set some: KEY=VALUE ... "
                            "(KEY= or KEY=none unsets a rule set before)",
                            epilog="rules: " + "; ".join(f"{k}: {v}" for k, v in RULE_DOCS.items()))
    rules.add_argument("name")
    rules.add_argument("changes", nargs="*", metavar="KEY=VALUE")
    client_flags(rules)
    events = sub.add_parser("events", help="a queue's topology events (scale-out, scale-in, relocations, host loss...) "
                            "from its monitor and the GCM, oldest first: TIME  ORIGIN  KIND  TEXT")
    events.add_argument("name", metavar="QUEUE")
    events.add_argument("--limit", type=int, default=200, help="how many of the latest to show (1-1000, default 200)")
    events.add_argument("--follow", action="store_true", help="then print new events as they come (Ctrl-C stops)")
    client_flags(events)
    client_flags(sub.add_parser("hosts", help="every live host with its capacity and KPIs"))
    watch = sub.add_parser("watch", help="print configuration broadcasts as they arrive (Ctrl-C stops)")
    watch.add_argument("--count", type=int, default=0, help="stop after this many broadcasts (default: never)")
    client_flags(watch)
    kpi_parsers(sub, client_flags)
    deploy = sub.add_parser("deploy", help="deploy a cluster file's processes as containers on its Docker hosts")
    dsub = deploy.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in (("up", "check the Docker hosts and images, then start ZooKeeper, GCMs and host managers, "
                                "each healthy before the next; on failure remove what was started"),
                         ("status", "the deployment's containers on every Docker host"),
                         ("down", "stop and remove exactly the deployment's containers (images are kept)")):
        a = dsub.add_parser(action, help=text)
        a.add_argument("file", nargs="?", default="cluster.toml", help="the cluster file (default cluster.toml)")
        a.add_argument("--json", action="store_true", help="print JSON instead of text")
        if action == "up":
            a.add_argument("--timeout", type=float, default=120.0, help="seconds each role has to become healthy "
                                                                        "(default 120)")
            a.add_argument("--pull", action="store_true", help="pull images missing on a Docker host")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging(args.log_level)
    try:
        file = read_toml(args.config) if args.config else None
        if args.command == "deploy":
            return _deploy(args)
        if args.command == "cluster":
            flags = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(ClusterSettings)}
            return _cluster_up(build(ClusterSettings, file=file, section="cluster", source=args.config or "", flags=flags))
        flags = {"zk": getattr(args, "zk", None) or os.environ.get("ROQ_ZK") or None, "root": getattr(args, "root", None),
                 "timeout": getattr(args, "timeout", None)}
        settings = build(ClientSettings, file=file, section="client", source=args.config or "", flags=flags)
        if args.command == "kpi":
            return run_kpi(args, settings)
        return _manage(args, settings)
    except KeyboardInterrupt:
        return ExitCode.SIGNALLED
    except ManagementError as exc:
        print(f"roq: {exc} (RESULT {exc.code})", file=sys.stderr)
        return ExitCode.FAILURE
    except RoQError as exc:
        print(f"roq: {exc}", file=sys.stderr)
        return ExitCode.CONFIG if isinstance(exc, ValueError) else ExitCode.FAILURE


# ---------------------------------------------------------------------- deploy


def _deploy(args: argparse.Namespace) -> int:
    from deploy import Deployer, load_cluster_file

    cluster = load_cluster_file(args.file)
    deployer = Deployer(cluster, progress=lambda line: print(line, flush=True))
    try:
        if args.action == "up":
            rows = deployer.up(timeout=args.timeout, pull=args.pull)
            _print_containers(rows, args.json)
            print(f"up: ZooKeeper {cluster.zk} (root {cluster.deployment.root}); "
                  f"try: roq queue create demo --zk {cluster.zk}")
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


# ---------------------------------------------------------------------- cluster up


def _cluster_up(s: ClusterSettings) -> int:
    import tempfile

    from roqcli.embedded import EmbeddedCluster

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Ctrl-C and SIGTERM both stop everything (SIGINT may arrive ignored when started in the background)
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    log_dir = s.log_dir or tempfile.mkdtemp(prefix="roq-cluster-")
    archive = os.path.abspath(s.kpi_archive or os.path.join(log_dir, "kpi-archive"))
    cluster = EmbeddedCluster(
        hosts=s.hosts, first_host=s.first_host, zk=s.zk or None, zk_port=s.zk_port, gcms=s.gcms, root=s.root,
        session_timeout=s.session_timeout, max_exchanges=s.max_exchanges, log_dir=log_dir,
        gcm_ports=(s.lookup_port, s.management_port, s.broadcast_port), kpi_archive=archive,
    )  # fmt: skip
    print(f"starting: {s.hosts} host(s) from {s.first_host}, {s.gcms} GCM(s); logs in {log_dir}; "
          f"KPI archive {archive}", flush=True)
    try:
        cluster.start()
        leader = cluster.manager.leader()
        print(f"zookeeper   {cluster.zk}{' (started here)' if not s.zk else ''}")
        for gid, child in cluster.gcms.items():
            info = child.info
            print(f"gcm         {gid} pid {child.pid}: look-up {info['lookup']}, management {info['management']}, "
                  f"broadcast {info['broadcast']}{' (leader)' if gid == leader['id'] else ''}")
        for address, child in cluster.hostmanagers.items():
            print(f"hostmanager {address} pid {child.pid}")
        print(f"ready. try: roq queue create demo --zk {cluster.zk}    (Ctrl-C stops everything)",
              flush=True)
        _status_loop(cluster)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
        print("\nstopping...", flush=True)
        cluster.stop()
        print("stopped", flush=True)
    return ExitCode.OK


def _status_loop(cluster: Any) -> None:
    tty = sys.stdout.isatty()
    last = ""
    while True:
        try:
            queues = cluster.manager.list()
            hosts = cluster.manager.hosts()
            line = (f"leader {cluster.leader()} | hosts {len(hosts)} | queues {len(queues)} "
                    f"({sum(q['State'] == 'running' for q in queues)} running) | "
                    f"exchanges {sum(len(q['Exchanges']) for q in queues)}")
        except RoQError as exc:
            line = f"cluster not answering: {exc}"
        if tty:
            print("\r" + line.ljust(100), end="", flush=True)
        elif line != last:
            print(time.strftime("%H:%M:%S ") + line, flush=True)
        last = line
        time.sleep(1.0)


# ---------------------------------------------------------------------- management


def _manage(args: argparse.Namespace, s: ClientSettings) -> int:
    from client import QueueManager

    with QueueManager(s.zk, root=s.root, timeout=s.timeout) as qm:
        if args.command == "hosts":
            return _show(args, qm.hosts(), _host_line)
        if args.command == "watch":
            return _watch(args, qm)
        if args.command == "events":
            return _events(args, qm)
        action = args.action
        if action == "create":
            return _show(args, qm.create(args.name, args.host, exchanges=args.exchanges), _queue_line)
        if action == "list":
            return _show(args, qm.list(), _queue_line)
        if action == "stats":
            return _show(args, qm.stats(args.name), None)
        if action == "rules":
            if args.changes:
                return _show(args, qm.set_rules(args.name, _parse_changes(args.changes)), None)
            return _show(args, qm.get_rules(args.name), None)
        getattr(qm, action)(args.name)
        print(f"queue {args.name}: {action} done")
        return ExitCode.OK


def _parse_changes(changes: list[str]) -> dict[str, Any]:
    from roq.errors import ConfigError

    out: dict[str, Any] = {}
    for change in changes:
        key, sep, value = change.partition("=")
        if not sep or not key:
            raise ConfigError(f"expected KEY=VALUE, got {change!r}")
        if value.strip().lower() in ("", "none", "null"):
            out[key] = None  # unset: the threshold or default applies again
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value  # the GCM names the key and the wrong type
    return out


def _show(args: argparse.Namespace, value: Any, line: Any) -> int:
    if args.json or line is None:
        print(json.dumps(value, indent=None if args.json else 2, sort_keys=True))
    elif isinstance(value, list):
        if not value:
            print("(none)")
        for item in value:
            print(line(item))
    else:
        print(line(value))
    return ExitCode.OK


def _queue_line(q: dict[str, Any]) -> str:
    xs = ", ".join(f"{x['Id']}@{x['Host']}" for x in q.get("Exchanges", []))
    return f"{q['Name']:<20} {q['State']:<9} monitor {q.get('Monitor') or '-'}  exchanges [{xs}]"


def _host_line(h: dict[str, Any]) -> str:
    return (f"{h['Address']:<15} exchanges {h['AssignedExchanges']}/{h['MaxExchanges']}  "
            f"cpu {h['CpuPercent']:.0f}%  memory {h['MemoryPercent']:.0f}%  net {h['NetBytesPerS'] / 1e3:.1f} kB/s")


def _event_line(e: dict[str, Any]) -> str:
    t = float(e.get("time", 0.0)) if isinstance(e.get("time"), (int, float)) else 0.0
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"
    return f"{stamp}  {e.get('origin', '?'):<7}  {e.get('kind', '?'):<20}  {e.get('text', '')}"


def _events(args: argparse.Namespace, qm: Any) -> int:
    from roq.errors import ConfigError

    if not 1 <= args.limit <= 1000:
        raise ConfigError(f"--limit must be between 1 and 1000, got {args.limit}")

    def show(events: list[dict[str, Any]]) -> None:
        for e in events:
            print(json.dumps(e, sort_keys=True) if args.json else _event_line(e), flush=True)

    def key(e: dict[str, Any]) -> tuple[Any, ...]:
        return e.get("origin"), e.get("seq"), e.get("time")

    # following: read every event stored (each source keeps at most 200), so none falls between two reads
    events = qm.events(args.name, 1000 if args.follow else args.limit)
    show(events[-args.limit:])
    if not args.follow:
        if not events and not args.json:
            print("(no events)")
        return ExitCode.OK
    seen = {key(e) for e in events}

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)  # even when started with SIGINT ignored (in the background)
    while True:  # until Ctrl-C (exit 130)
        time.sleep(0.5)
        latest = qm.events(args.name, 1000)
        show([e for e in latest if key(e) not in seen])
        seen = {key(e) for e in latest}


def _watch(args: argparse.Namespace, qm: Any) -> int:
    import zmq

    from roq import management as m
    from roq.sockets import poll_ms

    ctx = zmq.Context()
    seen = 0
    try:
        while not args.count or seen < args.count:
            leader = qm.leader()
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(leader["broadcast"])
            print(f"# watching {leader['id']} at {leader['broadcast']}", flush=True)
            try:
                while not args.count or seen < args.count:
                    if not sub.poll(poll_ms(1.0)):
                        if qm.leader().get("id") != leader.get("id"):
                            break  # a new leader: follow it
                        continue
                    try:
                        queues, hosts = m.parse_broadcast(sub.recv_multipart())
                    except ProtocolError as exc:
                        print(f"# unreadable broadcast: {exc}", flush=True)
                        continue
                    seen += 1
                    if args.json:
                        print(json.dumps({"Queues": queues, "Hosts": hosts}, sort_keys=True), flush=True)
                    else:
                        qs = ", ".join(f"{q['Name']}({q['State']}, {len(q['Exchanges'])} exchanges)" for q in queues) or "none"
                        hs = ", ".join(f"{h['Address']}({h['AssignedExchanges']}/{h['MaxExchanges']})" for h in hosts) or "none"
                        print(f"{time.strftime('%H:%M:%S')} queues: {qs} | hosts: {hs}", flush=True)
            finally:
                sub.close()
    finally:
        ctx.term()
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
