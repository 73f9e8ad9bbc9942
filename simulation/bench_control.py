"""(d) the control plane: from a create-queue request to the queue accepting publishers, from a topology change
in ZooKeeper to the GCM's broadcast saying so, from the GCM leader's kill -9 to a standby leading, and from an
exchange's kill -9 to its host manager's new one registered."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from typing import Any

from simulation.bench_common import Check, Result, percentiles

__all__ = ["bench_control", "checks"]

#: The ZooKeeper session timeout of the GCMs in the take-over trials, seconds: a standby leads once the dead
#: leader's session has expired.
SESSION_TIMEOUT = 4.0
TAKEOVER = "(d) GCM leader killed -> standby leads"
ADOPTION = "(d) thresholds written -> adopted by the queue's monitor"
RESTART = "(d) exchange killed -> restarted and registered"


def bench_control(trials: int, progress: Any) -> list[Result]:
    """(d): queue creation and broadcast latency on an embedded cluster."""
    import zmq

    import client
    from roq.wire import management as m
    from roq.wire.documents import HostDoc
    from roq.zk import Paths, Session
    from roqcli.embedded import EmbeddedCluster

    log_dir = tempfile.mkdtemp(prefix="roq-bench-")
    with EmbeddedCluster(hosts=3, log_dir=log_dir) as cluster:
        qm = cluster.manager
        progress(f"(d) create queue -> accepting publishers, {trials} queues")
        created = []
        for i in range(trials):
            started = time.monotonic()
            qm.create(f"bench{i}")
            with client.connect(zk=cluster.zk, queue=f"bench{i}", root=cluster.root) as conn:
                pub = conn.publisher()
                pub.send(b"k", b"first")
                pub.flush(10)
                created.append((time.monotonic() - started) * 1000)
            qm.remove(f"bench{i}")
        progress(f"(d) topology change -> broadcast, {trials} changes")
        paths = Paths(cluster.root)
        zk = Session(cluster.zk).start(timeout=10)
        ctx: zmq.Context = zmq.Context.instance()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.LINGER, 0)
        sub.connect(qm.leader()["broadcast"])
        time.sleep(0.3)  # let the subscription reach the GCM's PUB before the first change
        broadcast = []
        try:
            for i in range(trials):
                for present in (True, False):
                    started = time.monotonic()
                    if present:
                        zk.create(paths.host("127.0.0.99"), HostDoc(address="127.0.0.99").encode(), ephemeral=True)
                    else:
                        zk.delete(paths.host("127.0.0.99"))
                    while True:
                        if not sub.poll(5000):
                            raise RuntimeError("no broadcast within 5 s of a topology change")
                        _, hosts = m.parse_broadcast(sub.recv_multipart())
                        if ("127.0.0.99" in {h["Address"] for h in hosts}) == present:
                            break
                    broadcast.append((time.monotonic() - started) * 1000)
        finally:
            sub.close()
            zk.close()
        progress(f"(d) exchange kill -9 -> restarted and registered, {trials} kills")
        restarted = _restarts(cluster, trials)
        progress(f"(d) thresholds written -> adopted by the monitor, {trials} writes")
        adopted = _adoptions(cluster, trials)
    progress(f"(d) GCM leader kill -9 -> a standby leads, {min(trials, 3)} trials")
    takeovers = _takeovers(min(trials, 3))
    return [
        Result(TAKEOVER, latency_ms=percentiles(takeovers),
               notes={"trials": len(takeovers), "session_timeout_s": SESSION_TIMEOUT}),
        Result(RESTART, latency_ms=percentiles(restarted), notes={"trials": len(restarted)}),
        Result(ADOPTION, latency_ms=percentiles(adopted), notes={"trials": len(adopted)}),
        Result("(d) create queue -> accepting publishers", latency_ms=percentiles(created),
               notes={"trials": trials, "target_median_ms": 1000, "original_ms": 2000}),
        Result("(d) topology change -> broadcast received", latency_ms=percentiles(broadcast),
               notes={"trials": 2 * trials, "target_ms": 200}),
    ]


def _restarts(cluster: Any, trials: int) -> list[float]:
    """Kill -9 the exchange of a new queue, ``trials`` queues in turn; ms from each kill until its host manager's
    new one (a new pid) is registered in ZooKeeper. (A queue of its own each time: an exchange killed again soon
    after its restart is a crash loop, which its host manager restarts after a growing back-off.)"""
    from roq.zk import Paths, Session

    paths = Paths(cluster.root)
    zk = Session(cluster.zk).start(timeout=10)
    took = []
    try:
        for i in range(trials):
            queue = f"restart{i}"
            cluster.manager.create(queue, exchanges=1)

            def exchange() -> tuple[str, dict[str, Any]] | None:
                names = zk.children(paths.exchanges(queue))
                found = zk.get(paths.exchange(queue, names[0])) if names else None
                return (names[0], json.loads(found[0])) if found else None

            _slot, doc = cluster.wait_for(exchange, 30, "the queue's exchange registered")
            os.kill(doc["pid"], signal.SIGKILL)
            killed = time.monotonic()
            cluster.wait_for(lambda: (now := exchange()) is not None and now[1]["pid"] != doc["pid"], 60,
                             "the exchange restarted")
            took.append((time.monotonic() - killed) * 1000)
            cluster.manager.remove(queue)
    finally:
        zk.close()
    return took


def _adoptions(cluster: Any, trials: int) -> list[float]:
    """Write a running queue's thresholds ``trials`` times (as ``roq kpi tune`` does); ms from each write until
    the time of its monitor's ``thresholds_adopted`` event."""
    qm = cluster.manager
    qm.create("tuned", exchanges=1)
    took = []
    try:
        for i in range(trials):
            seen = len([e for e in qm.events("tuned") if e["kind"] == "thresholds_adopted"])
            written = time.time()
            qm.set_thresholds("tuned", {"exchange_records_per_s": 1500.0 + i}, {"capacity_records_per_s": 1875.0})
            adopted = cluster.wait_for(
                lambda: (es := [e for e in qm.events("tuned") if e["kind"] == "thresholds_adopted"])[seen:] and es[-1],
                30, "the thresholds adopted")
            took.append((adopted["time"] - written) * 1000)
    finally:
        qm.remove("tuned")
    return took


def _takeovers(trials: int) -> list[float]:
    """Kill -9 the leader of two GCMs ``trials`` times (a cluster each); ms from each kill until the other
    leads."""
    from roqcli.embedded import EmbeddedCluster

    took = []
    for _ in range(trials):
        with EmbeddedCluster(hosts=1, gcms=2, session_timeout=SESSION_TIMEOUT,
                             log_dir=tempfile.mkdtemp(prefix="roq-bench-")) as cluster:
            first = cluster.leader()
            killed = time.monotonic()
            cluster.kill_gcm(first)
            cluster.wait_for(lambda: (lead := cluster.manager.leader(timeout=10)["id"]) != first and lead,
                             SESSION_TIMEOUT + 30, "a standby leading")
            took.append((time.monotonic() - killed) * 1000)
    return took


def checks(results: list[Result]) -> list[Check]:
    """(d)'s targets: a queue accepts publishers within a second of its creation (median), a topology change
    is broadcast within 200 ms (p99), a standby GCM leads within the session timeout and 2 s of its leader's
    kill -9, a killed exchange is restarted and registered within 3 s, a running monitor adopts new thresholds
    within a second."""
    by = {r.name: r for r in results if r.name.startswith("(d)")}
    out = []
    for name, key, target, what in (
            ("(d) create queue -> accepting publishers", "p50", 1000.0, "(d) create -> accepting publishers, median"),
            ("(d) topology change -> broadcast received", "p99", 200.0, "(d) topology change -> broadcast, p99"),
            (TAKEOVER, "max", (SESSION_TIMEOUT + 2.0) * 1000, "(d) GCM leader killed -> standby leads, slowest"),
            (RESTART, "max", 3000.0, "(d) exchange killed -> restarted and registered, slowest"),
            (ADOPTION, "max", 1000.0, "(d) thresholds written -> adopted, slowest")):
        if name in by:
            out.append(Check(what, by[name].latency_ms.get(key, float("nan")), target, True, " ms"))
    return out
