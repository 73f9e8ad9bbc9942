"""A subscriber that stops reading costs the exchange a bounded number of bytes, and nobody else anything.

One publisher sends as fast as it can for 14 s, one subscriber reads everything, one stops reading for 10 s
(it takes no batch: it makes no progress, and the exchange sends past it once its grace ran out) and then
reads on. The stalled one falls behind by hundreds of megabytes at least; the exchange holds at most its
per-subscriber byte bound for it (``subscriber_queue_bytes``, 64 MiB by default): its RSS must stay under that
plus 100 MB. The one that keeps up loses nothing; the stalled one loses records and counts every gap. (A
subscriber that reads, however slowly, is not sent past: it holds the publisher back to its pace,
``test_flow_control.py``.)
"""

from __future__ import annotations

import psutil

from roq.config import DEFAULT_SUBSCRIBER_QUEUE_BYTES
from simulation.audit import compare
from tests.integration.memory import PeakRss

SECONDS = 14  # at 30-180 MB/s, 0.4 to 2.5 GB: far past the 64 MiB bound
STALL = 10.0  # seconds the slow subscriber reads nothing: 20 of the exchange's graces
RECORD = 4000  # bytes: batches near the publisher's 128 KiB bound, so the slow subscriber's backlog is in bytes
LIMIT = DEFAULT_SUBSCRIBER_QUEUE_BYTES + (100 << 20)


def test_a_slow_subscriber_costs_the_exchange_its_byte_bound_and_the_others_nothing(make_cluster, loads):
    cluster = make_cluster(exchanges=1)
    exchange = psutil.Process(cluster.exchanges["x1"].pid)
    m = cluster.monitor_endpoint
    fast = loads.start("subscribe", m, "--idle-exit", "5")
    # its own queue small, so that it reads past the exchange's holes within the run and sees them
    slow = loads.start("subscribe", m, "--pause-at", "1000", "--pause-for", str(STALL), "--rcvhwm", "20",
                       "--duration", str(SECONDS + 5))
    pub = loads.start("publish", m, "--duration", str(SECONDS), "--size", str(RECORD), "--keys", "a,b")

    with PeakRss(exchange) as rss:
        report = loads.report(pub, timeout=SECONDS + 60)
    assert report["error"] == "", report
    sent = {report["publisher"]: report["keys"]}
    sent_bytes = report["sent"] * RECORD
    print(f"published {report['sent']:,} records ({sent_bytes / 2**30:.1f} GiB) in {report['elapsed']:.1f}s; "
          f"exchange RSS peak {rss.peak / 2**20:.0f} MB (limit {LIMIT / 2**20:.0f} MB)")
    assert sent_bytes > 4 * DEFAULT_SUBSCRIBER_QUEUE_BYTES  # the slow one fell far further behind than the bound
    assert rss.peak < LIMIT

    loads.publishers_done(fast)
    keeping_up = compare(loads.report(fast)["audit"], sent)
    print(f"keeping up: {keeping_up}")
    assert keeping_up["expected"] == report["sent"]
    assert (keeping_up["lost"], keeping_up["duplicated"], keeping_up["reordered"]) == (0, 0, 0), keeping_up

    behind = loads.report(slow, timeout=60)
    audit = compare(behind["audit"], sent)
    print(f"slow: received {behind['received']:,}; audit {audit}; its own count: {behind['stats']}")
    assert audit["dropped"] > 0 and (audit["duplicated"], audit["reordered"]) == (0, 0)
    # every record in a hole is counted by the client; it may also have counted holes beyond the last record
    # the application read (batches it had taken in and not yet handed out when it stopped), which the audit
    # files under undelivered
    assert behind["stats"]["gaps"] > 0
    assert audit["dropped"] <= behind["stats"]["lost"] <= audit["dropped"] + audit["undelivered"]
    assert cluster.exchanges["x1"].alive() and exchange.pid == cluster.exchanges["x1"].pid
