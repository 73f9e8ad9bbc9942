"""A synthetic KPI archive with a known exchange capacity: ``python -m simulation.kpi_history --out DIR``.

For testing and measuring ``roq kpi``: every exchange's CPU rises linearly with its throughput,
``idle + (100 - idle) * x / capacity`` % of a core, and saturates at 100% (an exchange offered more
than its capacity carries its capacity), plus Gaussian noise. Loads wander between idle and 1.3 x
capacity. Beside the exchange records come the other kinds an archive holds: each exchange's
publishers, subscribers (latency grows as exchanges near saturation), hosts and a few events. Records
are written with the real :class:`~roq.kpi.archive.ArchiveWriter`, one second of KPIs per step.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from roq.kpi.archive import HOSTS_PARTITION, ArchiveWriter
from roq.kpi.records import EventRecord, ExchangeRecord, HostRecord, PublisherRecord, SubscriberRecord

__all__ = ["generate", "main"]


def generate(out: str, *, records: int, capacity: float = 40_000.0, queues: int = 1, exchanges: int = 3,
             hosts: int = 2, noise: float = 3.0, idle: float = 3.0, start: float | None = None,
             seed: int = 7) -> int:
    """Write about ``records`` records to the archive at ``out``; return how many were written."""
    rng = random.Random(seed)
    t = (time.time() - 86400) if start is None else start
    names = [f"q{i + 1}" for i in range(queues)] if queues > 1 else ["synthetic"]
    writers = {q: ArchiveWriter(out, q, "synthetic", retention_days=0, rotate_bytes=32 << 20, rotate_s=3600,
                                clock=lambda: t) for q in names}
    host_writer = ArchiveWriter(out, HOSTS_PARTITION, "synthetic", retention_days=0, rotate_s=3600, clock=lambda: t)
    addresses = [f"127.0.0.{11 + i}" for i in range(hosts)]
    load = {(q, e): rng.uniform(0, capacity) for q in names for e in range(exchanges)}
    written = 0
    while written < records:
        for q in names:
            w = writers[q]
            for e in range(exchanges):
                offered = min(1.3 * capacity, max(0.0, load[(q, e)] + rng.gauss(0, 0.08 * capacity)))
                load[(q, e)] = offered
                x = min(offered, capacity)
                cpu = max(0.0, min(100.0, idle + (100 - idle) * x / capacity) + rng.gauss(0, noise))
                xid, host = f"x{e + 1}-syn", addresses[e % hosts]
                w.append(ExchangeRecord(exchange=xid, host=host, period=1.0, records_in=int(x),
                                        bytes_in=int(x) * 200, records_out=int(x) * 2, bytes_out=int(x) * 400,
                                        publishers=2, cpu_percent=round(cpu, 2), rss_bytes=60 << 20,
                                        busy=round(min(1.0, x / capacity), 3), dropped=0), t)
                for p in range(2):
                    w.append(PublisherRecord(publisher=f"p{e}{p}", exchange=xid, host=host, period=1.0,
                                             records=int(x / 2), bytes=int(x / 2) * 200), t)
                written += 3
            heat = max(load[(q, e)] for e in range(exchanges)) / capacity
            for s in range(2):
                p50 = 1.0 + 20.0 * max(0.0, heat - 0.8) + rng.random() * 0.2
                w.append(SubscriberRecord(subscriber=f"s{s}", prefix="", period=1.0,
                                          records=int(sum(load[(q, e)] for e in range(exchanges))),
                                          latency_p50_ms=round(p50, 3), latency_p99_ms=round(p50 * 4, 3),
                                          gaps=0, lost=0, duplicates=0), t)
                written += 1
            if rng.random() < 0.01:
                w.append(EventRecord(event="relocated", text="synthetic relocation", exchange="x1-syn",
                                     publisher="p00", reason="rule"), t)
                written += 1
        for h in addresses:
            cpu = round(rng.uniform(20, 90), 1)
            host_writer.append(HostRecord(host=h, cpu_percent_now=cpu, cpu_percent=cpu, memory_percent=40.0,
                                          net_bytes_per_s=0.0), t)
            written += 1
        t += 1.0
        for w in (*writers.values(), host_writer):
            w.tick(t)
    for w in (*writers.values(), host_writer):
        w.close()
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulation.kpi_history", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the archive directory to write (created if missing)")
    p.add_argument("--records", type=int, default=100_000, help="about how many records (default 100,000)")
    p.add_argument("--capacity", type=float, default=40_000.0, help="each exchange's capacity, records/s (default 40,000)")
    p.add_argument("--queues", type=int, default=1, help="queues (default 1: 'synthetic')")
    p.add_argument("--exchanges", type=int, default=3, help="exchanges per queue (default 3)")
    p.add_argument("--noise", type=float, default=3.0, help="CPU noise, standard deviation in %% (default 3)")
    args = p.parse_args(argv)
    if args.records < 1 or args.capacity <= 0 or args.queues < 1 or args.exchanges < 1:
        p.error("--records, --capacity, --queues and --exchanges must be positive")
    started = time.monotonic()
    n = generate(args.out, records=args.records, capacity=args.capacity, queues=args.queues,
                 exchanges=args.exchanges, noise=args.noise)
    print(f"{n:,} records written to {args.out} in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
