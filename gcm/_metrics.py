"""The cluster's metrics in Prometheus's exposition format (``GET /metrics`` of the GCM's HTTP server).

Built on each scrape from what the leader already has: its view (hosts, queues) and its census (each running
queue's monitor status, see :mod:`gcm._census`); a scrape asks nobody. Names follow Prometheus's rules
(``roq_`` prefix, base units, ``_total`` for counters, ``_ratio`` for 0..1). Counters come from the monitors'
counts since they started (a restarted monitor starts its traffic counts again: ``rate()`` reads that as a
counter reset) and from their counters kept in ZooKeeper (relocations, fail-overs, scaling: continued across
monitors). A standby shows only ``roq_gcm_leader`` 0, so that a Prometheus scraping every GCM gets each series
once.

Cardinality is bounded whatever the traffic: per queue, the ``top`` busiest publishers and subscribers each
have a series of their own and the others are summed into one labelled ``other``; exchanges are bounded by the
queues' ``max_exchanges``.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gcm._census import Snapshot
from gcm._shapes import number
from gcm._view import View

__all__ = ["render", "families", "CONTENT_TYPE", "OTHER"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTHER = "other"  # the label of the series that sums the publishers or subscribers beyond the top ones

#: monitor counter -> (metric, help); relocations by reason are read from ``relocations_by_<reason>``
COUNTERS = {
    "failovers": ("roq_failovers_total", "publishers failed over from an exchange that died"),
    "exchanges_lost": ("roq_exchanges_lost_total", "exchanges declared dead"),
    "scale_outs": ("roq_scale_outs_total", "scale-out decisions"),
    "scale_ins": ("roq_scale_ins_total", "scale-in decisions"),
    "flaps": ("roq_flaps_total", "decisions that reversed an earlier one within two cool-downs"),
    "relocations_failed": ("roq_relocations_failed_total", "planned moves that did not complete"),
}
TRAFFIC = {
    "records_in": ("records_in", "records the exchanges received from publishers"),
    "bytes_in": ("bytes_in", "payload bytes the exchanges received from publishers"),
    "records_out": ("records_out", "records the exchanges sent to subscribers (once per subscriber)"),
    "bytes_out": ("bytes_out", "payload bytes the exchanges sent to subscribers"),
}


def _top(rows: list[dict[str, Any]], key: str, top: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``top`` rows with the highest ``key``, and the rest."""
    ranked = sorted(rows, key=lambda r: (-number(r.get(key)), str(r.get("id", ""))))
    return ranked[:top], ranked[top:]


def families(view: View, snapshots: dict[str, Snapshot], *, gcm: str, leading: bool, top: int,
             now: float) -> Iterator[Metric]:
    """Every metric family of the cluster as this GCM sees it (``now``: wall clock, for the census's age)."""
    leader = GaugeMetricFamily("roq_gcm_leader", "1 on the GCM that leads the cluster, 0 on a standby", labels=["gcm"])
    leader.add_metric([gcm], 1.0 if leading else 0.0)
    yield leader
    if not leading:
        return
    yield from _hosts(view)
    yield from _queues(view, snapshots, top, now)


def _hosts(view: View) -> Iterator[Metric]:
    _, hosts = view.summaries()
    specs = [("roq_host_cpus", "the host's CPU budget, cores", lambda h: h.Cpus),
             ("roq_host_cpu_ratio", "CPU used, of the host's budget (0..1)", lambda h: h.CpuPercent / 100),
             ("roq_host_memory_ratio", "memory used (0..1)", lambda h: h.MemoryPercent / 100),
             ("roq_host_network_bytes_per_second", "bytes/s in and out of the host", lambda h: h.NetBytesPerS),
             ("roq_host_link_bytes_per_second", "the rate of the host's link (0: unknown)", lambda h: h.LinkBytesPerS),
             ("roq_host_network_ratio", "network use, of the link's rate (0..1; 0 when unknown)",
              lambda h: h.NetPercent / 100),
             ("roq_host_exchanges", "exchanges the host runs", lambda h: h.Exchanges),
             ("roq_host_max_exchanges", "exchanges the host may run", lambda h: h.MaxExchanges),
             ("roq_host_monitors", "monitors the host runs", lambda h: h.Monitors)]
    for name, text, get in specs:
        family = GaugeMetricFamily(name, text, labels=["host"])
        for h in hosts:
            family.add_metric([h.Address], float(get(h)))
        yield family


def _queues(view: View, snapshots: dict[str, Snapshot], top: int, now: float) -> Iterator[Metric]:
    states = GaugeMetricFamily("roq_queue_state", "1 for the queue's state", labels=["queue", "state"])
    placed = GaugeMetricFamily("roq_queue_exchanges_placed", "exchanges the GCM placed for the queue", labels=["queue"])
    for name, q in sorted(view.queues.items()):
        states.add_metric([name, q.state], 1.0)
        placed.add_metric([name], float(len(q.placement)))
    yield states
    yield placed

    age = GaugeMetricFamily("roq_queue_status_age_seconds", "how old the monitor's status shown here is",
                            labels=["queue"])
    traffic = {k: CounterMetricFamily(f"roq_queue_{metric}", text, labels=["queue"])
               for k, (metric, text) in TRAFFIC.items()}
    x_traffic = {k: CounterMetricFamily(f"roq_exchange_{metric}", text, labels=["queue", "exchange"])
                 for k, (metric, text) in TRAFFIC.items()}
    gauges = {k: GaugeMetricFamily(f"roq_queue_{k}", text, labels=["queue"]) for k, text in (
        ("exchanges", "live exchanges of the queue"), ("publishers", "publishers the monitor knows"),
        ("subscribers", "live subscribers"))}
    relocations = CounterMetricFamily("roq_relocations_total", "publishers moved, by reason", labels=["queue", "reason"])
    counters = {k: CounterMetricFamily(metric, text, labels=["queue"]) for k, (metric, text) in COUNTERS.items()}
    x_gauges = {k: GaugeMetricFamily(metric, text, labels=["queue", "exchange"]) for k, metric, text in (
        ("records_per_s", "roq_exchange_records_in_per_second", "records/s in (smoothed)"),
        ("records_out_per_s", "roq_exchange_records_out_per_second", "records/s out (smoothed)"),
        ("busy", "roq_exchange_busy_ratio", "share of its time the exchange's loop works (0..1)"),
        ("mark_records_per_s", "roq_exchange_mark_records_per_second", "its own mark (the queue's, or less)"),
        ("publishers", "roq_exchange_publishers", "publishers sending through it"),
        ("publisher_pressure", "roq_exchange_publisher_pressure_ratio",
         "share of their time its publishers' batches wait for it (0..1)"))}
    pub_rate = GaugeMetricFamily("roq_publisher_records_per_second", f"records/s of the {top} busiest publishers "
                                 f"per queue ('{OTHER}': the rest, summed)", labels=["queue", "publisher"])
    sub_rate = GaugeMetricFamily("roq_subscriber_records_per_second", "records/s delivered to each of the busiest "
                                 f"subscribers per queue ('{OTHER}': the rest, summed)", labels=["queue", "subscriber"])
    sub_p50 = GaugeMetricFamily("roq_subscriber_latency_p50_seconds", "median end-to-end latency in the subscriber's "
                                "last KPI period", labels=["queue", "subscriber"])
    sub_p99 = GaugeMetricFamily("roq_subscriber_latency_p99_seconds", "99th percentile end-to-end latency in the "
                                "subscriber's last KPI period", labels=["queue", "subscriber"])
    sub_lost = CounterMetricFamily("roq_subscriber_lost_records_total", "records lost in gaps, as the subscribers "
                                   "count them since they started", labels=["queue", "subscriber"])
    latency = HistogramMetricFamily("roq_queue_latency_seconds", "end-to-end latency of the batches the queue's "
                                    "subscribers received, publisher's clock to subscriber's", labels=["queue"])
    for name, snap in sorted(snapshots.items()):
        s = snap.status
        age.add_metric([name], max(0.0, now - snap.at))
        histogram = _histogram(s.get("latency_histogram"))
        if histogram is not None:
            latency.add_metric([name], *histogram)
        totals = s.get("totals") if isinstance(s.get("totals"), dict) else {}
        for k, family in traffic.items():
            family.add_metric([name], number(totals.get(k)))
        exchanges = [x for x in s.get("exchanges", []) if isinstance(x, dict)]
        publishers = [p for p in s.get("publishers", []) if isinstance(p, dict)]
        subscribers = [x for x in s.get("subscribers", []) if isinstance(x, dict) and x.get("live")]
        gauges["exchanges"].add_metric([name], float(len(exchanges)))
        gauges["publishers"].add_metric([name], float(len(publishers)))
        gauges["subscribers"].add_metric([name], float(len(subscribers)))
        for x in exchanges:
            xid = str(x.get("id", ""))
            xt = x.get("totals") if isinstance(x.get("totals"), dict) else {}
            for k, family in x_traffic.items():
                family.add_metric([name, xid], number(xt.get(k)))
            for k, family in x_gauges.items():
                family.add_metric([name, xid], number(x.get(k)))
        c = s.get("counters") if isinstance(s.get("counters"), dict) else {}
        for k, family in counters.items():
            family.add_metric([name], number(c.get(k)))
        for key, value in sorted(c.items()):
            if isinstance(key, str) and key.startswith("relocations_by_"):
                relocations.add_metric([name, key.removeprefix("relocations_by_")], number(value))
        shown, rest = _top(publishers, "records_per_s", top)
        for p in shown:
            pub_rate.add_metric([name, str(p.get("id", ""))], number(p.get("records_per_s")))
        if rest:
            pub_rate.add_metric([name, OTHER], sum(number(p.get("records_per_s")) for p in rest))
        shown, rest = _top(subscribers, "records_per_s", top)
        for sub in shown:
            sid = str(sub.get("id", ""))
            sub_rate.add_metric([name, sid], number(sub.get("records_per_s")))
            sub_lost.add_metric([name, sid], number(sub.get("lost")))
            for family, key in ((sub_p50, "latency_p50_ms"), (sub_p99, "latency_p99_ms")):
                if number(sub.get(key)) >= 0 and key in sub:
                    family.add_metric([name, sid], number(sub.get(key)) / 1000)
        if rest:
            sub_rate.add_metric([name, OTHER], sum(number(x.get("records_per_s")) for x in rest))
            sub_lost.add_metric([name, OTHER], sum(number(x.get("lost")) for x in rest))
    yield age
    yield from traffic.values()
    yield from gauges.values()
    yield from x_traffic.values()
    yield from x_gauges.values()
    yield relocations
    yield from counters.values()
    yield from (pub_rate, sub_rate, sub_p50, sub_p99, sub_lost, latency)


def _histogram(doc: Any) -> tuple[list[tuple[str, float]], float] | None:
    """A monitor's latency histogram as Prometheus's cumulative buckets (seconds) and sum; None if malformed."""
    if not isinstance(doc, dict):
        return None
    bounds, counts = doc.get("bounds_ms"), doc.get("counts")
    if not isinstance(bounds, list) or not isinstance(counts, list) or len(counts) != len(bounds) + 1:
        return None
    buckets, total = [], 0.0
    for bound, count in zip([*bounds, None], counts):
        total += number(count)
        buckets.append(("+Inf" if bound is None else repr(number(bound) / 1000), total))
    return buckets, number(doc.get("sum_ms")) / 1000


class _Families(Collector):
    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics = list(metrics)

    def collect(self) -> Iterable[Metric]:
        return self._metrics


def render(metrics: Iterable[Metric]) -> bytes:
    """The exposition text of ``metrics``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(metrics))
    return generate_latest(registry)
