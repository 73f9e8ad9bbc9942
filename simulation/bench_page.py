"""(l) the dashboard in a real browser: Debian's headless chromium driven by Selenium through Debian's chromedriver
(nothing downloads a browser), the page served by an embedded cluster's GCM.

* **drawing**: a minute of 100 queues (60 states of 2-4 exchanges and 3-6 publishers each, as the live feed sends
  them) drawn through ``window.roqRender``, and 240 events added in sets of 4, each timed in the browser (the
  drawing and the style and layout it causes, not WebDriver's trip);
* **freshness**: from a queue's rule forcing a scale-out (``min_exchanges`` 2) to its event on the live page.

Targets: a drawing of 100 queues at most 50 ms on average and 500 ms at worst, a set of events at most 20 ms on
average, an event on the page within 2 s.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from simulation.bench_common import Check, Result, percentiles

__all__ = ["run", "render", "checks", "browser", "fake_state", "RENDER", "ADD_EVENTS", "CHROMIUM", "CHROMEDRIVER"]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DRAWING = "(l) dashboard: a state of 100 queues drawn"
EVENTS = "(l) dashboard: 4 events added"
FRESHNESS = "(l) dashboard: forced scale-out -> its event on the live page"
#: Queues whose forced scale-out is timed.
TRIALS = 3


@contextmanager
def browser() -> Iterator[Any]:
    """A headless chromium, quit on leaving (so no chromium process outlives its user). Its profile and its
    temporary files go to a directory of its own, removed after it: the directory of its singleton socket, which
    chromium makes in the machine's temporary directory, outlived every run."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    scratch = tempfile.mkdtemp(prefix="roq-chromium-")
    try:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1400,1000", "--no-proxy-server", f"--user-data-dir={scratch}/profile"):
            options.add_argument(arg)
        service = Service(executable_path=CHROMEDRIVER, env={**os.environ, "TMPDIR": scratch})
        driver = webdriver.Chrome(service=service, options=options)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def fake_state(step: int, rng: random.Random, start: float) -> dict:
    """A state of 100 queues of 2-4 exchanges and 3-6 publishers each, as the feed sends it."""
    queues = []
    for i in range(100):
        n = 2 + (i + step // 20) % 3  # the exchange count changes twice in the minute
        ids = [f"x{k + 1}-{i:04x}" for k in range(n)]
        publishers: list[dict[str, Any]] = [
            {"id": f"{i:04x}{p:04x}", "exchange": ids[p % n], "records_per_s": rng.uniform(0, 2000)}
            for p in range(3 + i % 4)]
        exchanges = [{"id": x, "records_per_s": sum(p["records_per_s"] for p in publishers if p["exchange"] == x),
                      "records_out_per_s": rng.uniform(0, 4000), "busy": rng.random(),
                      "publishers": sum(p["exchange"] == x for p in publishers), "mark_records_per_s": 200000.0,
                      "draining": False} for x in ids]
        rate = sum(x["records_per_s"] for x in exchanges)
        queues.append({
            "name": f"q{i:03d}", "state": "running", "host": "127.0.0.11",
            "placement": {f"x{k + 1}": f"127.0.0.{11 + k}" for k in range(n)},
            "records_in_per_s": rate, "records_out_per_s": rate, "bytes_in_per_s": rate * 100,
            "bytes_out_per_s": rate * 100, "publishers": len(publishers), "subscribers": 2,
            "exchanges": exchanges, "publisher_list": publishers,
            "latency": [{"id": f"{i:04x}{k:04x}", "p50": rng.uniform(1, 5), "p99": rng.uniform(5, 50),
                         "prefix": "b''" if k else "b'eu'"} for k in range(2)],
            "counters": {"relocations": step // 10, "failovers": 0, "scale_outs": step // 20, "scale_ins": 0},
            "journal": None if i % 2 else {
                "host": "127.0.0.12", "durability": "always", "alive": True, "first_offset": 0,
                "next_offset": 1000 * step, "size_bytes": 1_200_000 * step, "unsynced_bytes": 0,
                "lag_bytes": 4096, "sync_ms": 0.7, "sync_max_ms": 21.0, "write_failures": 0},
        })
    hosts = [{"address": f"127.0.0.{11 + k}", "cpus": 2.0, "cpu_percent": rng.uniform(0, 100),
              "memory_percent": rng.uniform(0, 100), "net_bytes_per_s": 1e6, "net_percent": 0.0, "exchanges": 75,
              "max_exchanges": 100, "monitors": 25} for k in range(4)]
    return {"time": start + step, "leader": "gcm1", "hosts": hosts, "queues": queues}


RENDER = "const t0 = performance.now(); window.roqRender(arguments[0]); document.body.offsetHeight; " \
         "return performance.now() - t0;"
ADD_EVENTS = "const t0 = performance.now(); for (const e of arguments[0]) window.roqAddEvent(e); " \
             "document.body.offsetHeight; return performance.now() - t0;"


def _wait(driver: Any, condition: Callable[[Any], Any], what: str, timeout: float = 30.0) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.02).until(condition, f"timed out waiting for: {what}")


def _drawing(url: str, driver: Any) -> tuple[list[float], list[float]]:
    """Each drawing's ms and each set of events' ms, in the browser, over a minute of made-up states."""
    driver.get(url + "/?feed=0")  # the page without the live feed: these states only
    _wait(driver, lambda d: d.execute_script("return typeof window.roqRender === 'function'"), "the page's script")
    rng = random.Random(7)
    start = time.time()
    kinds = ["relocated", "failover", "scale_out", "thresholds_adopted"]
    renders, adds, seq = [], [], 0
    for step in range(60):
        renders.append(driver.execute_script(RENDER, fake_state(step, rng, start)))
        events = []
        for _ in range(4):
            seq += 1
            events.append({"queue": f"q{seq % 100:03d}", "seq": seq, "time": start + step + seq / 1000,
                           "kind": kinds[seq % 4], "text": f"<b>event {seq}</b> moved 12 records/s"})
        adds.append(driver.execute_script(ADD_EVENTS, events))
    return renders, adds


def _freshness(cluster: Any, driver: Any) -> list[float]:
    """ms from a queue's rule forcing a scale-out to its event shown on the live page, :data:`TRIALS` queues."""
    from selenium.webdriver.common.by import By

    driver.get(cluster.http_url() + "/")
    took = []
    for i in range(TRIALS):
        queue = f"page{i}"
        cluster.manager.create(queue, exchanges=1)
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f'#queues tbody tr[data-queue="{queue}"]'),
              f"{queue}'s row")
        forced = time.monotonic()
        cluster.manager.set_rules(queue, {"min_exchanges": 2})
        _wait(driver, lambda d: d.find_elements(
            By.CSS_SELECTOR, f'#events li[data-kind="scale_out"][data-queue="{queue}"]'), f"{queue}'s scale-out")
        took.append((time.monotonic() - forced) * 1000)
    return took


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> list[Result]:
    """(l): the page's drawing and events, and how fresh the live page is."""
    from roqcli.embedded import EmbeddedCluster

    with EmbeddedCluster(hosts=2, log_dir=tempfile.mkdtemp(prefix="roq-bench-")) as cluster, browser() as driver:
        progress("(l) the dashboard: a minute of 100 queues drawn in chromium")
        renders, adds = _drawing(cluster.http_url(), driver)
        progress(f"(l) the dashboard: forced scale-outs on the live page, {TRIALS} queues")
        fresh = _freshness(cluster, driver)
    return [Result(DRAWING, latency_ms=percentiles(renders),
                   notes={"mean_ms": sum(renders) / len(renders), "states": len(renders)}),
            Result(EVENTS, latency_ms=percentiles(adds), notes={"mean_ms": sum(adds) / len(adds), "sets": len(adds)}),
            Result(FRESHNESS, latency_ms=percentiles(fresh), notes={"trials": len(fresh),
                                                                    "each_ms": [round(t) for t in fresh]})]


def render(results: list[Result]) -> list[str]:
    rows = [r for r in results if r.name.startswith("(l)")]
    if not rows:
        return []
    lines = ["", f"{'the dashboard in chromium (l)':62} {'mean ms':>8} {'p50 ms':>8} {'max ms':>8}"]
    for r in rows:
        lines.append(f"{r.name:62} {r.notes.get('mean_ms', float('nan')):8.1f} "
                     f"{r.latency_ms.get('p50', float('nan')):8.1f} {r.latency_ms.get('max', float('nan')):8.1f}")
    lines.append("targets: drawing mean <= 50 ms and max <= 500 ms; events mean <= 20 ms; an event on the page <= 2 s")
    return lines


def checks(results: list[Result]) -> list[Check]:
    """(l)'s targets (see the module's documentation)."""
    by = {r.name: r for r in results if r.name.startswith("(l)")}
    out = []
    if DRAWING in by:
        r = by[DRAWING]
        out.append(Check("(l) a state of 100 queues drawn, mean", r.notes["mean_ms"], 50.0, True, " ms"))
        out.append(Check("(l) a state of 100 queues drawn, slowest", r.latency_ms.get("max", float("nan")), 500.0,
                         True, " ms"))
    if EVENTS in by:
        out.append(Check("(l) 4 events added, mean", by[EVENTS].notes["mean_ms"], 20.0, True, " ms"))
    if FRESHNESS in by:
        out.append(Check("(l) forced scale-out -> its event on the page, slowest",
                         by[FRESHNESS].latency_ms.get("max", float("nan")), 2000.0, True, " ms"))
    return out
