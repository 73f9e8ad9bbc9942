"""(p) A link that compresses (``python -m client.link --compress``) beside one that does not, in the same run, on
records as orders look: JSON text of about 150 bytes, each one different (:func:`orders`).

* **capped**: the link's rate limit at :data:`CAP` bytes a second (8 Mbit/s, a slow network between sites); the
  records a second that reach a subscriber on the far side, from its first record to its last;
* **free**: no cap, on loopback; the CPU seconds the link and the far exchange spent per 100,000 records (what
  compressing costs where the network is not the limit), and the records a second (bounded by this benchmark's
  own process, which publishes and subscribes).

Two sites on loopback addresses (127.0.0.18: a durable queue the link reads; 127.0.0.20: a queue with one
exchange), a new link for each run (it carries what is published from its start on).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from typing import Callable

import psutil

import client
from roq.process import Child, spawn
from simulation.bench_common import Result
from simulation.bench_link import site

__all__ = ["run", "render", "orders", "CAP"]

SITES = ("127.0.0.18", "127.0.0.20")
#: the capped runs' rate limit, bytes a second (8 Mbit/s)
CAP = 1_000_000
#: records of a capped run, and of a free one
CAPPED_RECORDS = 40_000
FREE_RECORDS = 200_000
#: records a send_many call takes
CHUNK = 500
_WORDS = ("restock", "urgent", "backorder", "gift", "return", "express", "fragile", "bulk", "")


def orders(n: int, seed: int = 7) -> list[bytes]:
    """``n`` orders as JSON text (about 110 bytes each), every one different."""
    rng = random.Random(seed)
    return [json.dumps({"order": i, "store": f"store-{rng.randrange(400)}", "sku": f"SKU-{rng.randrange(10**6):06d}",
                        "qty": rng.randrange(1, 20), "price": round(rng.uniform(1, 500), 2),
                        "at": 1_795_000_000_000 + i * 37 + rng.randrange(37), "note": rng.choice(_WORDS)},
                       separators=(",", ":")).encode() for i in range(n)]


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _across(leaf: str, root: str, far_exchange: int, records: list[bytes], name: str, extra: list[str],
            children: list[Child]) -> dict[str, float]:
    """One run: a new link, ``records`` published at the leaf; the far subscriber's records a second and the CPU
    seconds the link and the far exchange spent meanwhile."""
    link = spawn("link", "client.link", ["--name", name, "--source", leaf, "--target", root, "--log-level",
                                         "WARNING", *extra])
    children.append(link)
    link.wait_ready(60)
    try:
        with client.connect(leaf) as here, client.connect(root) as there:
            sub = there.subscriber(b"orders")
            pub = here.publisher()
            deadline = time.monotonic() + 60
            while not any(b.key == b"orders.probe" for b in sub.recv_many(timeout=0.2)):  # the way is open
                if time.monotonic() > deadline:
                    raise TimeoutError(f"(p) nothing crossed link {name} in 60 s")
                pub.send(b"orders.probe", b"{}")
                pub.flush(30)
            while sub.recv_many(timeout=0.3):
                pass
            cpu = _cpu(link.pid) + _cpu(far_exchange)

            def publish() -> None:
                for i in range(0, len(records), CHUNK):
                    pub.send_many(b"orders", records[i:i + CHUNK])
                pub.flush(600)

            sender = threading.Thread(target=publish, daemon=True)
            sender.start()
            count, first, last = 0, 0.0, 0.0
            deadline = time.monotonic() + 600
            while count < len(records) and time.monotonic() < deadline:
                for b in sub.recv_many(timeout=1.0):
                    if b.key == b"orders":
                        last = time.perf_counter()
                        first = first or last
                        count += len(b.payloads)
            sender.join(60)
            spent = _cpu(link.pid) + _cpu(far_exchange) - cpu
    finally:
        link.stop()
        children.remove(link)
    return {"rate": count / (last - first) if last > first else 0.0, "lost": len(records) - count,
            "cpu_per_100k": spent * 100_000 / max(count, 1)}


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    children: list[Child] = []
    out: list[Result] = []
    capped, free = orders(CAPPED_RECORDS), orders(FREE_RECORDS, seed=8)
    size = sum(map(len, free)) / len(free)
    try:
        leaf = site(SITES[0], tempfile.mkdtemp(prefix="roq-bench-squeeze-"), True, children)
        root = site(SITES[1], "", False, children)
        far_exchange = children[-1].pid  # (the root's exchange: the last process _site started)
        runs = [("capped", capped, ["--rate-limit", str(CAP)]), ("free", free, [])]
        for i, (kind, records, extra) in enumerate(runs):
            for compress in (False, True):
                progress(f"(p) a link {kind}{' compressing' if compress else ''}: {len(records):,} orders")
                fig = _across(leaf, root, far_exchange, records, f"squeeze-{i}-{int(compress)}",
                              extra + (["--compress"] if compress else []), children)
                r = Result(f"(p) orders across a link, {kind}{', compressed' if compress else ''}", fig["rate"],
                           fig["rate"] * size / 1e6, int(fig["lost"]))
                r.notes.update(kind=kind, compressed=compress, cpu_per_100k=fig["cpu_per_100k"], size=size)
                out.append(r)
    finally:
        for child in reversed(children):
            child.stop()
    return out


def render(results: list[Result]) -> list[str]:
    """(p)'s figures, compressed beside not."""
    rows = {(r.notes["kind"], r.notes["compressed"]): r for r in results if r.name.startswith("(p)")}
    if len(rows) != 4:
        return []
    lines = ["", f"(p) a link compressing beside one that does not, orders of {rows['free', False].notes['size']:.0f} B "
                 f"(JSON): capped at {CAP * 8 / 1e6:g} Mbit/s, records/s across; free (loopback), CPU s of the link "
                 f"and the far exchange per 100,000 records"]
    for kind in ("capped", "free"):
        off, on = rows[kind, False], rows[kind, True]
        lines.append(f"    {kind:7} off {off.records_per_s:>10,.0f}/s  {off.notes['cpu_per_100k']:5.2f} CPU s   on "
                     f"{on.records_per_s:>10,.0f}/s  {on.notes['cpu_per_100k']:5.2f} CPU s   "
                     f"x{on.records_per_s / max(off.records_per_s, 1e-9):.2f} records/s")
    return lines
