"""A real Prometheus server (Debian's package) scrapes the GCM's /metrics while publishers run at a known
rate; PromQL through its HTTP API gives that rate back, and the per-publisher series stay capped."""

from __future__ import annotations

import urllib.parse

from simulation.prometheus import PrometheusServer
from tests.integration.queues import Queue
from tests.integration.zkhelp import wait_until

RATE = 600  # records/s of each publisher
PUBLISHERS = 3


def test_prometheus_scrapes_the_cluster_and_promql_gives_the_published_rate(make_embedded, loads, tmp_path):
    # one series per queue for the busiest publisher, the other two summed into "other"
    cluster = make_embedded(hosts=2, gcm_args=["--metrics-top", "1"])
    q = Queue(cluster, loads, "metered")
    q.subscribe("")
    for i in range(PUBLISHERS):
        q.publish(RATE, f"k{i}")
    target = urllib.parse.urlsplit(cluster.http_url()).netloc
    with PrometheusServer([target], scrape_interval=1.0, workdir=tmp_path / "prometheus") as prom:
        def rate() -> float | None:
            result = prom.query('sum(rate(roq_queue_records_in_total{queue="metered"}[5s]))')
            value = float(result[0]["value"][1]) if result else 0.0
            print(f"PromQL rate: {value:,.0f} rec/s")
            return value if abs(value - RATE * PUBLISHERS) <= 0.2 * RATE * PUBLISHERS else None

        measured = wait_until(rate, 60, f"Prometheus to see {RATE * PUBLISHERS} rec/s", interval=1.0)
        assert prom.targets_up() == {f"http://{target}/metrics": "up"}
        out = prom.query('sum(rate(roq_exchange_records_out_total{queue="metered"}[5s]))')
        assert abs(float(out[0]["value"][1]) - measured) <= 0.2 * measured  # one subscriber: out = in
        publishers = prom.query('roq_publisher_records_per_second{queue="metered"}')
        assert len(publishers) == 2 and "other" in {s["metric"]["publisher"] for s in publishers}
        hosts = prom.query("roq_host_cpu_ratio")
        assert {s["metric"]["host"] for s in hosts} == set(cluster.addresses)
        assert prom.query('roq_gcm_leader{gcm="gcm1"}')[0]["value"][1] == "1"
        median = prom.query('histogram_quantile(0.5, sum by (le) '
                            '(rate(roq_queue_latency_seconds_bucket{queue="metered"}[5s])))')
        print(f"median latency from the histogram: {float(median[0]['value'][1]) * 1000:.2f} ms")
        assert 0 < float(median[0]["value"][1]) < 5.0
    q.audit()
