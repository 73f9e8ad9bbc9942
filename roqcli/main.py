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
    roq spark up [--workers 2]          a standalone Spark cluster (a master, N workers) in the foreground
    roq deploy up|status|down cluster.toml  containers on Docker hosts (see deploy/)
    roq keys new NAME | client NAME | revoke NAME   CURVE keys; a client's credentials; taking a key back
    roq acl list | grant|revoke PRINCIPAL PERMISSION [--queues P] [--deny] [--prefix K]   permissions
    roq journal stats|verify QUEUE                          a durable queue's journal
    roq audit [--limit N]               the latest management actions: who, what, when, result
    roq federation status               this cluster's place in its tree of clusters, and its children
    roq federation links                what each child's link carried, and when it last said hello

Settings come from a TOML file (``--config``: a ``[cluster]`` table for ``cluster up``, a ``[client]``
table for the others) overridden by flags; an unknown key or a value of the wrong type is an error naming
it. ``--zk`` defaults to ``$ROQ_ZK`` or 127.0.0.1:2181, ``--credentials`` to ``$ROQ_CREDENTIALS``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from roq.errors import ManagementError, RoQError
from roq.rules import RULE_DOCS
from roq.runtime import ExitCode, setup_logging
from roq.settings import build, read_toml
from roqcli.cluster import ClusterSettings, cluster_up
from roqcli.deploying import deploy
from roqcli.keys import DEFAULT_CLUSTER_KEYS, keys
from roqcli.kpi.command import add_parsers as kpi_parsers, run as run_kpi
from roqcli.manage import ClientSettings, manage
from roqcli.sparkcluster import spark_up
from roq import defaults

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="roq", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n")[1])
    p.add_argument("--config", help="TOML settings file ([cluster] and [client] tables)")
    p.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING... (default WARNING)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def client_flags(q: argparse.ArgumentParser) -> None:
        q.add_argument("--zk", help=f"ZooKeeper servers (default $ROQ_ZK or {defaults.ZK})")
        q.add_argument("--root", help=f"ZooKeeper root of the cluster (default {defaults.ROOT})")
        q.add_argument("--timeout", type=float, help="seconds to wait for the cluster (default 30)")
        q.add_argument("--credentials", help="your credentials directory, for a cluster that serves CURVE (your "
                       "secret key and cluster.key; default $ROQ_CREDENTIALS; roq cluster up prints the admin's)")
        q.add_argument("--json", action="store_true", help="print JSON instead of text")

    cluster = sub.add_parser("cluster", help="run an embedded local cluster")
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = csub.add_parser("up", help="start ZooKeeper (unless --zk), GCMs and one host manager per loopback host; "
                         "runs in the foreground until Ctrl-C, then stops everything it started")
    up.add_argument("--hosts", type=int, help="host managers on 127.0.0.11, 127.0.0.12, ... (default 3)")
    up.add_argument("--first-host", help="address of the first host (default 127.0.0.11)")
    up.add_argument("--zk", help="use this ZooKeeper instead of starting one")
    up.add_argument("--zk-port", type=int, help=f"port of the ZooKeeper it starts (default {defaults.ZK_PORT}; 0 = any free)")
    up.add_argument("--gcms", type=int, help="GCMs: one leader, the rest standbys (default 2); any GCM or host "
                    "manager that exits is started again")
    up.add_argument("--root", help=f"ZooKeeper root (default {defaults.ROOT})")
    up.add_argument("--keys", help="the cluster's CURVE keys, made where missing (default ~/.roq/cluster): every "
                    "socket is encrypted and only keys of KEYS/keyring may connect; the admin's credentials are "
                    "KEYS/clients/admin")
    up.add_argument("--insecure", action="store_true", default=None,
                    help="no CURVE: anyone who reaches the cluster's ports may use it (said so in the log)")
    up.add_argument("--session-timeout", type=float, help="ZooKeeper session timeout, seconds (default 6)")
    up.add_argument("--max-exchanges", type=int, help="exchanges per host (default 4)")
    up.add_argument("--lookup-port", type=int, help=f"first GCM's look-up port (default {defaults.LOOKUP_PORT}; 0 = any free)")
    up.add_argument("--management-port", type=int, help=f"first GCM's management port (default {defaults.MANAGEMENT_PORT})")
    up.add_argument("--broadcast-port", type=int, help=f"first GCM's broadcast port (default {defaults.BROADCAST_PORT})")
    up.add_argument("--http-port", type=int, help="first GCM's HTTP API, metrics and dashboard, on 127.0.0.1 "
                    f"(default {defaults.HTTP_PORT}; 0 = any free; -1 = none); writes need the bearer token it prints "
                    "the path of")
    up.add_argument("--log-dir", help="directory for every process's log (default: a temporary directory)")
    up.add_argument("--kpi-archive", help="directory of the KPI archive the host managers and monitors append to, "
                    "read by 'roq kpi' (default LOG_DIR/kpi-archive)")
    up.add_argument("--kpi-queue", nargs="?", const=defaults.KPI_QUEUE, metavar="NAME",
                    help="ship each host's KPI archive to this durable queue of the cluster (default name "
                    f"{defaults.KPI_QUEUE}), where 'roq kpi ... --kpi-queue' reads every host's records")
    up.add_argument("--host-cpus", help="emulated hosts: each host's CPU budget in cores, a cgroup quota on its "
                    "host manager and everything it runs: one value for all (0.5) or one per host (0.25,0.5,1); "
                    "needs root")
    up.add_argument("--host-bandwidth", help="emulated hosts: each host in a network namespace of its own with a "
                    "link of this rate (tc tbf both ways; 100mbit, 1gbit), one for all or one per host; the hosts "
                    "then have addresses in 198.18.0.0/15; needs root")
    up.add_argument("--cluster-name", help="the cluster's name in a tree of clusters (1-64 of A-Z a-z 0-9 _ . -)")
    up.add_argument("--cluster-role", choices=("root", "branch", "leaf"),
                    help="its place in the tree (default root): a branch or a leaf has a parent")
    up.add_argument("--parent-zk", help="the parent cluster's ZooKeeper: each durable queue whose rules say "
                    "link = parent gets a link to the parent's queue of the same name")
    up.add_argument("--parent-root", help=f"the parent cluster's ZooKeeper root (default {defaults.ROOT})")
    up.add_argument("--parent-credentials", help="this cluster's credentials directory in its parent (for a "
                    "parent that serves CURVE)")

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
    acl = sub.add_parser("acl", help="the cluster's permissions: who may publish, subscribe, manage, administer")
    asub = acl.add_subparsers(dest="action", required=True, metavar="ACTION")
    client_flags(asub.add_parser("list", help="every rule"))
    for action, text in (("grant", "add a rule (in force within a second everywhere)"),
                         ("revoke", "take a rule out (the same fields as it was granted with)")):
        a = asub.add_parser(action, help=text)
        a.add_argument("principal", help="a key's name (its principal), or * for everyone")
        a.add_argument("permission", choices=("publish", "subscribe", "manage", "admin", "link"))
        a.add_argument("--queues", default="*", help="the queues it covers: a name or a pattern (orders.*; default *)")
        a.add_argument("--deny", action="store_true", help="a deny rule (a matching deny wins over any allow)")
        a.add_argument("--prefix", action="append", default=[], help="subscribe only: the key prefixes it covers "
                                                                     "(repeatable; default every key)")
        client_flags(a)
    journal = sub.add_parser("journal", help="a durable queue's journal: its figures, or a check of every segment")
    jsub = journal.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in (("stats", "where it is, its offsets, size, bytes not yet synced, syncs and failures"),
                         ("verify", "read every segment whole and name what does not check (exit 1 if anything)")):
        a = jsub.add_parser(action, help=text)
        a.add_argument("name", metavar="QUEUE")
        client_flags(a)
    audit = sub.add_parser("audit", help="the audit trail: who did what, when, through which port, and the result")
    audit.add_argument("--limit", type=int, default=100, help="the latest entries to show (1-1000, default 100)")
    client_flags(audit)
    federation = sub.add_parser("federation", help="the tree of clusters: this cluster's place and its children")
    fsub = federation.add_subparsers(dest="action", required=True, metavar="ACTION")
    client_flags(fsub.add_parser("status", help="its name, role and path to the root; each linked child with the "
                                               "clusters below it; links refused, by reason"))
    client_flags(fsub.add_parser("links", help="each child's link: when it last said hello, and what each of its "
                                              "crossings carried (records, bytes, backlog, moves, rate limit, keys)"))
    client_flags(sub.add_parser("hosts", help="every live host with its capacity and KPIs"))
    client_flags(sub.add_parser("status", help="one screen: the leader, every host, and the busiest queues with "
                                "their traffic, latency and moves"))
    watch = sub.add_parser("watch", help="print configuration broadcasts as they arrive (Ctrl-C stops)")
    watch.add_argument("--count", type=int, default=0, help="stop after this many broadcasts (default: never)")
    client_flags(watch)
    kpi_parsers(sub, client_flags)
    spark = sub.add_parser("spark", help="a standalone Spark cluster from the installed PySpark, for 'roq kpi "
                           "--master' and the roq data source")
    ssub = spark.add_subparsers(dest="action", required=True, metavar="ACTION")
    sup = ssub.add_parser("up", help="start a master and its workers (each its own JVM) on a loopback address, print "
                          "the master's URL and web UI, and run until Ctrl-C, which stops all of them")
    sup.add_argument("--address", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    sup.add_argument("--port", type=int, default=defaults.SPARK_PORT,
                     help=f"the master's port (default {defaults.SPARK_PORT})")
    sup.add_argument("--ui-port", type=int, default=defaults.SPARK_UI_PORT,
                     help=f"the master's web UI port (default {defaults.SPARK_UI_PORT})")
    sup.add_argument("--workers", type=int, default=2, help="how many workers (default 2)")
    sup.add_argument("--cores", type=int, default=1, help="cores each worker offers (default 1)")
    sup.add_argument("--memory", default="1g", help="memory each worker offers (default 1g)")
    sup.add_argument("--worker-cpus", type=float, default=0.0,
                     help="emulated hosts: each worker (and its executors) in a cgroup with this CPU quota in cores, as "
                     "on a host of its own; needs root (default 0: none)")
    sup.add_argument("--dir", default=os.path.expanduser("~/.roq/spark"),
                     help="where the logs and the workers' scratch go (default ~/.roq/spark)")
    keys = sub.add_parser("keys", help="CURVE key pairs for the cluster's processes and its clients")
    ksub = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = ksub.add_parser("new", help="write a new key pair NAME.key (public) and NAME.key_secret (mode 600) in "
                          "pyzmq's certificate format")
    new.add_argument("name", help="the key's name: 1-64 letters, digits, '.', '_' or '-'")
    new.add_argument("--dir", help="where to write it (default ~/.roq/keys, made with mode 700)")
    new.add_argument("--force", action="store_true", help="replace a pair of that name")
    for action, text in (("client", "make a client's credentials in a cluster's keys (KEYS/clients/NAME) and admit "
                                    "its key (KEYS/keyring/NAME.key); an existing one is only printed"),
                         ("revoke", "take a client's key out of a cluster's keyring: it opens no more connections "
                                    "(within a second; nothing restarts)")):
        a = ksub.add_parser(action, help=text)
        a.add_argument("name", help="the client's name (its principal)")
        a.add_argument("--keys", help=f"the cluster's keys directory (default {DEFAULT_CLUSTER_KEYS})")
        if action == "client":
            a.add_argument("--valid-for", help="a new key expires after this long (90s, 30m, 12h, 30d; default never)")
    deploy = sub.add_parser("deploy", help="deploy a cluster file's processes as containers on its Docker hosts")
    dsub = deploy.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in (("up", "check the Docker hosts and images, then start ZooKeeper, GCMs and host managers, "
                                "each healthy before the next; on failure remove what was started"),
                         ("status", "the deployment's containers on every Docker host"),
                         ("down", "stop and remove exactly the deployment's containers (images are kept)"),
                         ("keys", "copy the keyring and the bearer tokens into the running containers again "
                                  "(after roq keys client|revoke --keys DIR)")):
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
            return deploy(args)
        if args.command == "keys":
            return keys(args)
        if args.command == "spark":
            return spark_up(args)
        if args.command == "cluster":
            flags = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(ClusterSettings)}
            return cluster_up(build(ClusterSettings, file=file, section="cluster", source=args.config or "", flags=flags))
        flags = {"zk": getattr(args, "zk", None) or os.environ.get("ROQ_ZK") or None, "root": getattr(args, "root", None),
                 "timeout": getattr(args, "timeout", None),
                 "credentials": getattr(args, "credentials", None) or os.environ.get("ROQ_CREDENTIALS") or None}
        settings = build(ClientSettings, file=file, section="client", source=args.config or "", flags=flags)
        if args.command == "kpi":
            return run_kpi(args, settings)
        return manage(args, settings)
    except KeyboardInterrupt:
        return ExitCode.SIGNALLED
    except ManagementError as exc:
        print(f"roq: {exc} (RESULT {exc.code})", file=sys.stderr)
        return ExitCode.FAILURE
    except RoQError as exc:
        print(f"roq: {exc}", file=sys.stderr)
        return ExitCode.CONFIG if isinstance(exc, ValueError) else ExitCode.FAILURE


if __name__ == "__main__":
    sys.exit(main())
