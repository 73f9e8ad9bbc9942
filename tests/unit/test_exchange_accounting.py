"""exchange accounting: a KPI period's counts become one report; the per-publisher table is bounded."""

from __future__ import annotations

from exchange._accounting import MAX_PUBLISHERS, Accounting
from roq.wire import control
def test_a_period_becomes_a_report_and_the_counters_start_again():
    acct = Accounting(10.0)
    acct.records_in = acct.records_out = 30
    acct.bytes_in = acct.bytes_out = 3000
    acct.publishers[b"\x01" * 16] = [30, 3000]
    acct.busy = 0.25
    kpi = acct.report("x1", 10.5, cpu_percent=12.0, rss_bytes=1 << 20, dropped=2)
    assert kpi == control.ExchangeKpi(exchange="x1", period=0.5, records_in=30, bytes_in=3000, records_out=30,
                                      bytes_out=3000, publishers=[control.PublisherRate("01" * 16, 30, 3000)],
                                      cpu_percent=12.0, rss_bytes=1 << 20, busy=0.5, dropped=2)
    assert (acct.records_in, acct.publishers, acct.busy, acct.started) == (0, {}, 0.0, 10.5)
    assert acct.max_publishers == MAX_PUBLISHERS


def test_the_report_of_the_most_publishers_counted_fits_a_monitor_message():
    acct = Accounting(0.0)
    for i in range(acct.max_publishers):
        acct.publishers[i.to_bytes(16, "big")] = [2**40, 2**50]
    frame = control.encode(acct.report("x" * 64, 1.0, cpu_percent=100.0, rss_bytes=2**40, dropped=2**40))
    assert len(frame) < 1 << 20  # the monitor's message bound


def test_the_bound_survives_the_reset():
    acct = Accounting(0.0, max_publishers=3)
    acct.report("x1", 1.0, cpu_percent=0.0, rss_bytes=0, dropped=0)
    assert acct.max_publishers == 3
