"""Load generators, each in its own process: ``python -m simulation.load publish|subscribe ...``.

A Python publisher can saturate a core, so load is spread over processes. Each prints ``READY {json}``
once connected, works until its duration, count or idle limit (or SIGTERM), then prints one line
``REPORT {json}``: what it sent (per key) or what it received, with the audit of
:mod:`simulation.audit` and latencies measured from the send time inside every payload.
"""

from __future__ import annotations

import argparse
import array
import dataclasses
import json
import logging
import os
import random
import signal
import sys
import time
from typing import Any, Callable, ClassVar

import client
from roq import defaults
from roq.errors import RoQError
from roq.process import Child, spawn, stop_all
from roq.wire.ready import Ready, register
from roq.runtime import ExitCode, StopFlag, announce_ready, setup_logging
from simulation.audit import PAYLOAD_HEADER, Audit, make_payload
from simulation.histogram import Histogram

REPORT_PREFIX = "REPORT "
#: A paced publisher wakes at most this often and sends what fell due meanwhile: records of one key sent
#: together share a batch (and its acknowledgement), so a paced load costs far less CPU than waking per
#: record; each record still carries the time it was sent.
PACING_TICK = 0.005
#: After SIGUSR1 ("every publisher has flushed"), a subscriber stops this long after its last record.
DONE_IDLE_S = 1.5

__all__ = ["main", "Loads", "parse_report", "percentiles", "REPORT_PREFIX", "PublisherReady", "SubscriberReady"]


@register
@dataclasses.dataclass(frozen=True)
class PublisherReady(Ready):
    """A load publisher's ready line."""

    ROLE: ClassVar[str] = "publisher"
    publisher: str  # its id


@register
@dataclasses.dataclass(frozen=True)
class SubscriberReady(Ready):
    """A load subscriber's ready line."""

    ROLE: ClassVar[str] = "subscriber"
    subscriber: str  # its id
    prefix: str


def parse_report(output: str) -> dict[str, Any]:
    """The REPORT of a load process's standard output.

    Raises:
        ValueError: the output has no report line.
    """
    for line in reversed(output.splitlines()):
        if line.startswith(REPORT_PREFIX):
            return json.loads(line[len(REPORT_PREFIX) :])
    raise ValueError(f"no report in output: {output[-500:]!r}")


class Loads:
    """Load processes started from here, each logging to its own file in ``log_dir``; all stopped by pid on
    :meth:`close`."""

    def __init__(self, log_dir: str | os.PathLike[str], *, ready_timeout: float = 30.0) -> None:
        self.log_dir = log_dir
        self.ready_timeout = ready_timeout
        self.children: list[Child] = []
        self._files: list[Any] = []

    def start(self, role: str, monitor: str, *args: str, enter: Callable[[], None] | None = None) -> Child:
        """Start ``python -m simulation.load ROLE --monitor MONITOR ARGS`` and wait for its READY (``monitor``
        "": ARGS say how to connect, e.g. ``--zk SERVERS --queue NAME``; ``enter``: called in the child before
        it runs, such as an emulated host's network namespace).

        Raises:
            RoQError: it did not become ready in time (it is stopped on :meth:`close`).
        """
        log_file = open(os.path.join(self.log_dir, f"{role}-{len(self.children)}.log"), "ab")
        self._files.append(log_file)
        where = ["--monitor", monitor] if monitor else []
        child = spawn(role, "simulation.load", [role, *where, *args], stderr=log_file, enter=enter)
        self.children.append(child)
        child.wait_ready(self.ready_timeout)
        return child

    def publishers_done(self, *subscribers: Child) -> None:
        """Tell ``subscribers`` every publisher has flushed: each stops :data:`DONE_IDLE_S` after its last
        record instead of its ``--idle-exit``."""
        for child in subscribers:
            child.signal(signal.SIGUSR1)

    def report(self, child: Child, *, stop: bool = False, timeout: float = 60.0) -> dict[str, Any]:
        """The REPORT of ``child`` once it ends (``stop``: SIGTERM it first)."""
        if stop:
            child.signal(signal.SIGTERM)
        return parse_report(child.communicate(timeout))

    def close(self) -> None:
        stop_all(self.children, 5)
        for f in self._files:
            f.close()

    def __enter__(self) -> Loads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def percentiles(samples: Any) -> dict[str, float]:
    """count, mean, p50, p99, max of ``samples`` (in the samples' unit)."""
    values = sorted(samples)
    if not values:
        return {"count": 0}
    n = len(values)
    return {
        "count": n,
        "mean": sum(values) / n,
        "p50": values[n // 2],
        "p99": values[min(n - 1, int(n * 0.99))],
        "max": values[-1],
    }


def _report(doc: dict[str, Any]) -> None:
    sys.stdout.write(REPORT_PREFIX + json.dumps(doc) + "\n")
    sys.stdout.flush()


def _connect(args: argparse.Namespace) -> client.Connection:
    if args.monitor:
        return client.connect(args.monitor, credentials=args.credentials or None)
    return client.connect(zk=args.zk, queue=args.queue, root=args.root, credentials=args.credentials or None)


def publish(args: argparse.Namespace) -> int:
    stop = StopFlag()
    keys = [k.encode() for k in args.keys.split(",")]
    options: dict[str, Any] = {}
    if args.linger is not None:
        options["linger"] = args.linger
    if args.buffer_bytes:
        options["buffer_bytes"] = args.buffer_bytes
    with _connect(args) as conn:
        pub = conn.publisher(**options)
        announce_ready(PublisherReady(pid=os.getpid(), publisher=pub.name))
        sent_per_key = dict.fromkeys(keys, 0)
        sent = 0
        longest_pause = 0.0
        started = time.monotonic()
        deadline = started + args.duration if args.duration else float("inf")
        clock = time.monotonic
        key_index = 0
        run_left = args.key_run
        send = pub.send
        size = args.size
        # sizes uniform in [size, size_max], the same sequence for the same publisher name
        pick = random.Random(pub.name).randint if args.size_max > size else None
        while not stop.asked and sent < args.count and time.monotonic() < deadline:
            now = time.monotonic()
            if args.rate:
                due = int((now - started) * args.rate) - sent
                if due <= 0:
                    time.sleep(min(0.1, max(PACING_TICK, (sent + 1) / args.rate - (now - started))))
                    continue
                due = min(due, args.count - sent)
            else:
                due = min(1000, args.count - sent)
            for _ in range(due):
                key = keys[key_index]
                per_key = sent_per_key[key]
                before = clock()
                send(key, make_payload(sent, per_key, time.time_ns(), pick(size, args.size_max) if pick else size))
                took = clock() - before
                if took > longest_pause:
                    longest_pause = took
                sent_per_key[key] = per_key + 1
                sent += 1
                run_left -= 1
                if run_left == 0:
                    run_left = args.key_run
                    key_index = (key_index + 1) % len(keys)
        elapsed = time.monotonic() - started
        ended = time.time()
        error = ""
        try:
            pub.flush(timeout=args.flush_timeout)
        except RoQError as exc:
            error = str(exc)
        _report(
            {
                "publisher": pub.name,
                "sent": sent,
                "keys": {k.decode(): v for k, v in sent_per_key.items()},
                "elapsed": elapsed,
                "ended": ended,  # wall time when it stopped sending (before its flush)
                "rate": sent / elapsed if elapsed else 0.0,
                "longest_send_ms": longest_pause * 1000,
                "stats": pub.stats(),
                "error": error,
            }
        )
    return ExitCode.OK if not error else ExitCode.FAILURE


def subscribe(args: argparse.Namespace) -> int:
    stop = StopFlag()
    idle_exit = [args.idle_exit]

    def publishers_done(_signum: int, _frame: Any) -> None:  # what is under way arrives without pauses
        idle_exit[0] = min(idle_exit[0] or DONE_IDLE_S, DONE_IDLE_S)

    signal.signal(signal.SIGUSR1, publishers_done)  # before the ready line: the harness may signal after it
    fast = [False]

    def read_on(_signum: int, _frame: Any) -> None:  # the end of --delay-us, whatever --delay-for says
        fast[0] = True

    signal.signal(signal.SIGUSR2, read_on)
    audit = Audit()
    latency = array.array("d")  # ms, since the last timeline point (then folded into the run's histogram)
    overall = Histogram()
    with _connect(args) as conn:
        sub = conn.subscriber(prefix=args.prefix.encode(), hold_timeout=args.hold_timeout, rcvhwm=args.rcvhwm,
                              heartbeat_interval=args.heartbeat)
        announce_ready(SubscriberReady(pid=os.getpid(), subscriber=sub.name, prefix=args.prefix))
        started = time.monotonic()
        deadline = started + args.duration if args.duration else float("inf")
        first = last = 0.0
        received = 0
        delay = args.delay_us / 1e6
        pause_at = started + args.pause_at_s if args.pause_at_s > 0 else float("inf")
        unpack = PAYLOAD_HEADER.unpack_from
        record = audit.record
        # one point per --timeline-every seconds: wall time, records so far, latency of that window, gaps and
        # the records they dropped (as the client library counts them)
        timeline: list[dict[str, Any]] = []
        next_point = started + args.timeline_every if args.timeline_every else float("inf")
        while not stop.asked:
            now = time.monotonic()
            if now >= next_point:
                next_point = now + args.timeline_every
                window = percentiles(latency)
                overall.add_all(latency)
                del latency[:]
                stats = sub.stats()
                timeline.append({"time": round(time.time(), 3), "received": received, "gaps": stats.gaps,
                                 "dropped": stats.lost, "p50_ms": window.get("p50"), "p99_ms": window.get("p99")})
            if now >= deadline or (received and idle_exit[0] and now - last >= idle_exit[0]):
                break
            if now >= pause_at:
                pause_at = float("inf")
                time.sleep(args.pause_for)  # a stalled consumer, at a time of the run however fast it read
                last = time.monotonic()
                continue
            msg = sub.recv(timeout=0.1)
            if msg is None:
                continue
            last = time.monotonic()
            if not received:
                first = last
            received += 1
            payload = msg.payload
            record(msg.publisher, msg.key, payload)
            if len(payload) >= PAYLOAD_HEADER.size:
                latency.append((time.time_ns() - unpack(payload)[2]) / 1e6)
                if len(latency) >= 1 << 16 and not args.timeline_every:
                    overall.add_all(latency)
                    del latency[:]
            if delay:
                time.sleep(delay)
                if fast[0] or (args.delay_for and last - started >= args.delay_for):
                    delay = 0.0
            if received == args.pause_at:
                time.sleep(args.pause_for)  # a stalled consumer: its queues overflow meanwhile
                last = time.monotonic()
        active = last - first
        overall.add_all(latency)
        _report(
            {
                "subscriber": sub.name,
                "prefix": args.prefix,
                "received": received,
                "rate": received / active if active > 0 else 0.0,
                "latency_ms": overall.summary(),
                "audit": audit.summary(),
                "stats": sub.stats().as_dict(),
                "timeline": timeline,
            }
        )
    return ExitCode.OK


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m simulation.load", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role", required=True)
    pp = sub.add_parser("publish", help="publish records at a rate, with counters and send times in payloads")
    pp.add_argument("--rate", type=float, default=0.0, help="records/s (default 0 = as fast as possible)")
    pp.add_argument("--duration", type=float, default=0.0, help="seconds to publish (default 0 = until --count)")
    pp.add_argument("--count", type=int, default=sys.maxsize, help="records to publish (default: no limit)")
    pp.add_argument("--size", type=int, default=100, help="payload bytes (default 100; at least 24 are used)")
    pp.add_argument("--size-max", type=int, default=0, help="if above --size: payload bytes uniform in [size, size-max]")
    pp.add_argument("--keys", default="load", help="comma-separated keys, used in turn (default 'load')")
    pp.add_argument("--key-run", type=int, default=100, help="records per key before the next key (default 100)")
    pp.add_argument("--linger", type=float, default=None, help="publisher linger in seconds (default: the library's)")
    pp.add_argument("--buffer-bytes", type=int, default=0,
                    help="the publisher's buffer of records not yet acknowledged, bytes (default 0 = the library's)")
    pp.add_argument("--flush-timeout", type=float, default=30.0, help="seconds to wait for the last acks (default 30)")
    sp = sub.add_parser("subscribe", help="receive and audit records")
    sp.add_argument("--prefix", default="", help="key prefix (default '' = everything)")
    sp.add_argument("--duration", type=float, default=0.0, help="seconds to listen (default 0 = until idle)")
    sp.add_argument("--idle-exit", type=float, default=3.0, help="stop this long after the last record (default 3; 0 = never; "
                    f"{DONE_IDLE_S} s once SIGUSR1 says every publisher has flushed)")
    sp.add_argument("--delay-us", type=float, default=0.0, help="processing time per record, to model a slow consumer")
    sp.add_argument("--delay-for", type=float, default=0.0,
                    help="seconds of --delay-us, then as fast as it can (default 0 = the whole run, or until "
                         "SIGUSR2)")
    sp.add_argument("--hold-timeout", type=float, default=2.0, help="subscriber hold timeout in seconds (default 2)")
    sp.add_argument("--pause-at", type=int, default=-1, help="stop reading after this many records...")
    sp.add_argument("--pause-at-s", type=float, default=0.0,
                    help="or: stop reading this many seconds after joining (default 0 = never)...")
    sp.add_argument("--pause-for", type=float, default=0.0, help="...for this many seconds, then read on")
    sp.add_argument("--rcvhwm", type=int, default=1000, help="receive high-water mark per exchange, batches (default 1000)")
    sp.add_argument("--heartbeat", type=float, default=1.0,
                    help="seconds between the subscriber's hellos to the monitor (default 1)")
    sp.add_argument("--timeline-every", type=float, default=0.0,
                    help="seconds between the points of the timeline in the report (default 0 = none)")
    for q in (pp, sp):
        q.add_argument("--monitor", default="", help="monitor endpoint of the queue")
        q.add_argument("--zk", default="", help="or: ZooKeeper servers, with --queue (follows a moving monitor)")
        q.add_argument("--queue", default="", help="the queue's name, with --zk")
        q.add_argument("--root", default=defaults.ROOT,
                       help=f"ZooKeeper root of the cluster, with --zk (default {defaults.ROOT})")
        q.add_argument("--credentials", default="", help="the client's credentials directory, for a cluster that "
                                                          "serves CURVE (its secret key and cluster.key)")
        q.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    if bool(args.monitor) == bool(args.zk) or bool(args.zk) != bool(args.queue):
        p.error("give either --monitor ENDPOINT or --zk SERVERS with --queue NAME")
    if args.role == "publish" and not args.duration and args.count == sys.maxsize:
        p.error("publish needs --duration or --count")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level)
    try:
        return publish(args) if args.role == "publish" else subscribe(args)
    except RoQError as exc:
        logging.getLogger("simulation.load").error("%s failed: %s", args.role, exc)
        return ExitCode.FAILURE


if __name__ == "__main__":
    sys.exit(main())
