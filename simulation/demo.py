"""The demo behind ``make demo``: an embedded cluster, a queue made through the management API, load,
moves and a crash, then the audit.

Timeline (about 25 s): ZooKeeper, two GCMs (a leader and a standby) and three host managers (127.0.0.11,
.12, .13) start; the queue ``demo`` is created through the BSON management API with two exchanges on
127.0.0.11; two subscribers join (one for everything, one for ``orders.``); four publishers send at uneven
rates for 10 s; the relocation rule moves a publisher off the hot exchange; two more relocations are
forced; a third exchange is added on another host through the management API; the busiest exchange is
killed with SIGKILL under load (its publishers fail over, its host manager starts a new one). At the end
every subscriber's audit is held against what the publishers sent.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from typing import Any

import client
from roq.process import Child, spawn
from roq.wire.status import QueueStatus
from simulation.audit import compare
from roqcli.embedded import EmbeddedCluster
from simulation.load import parse_report

PUBLISHERS = [  # rate (records/s), keys
    (30_000, "orders.eu,orders.us"),
    (15_000, "orders.asia"),
    (8_000, "stock.eu"),
    (8_000, "stock.us"),
]
SUBSCRIBERS = ["", "orders."]
DURATION = 10.0
#: The queue's rules, set through the management API: the relocation mark, and quick decisions for a short run.
RULES = {"exchange_records_per_s": 35_000, "sustain_s": 1.0, "cooldown_s": 4.0}


def _load(monitor: str, role: str, args: list[str]) -> Child:
    return spawn(role, "simulation.load", [role, "--monitor", monitor, *args])


def run(out: Any = sys.stdout) -> int:
    def say(text: str) -> None:
        print(text, file=out, flush=True)

    log_dir = tempfile.mkdtemp(prefix="roq-demo-")
    say(f"RoQ-Py demo: an embedded cluster on loopback hosts 127.0.0.11-13 (process logs in {log_dir})")
    cluster = EmbeddedCluster(hosts=3, gcms=2, log_dir=log_dir)
    children: list[Child] = []
    admin: client.Connection | None = None
    try:
        cluster.start()
        say(f"  zookeeper  {cluster.zk}")
        leader = cluster.leader()
        for gid in cluster.gcms:
            say(f"  gcm        {gid}{' (leader)' if gid == leader else ' (standby)'}")
        for h in cluster.manager.hosts():
            say(f"  host       {h['Address']}  capacity {h['MaxExchanges']} exchanges")
        started = time.monotonic()
        made = cluster.manager.create("demo", "127.0.0.11", exchanges=2)
        say(f"queue 'demo' created through the management API in {time.monotonic() - started:.2f} s:")
        say(f"  monitor    {made['Monitor']}")
        for x in made["Exchanges"]:
            say(f"  exchange   {x['Name']} on {x['Host']}  frontend {x['Frontend']}  backend {x['Backend']}")
        rules = cluster.manager.set_rules("demo", RULES)
        monitor = cluster.manager.lookup("demo")
        admin = client.Connection(monitor)
        cluster.wait_for(lambda: admin.status().rules == rules, 10, "the monitor to adopt the queue's rules")
        say(f"  rules      relocation mark {rules['exchange_records_per_s']:,.0f} records/s per exchange, "
            f"{rules['min_exchanges']} to {rules['max_exchanges']} exchanges, sustain {rules['sustain_s']:g} s, "
            f"cool-down {rules['cooldown_s']:g} s")
        subs = [_load(monitor, "subscribe", ["--prefix", p, "--idle-exit", "3"]) for p in SUBSCRIBERS]
        children += subs
        for s in subs:
            s.wait_ready()
        say(f"  {len(subs)} subscribers joined (prefixes: {', '.join(repr(p) for p in SUBSCRIBERS)})")
        pubs = [
            _load(monitor, "publish", ["--rate", str(rate), "--duration", str(DURATION), "--keys", keys])
            for rate, keys in PUBLISHERS
        ]
        children += pubs
        for p in pubs:
            p.wait_ready()
        total_rate = sum(r for r, _ in PUBLISHERS)
        say(f"  {len(pubs)} publishers sending {total_rate:,} records/s in all for {DURATION:.0f} s")
        started = time.monotonic()
        actions = {3.0: "force", 5.0: "force", 6.0: "add", 7.0: "kill"}
        while any(p.alive() for p in pubs):
            elapsed = time.monotonic() - started
            for at, action in list(actions.items()):
                if elapsed >= at:
                    del actions[at]
                    say("  " + _act(cluster, admin, action))
            status = admin.status()
            rate = sum(x.records_per_s for x in status.exchanges)
            say(f"  t={elapsed:4.1f}s  exchanges {len(status.exchanges)}  publishers {len(status.publishers)}  "
                f"{rate:9,.0f} records/s  relocations {status.count('relocations')}  "
                f"failovers {status.count('failovers')}")
            time.sleep(1.0)
        pub_reports = [parse_report(p.communicate(60)) for p in pubs]
        sub_reports = [parse_report(s.communicate(60)) for s in subs]
        status = admin.status()
        queue = cluster.manager.list()[0]
        placed = ", ".join(f"{x['Name']}@{x['Host']}" for x in queue["Exchanges"])
        say(f"queue 'demo' now has exchanges {placed}")
    finally:
        for child in children:
            child.stop()
        if admin is not None:
            admin.close()
        cluster.stop()
    return _summarise(say, pub_reports, sub_reports, status)


def _act(cluster: EmbeddedCluster, admin: client.Connection, action: str) -> str:
    if action == "force":
        moved = admin.relocate()
        return f"forced relocation: publisher {moved['publisher'][:8]} {moved['source']} -> {moved['target']}"
    if action == "add":
        made = cluster.manager.add_exchange("demo", "127.0.0.12")
        return f"exchange {made['name']} added on {made['Host']} through the management API"
    victim = max(admin.status().exchanges, key=lambda x: x.records_per_s)
    os.kill(victim.pid, signal.SIGKILL)
    return f"exchange {victim.id} killed with SIGKILL (pid {victim.pid}) under load; its host manager starts a new one"


def _summarise(say: Any, pubs: list[dict], subs: list[dict], status: QueueStatus) -> int:
    sent = {r["publisher"]: r["keys"] for r in pubs}
    total_sent = sum(r["sent"] for r in pubs)
    say("")
    say(f"published: {total_sent:,} records ({sum(r['rate'] for r in pubs):,.0f} records/s in all)")
    c = status.count
    say(f"monitor:   {c('relocations')} relocations ({c('failovers')} failovers), {c('exchanges_lost')} exchange lost, "
        f"{c('limit_cases')} limit cases, {c('flaps')} flaps")
    for e in status.events:
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
