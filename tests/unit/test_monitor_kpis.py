"""KPI ingestion: smoothed loads, when an exchange is hot, rates of known publishers, archive records."""

from __future__ import annotations

from monitor.testing import Driver, Peers
from roq.wire import control
from roq.config import MonitorConfig
from roq.kpi.records import ExchangeRecord, PublisherRecord, SubscriberRecord
from roq.wire.status import Totals

CONFIG = MonitorConfig(high_records_per_s=1000, smoothing=0.5, sustain=2, kpi_period=1)


def kpi(x: str, records: int, publishers: dict[str, int], period: float = 1.0) -> control.ExchangeKpi:
    return control.ExchangeKpi(x, period, records, 10 * records, records, 10 * records,
                               [control.PublisherRate(p, r, 10 * r) for p, r in publishers.items()], 35.0, 1 << 26,
                               0.4, 2)


def test_loads_are_smoothed_per_exchange_and_per_known_publisher():
    q = Peers(Driver(CONFIG), ("x1",), ())
    q.publisher("p1")
    d = q.d
    d.send(kpi("x1", 400, {"p1": 400, "stranger": 5}, period=0.5), b"x1")
    x1 = d.core.topology.exchanges["x1"]
    assert (x1.load.value, x1.bytes_load.value) == (800.0, 8000.0)  # per second, over a half-second period
    assert set(x1.rates) == {"p1"} and x1.rates["p1"].value == 800.0
    d.send(kpi("x1", 0, {}), b"x1")
    assert x1.load.value == 400.0 and x1.rates["p1"].value == 400.0  # p1 still sends there: kept, decaying
    assert (x1.cpu_percent, x1.busy, x1.dropped) == (35.0, 0.4, 4)
    d.send(kpi("x-unknown", 5, {}), b"x9")  # before its first heartbeat: ignored
    assert "x-unknown" not in d.core.topology.exchanges


def test_hot_counts_the_sustain_from_the_raw_crossing():
    q = Peers(Driver(CONFIG), ("x1",), ())
    d = q.d
    x1 = d.core.topology.exchanges["x1"]
    d.now = 10.0
    d.send(kpi("x1", 500, {}), b"x1")
    d.now = 11.0
    d.send(kpi("x1", 1600, {}), b"x1")  # raw over the mark, smoothed 1050: hot since this report
    assert (x1.over_since, x1.hot_since) == (11.0, 11.0)
    d.now = 12.0
    d.send(kpi("x1", 1200, {}), b"x1")
    assert (x1.over_since, x1.hot_since) == (11.0, 11.0)
    d.now = 13.0
    d.send(kpi("x1", 100, {}), b"x1")  # smoothed 612: cool again
    assert (x1.over_since, x1.hot_since) == (None, None)


def test_negative_counts_read_as_zero_and_totals_stay_in_range():
    q = Peers(Driver(CONFIG), ("x1",), ())
    d = q.d
    big = 2**63 - 1
    for _ in range(3):
        d.send(control.ExchangeKpi("x1", 0.0, -5, -5, 0, 0, [], 0.0, 0, 0.0, big), b"x1")
    x1 = d.core.topology.exchanges["x1"]
    assert x1.load.value == 0.0 and x1.bytes_load.value == 0.0 and x1.dropped == 1 << 62


def test_every_kpi_is_an_archive_record_when_there_is_an_archive():
    q = Peers(Driver(CONFIG, archiving=True), ("x1",), ())
    q.publisher("p1")
    d = q.d
    d.send(kpi("x1", 300, {"p1": 200, "p2": 100}), b"x1")
    d.send(control.SubscriberHello("s1", b"k.\xff", [], period=1.0, records=300, latency_p50_ms=0.4,
                                   latency_p99_ms=1.2, gaps=1, lost=3, duplicates=0), b"s1")
    d.send(control.SubscriberHello("s1", b"k.", []), b"s1")  # no KPIs in this one
    exchange, *publishers, subscriber = d.records
    assert exchange == ExchangeRecord(exchange="x1", host="127.0.0.1", period=1.0, records_in=300, bytes_in=3000,
                                      records_out=300, bytes_out=3000, publishers=2, cpu_percent=35.0,
                                      rss_bytes=1 << 26, busy=0.4, dropped=2)
    assert [(r.publisher, r.records) for r in publishers] == [("p1", 200), ("p2", 100)]
    assert all(isinstance(r, PublisherRecord) and r.exchange == "x1" for r in publishers)
    assert isinstance(subscriber, SubscriberRecord)
    assert (subscriber.prefix, subscriber.records, subscriber.lost) == ("k.\\xff", 300, 3)


def test_no_records_without_an_archive():
    q = Peers(Driver(CONFIG), ("x1",), ())
    q.d.send(kpi("x1", 300, {}), b"x1")
    assert q.d.records == []


def test_traffic_is_counted_per_exchange_and_for_the_queue_and_subscribers_kpis_show_in_the_status():
    q = Peers(Driver(CONFIG), ("x1", "x2"), ("s1",))
    d = q.d
    d.send(control.ExchangeKpi("x1", 1.0, 100, 1000, 300, 3000, [], 1.0, 1, 0.1, 0), b"x1")
    d.send(control.ExchangeKpi("x1", 0.5, 50, 500, 150, 1500, [], 1.0, 1, 0.1, 0), b"x1")
    d.send(control.ExchangeKpi("x2", 1.0, 7, 70, -5, 10, [], 1.0, 1, 0.1, 0), b"x2")  # a negative count: 0
    status = d.status()
    x1 = next(x for x in status.exchanges if x.id == "x1")
    assert x1.totals == Totals(records_in=150, bytes_in=1500, records_out=450, bytes_out=4500)
    assert x1.records_out_per_s == 300.0  # 300 rec/s in both periods
    assert status.totals == Totals(records_in=157, bytes_in=1570, records_out=450, bytes_out=4510)
    assert status.subscribers[0].records_per_s is None  # no KPIs reported yet
    d.send(control.SubscriberHello("s1", b"", ["x1", "x2"], period=2.0, records=500, latency_p50_ms=1.5,
                                   latency_p99_ms=9.0, gaps=1, lost=3, duplicates=2), b"s1")
    [s1] = d.status().subscribers
    assert (s1.records_per_s, s1.latency_p50_ms, s1.latency_p99_ms, s1.lost) == (250.0, 1.5, 9.0, 3)


def test_subscribers_latency_counts_add_up_in_the_queue_histogram_and_malformed_ones_are_ignored():
    q = Peers(Driver(CONFIG), ("x1",), ("s1",))
    d = q.d
    n = len(control.LATENCY_BOUNDS_MS) + 1
    d.send(control.SubscriberHello("s1", b"", ["x1"], period=1.0, latency_buckets=[1] * n, latency_sum_ms=30.0), b"s1")
    d.send(control.SubscriberHello("s1", b"", ["x1"], period=1.0, latency_buckets=[0, 2] + [0] * (n - 2),
                                   latency_sum_ms=1.5), b"s1")
    d.send(control.SubscriberHello("s1", b"", ["x1"], period=1.0, latency_buckets=[5, 5], latency_sum_ms=9.0), b"s1")
    d.send(control.SubscriberHello("s1", b"", ["x1"], period=1.0, latency_buckets=[-1] * n), b"s1")
    histogram = d.status().latency_histogram
    assert histogram.counts == [1, 3] + [1] * (n - 2) and histogram.sum_ms == 31.5
    assert histogram.bounds_ms == list(control.LATENCY_BOUNDS_MS)
