"""The Prometheus fixture end to end: a real server scrapes a prometheus_client exporter and answers PromQL."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from tests.integration.prometheus import PrometheusServer

RATE = 40.0  # ticks/s the exporter's counter grows by


def _tick(counter: Counter, stop: threading.Event) -> None:
    # Catch up with the clock on every wake-up: a busy machine delays the thread, not the average rate.
    start, done = time.monotonic(), 0
    while not stop.wait(0.02):
        due = int((time.monotonic() - start) * RATE)
        counter.inc(due - done)
        done = due


@pytest.mark.timeout(120)
def test_prometheus_scrapes_a_counter_and_answers_its_rate(tmp_path):
    registry = CollectorRegistry()
    counter = Counter("roq_fixture_ticks", "ticks at a known rate", registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    stop = threading.Event()
    ticker = threading.Thread(target=_tick, args=(counter, stop), daemon=True)
    ticker.start()
    try:
        target = f"127.0.0.1:{server.server_port}"
        with PrometheusServer([target], scrape_interval=1.0, workdir=tmp_path) as prom:
            result = prom.wait_for(
                "rate(roq_fixture_ticks_total[5s])",
                lambda r: len(r) == 1 and 0.8 * RATE <= float(r[0]["value"][1]) <= 1.2 * RATE,
                timeout=30.0,
                what=f"the counter's rate near {RATE}/s",
            )
            assert result[0]["metric"]["job"] == "roq" and result[0]["metric"]["instance"] == target
            assert prom.targets_up() == {f"http://{target}/metrics": "up"}
    finally:
        stop.set()
        ticker.join()
        server.shutdown()
        server.server_close()
        thread.join()
