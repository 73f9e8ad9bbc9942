"""A subscriber that reads steadily is never sent past: it holds its publisher back to its pace; only one that
makes no progress for the exchange's grace is.

With two processes burning CPU beside the cluster while records flow, one publisher sends records as fast as it can
for ``ROQ_FLOW_SECONDS`` (6; ``make flow``: 60) while one subscriber reads them one ``recv()`` at a time: it
loses nothing, and what the publisher had sent when it stopped was never further ahead of what the subscriber
had received than the pipes between them hold. Then a second publisher sends while a second subscriber reads a
record a second (it takes no batch: no progress) until the exchange has sent past it (logged its stall: seconds
on a quiet machine, longer on a busy one), and then reads on as fast as it can while the publisher goes on
for a little: it sees gaps, the first subscriber still loses nothing, and the exchange's memory stays within
its byte bounds. ``ROQ_FLOW_RECORD`` sets the record size (100 bytes; ``make
flow`` also runs 4 KiB).
"""

from __future__ import annotations

import bisect
import os
import signal
import time
from pathlib import Path

import psutil

from roq.config import DEFAULT_SUBSCRIBER_QUEUE_BYTES, ExchangeConfig, PublisherConfig, SubscriberConfig
from simulation.audit import compare
from tests.integration.memory import PeakRss

SECONDS = float(os.environ.get("ROQ_FLOW_SECONDS", "6"))
RECORD = int(os.environ.get("ROQ_FLOW_RECORD", "100"))
STALL_WITHIN = 90.0  # the second subscriber reads a record a second until the exchange sent past it, at most this
AFTER_STALL_S = 60.0  # the second publisher goes on once it was, while the subscriber reads on, until it found a gap
SECOND_PHASE = 30.0  # (the second publisher's --duration beyond STALL_WITHIN: it is stopped before)
#: Two subscribers' pipes at the exchange (each its byte bound), the publishers' pipes, the process itself.
MEMORY_LIMIT = 2 * DEFAULT_SUBSCRIBER_QUEUE_BYTES + (100 << 20)


def in_flight_bound() -> int:
    """Records that may be between a publisher's send and a subscriber's recv when everything between them is
    full: the subscriber's pipe at the exchange, its receive pipe and the batches it took in at once, the
    publisher's pipe at the exchange, and a few hundred batches in the two sockets' kernel buffers and the
    publisher's window; every batch full."""
    batches = ExchangeConfig(monitor="tcp://127.0.0.1:1").subscriber_hwm + SubscriberConfig().rcvhwm + 128 + 256
    publisher = PublisherConfig()
    per_batch = min(publisher.batch_records, publisher.batch_bytes // (RECORD + 4))
    return (batches + 400) * per_batch


def received_at(timeline: list[dict], wall: float) -> int:
    """Records the subscriber had received at wall time ``wall``, as its timeline (every 0.5 s) says: the first
    point at or after it."""
    times = [p["time"] for p in timeline]
    return timeline[min(bisect.bisect_left(times, wall), len(timeline) - 1)]["received"]


def stalls_of(log_dir: Path, subscriber: str = "") -> int:
    """The exchange's log lines saying that ``subscriber``'s pipe stayed full for the grace (it was sent past;
    "": any subscriber's)."""
    said = f"subscriber {subscriber[:8]}: its pipe stayed full" if subscriber else ": its pipe stayed full"
    return sum(line.count(said)
               for log in log_dir.rglob("*.log") if "x1" in log.name for line in log.read_text().splitlines())


def test_a_steady_reader_loses_nothing_and_paces_the_publisher_and_only_a_stalled_one_is_sent_past(
        make_cluster, loads, burner, tmp_path):
    log_dir = tmp_path / "flow"
    cluster = make_cluster(exchanges=1, log_dir=str(log_dir))
    exchange = psutil.Process(cluster.exchanges["x1"].pid)
    m = cluster.monitor_endpoint
    busy = [psutil.Process(p.pid) for p in burner(2)]

    steady = loads.start("subscribe", m, "--idle-exit", "10", "--timeline-every", "0.5")
    with PeakRss(exchange) as rss:
        first = loads.start("publish", m, "--duration", str(SECONDS), "--size", str(RECORD))
        one = loads.report(first, timeout=SECONDS + 120)
        assert one["error"] == "", one
        # its own queue small, so that the pipes to it are full within seconds at the steady one's pace (600
        # batches, not 1,600: at 150,000 records a second those took longer than it stalled). It reads a record a
        # second until the exchange has sent past it (however long the pipes take to fill on a busy machine),
        # then, told so, as fast as it can while the publisher goes on a little
        slow = loads.start("subscribe", m, "--delay-us", "1000000", "--rcvhwm", "20", "--idle-exit", "5")
        second = loads.start("publish", m, "--duration", str(STALL_WITHIN + SECOND_PHASE), "--size", str(RECORD))
        deadline = time.monotonic() + STALL_WITHIN
        while stalls_of(log_dir) < 1 and second.alive():
            assert time.monotonic() < deadline, "the exchange never sent past the stalled subscriber"
            time.sleep(0.2)  # (reading the exchange's log: a wait on a condition, with a deadline)
        slow.signal(signal.SIGUSR2)
        # the load's last phase: records sent while it reads on, until what reaches it shows the gap (its hellos
        # carry its gaps; a fixed 2 s was too short on a busy machine: the records it missed were the last it saw)
        cluster.wait_for(lambda s: any((x.gaps or 0) > 0 for x in s.subscribers), AFTER_STALL_S,
                         "the stalled subscriber to receive past what it missed")
        two = loads.report(second, stop=True, timeout=120)
    assert two["error"] == "", two
    assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in busy)  # busy the whole time
    burner.stop()  # what is left is counting what arrived

    loads.publishers_done(steady, slow)
    kept = loads.report(steady, timeout=120)
    sent = {one["publisher"]: one["keys"], two["publisher"]: two["keys"]}
    audit = compare(kept["audit"], sent)
    timeline = kept["timeline"]
    at_end = received_at(timeline, one["ended"])
    ahead = one["sent"] - at_end
    print(f"phase 1: published {one['sent']:,} records of {RECORD} B in {one['elapsed']:.1f}s "
          f"({one['rate']:,.0f}/s); the steady subscriber had {at_end:,} of them when it stopped ({ahead:,} in flight, "
          f"bound {in_flight_bound():,}), received at {kept['rate']:,.0f}/s overall; latency {kept['latency_ms']}")
    print(f"phase 2: published {two['sent']:,} ({two['rate']:,.0f}/s); steady subscriber: {audit}, "
          f"its own count {kept['stats']}; exchange RSS peak {rss.peak / 2**20:.0f} MB (limit "
          f"{MEMORY_LIMIT / 2**20:.0f} MB)")
    assert audit["expected"] == one["sent"] + two["sent"] == kept["received"]
    assert (audit["lost"], audit["duplicated"], audit["reordered"]) == (0, 0, 0), audit
    assert (kept["stats"]["gaps"], kept["stats"]["lost"]) == (0, 0)
    assert 0 <= ahead <= in_flight_bound()  # the publisher went at the subscriber's pace
    assert stalls_of(log_dir, kept["subscriber"]) == 0

    behind = loads.report(slow, timeout=120)
    missed = compare(behind["audit"], {two["publisher"]: two["keys"]})
    print(f"stalled subscriber: received {behind['received']:,}; {missed}; its own count {behind['stats']}; "
          f"stalls logged {stalls_of(log_dir, behind['subscriber'])}")
    assert stalls_of(log_dir, behind["subscriber"]) >= 1  # sent past once its grace ran out, and logged
    assert missed["dropped"] > 0 and behind["stats"]["gaps"] > 0
    assert (missed["duplicated"], missed["reordered"]) == (0, 0)
    assert rss.peak < MEMORY_LIMIT
    assert cluster.exchanges["x1"].alive() and exchange.pid == cluster.exchanges["x1"].pid
