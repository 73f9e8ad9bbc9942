"""KPI ingestion: exchanges' KPI reports become smoothed loads, and every KPI goes to the archive.

An exchange reports every KPI period its records and bytes in and out, its publishers' shares, CPU, RSS,
busy fraction and drops. The monitor counts the traffic (per exchange and for the queue: ``totals``, the
metrics' counters), smooths records/s and bytes/s in and out and the busy fraction per exchange and
records/s per publisher (EWMA, weight ``smoothing``), gives each exchange its own mark (the queue's, or less
when it saturates first: :func:`monitor._rule.saturation_mark`) and marks it *hot* while its smoothed load is
above that mark, the sustain counting from the first report whose raw load went over (see docs/design.md,
"Elasticity").

With a KPI archive, each report is an :class:`~roq.kpi.records.ExchangeRecord` plus one
:class:`~roq.kpi.records.PublisherRecord` per publisher, and each subscriber's hello with KPIs a
:class:`~roq.kpi.records.SubscriberRecord` (through the outbox: the shell writes them).

Numbers come from peers: negative counts are read as 0, an exchange's running total of drops stops at
:data:`MAX_TOTAL`, and rates are kept only for publishers the monitor knows, at most
:data:`~monitor._topology.MAX_RATES` per exchange.
"""

from __future__ import annotations

from typing import TypedDict

from monitor._outbox import Outbox
from monitor._rule import Ewma, saturation_mark
from monitor._rules import Rules
from monitor._topology import MAX_PREFIX, MAX_RATES, TOTALS, ExchangeEntry, Topology
from roq.wire import control
from roq.kpi.records import ExchangeRecord, PublisherRecord, SubscriberRecord

__all__ = ["Kpis", "MAX_TOTAL"]

MAX_TOTAL = 1 << 62  # a running total stays well inside a BSON int64
MIN_PERIOD = 1e-3  # a report's period is read as at least this (a peer may say 0)


class Latency(TypedDict):
    """The subscribers' latency histogram, as it is counted (the status shows it as a
    :class:`roq.wire.status.LatencyHistogram`)."""

    bounds_ms: list[float]
    counts: list[int]
    sum_ms: float


class Kpis:
    """Turns KPI reports into loads, and into archive records.

    Args:
        topology: the exchanges whose loads are kept, the publishers whose rates are.
        rules: the rules in force (smoothing, the mark).
        outbox: where archive records go.
        archiving: whether there is an archive (records are made only then).
    """

    def __init__(self, topology: Topology, rules: Rules, outbox: Outbox, *, archiving: bool) -> None:
        self.topology = topology
        self.rules = rules
        self.outbox = outbox
        self.archiving = archiving
        self.totals = dict.fromkeys(TOTALS, 0)  # the queue's traffic since this monitor started
        # its subscribers' batches per latency bound (control.LATENCY_BOUNDS_MS, then one above the last) and
        # their sum, since this monitor started: the metrics' latency histogram
        self.latency: Latency = {"bounds_ms": list(control.LATENCY_BOUNDS_MS),
                        "counts": [0] * (len(control.LATENCY_BOUNDS_MS) + 1), "sum_ms": 0.0}

    def exchange(self, kpi: control.ExchangeKpi, identity: bytes, now: float) -> None:
        """An exchange's KPI report (ignored until its first heartbeat, which carries its endpoints)."""
        x = self.topology.exchanges.get(kpi.exchange)
        if x is None:
            return
        x.last_seen = now
        period = max(kpi.period, MIN_PERIOD)
        raw = max(kpi.records_in, 0) / period
        x.load.add(raw)
        x.bytes_load.add(max(kpi.bytes_in, 0) / period)
        x.out_load.add(max(kpi.records_out, 0) / period)
        x.out_bytes_load.add(max(kpi.bytes_out, 0) / period)
        for name, n in zip(TOTALS, (kpi.records_in, kpi.bytes_in, kpi.records_out, kpi.bytes_out)):
            n = min(max(n, 0), MAX_TOTAL)
            x.totals[name] = min(x.totals[name] + n, MAX_TOTAL)
            self.totals[name] = min(self.totals[name] + n, MAX_TOTAL)
        x.cpu_percent, x.rss_bytes, x.busy = kpi.cpu_percent, kpi.rss_bytes, kpi.busy
        x.busy_load.add(min(max(kpi.busy, 0.0), 1.0))
        x.dropped = min(x.dropped + max(kpi.dropped, 0), MAX_TOTAL)
        if self.archiving:
            self._archive(x, kpi)
        self._rates(x, kpi, period)
        # smoothing decides *whether* the exchange is hot; the sustain counts from when the raw load went over,
        # so smoothing does not delay the reaction to a real overload a second time
        rules = self.rules
        x.pressure = self._pressure(x)
        high = x.mark = saturation_mark(rules.high, x.load.value, x.busy_load.value, rules.busy)
        x.over_since = (now if x.over_since is None else x.over_since) if raw > high else None
        if x.load.value > high:
            x.hot_since = x.hot_since if x.hot_since is not None else x.over_since if x.over_since is not None else now
        else:
            x.hot_since = None

    def _pressure(self, x: ExchangeEntry) -> float:
        """The mean pressure of the publishers settled on ``x`` (not moving): 0 without any."""
        said = [p.pressure for p in self.topology.publishers.values() if p.exchange == x.id and p.relocation is None]
        return sum(said) / len(said) if said else 0.0

    def _rates(self, x: ExchangeEntry, kpi: control.ExchangeKpi, period: float) -> None:
        publishers = self.topology.publishers
        seen = set()
        for rate in kpi.publishers:
            p = publishers.get(rate.publisher)
            if p is None:  # the monitor does not know it (yet): nothing would read its rate
                continue
            seen.add(p.id)
            ewma = x.rates.get(p.id)
            if ewma is None:
                if len(x.rates) >= MAX_RATES:
                    continue
                ewma = x.rates[p.id] = Ewma(self.rules.smoothing)
            ewma.add(max(rate.records, 0) / period)
        for pub in [pub for pub in x.rates if pub not in seen]:
            value = x.rates[pub].add(0.0)
            entry = publishers.get(pub)
            if value < 1.0 and (entry is None or entry.exchange != x.id):
                del x.rates[pub]

    def _archive(self, x: ExchangeEntry, kpi: control.ExchangeKpi) -> None:
        host = x.frontend.rsplit("/", 1)[-1].rsplit(":", 1)[0]
        self.outbox.record(ExchangeRecord(
            exchange=x.id, host=host, period=kpi.period, records_in=kpi.records_in, bytes_in=kpi.bytes_in,
            records_out=kpi.records_out, bytes_out=kpi.bytes_out, publishers=len(kpi.publishers),
            cpu_percent=kpi.cpu_percent, rss_bytes=kpi.rss_bytes, busy=kpi.busy, dropped=kpi.dropped))
        for rate in kpi.publishers:
            self.outbox.record(PublisherRecord(publisher=rate.publisher, exchange=x.id, host=host, period=kpi.period,
                                               records=rate.records, bytes=rate.bytes))

    def subscriber(self, hello: control.SubscriberHello, identity: bytes, now: float) -> None:
        """A subscriber's KPIs, which ride on its hello (``period`` 0 = none): kept on its entry for the
        status, and archived."""
        s = self.topology.subscribers.get(hello.subscriber)
        counts = self.latency["counts"]
        buckets = hello.latency_buckets
        if s is not None and len(buckets) == len(counts) and all(type(n) is int and 0 <= n < MAX_TOTAL for n in buckets):
            for i, n in enumerate(buckets):
                counts[i] = min(counts[i] + n, MAX_TOTAL)
            self.latency["sum_ms"] += min(max(hello.latency_sum_ms, 0.0), 1e15)
        if s is not None and hello.period > 0:
            s.kpis = {
                "records_per_s": round(max(hello.records, 0) / max(hello.period, MIN_PERIOD), 1),
                "latency_p50_ms": hello.latency_p50_ms,
                "latency_p99_ms": hello.latency_p99_ms,
                "gaps": max(hello.gaps, 0),
                "lost": max(hello.lost, 0),
                "duplicates": max(hello.duplicates, 0),
            }
        if self.archiving and hello.period > 0:
            self.outbox.record(SubscriberRecord(
                subscriber=hello.subscriber, prefix=hello.prefix[:MAX_PREFIX].decode("utf-8", "backslashreplace"),
                period=hello.period, records=hello.records, latency_p50_ms=hello.latency_p50_ms,
                latency_p99_ms=hello.latency_p99_ms, gaps=hello.gaps, lost=hello.lost, duplicates=hello.duplicates))
