"""Relocation under continuous load: forced and rule-driven moves lose, duplicate and reorder nothing."""

from __future__ import annotations

import time

from roq.errors import NotFoundError, UnavailableError
from simulation.audit import compare

FAST = ["--kpi-period", "0.5"]


def test_twenty_relocations_under_load_lose_nothing(make_cluster, loads):
    # One exchange first: the publishers all land on it; then two more join and the rule
    # (mark 6,000 records/s, sustained 1 s) moves publishers onto them. Forced moves follow.
    cluster = make_cluster(
        exchanges=1,
        monitor_args=[*FAST, "--high-records-per-s", "6000", "--sustain", "1", "--cooldown", "1.5"],
        exchange_args=FAST,
    )
    m = cluster.monitor_endpoint
    subs = [loads.start("subscribe", m, "--prefix", p, "--idle-exit", "5") for p in ("", "orders.", "stock.eu")]
    pubs = [
        loads.start("publish", m, "--rate", "2500", "--duration", "120", "--keys", keys, "--key-run", "20")
        for keys in ("orders.eu,stock.eu", "orders.us", "stock.eu,stock.us", "orders.asia,orders.eu")
    ]
    cluster.wait_for(lambda s: len(s.publishers) == 4, 10, "4 publishers registered")
    cluster.add_exchange()
    cluster.add_exchange()
    status = cluster.wait_for(
        lambda s: any(e["kind"] == "relocated" and e["reason"] == "rule" for e in s.events), 30,
        "a relocation decided by the rule",
    )
    deadline = time.monotonic() + 90
    while status.count("relocations") < 24:
        assert time.monotonic() < deadline, f"only {status.count('relocations')} relocations"
        try:
            cluster.relocate()
        except (UnavailableError, NotFoundError):  # the chosen publisher is already moving, or none can move: ask again
            pass
        status = cluster.wait_for(lambda s: s.relocations_in_flight == 0, 10, "the move to finish")
    sent = {}
    for pub in pubs:
        report = loads.report(pub, stop=True)
        assert report["error"] == ""
        sent[report["publisher"]] = report["keys"]
    status = cluster.status()
    relocated = [e for e in status.events if e["kind"] == "relocated"]
    reasons = {e["reason"] for e in relocated}
    assert len(relocated) >= 20 and {"rule", "forced"} <= reasons
    assert status.count("relocations_failed") == 0
    print(f"{len(relocated)} relocations ({', '.join(sorted(reasons))}); "
          f"longest {max(e['duration_ms'] for e in relocated):.1f} ms")
    loads.publishers_done(*subs)
    for sub in subs:
        report = loads.report(sub)
        audit = compare(report["audit"], sent, report["prefix"].encode())
        assert audit["expected"] > 5_000, audit
        assert (audit["lost"], audit["duplicated"], audit["reordered"]) == (0, 0, 0), (report["prefix"], audit)
        assert report["stats"]["gaps"] == 0
        print(f"subscriber {report['prefix']!r}: {audit}; held-release timeouts {report['stats']['hold_timeouts']}")
