"""A queue of an embedded cluster under test: its monitor's status, its load processes and their audit."""

from __future__ import annotations

import signal
from typing import Any, Callable

import client
from roq.errors import RoQError, UnavailableError
from roq.wire.status import QueueStatus
from simulation.audit import compare, holes
from tests.integration.zkhelp import wait_until

__all__ = ["Queue"]

#: How long a queue whose creation outlasted the GCM's answer may take to run (a host of a twentieth of a core
#: starts a monitor in about 8 s).
READY_S = 60.0


def _running(cluster: Any, name: str) -> bool:
    """Whether queue ``name``'s monitor answers and has an exchange."""
    try:
        with client.connect(monitor=cluster.manager.lookup(name), timeout=2.0,
                            credentials=getattr(cluster, "credentials", None)) as conn:
            return bool(conn.status(timeout=2.0).exchanges)
    except RoQError:
        return False


class Queue:
    """A queue of an embedded cluster, its monitor's status, and its load processes."""

    def __init__(self, cluster: Any, loads: Any, name: str, host: str | None = None, *, follow: bool = False,
                 **rules: Any) -> None:
        """``follow``: every client connects by name through ZooKeeper and follows the monitor if it moves."""
        self.cluster, self.loads, self.name = cluster, loads, name
        try:
            cluster.manager.create(name, host, exchanges=1)
        except UnavailableError:  # on a host of a small CPU budget its processes start slowly: the creation goes on
            wait_until(lambda: _running(cluster, name), READY_S, f"queue {name} running (its creation took over 15 s)")
        if rules:
            cluster.manager.set_rules(name, rules)
        self.monitor = cluster.manager.lookup(name)
        credentials = getattr(cluster, "credentials", None)  # a secure cluster's admin's
        self.conn = cluster.connect(name) if follow else client.connect(monitor=self.monitor, credentials=credentials)
        self.where = ("", "--zk", cluster.zk, "--queue", name, "--root", cluster.root) if follow else (self.monitor,)
        self.where += ("--credentials", credentials) if credentials else ()
        self.pubs: list[Any] = []
        self.subs: list[Any] = []
        self.sent: dict[str, dict[str, int]] = {}
        self.reports: dict[str, dict[str, Any]] = {}  # each stopped publisher's REPORT, by id

    def status(self) -> QueueStatus:
        return self.conn.status(timeout=10)

    def wait(self, condition: Callable[[QueueStatus], Any], timeout: float, what: str) -> QueueStatus:
        def check() -> QueueStatus | None:
            try:
                s = self.status()
            except Exception:  # the monitor may be restarting
                return None
            return s if condition(s) else None

        return wait_until(check, timeout, what, interval=0.1)

    def subscribe(self, prefix: str = "", *options: str) -> None:
        # it stops 5 s after the last record: once every publisher has flushed, it has everything
        self.subs.append(self.loads.start("subscribe", *self.where, "--prefix", prefix, "--idle-exit", "5", *options))

    def publish(self, rate: float, keys: str, *options: str) -> Any:
        """A publisher of ``rate`` records/s (0: as fast as the queue takes them) over ``keys`` (comma-separated)."""
        pub = self.loads.start("publish", *self.where, "--rate", str(rate), "--duration", "600", "--keys", keys,
                               *options)
        self.pubs.append(pub)
        return pub

    def stop_publisher(self, pub: Any, *, signalled: bool = False) -> dict[str, Any]:
        report = self.loads.report(pub, stop=not signalled)
        assert report["error"] == "", report
        self.sent[report["publisher"]] = report["keys"]
        self.reports[report["publisher"]] = report
        self.pubs.remove(pub)
        return report

    def audit(self) -> list[dict[str, Any]]:
        """Stop the remaining publishers, then collect the subscribers' reports (they stop once idle); check each."""
        for pub in self.pubs:  # all at once: each flushes what it has while the others do
            pub.signal(signal.SIGTERM)
        for pub in list(self.pubs):
            self.stop_publisher(pub, signalled=True)
        self.loads.publishers_done(*self.subs)  # every record is acknowledged, so under way: no 5 s idle wait
        expected = sum(sum(keys.values()) for keys in self.sent.values())
        audits = []
        for sub in self.subs:
            report = self.loads.report(sub)
            audit = compare(report["audit"], self.sent, report["prefix"].encode())
            print(f"subscriber {report['prefix']!r}: {audit}; its library's counts: {report['stats']}")
            if report.get("timeline"):
                print("  timeline: " + ", ".join(f"{p['received']}/{p['gaps']}" for p in report["timeline"]))
            for line in holes(report["audit"]):
                print("  " + line)
            assert (audit["lost"], audit["duplicated"], audit["reordered"]) == (0, 0, 0), audit
            assert audit["expected"] > 0 and (report["prefix"] or audit["expected"] == expected), audit
            audits.append(audit)
        return audits

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.status().events if kind is None or e["kind"] == kind]

    def close(self) -> None:
        self.conn.close()
