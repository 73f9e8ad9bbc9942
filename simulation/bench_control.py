"""(d) the control plane: from a create-queue request to the queue accepting publishers, and from a topology
change in ZooKeeper to the GCM's broadcast saying so."""

from __future__ import annotations

import tempfile
import time
from typing import Any

from simulation.bench_common import Result, percentiles

__all__ = ["bench_control"]


def bench_control(trials: int, progress: Any) -> list[Result]:
    """(d): queue creation and broadcast latency on an embedded cluster."""
    import zmq

    import client
    from roq import management as m
    from roq.documents import HostDoc
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
        ctx = zmq.Context.instance()
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
    return [
        Result("(d) create queue -> accepting publishers", latency_ms=percentiles(created),
               notes={"trials": trials, "target_median_ms": 1000, "original_ms": 2000}),
        Result("(d) topology change -> broadcast received", latency_ms=percentiles(broadcast),
               notes={"trials": 2 * trials, "target_ms": 200}),
    ]
