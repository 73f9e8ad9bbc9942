"""The demo behind ``make demo``: a local cluster under load, moves and a crash, then the audit.

Timeline (about 15 s): two exchanges and a monitor start on 127.0.0.11; two subscribers join (one for
everything, one for ``orders.``); four publishers send at uneven rates for 10 s; the relocation rule
moves a publisher off the hot exchange; two more relocations are forced; a third exchange joins and the
first one is killed with SIGKILL under load. At the end every subscriber's audit is held against what
the publishers sent.
"""

from __future__ import annotations

import sys
import tempfile
import time
from typing import Any

from roq.process import Child, spawn
from simulation.audit import compare
from simulation.cluster import LocalCluster
from simulation.load import parse_report

PUBLISHERS = [  # rate (records/s), keys
    (30_000, "orders.eu,orders.us"),
    (15_000, "orders.asia"),
    (8_000, "stock.eu"),
    (8_000, "stock.us"),
]
SUBSCRIBERS = ["", "orders."]
DURATION = 10.0


def _load(cluster: LocalCluster, role: str, args: list[str]) -> Child:
    return spawn(role, "simulation.load", [role, "--monitor", cluster.monitor_endpoint, *args])


def run(out: Any = sys.stdout) -> int:
    def say(text: str) -> None:
        print(text, file=out, flush=True)

    log_dir = tempfile.mkdtemp(prefix="roq-demo-")
    say(f"RoQ-Py demo: one elastic logical queue on 127.0.0.11 (process logs in {log_dir})")
    cluster = LocalCluster(
        address="127.0.0.11",
        exchanges=2,
        monitor_args=["--high-records-per-s", "35000", "--sustain", "1", "--cooldown", "4"],
        log_dir=log_dir,
    )
    children: list[Child] = []
    try:
        cluster.start()
        say(f"  monitor   {cluster.monitor_endpoint}")
        for x in cluster.status()["exchanges"]:
            say(f"  exchange  {x['id']}  frontend {x['frontend']}  backend {x['backend']}")
        subs = [_load(cluster, "subscribe", ["--prefix", p, "--idle-exit", "3"]) for p in SUBSCRIBERS]
        children += subs
        for s in subs:
            s.wait_ready()
        say(f"  {len(subs)} subscribers joined (prefixes: {', '.join(repr(p) for p in SUBSCRIBERS)})")
        pubs = [
            _load(cluster, "publish", ["--rate", str(rate), "--duration", str(DURATION), "--keys", keys])
            for rate, keys in PUBLISHERS
        ]
        children += pubs
        for p in pubs:
            p.wait_ready()
        total_rate = sum(r for r, _ in PUBLISHERS)
        say(f"  {len(pubs)} publishers sending {total_rate:,} records/s in all for {DURATION:.0f} s; "
            "relocation mark 35,000 records/s per exchange")
        started = time.monotonic()
        actions = {3.0: "force", 5.0: "force", 6.0: "add", 7.0: "kill"}
        while any(p.alive() for p in pubs):
            elapsed = time.monotonic() - started
            for at, action in list(actions.items()):
                if elapsed >= at:
                    del actions[at]
                    say("  " + _act(cluster, action))
            status = cluster.status()
            rate = sum(x["records_per_s"] for x in status["exchanges"])
            c = status["counters"]
            say(f"  t={elapsed:4.1f}s  exchanges {len(status['exchanges'])}  publishers {len(status['publishers'])}  "
                f"{rate:9,.0f} records/s  relocations {c['relocations']}  failovers {c['failovers']}")
            time.sleep(1.0)
        pub_reports = [parse_report(p.communicate(60)) for p in pubs]
        sub_reports = [parse_report(s.communicate(60)) for s in subs]
        status = cluster.status()
    finally:
        for child in children:
            child.stop()
        cluster.stop()
    return _summarise(say, pub_reports, sub_reports, status)


def _act(cluster: LocalCluster, action: str) -> str:
    if action == "force":
        moved = cluster.relocate()
        return f"forced relocation: publisher {moved['publisher'][:8]} {moved['source']} -> {moved['target']}"
    if action == "add":
        name = cluster.add_exchange()
        return f"exchange {name} added"
    victim = max(cluster.status()["exchanges"], key=lambda x: x["records_per_s"])["id"]
    pid = cluster.kill_exchange(victim)
    return f"exchange {victim} killed with SIGKILL (pid {pid}) under load"


def _summarise(say: Any, pubs: list[dict], subs: list[dict], status: dict) -> int:
    sent = {r["publisher"]: r["keys"] for r in pubs}
    total_sent = sum(r["sent"] for r in pubs)
    say("")
    say(f"published: {total_sent:,} records ({sum(r['rate'] for r in pubs):,.0f} records/s in all)")
    c = status["counters"]
    say(f"monitor:   {c['relocations']} relocations ({c['failovers']} failovers), {c['exchanges_lost']} exchange lost, "
        f"{c['limit_cases']} limit cases, {c['flaps']} flaps")
    for e in status["events"]:
        if e["kind"] in ("relocated", "exchange_lost", "limit_case", "relocation_failed"):
            say(f"           - {e['text']}")
    clean = True
    for report in subs:
        prefix = report["prefix"]
        audit = compare(report["audit"], sent, prefix.encode())
        lat = report["latency_ms"]
        ok = audit["lost"] == audit["duplicated"] == audit["reordered"] == 0 and audit["expected"] > 0
        clean &= ok
        say(f"subscriber {prefix or '(all)'!s:9} expected {audit['expected']:,}  received {audit['received']:,}  "
            f"lost {audit['lost']}  duplicated {audit['duplicated']}  reordered {audit['reordered']}  "
            f"latency p50 {lat.get('p50', 0):.2f} ms p99 {lat.get('p99', 0):.2f} ms  "
            f"(duplicates dropped by the client: {report['stats']['duplicates']})")
    say("(records caught in the killed exchange wait for its death to be noticed, about a second, and are "
        "resent: they make the p99)")
    say("audit: " + ("every record delivered exactly once, in order" if clean else "FAILED"))
    return 0 if clean else 1
