"""The dashboard (gcm/static) in a real browser: Debian's headless chromium, driven by Selenium through Debian's
chromedriver (nothing downloads a browser), the page served by a real cluster's GCM.

The first test opens the page of a cluster under audited load while a real Prometheus (Debian's package)
scrapes it every second: the page follows a load step and a forced scale-out, PromQL gives back the rate sent,
and nothing is lost. The second draws a minute of 100 queues through ``window.roqRender``: rows are updated in
place. How soon and how fast are figures of benchmark (l) (:mod:`simulation.bench_page`, ``make bench-check``).
"""

from __future__ import annotations

import random
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import client
from simulation.bench_page import ADD_EVENTS, RENDER, fake_state
from simulation.bench_page import browser as chromium
from simulation.prometheus import PrometheusServer
from tests.integration.queues import Queue
from tests.integration.zkhelp import wait_until

SCREENSHOTS = Path(__file__).resolve().parents[2] / "out" / "test-output"
WAIT_S = 30


@pytest.fixture
def browser():
    """A headless chromium, quit after the test (so no chromium process outlives it)."""
    with chromium() as driver:
        yield driver


def wait(driver, condition, what: str, timeout: float = WAIT_S):
    """The value of ``condition(driver)`` once it is true; the test fails with ``what`` at the deadline."""
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition, f"timed out waiting for: {what}")


def shown(driver, script: str, *args):
    return driver.execute_script(script, *args)


def records_in(driver, queue: str) -> float | None:
    """The records/s in the page shows for ``queue`` (None before its row is there)."""
    text = shown(driver, f"""
        const row = document.querySelector('#queues tbody tr[data-queue="{queue}"]');
        return row === null ? null : row.querySelector('.c-in').textContent;""")
    if text is None:
        return None
    text = text.strip().replace(",", "")
    scale = {"k": 1e3, "M": 1e6}.get(text[-1:], 1.0)
    return float(text[:-1] if text[-1:] in ("k", "M") else text) * scale


def test_the_page_follows_load_and_scaling_live_while_prometheus_scrapes_and_nothing_is_lost(
        make_embedded, loads, browser, tmp_path):
    cluster = make_embedded(hosts=2, gcm_args=["--metrics-top", "1"])  # one publisher's own series, then "other"
    # KPIs every half second: the page's delay is a KPI period, a census round (1 s) and the page's work at
    # worst, and 2 s must hold on a busy machine too
    q = Queue(cluster, loads, "orders", min_exchanges=1, max_exchanges=3, exchange_records_per_s=100000,
              kpi_period_s=0.5)
    q.subscribe("a")  # audited: everything the load processes send under keys "a..."
    q.publish(200, "a1,a2")
    conn = client.connect(monitor=q.monitor)
    rate = [300.0]  # records/s of the step publisher, under key "z" (the audited subscriber does not read it)
    stop = threading.Event()
    errors: list[BaseException] = []

    counted: list[tuple[float, int]] = []  # (when, records the step publisher sent in all)

    def step_load() -> None:  # its sockets belong to this thread
        try:
            pub = conn.publisher()
            started, sent, total = time.monotonic(), 0.0, 0
            while not stop.wait(0.005):
                due = (time.monotonic() - started) * rate[0]
                while sent < due:
                    pub.send(b"z", b"step")
                    sent += 1
                    total += 1
                counted.append((time.monotonic(), total))
                del counted[:-2000]
                if rate[0] != step_load.rate:  # a new rate counts from now
                    step_load.rate, started, sent = rate[0], time.monotonic(), 0.0
            pub.close()
        except BaseException as exc:
            errors.append(exc)

    step_load.rate = rate[0]
    sender = threading.Thread(target=step_load, daemon=True)
    target = urllib.parse.urlsplit(cluster.http_url()).netloc
    with PrometheusServer([target], scrape_interval=1.0, workdir=tmp_path / "prometheus") as prom:
        sender.start()
        try:
            browser.get(cluster.http_url() + "/")
            wait(browser, lambda d: d.find_element(By.ID, "conn").text == "live", "the connection indicator says live")
            assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-connected") == "1"
            wait(browser, lambda d: (records_in(d, "orders") or 0) > 300, "the queue's records/s in up")
            hosts = wait(browser, lambda d: (lambda h: h if len(h) == 2 else None)(
                shown(d, "return [...document.querySelectorAll('#hosts .host')].map(h => h.dataset.host)")),
                "both hosts")
            assert sorted(hosts) == sorted(cluster.addresses)
            assert browser.find_element(By.ID, "leader").text == "gcm1"

            # the load changes: the page shows it
            wait(browser, lambda d: 350 <= (records_in(d, "orders") or 0) <= 700,
                 "the shown rate settled near the 500 records/s sent")
            before = records_in(browser, "orders")
            rate[0] = 3000.0
            changed = time.monotonic()
            wait(browser, lambda d: (records_in(d, "orders") or 0) > before + 500,
                 "the records/s shown to follow the load up")
            took = time.monotonic() - changed
            print(f"records/s on the page: {before:,.0f} before the step, moved {took:.2f} s after it")

            # a forced scale-out (min_exchanges 2): its event on the page
            cluster.manager.set_rules("orders", {"min_exchanges": 2})
            forced = time.monotonic()
            wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR,
                                                    '#events li[data-kind="scale_out"][data-queue="orders"]'),
                 "the scale-out in the event list")
            took = time.monotonic() - forced
            text = browser.find_element(By.CSS_SELECTOR, '#events li[data-kind="scale_out"] .text').text
            print(f"scale-out on the page {took:.2f} s after the rule was set: {text}")
            assert "min_exchanges" in text  # how soon is benchmark (l)'s figure (make bench-check)

            # a forced relocation, and the selected queue's exchanges with their publishers
            wait(browser, lambda d: shown(d, "return document.querySelectorAll('#d-exchanges tr.exchange').length")
                 == 2, "the second exchange on the page")
            moved = conn.relocate()
            wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR,
                                                    '#events li[data-kind="relocated"][data-queue="orders"]'),
                 "a relocated event of the queue in the event list")
            assert browser.find_element(By.ID, "d-name").text == "orders"
            screenshot = SCREENSHOTS / "dashboard.png"  # kept with the test run's output (out/ is not versioned)
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(screenshot))
            print(f"screenshot: {screenshot} ({screenshot.stat().st_size:,} bytes); moved {moved['publisher'][:8]}")
            assert screenshot.stat().st_size > 10_000

            # a page opened now draws the last seconds at once: the feed's first state brings the history
            browser.get(cluster.http_url() + "/")
            # (without it the page would have one point per state it received, at most one per render)
            wait(browser, lambda d: shown(d, """
                const line = document.querySelector('#queues tbody tr[data-queue="orders"] polyline');
                const points = line === null ? 0 : line.getAttribute('points').trim().split(' ').length;
                return points >= Number(document.body.dataset.renders || 0) + 5;"""),
                "the reopened page's sparkline drawn from the history, more points than states it received")

            # Prometheus scraped all along: PromQL gives back the rate sent, and the series stay bounded
            def sent() -> float:  # records/s sent over the last 5 s: the step publisher's, and the load's 200
                now, total = counted[-1]
                then = next(t for t in counted if t[0] >= now - 5.0)
                return 200 + (total - then[1]) / max(now - then[0], 1e-3)

            def promql_rate() -> tuple[float, float] | None:
                result = prom.query('sum(rate(roq_queue_records_in_total{queue="orders"}[5s]))')
                value, expected = (float(result[0]["value"][1]) if result else 0.0), sent()
                return (value, expected) if abs(value - expected) <= 0.1 * expected else None

            measured, expected = wait_until(promql_rate, 30, "PromQL to give the records/s sent", interval=0.5)
            print(f"PromQL: {measured:,.0f} records/s for {expected:,.0f} sent")
            assert prom.targets_up() == {f"http://{target}/metrics": "up"}
            def rate_out() -> float:  # read until it holds: once in CI a single read gave 0 just after the line above
                out = prom.query('sum(rate(roq_exchange_records_out_total{queue="orders"}[5s]))')
                return float(out[0]["value"][1]) if out else 0.0

            # the audited subscriber reads the "a" keys only
            wait_until(lambda: rate_out() >= 0.5 * measured, 15, "PromQL to give the exchanges' records/s out",
                       interval=0.5)
            publishers = prom.query('roq_publisher_records_per_second{queue="orders"}')
            assert len(publishers) == 2 and "other" in {p["metric"]["publisher"] for p in publishers}
            assert {h["metric"]["host"] for h in prom.query("roq_host_cpu_ratio")} == set(cluster.addresses)
            assert prom.query('roq_gcm_leader{gcm="gcm1"}')[0]["value"][1] == "1"
            median = prom.query('histogram_quantile(0.5, sum by (le) '
                                '(rate(roq_queue_latency_seconds_bucket{queue="orders"}[5s])))')
            print(f"median latency from the histogram: {float(median[0]['value'][1]) * 1000:.2f} ms")
            assert 0 < float(median[0]["value"][1]) < 5.0
        finally:
            stop.set()
            sender.join(10)
            conn.close()
    assert not errors, errors
    q.audit()  # with the page open and Prometheus scraping: nothing lost, duplicated or reordered


def test_a_minute_of_100_queues_renders_in_place(make_embedded, browser):
    cluster = make_embedded(hosts=1)
    browser.get(cluster.http_url() + "/?feed=0")  # the page without the live feed: these states only
    wait(browser, lambda d: shown(d, "return typeof window.roqRender === 'function'"), "the page's script")
    rng = random.Random(7)
    start = time.time()
    kinds = ["relocated", "failover", "scale_out", "thresholds_adopted"]
    renders, adds, seq = [], [], 0
    for step in range(60):
        # the timing is the browser's: the drawing and the style and layout it causes, not WebDriver's trip
        renders.append(shown(browser, RENDER, fake_state(step, rng, start)))
        if step == 0:
            shown(browser, "window.firstRow = document.querySelector('#queues tbody tr')")
        events = []
        for _ in range(4):
            seq += 1
            events.append({"queue": f"q{seq % 100:03d}", "seq": seq, "time": start + step + seq / 1000,
                           "kind": kinds[seq % 4], "text": f"<b>event {seq}</b> moved 12 records/s"})
        adds.append(shown(browser, ADD_EVENTS, events))

    began = time.perf_counter()
    rows = shown(browser, "return document.querySelectorAll('#queues tbody tr').length")
    round_trip = time.perf_counter() - began
    page = shown(browser, """
        const items = [...document.querySelectorAll('#events li')];
        return {
            sameRow: window.firstRow === document.querySelector('#queues tbody tr[data-queue="q000"]'),
            renders: document.body.dataset.renders, events: items.length,
            newestFirst: items.every((li, i) => i === 0 || li.querySelector('time').dateTime
                                     <= items[i - 1].querySelector('time').dateTime),
            bold: document.querySelectorAll('#events b').length,
            firstText: items[0].querySelector('.text').textContent,
            points: document.querySelector('#queues tbody tr polyline').getAttribute('points').trim().split(' ').length,
            exchanges: document.querySelectorAll('#d-exchanges tr.exchange').length,
            latency: document.querySelectorAll('#d-latency tbody tr').length,
            journal: document.querySelector('#d-journal').hidden ? null
                : document.querySelector('#d-journal').textContent,
        };""")
    average, worst = sum(renders) / len(renders), max(renders)
    print(f"\n100 queues, 60 states: render average {average:.1f} ms, first {renders[0]:.1f} ms, worst {worst:.1f} "
          f"ms, median {sorted(renders)[30]:.1f} ms; 240 events in batches of 4: average "
          f"{sum(adds) / len(adds):.2f} ms; a round trip after: {round_trip * 1000:.0f} ms")

    assert rows == 100 and page["sameRow"], "rows are updated in place, not rebuilt"
    assert page["renders"] == "60" and page["points"] == 60
    assert page["events"] == 200 and page["newestFirst"]
    assert page["bold"] == 0 and page["firstText"] == f"<b>event {seq}</b> moved 12 records/s"
    assert page["exchanges"] in (2, 3, 4) and page["latency"] == 2
    assert page["journal"] == ("journal on 127.0.0.12 · always · 70.8 MB, offsets 0..59000 · lag 4.1 kB · unsynced "
                               "0 B · sync 0.70 ms (max 21 ms)"), page["journal"]  # q000's, of the last state
    # how fast is benchmark (l)'s figure (make bench-check): here, that every drawing and set of events was timed
    assert len(renders) == 60 and len(adds) == 60 and all(t >= 0 for t in renders + adds)

    # ten minutes later: the five-minute histories keep only the new point
    shown(browser, RENDER, fake_state(660, rng, start))
    points = shown(browser, "return document.querySelector('#queues tbody tr polyline')"
                            ".getAttribute('points').trim().split(' ').length")
    assert points == 1

    # a cluster in a tree: its path from the root, itself, each child with its link's state and rate between two states
    def place(t: float, carried: int) -> dict:
        return {**fake_state(661, rng, start), "time": t, "federation": {
            "name": "eu", "role": "branch", "path": ["hq"], "children": [
                {"name": "store-1", "below": 0, "heard_s": 0.4, "links": [
                    {"records": 1000, "bytes": carried, "backlog": 2048, "rate_limit": 250000, "refused": False}]},
                {"name": "store-2", "below": 2, "heard_s": 7.0, "links": [
                    {"records": 0, "bytes": 0, "backlog": 0, "rate_limit": 0, "refused": True}]}]}}

    shown(browser, RENDER, place(start + 700, 100_000))
    shown(browser, RENDER, place(start + 701, 150_000))
    tree = shown(browser, """return {hidden: document.querySelector('#tree-panel').hidden,
        place: document.querySelector('#t-place').textContent,
        items: [...document.querySelectorAll('#t-tree li')].map(li => [li.className, li.dataset.state || '',
                                                                       li.textContent])};""")
    assert not tree["hidden"] and tree["place"] == "eu (branch)"
    assert [(c, st) for c, st, _ in tree["items"]] == [("t-up", ""), ("t-self", ""), ("t-child", "up"),
                                                       ("t-child", "REFUSED")], tree
    assert tree["items"][0][2] == "hq" and "eu (this cluster)" in tree["items"][1][2]
    assert "50kB/s (cap 250kB/s)" in tree["items"][2][2] and "backlog 2.0 kB" in tree["items"][2][2], tree
    assert "2 below" in tree["items"][3][2]
    shown(browser, RENDER, fake_state(662, rng, start))  # a state of a cluster in no tree: no panel
    assert shown(browser, "return document.querySelector('#tree-panel').hidden") is True
