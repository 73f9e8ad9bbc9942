"""Garbage on every listening port of every process of a running cluster, under audited load.

The seeds: ``ROQ_FUZZ_SEEDS`` of them (default 6; ``make fuzz`` runs 1,000) from ``ROQ_FUZZ_SEED_BASE`` on (default:
a new base each run, printed, so that the runs of make test go through new seeds rather than the same few again;
the base printed runs them again). Before the seeds,
one sweep sends every command of the protocol with each field replaced by each wrong type, every bad value,
huge and nested documents, every broken batch and broken greetings to every port. Afterwards every process
still has its pid, none grew its memory by more than :data:`RSS_GROWTH`, the management API answers, the
load that ran through it all was delivered exactly, and a fresh audited run of 10,000 records is exact.
"""

from __future__ import annotations

import os
import random
import time

import psutil
import pytest
from tests.integration.queues import Queue

from roq.wire.status import of_stats
from simulation import fuzz
from simulation.audit import compare
from tests.integration.zkhelp import wait_until

SEED_BASE = int(os.environ.get("ROQ_FUZZ_SEED_BASE") or random.randrange(1_000_000))
SEEDS = range(SEED_BASE, SEED_BASE + int(os.environ.get("ROQ_FUZZ_SEEDS", "6")))
RSS_GROWTH = 200 << 20  # bytes a process may have grown by after all of it (garbage is transient)


def _targets(cluster, q: Queue) -> list[fuzz.Target]:
    targets = []
    for gid, child in cluster.gcms.items():
        targets += [fuzz.Target(f"{gid} look-up", child.info.lookup, "server"),
                    fuzz.Target(f"{gid} management", child.info.management, "server"),
                    fuzz.Target(f"{gid} broadcast", child.info.broadcast, "pub"),
                    fuzz.Target(f"{gid} http", child.info.http, "http")]
    for address, child in cluster.hostmanagers.items():
        targets += [fuzz.Target(f"host manager {address}", child.info.endpoint, "server"),
                    fuzz.Target(f"host manager {address} http", child.info.http, "http")]
    targets.append(fuzz.Target("monitor", q.monitor, "server"))
    status = q.status()
    for x in status.exchanges:
        targets += [fuzz.Target(f"exchange {x.id} frontend", x.frontend, "frontend"),
                    fuzz.Target(f"exchange {x.id} backend", x.backend, "backend")]
    journal = status.journal
    if journal.journal:  # a durable queue: its journal's intake takes batches, its reads port commands
        targets += [fuzz.Target("journal intake", journal.intake, "frontend"),
                    fuzz.Target("journal reads", journal.reads, "reads")]
    return targets


def _processes(cluster, q: Queue) -> dict[str, int]:
    status = q.status()
    pids = {f"gcm {gid}": c.pid for gid, c in cluster.gcms.items()}
    pids.update({f"host manager {a}": c.pid for a, c in cluster.hostmanagers.items()})
    pids["monitor"] = status.pid
    pids.update({f"exchange {x.id}": x.pid for x in status.exchanges})
    if status.journal.journal:
        pids["journal"] = status.journal.pid
    return pids


def _rss(pids: dict[str, int]) -> dict[str, int]:
    return {name: psutil.Process(pid).memory_info().rss for name, pid in pids.items()}


def _fresh_run_is_exact(loads, q: Queue) -> None:
    """A fresh audited run of 10,000 records through ``q`` arrives exactly."""
    sub = loads.start("subscribe", *q.where, "--idle-exit", "3")
    pub = loads.start("publish", *q.where, "--count", "10000", "--rate", "5000", "--keys", "fresh,again")
    report = loads.report(pub)
    assert report["error"] == "" and sum(report["keys"].values()) == 10_000, report
    audit = compare(loads.report(sub)["audit"], {report["publisher"]: report["keys"]})
    assert (audit["expected"], audit["received"], audit["lost"], audit["duplicated"], audit["reordered"]) == (
        10_000, 10_000, 0, 0, 0), audit


@pytest.mark.timeout(240 + 3 * len(SEEDS))
def test_garbage_on_every_port_kills_nothing_and_loses_nothing(make_embedded, loads):
    cluster = make_embedded(hosts=2, gcms=2)
    q = Queue(cluster, loads, "fuzzq", "127.0.0.11", min_exchanges=2, max_exchanges_per_host=1, host_cpu_percent=100,
              durability="interval")  # durable: its journal's ports too
    q.wait(lambda s: len(s.exchanges) == 2 and s.journal.alive, 30,
           "the queue's two exchanges, one per host, and its journal")
    q.subscribe()
    q.subscribe("b")
    q.publish(400, "a,b")
    q.wait(lambda s: sum(x.records_per_s for x in s.exchanges) > 200, 20, "the load flowing")
    targets = _targets(cluster, q)
    before = _processes(cluster, q)
    rss_before = _rss(before)
    print(f"fuzzing {len(targets)} ports of {len(before)} processes with {len(SEEDS)} seeds from {SEED_BASE} "
          f"(ROQ_FUZZ_SEED_BASE={SEED_BASE} runs them again)")

    started = time.monotonic()
    tally = fuzz.sweep(targets, "fuzzq")
    for seed in SEEDS:
        tally.counts.update({k: tally.counts.get(k, 0) + v for k, v in fuzz.fuzz_round(targets, seed, "fuzzq").counts.items()})
    print(f"sent {tally.total:,} pieces of garbage in {time.monotonic() - started:.1f}s: {tally.counts}")
    # every malformed request that fits a server's size limit was answered, and refused
    assert tally.counts["answered"] == tally.counts["asked"] > 15_000 and "accepted" not in tally.counts, tally.counts
    # every broken HTTP request was answered (refused), none ignored
    unanswered = {k: v for k, v in tally.counts.items() if k.startswith("unanswered")}
    assert tally.counts["http answered"] == tally.counts["broken HTTP"] > 80 + 20 * len(SEEDS), unanswered  # (30 a seed)

    # every process is the one it was, and serves
    assert _processes(cluster, q) == before
    grown = {name: (rss - rss_before[name]) >> 20 for name, rss in _rss(before).items()}
    print(f"RSS growth, MB: {grown}")
    assert all(mb < RSS_GROWTH >> 20 for mb in grown.values()), grown
    assert [x["Name"] for x in cluster.manager.list()] == ["fuzzq"]
    stats = cluster.manager.stats("fuzzq")
    assert of_stats(stats).count("dropped_messages") > 1000  # it saw the garbage, counted and refused it
    assert stats["Rules"]["max_exchanges"] == 4 and stats["Rules"]["sustain_s"] == 2.0  # no bad rule got in
    audits = q.audit()  # the load that ran through all of it
    assert audits[0]["expected"] > 1000

    _fresh_run_is_exact(loads, q)
    wait_until(lambda: _processes(cluster, q) == before, 5, "still the same processes")
    for target in [t for t in targets if t.kind == "http"]:  # the HTTP ports serve on
        assert fuzz.send_raw(target.endpoint, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n", wait=2.0).startswith(
            b"HTTP/1.1 200"), target


@pytest.mark.timeout(240)
def test_garbage_and_strangers_handshakes_at_a_secure_cluster_kill_nothing_and_lose_nothing(make_embedded, loads):
    """The same at a cluster that serves CURVE everywhere: garbage from clients without keys dies at the
    handshake; handshakes with unknown keys, a wrong server key or another mechanism are refused (ZAP, or the
    handshake itself) and counted; garbage from a key of the keyring without permissions reaches the
    dispatchers and is refused there; and the audited load through all of it is exact."""
    from roq.config import CurveClient

    cluster = make_embedded(hosts=2, gcms=1, secure=True)
    q = Queue(cluster, loads, "fuzzq", "127.0.0.11", min_exchanges=2, max_exchanges_per_host=1, host_cpu_percent=100,
              durability="always")
    q.wait(lambda s: len(s.exchanges) == 2 and s.journal.alive, 30,
           "the queue's two exchanges, one per host, and its journal")
    q.subscribe()
    q.publish(400, "a,b")
    q.wait(lambda s: sum(x.records_per_s for x in s.exchanges) > 200, 20, "the load flowing")
    targets = _targets(cluster, q)
    before = _processes(cluster, q)
    mallory = CurveClient.load(cluster.keys.client("mallory"))  # in the keyring, allowed nothing
    server_key = mallory.server_key.encode()
    tally = fuzz.Tally()
    for seed in range(2):
        for part in (fuzz.fuzz_round(targets, seed, "fuzzq"), fuzz.fuzz_round(targets, seed, "fuzzq", curve=mallory),
                     fuzz.strangers(targets, seed, server_key)):
            tally.counts.update({k: tally.counts.get(k, 0) + v for k, v in part.counts.items()})
    print(f"sent {tally.total:,} pieces of garbage and handshakes: {tally.counts}")
    assert _processes(cluster, q) == before
    assert [x["Name"] for x in cluster.manager.list()] == ["fuzzq"]
    audits = q.audit()
    assert audits[0]["expected"] > 1000
    logs = ""
    for root, _, files in os.walk(cluster.log_dir):
        logs += "".join(open(os.path.join(root, f), errors="replace").read() for f in files if f.endswith(".log"))
    # mallory's messages name ids that are not her key's (refused before her permissions are looked at)
    for reason in ("refused: unknown key", "forged id", "bad connection"):
        assert reason in logs, reason
