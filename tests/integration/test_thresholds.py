"""Thresholds written as the KPI tuner writes them reach a running monitor at once and drive its next
relocation decision; the monitor and the host manager archive every kind of KPI record as they run."""

from __future__ import annotations

import json
import os
import time

from tests.integration.queues import Queue


def archived_kinds(archive: str) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for d, _, files in os.walk(archive):
        for name in files:
            assert not name.startswith("."), f"a part left unfinished after a clean stop: {d}/{name}"
            for line in open(os.path.join(d, name)):
                kind = json.loads(line)["kind"]
                kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def test_a_running_monitor_adopts_new_thresholds_and_relocates_by_them(make_embedded, loads, tmp_path):
    archive = str(tmp_path / "archive")
    cluster = make_embedded(hosts=1, kpi_archive=archive)
    q = Queue(cluster, loads, "tuned", kpi_period_s=0.5, sustain_s=1.0, cooldown_s=1.0, smoothing=1.0,
              max_exchanges=2, host_cpu_percent=100)
    cluster.manager.add_exchange("tuned")
    cluster.manager.set_rules("tuned", {"min_exchanges": 2})
    status = q.wait(lambda s: len(s.exchanges) == 2, 20, "two exchanges")
    first = status.exchanges[0].id
    q.subscribe()
    for _ in range(4):
        q.publish(500, "k")
    status = q.wait(lambda s: len(s.publishers) == 4, 20, "four publishers")
    for p in status.publishers:  # all of them onto one exchange: 2,000 records/s, under the default mark
        if p.exchange != first:
            q.conn.relocate(p.id, first)
    q.wait(lambda s: all(p.exchange == first and not p.relocating for p in s.publishers)
           and next(x for x in s.exchanges if x.id == first).records_per_s > 1800, 20,
           "2,000 records/s through one exchange")
    assert not q.events("thresholds_adopted")

    # as `roq kpi tune` does: thresholds with their evidence, through the management API
    written = time.time()
    cluster.manager.set_thresholds("tuned", {"exchange_records_per_s": 1500.0}, {"capacity_records_per_s": 1875.0})
    status = q.wait(lambda s: any(e["kind"] == "thresholds_adopted" for e in s.events), 5, "the adoption event")
    adopted = next(e for e in status.events if e["kind"] == "thresholds_adopted")
    print(f"adopted {adopted['time'] - written:.3f} s after the write: {adopted['text']}")
    # how soon is benchmark (d)'s figure (make bench-check)
    assert adopted["adopted"] == ["exchange_records_per_s"] and adopted["overridden"] == []
    assert status.rules["exchange_records_per_s"] == 1500.0

    # the next relocation decision uses the new mark
    status = q.wait(lambda s: any(e["kind"] == "relocated" and e["reason"] == "rule" for e in s.events), 20,
                    "a relocation by the rule")
    moved = next(e for e in status.events if e["kind"] == "relocated" and e["reason"] == "rule")
    print(moved["detail"])
    assert moved["time"] > adopted["time"] and "> high 1,500" in moved["detail"]

    # an explicit rule wins over a threshold, and the event says so
    cluster.manager.set_rules("tuned", {"exchange_records_per_s": 50_000})
    cluster.manager.set_thresholds("tuned", {"exchange_records_per_s": 1200.0})
    status = q.wait(lambda s: len([e for e in s.events if e["kind"] == "thresholds_adopted"]) == 2, 5,
                    "the second adoption event")
    second = [e for e in status.events if e["kind"] == "thresholds_adopted"][-1]
    assert second["overridden"] == ["exchange_records_per_s"] and "rule 50000" in second["text"]
    assert status.rules["exchange_records_per_s"] == 50_000
    q.audit()
    q.close()

    # everything the monitor and the host manager saw is in the archive, in whole files once they stopped
    cluster.stop()
    kinds = archived_kinds(archive)
    print(kinds)
    assert {"exchange", "publisher", "subscriber", "host", "event"} <= set(kinds)
    assert kinds["exchange"] >= 10 and kinds["publisher"] >= 10 and kinds["subscriber"] >= 3
