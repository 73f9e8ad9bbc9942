"""``python -m simulation.bench``: RoQ-Py's throughput and latency beside a raw-pyzmq baseline, in one run.

Configurations (100-byte payloads unless ``--size``):

(a) baseline: raw pyzmq PUB -> SUB, each record its own ZeroMQ message ``[key, payload]`` (as the
    original system sent them), one publisher process, one subscriber process;
(b) RoQ end to end through the client API: 1 publisher -> 1 exchange -> 1 subscriber;
(c) RoQ: 4 publishers over 2 exchanges to 2 subscribers (every subscriber receives everything);
(d) control plane on a real ZooKeeper, a GCM and 3 host managers: time from a create-queue request to the
    queue accepting publishers (a publisher's first record acknowledged), beside the 2 s the original
    slept by design; time from a topology change in ZooKeeper (a host node appearing or going) to the
    GCM's broadcast saying so at a subscriber;
(e) elasticity (:mod:`simulation.bench_elastic`): on the same kind of cluster, from an exchange's overload
    to a new exchange carrying traffic, beside the floor of an add-exchange request; the longest send of
    a moved publisher beside one not moved; then records/s from 4 publishers through 1, 2, 3 exchanges;
(f) the KPI pipeline (:mod:`simulation.bench_kpi`): archive write cost per record beside decoding the KPI
    message, and ``roq kpi report`` over a 1,000,000-record archive beside parsing it in one process;
(g) as (b), through the client's batch API: ``send_many`` of 1,000 records a call, ``recv_many``;
(h) capacity on emulated hosts (:mod:`simulation.bench_capacity`; root: cgroups and namespaces): records/s
    of a queue held at 1, 2, 3, 4 exchanges on hosts of a tenth of a core each;
(i) observability (:mod:`simulation.bench_http`): (b) and (c) with a real Prometheus scraping every second
    and the dashboard's live feed read, beside neither; ``/metrics`` of 1,000 queues; a queue's statistics
    over HTTP;
(j) as (b), with CURVE between the clients and the exchange (the cluster's key, a keyring admitting the
    client's key), beside (b);
(k) durable queues (:mod:`simulation.bench_durable`): 1 KiB records acknowledged under durability none,
    interval and always (batched, one at a time, and every record's acknowledgement latency paced at
    ``--ack-rate``) and a replay from the start, beside NATS JetStream's file store with its default sync
    and with ``sync_interval: always``;
(l) the dashboard in a real browser (:mod:`simulation.bench_page`): a state of 100 queues drawn, events added, and
    a forced scale-out's event on the live page;
(m) the KPI tuner on an emulated host of a known CPU budget (:mod:`simulation.bench_tuner`; root): its capacity
    estimate beside the saturation throughput measured in the same run;
(n) the GCM's HTTP server under abuse (:mod:`simulation.bench_abuse`): health-check latency and the GCM's CPU
    while a slowloris, readers that never read, a held ``HEAD``, pipelined health checks and a half-closing
    client work on it, beside the same figures with the health checks alone;
(o) across links (:mod:`simulation.bench_link`): a durable queue's records at subscribers one and two sites away,
    where on-demand link processes carry them, beside a subscriber at the queue's own site, in the same run; and
    the time from a subscriber's joining two links away to its first record;
(p) a link that compresses beside one that does not (:mod:`simulation.bench_compression`), on JSON orders:
    records/s across a link capped at 8 Mbit/s, and the CPU the link and the far exchange spend uncapped;
(q) a replicated journal (:mod:`simulation.bench_replicas`): a leader and two followers beside one journal,
    ``durability = always``: acknowledged records/s of 100 B and 1 KiB records, acknowledgement latency one record
    at a time, and a replay from the start;
(r) starting a process (:mod:`simulation.bench_spawn`): an exchange to its ready line, forked from a prefork
    server beside a new interpreter, taken in turn;
(s) Spark reading a durable queue (:mod:`simulation.bench_spark`) through the ``roq`` data source, on one core and
    on two, beside a replay subscriber reading the same queue.

For each: delivered records/s and MB/s of payload when publishers send as fast as they can (records
lost are reported), then p50/p99 latency (send time in the payload -> receipt) with publishers paced
at ``--rate`` records/s in all. Only ratios within one run mean something: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict

from simulation import (bench_abuse, bench_capacity, bench_compression, bench_control, bench_dataplane, bench_durable,
                        bench_elastic, bench_http, bench_kpi, bench_link, bench_page, bench_replicas, bench_spark,
                        bench_spawn, bench_tuner)
from simulation.bench_common import STAMP, Check, Result


def run(args: argparse.Namespace) -> list[Result]:
    def progress(text: str) -> None:
        print(f"  .. {text}", file=sys.stderr, flush=True)

    results = bench_dataplane.run(args, progress)
    if "d" in args.only:
        results += bench_control.bench_control(args.trials, progress)
    if "e" in args.only:
        results += bench_elastic.run(args, progress)
    if "f" in args.only:
        results += bench_kpi.run(args, progress)
    if "h" in args.only:
        results += bench_capacity.run(args, progress)
    if "i" in args.only:
        results += bench_http.run(args, progress)
    if "k" in args.only:
        results += bench_durable.run(args, progress)
    if "l" in args.only:
        results += bench_page.run(args, progress)
    if "m" in args.only:
        results += bench_tuner.run(args, progress)
    if "n" in args.only:
        results += bench_abuse.run(args, progress)
    if "o" in args.only:
        results += bench_link.run(args, progress)
    if "p" in args.only:
        results += bench_compression.run(args, progress)
    if "q" in args.only:
        results += bench_replicas.run(args, progress)
    if "r" in args.only:
        results += bench_spawn.run(args, progress)
    if "s" in args.only:
        results += bench_spark.run(args, progress)
    return results


def render(results: list[Result], args: argparse.Namespace) -> str:
    import zmq

    lines = [
        f"RoQ-Py benchmark, {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()}: {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, pyzmq {zmq.__version__} / libzmq {zmq.zmq_version()}",
        f"payload {args.size} B; throughput over {args.records:,} records per publisher group; "
        f"latency at {args.rate:,.0f} records/s in all for {args.latency_seconds:.0f} s",
        "",
        f"{'configuration':62} {'records/s':>11} {'MB/s':>7} {'lost':>6} {'p50 ms':>7} {'p99 ms':>7}",
    ]
    for r in results:
        lat = r.latency_ms
        if r.name.startswith(("(d)", "(e)", "(f)", "(h)", "(i)", "(k)", "(l)", "(m)", "(n)", "(p)", "(q)", "(r)", "(s)")):
            continue
        lines.append(
            f"{r.name:62} {r.records_per_s:11,.0f} {r.mb_per_s:7.1f} {r.lost:6d} "
            f"{lat.get('p50', float('nan')):7.2f} {lat.get('p99', float('nan')):7.2f}"
        )
    by = {r.name[:3]: r for r in results}
    if "(a)" in by and "(b)" in by and by["(a)"].records_per_s:
        ratio = by["(b)"].records_per_s / by["(a)"].records_per_s
        lines.append("")
        lines.append(f"(b) / (a) throughput: {ratio:.2f}x (target >= 2x); "
                     f"(b) p99 at {args.rate:,.0f} records/s: {by['(b)'].latency_ms.get('p99', float('nan')):.2f} ms "
                     "(target <= 5 ms)")
    if "(b)" in by and "(j)" in by and by["(b)"].records_per_s:
        plain, curve = by["(b)"], by["(j)"]
        extra = curve.latency_ms.get("p99", float("nan")) - plain.latency_ms.get("p99", float("nan"))
        lines.append(f"(j) / (b), CURVE beside plaintext: throughput {curve.records_per_s / plain.records_per_s:.2f}x "
                     f"(target >= 0.70); p99 {extra:+.2f} ms (target <= +1 ms)")
    apis = [r for r in results if r.name[:3] in ("(b)", "(g)")]
    if apis:
        lines += ["", f"{'records/s per process, per-record API beside batch API':62} {'publisher':>11} "
                      f"{'subscriber':>11}"]
        lines += [f"{r.name:62} {r.notes.get('publisher_records_per_s', 0):11,.0f} {r.records_per_s:11,.0f}"
                  for r in apis]
        lines.append("target: one subscriber through recv_many takes >= 2,000,000 records/s of 100 bytes")
    control = [r for r in results if r.name.startswith("(d)")]
    if control:
        lines += ["", f"{'control plane':62} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}  trials"]
        for r in control:
            lat = r.latency_ms
            lines.append(f"{r.name:62} {lat.get('p50', 0):9.1f} {lat.get('p99', 0):9.1f} {lat.get('max', 0):9.1f}  "
                         f"{r.notes['trials']}")
        lines.append("targets: create median <= 1000 ms (the original slept 2000 ms by design); "
                     f"broadcast p99 <= 200 ms; a standby leads within the session timeout "
                     f"({bench_control.SESSION_TIMEOUT:g} s) + 2 s; an exchange is back within 3 s")
    for r in results:
        if "exchange_rss_mb" in r.notes:
            lines.append(f"{r.name[:3]} exchange RSS after the runs (MB): {r.notes['exchange_rss_mb']}")
    lines += bench_elastic.render(results)
    lines += bench_kpi.render(results)
    lines += bench_capacity.render(results)
    lines += bench_durable.render(results)
    lines += bench_page.render(results)
    lines += bench_tuner.render(results)
    lines += bench_http.render(results)
    lines += bench_abuse.render(results)
    lines += bench_link.render(results)
    lines += bench_compression.render(results)
    lines += bench_replicas.render(results)
    lines += bench_spawn.render(results)
    lines += bench_spark.render(results)
    return "\n".join(lines)


def checks(results: list[Result], args: argparse.Namespace) -> list[Check]:
    """Every target of the configurations that ran, with its figure."""
    return (bench_dataplane.checks(results, args.rate) + bench_control.checks(results) + bench_elastic.checks(results)
            + bench_capacity.checks(results) + bench_http.checks(results) + bench_durable.checks(results)
            + bench_page.checks(results) + bench_tuner.checks(results) + bench_abuse.checks(results)
            + bench_link.checks(results) + bench_replicas.checks(results) + bench_spawn.checks(results)
            + bench_spark.checks(results))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulation.bench", description=__doc__.split("\n\n")[0],
                                epilog="Configurations are described in the module's documentation.")
    p.add_argument("--records", type=int, default=1_000_000, help="records sent in a throughput run (default 1,000,000)")
    p.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    p.add_argument("--rate", type=float, default=20_000, help="records/s in all for the latency runs (default 20,000)")
    p.add_argument("--latency-seconds", type=float, default=5.0, help="length of a latency run (default 5)")
    p.add_argument("--ack-rate", type=float, default=5_000,
                   help="records/s of (k)'s paced run, one record a send, every acknowledgement timed (default 5,000)")
    p.add_argument("--only", default="abcdefghijklmnopqrs", help="which configurations to run (default abcdefghijklmnopqrs)")
    p.add_argument("--observed-rounds", type=int, default=2,
                   help="runs each of (i)'s data plane unwatched and watched, alternating (default 2)")
    p.add_argument("--kpi-records", type=int, default=1_000_000,
                   help="records in the synthetic KPI archive of (f) (default 1,000,000)")
    p.add_argument("--trials", type=int, default=10,
                   help="queues created and topology changes in (d), at most 3 overloads in (e) (default 10)")
    p.add_argument("--json", default=None, help="also write the results as JSON to this file")
    p.add_argument("--check", action="store_true",
                   help="exit with status 1 when a figure misses its target (make bench-check)")
    args = p.parse_args(argv)
    if args.size < STAMP.size:
        p.error(f"--size must be at least {STAMP.size}")
    try:
        results = run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(render(results, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)
    if args.check:
        held = checks(results, args)
        print("\nchecks:\n" + "\n".join(c.line() for c in held))
        missed = [c for c in held if not c.ok]
        if missed or not held:
            print(f"{len(missed)} of {len(held)} figures missed their targets" if held else "no figure to check")
            return 1
        print(f"all {len(held)} figures met their targets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
