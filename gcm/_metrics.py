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
queues' ``max_exchanges``. Anyone may scrape: a publisher's or subscriber's series is labelled with its opaque
label (:class:`gcm._labels.Labels`), never its id.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Protocol, TypeVar

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gcm._census import Snapshot
from gcm._labels import Labels
from gcm._view import View
from roq.wire.control.links import LinkStats
from roq.wire.status import ExchangeStatus, JournalStatus, LatencyHistogram, QueueStatus, live_subscribers

__all__ = ["Exposition", "render", "families", "queue_lines", "CONTENT_TYPE", "OTHER", "QUEUE_FAMILIES"]

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
class _Named(Protocol):
    @property
    def id(self) -> str: ...


R = TypeVar("R", bound=_Named)

TRAFFIC = {
    "records_in": ("records_in", "records the exchanges received from publishers"),
    "bytes_in": ("bytes_in", "payload bytes the exchanges received from publishers"),
    "records_out": ("records_out", "records the exchanges sent to subscribers (once per subscriber)"),
    "bytes_out": ("bytes_out", "payload bytes the exchanges sent to subscribers"),
}


def _top(rows: list[R], rate: Callable[[R], float | None], top: int) -> tuple[list[R], list[R]]:
    """The ``top`` rows (publishers or subscribers) with the highest ``rate``, and the rest."""
    ranked = sorted(rows, key=lambda r: (-(rate(r) or 0.0), r.id))
    return ranked[:top], ranked[top:]


#: a child's link: (its name, seconds since its last hello, what its crossings carried), as
#: :meth:`gcm._federation.Federation.links` gives them
Links = Iterable[tuple[str, float, list[LinkStats]]]


def families(view: View, *, gcm: str, leading: bool, links: Links = ()) -> Iterator[Metric]:
    """The families of the GCM, its hosts, its queues' states and its children's links, as prometheus_client
    objects (the queues' traffic and topology come as text from :class:`Exposition`, for speed)."""
    leader = GaugeMetricFamily("roq_gcm_leader", "1 on the GCM that leads the cluster, 0 on a standby", labels=["gcm"])
    leader.add_metric([gcm], 1.0 if leading else 0.0)
    yield leader
    if not leading:
        return
    yield from _hosts(view)
    yield from _queues(view)
    yield from _links(links)


def _links(links: Links) -> Iterator[Metric]:
    """Each child's link (labels: the child, and the monitor of the queue each crossing carries into)."""
    heard = GaugeMetricFamily("roq_link_heard_seconds", "seconds since the child's link last said hello",
                              labels=["child"])
    specs: list[tuple[type[GaugeMetricFamily] | type[CounterMetricFamily], str, str, Callable[[LinkStats], int]]] = [
        (CounterMetricFamily, "roq_link_records_sent", "records the link sent into the parent's queue (resent too)",
         lambda s: s.records_sent),
        (CounterMetricFamily, "roq_link_bytes_sent", "bytes of batches the link sent into the parent's queue",
         lambda s: s.bytes_sent),
        (CounterMetricFamily, "roq_link_bytes_read", "bytes of the source journal's answers, as they came",
         lambda s: s.bytes_read),
        (GaugeMetricFamily, "roq_link_backlog_bytes", "bytes on their way, not acknowledged yet", lambda s: s.backlog),
        (CounterMetricFamily, "roq_link_moves", "moves and fail-overs of the link in the parent's queue",
         lambda s: s.moves),
        (GaugeMetricFamily, "roq_link_rate_limit_bytes_per_second", "the link's rate limit (0: none)",
         lambda s: s.rate_limit),
        (GaugeMetricFamily, "roq_link_prefixes_carried", "key prefixes the link carries now",
         lambda s: len(s.carrying))]
    out = [kind(name, text, labels=["child", "target"]) for kind, name, text, _ in specs]
    for child, age, crossings in links:
        heard.add_metric([child], age)
        for s in crossings:
            for family, (_, _, _, get) in zip(out, specs):
                family.add_metric([child, s.target], float(get(s)))
    yield heard
    yield from out


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


def _queues(view: View) -> Iterator[Metric]:
    states = GaugeMetricFamily("roq_queue_state", "1 for the queue's state", labels=["queue", "state"])
    placed = GaugeMetricFamily("roq_queue_exchanges_placed", "exchanges the GCM placed for the queue", labels=["queue"])
    for name, q in sorted(view.queues.items()):
        states.add_metric([name, q.state], 1.0)
        placed.add_metric([name], float(len(q.placement)))
    yield states
    yield placed


#: the families made of each queue's monitor status, in their order: (name, type, help)
QUEUE_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("roq_queue_status_age_seconds", "gauge", "how old the monitor's status shown here is"),
    *((f"roq_queue_{k}_total", "counter", text) for k, (_, text) in TRAFFIC.items()),
    ("roq_queue_exchanges", "gauge", "live exchanges of the queue"),
    ("roq_queue_publishers", "gauge", "publishers the monitor knows"),
    ("roq_queue_subscribers", "gauge", "live subscribers"),
    *((f"roq_exchange_{k}_total", "counter", text) for k, (_, text) in TRAFFIC.items()),
    ("roq_exchange_records_in_per_second", "gauge", "records/s in (smoothed)"),
    ("roq_exchange_records_out_per_second", "gauge", "records/s out (smoothed)"),
    ("roq_exchange_busy_ratio", "gauge", "share of its time the exchange's loop works (0..1)"),
    ("roq_exchange_mark_records_per_second", "gauge", "its own mark (the queue's, or less)"),
    ("roq_exchange_publishers", "gauge", "publishers sending through it"),
    ("roq_exchange_publisher_pressure_ratio", "gauge", "share of their time its publishers' batches wait for it (0..1)"),
    ("roq_relocations_total", "counter", "publishers moved, by reason"),
    *((metric, "counter", text) for metric, text in COUNTERS.values()),
    ("roq_publisher_records_per_second", "gauge", f"records/s of the busiest publishers per queue ('{OTHER}': the "
                                                  "rest, summed)"),
    ("roq_subscriber_records_per_second", "gauge", f"records/s delivered to each of the busiest subscribers per "
                                                   f"queue ('{OTHER}': the rest, summed)"),
    ("roq_subscriber_latency_p50_seconds", "gauge", "median end-to-end latency in the subscriber's last KPI period"),
    ("roq_subscriber_latency_p99_seconds", "gauge", "99th percentile end-to-end latency in the subscriber's last KPI "
                                                    "period"),
    ("roq_subscriber_lost_records_total", "counter", "records lost in gaps, as the subscribers count them since "
                                                     "they started"),
    ("roq_queue_latency_seconds", "histogram", "end-to-end latency of the batches the queue's subscribers received, "
                                               "publisher's clock to subscriber's"),
    ("roq_journal_up", "gauge", "1 while the durable queue's journal reports to its monitor"),
    ("roq_journal_bytes", "gauge", "bytes of the queue's journal on disk (its segments)"),
    ("roq_journal_records", "gauge", "records the journal keeps (its first to its next offset)"),
    ("roq_journal_next_offset", "gauge", "the offset the journal's next record gets"),
    ("roq_journal_unsynced_bytes", "gauge", "bytes written and not yet on disk: what a power failure could take "
                                            "(durability interval)"),
    ("roq_journal_sync_seconds", "gauge", "mean time of one fdatasync in the journal's last heartbeat period"),
    ("roq_journal_sync_max_seconds", "gauge", "longest fdatasync in the journal's last heartbeat period"),
    ("roq_journal_write_failures_total", "counter", "writes or syncs of the journal that failed (a full disk...)"),
    ("roq_journal_lag_bytes", "gauge", "bytes the exchanges sent the journal that it has not acknowledged yet"),
    ("roq_journal_replica_up", "gauge", "1 while a replica of the queue's replicated journal reports to the monitor"),
    ("roq_journal_replica_leader", "gauge", "1 for the replica that leads the newest epoch"),
    ("roq_journal_replica_epoch", "gauge", "the newest epoch the replica promised"),
    ("roq_journal_replica_lag", "gauge", "offsets of the leader's log the replica does not hold, as the leader counted"),
    ("roq_journal_replica_in_sync", "gauge", "1 while the replica holds everything a majority acknowledged"),
    ("roq_journal_replica_learner", "gauge", "1 while the replica, new in place of a lost one, does not vote yet"),
    ("roq_journal_elections_total", "counter", "elections the queue's monitor started for its replicated journal"),
)
_JOURNAL: tuple[tuple[str, Callable[[JournalStatus], float | None], float], ...] = (
    ("roq_journal_bytes", lambda j: j.size_bytes, 1), ("roq_journal_next_offset", lambda j: j.next_offset, 1),
    ("roq_journal_unsynced_bytes", lambda j: j.unsynced_bytes, 1), ("roq_journal_sync_seconds", lambda j: j.sync_ms, 1e-3),
    ("roq_journal_sync_max_seconds", lambda j: j.sync_max_ms, 1e-3),
    ("roq_journal_write_failures_total", lambda j: j.write_failures, 1), ("roq_journal_lag_bytes", lambda j: j.lag_bytes, 1))
_X_GAUGES: tuple[tuple[Callable[[ExchangeStatus], float], str], ...] = (
    (lambda x: x.records_per_s, "roq_exchange_records_in_per_second"),
    (lambda x: x.records_out_per_s, "roq_exchange_records_out_per_second"), (lambda x: x.busy, "roq_exchange_busy_ratio"),
    (lambda x: x.mark_records_per_s, "roq_exchange_mark_records_per_second"),
    (lambda x: x.publishers, "roq_exchange_publishers"),
    (lambda x: x.publisher_pressure, "roq_exchange_publisher_pressure_ratio"))


def _label(value: str) -> str:
    """A label value escaped as the text format wants it."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def queue_lines(name: str, status: QueueStatus, top: int, label: Labels) -> dict[str, list[str]]:
    """The sample lines of one queue's monitor status, by family (all but the age, which changes with the clock);
    publishers and subscribers by their ``label``.

    Formatted here rather than through prometheus_client's objects: a scrape of 1,000 queues is some 80,000
    lines, which its objects render in half a second; this is done once per status (as the census gets it)
    and a scrape only joins the lines. The tests parse the result with prometheus_client's own parser.
    """
    q = _label(name)
    out: dict[str, list[str]] = {}

    def add(family: str, line: str) -> None:
        out.setdefault(family, []).append(line)

    for k in TRAFFIC:
        add(f"roq_queue_{k}_total", f'roq_queue_{k}_total{{queue="{q}"}} {float(getattr(status.totals, k))!r}')
    subscribers = live_subscribers(status)
    for family, n in (("roq_queue_exchanges", len(status.exchanges)), ("roq_queue_publishers", len(status.publishers)),
                      ("roq_queue_subscribers", len(subscribers))):
        add(family, f'{family}{{queue="{q}"}} {float(n)!r}')
    for x in status.exchanges:
        labels = f'queue="{q}",exchange="{_label(x.id)}"'
        for k in TRAFFIC:
            add(f"roq_exchange_{k}_total", f"roq_exchange_{k}_total{{{labels}}} {float(getattr(x.totals, k))!r}")
        for gauge, family in _X_GAUGES:
            add(family, f"{family}{{{labels}}} {float(gauge(x))!r}")
    for key, times in sorted(status.counters.items()):
        if key.startswith("relocations_by_"):
            reason = _label(key.removeprefix("relocations_by_"))
            add("roq_relocations_total", f'roq_relocations_total{{queue="{q}",reason="{reason}"}} {float(times)!r}')
    for key, (metric, _) in COUNTERS.items():
        add(metric, f'{metric}{{queue="{q}"}} {float(status.count(key))!r}')
    shown, rest = _top(status.publishers, lambda p: p.records_per_s, top)
    family = "roq_publisher_records_per_second"
    for p in shown:
        add(family, f'{family}{{queue="{q}",publisher="{label(p.id)}"}} {p.records_per_s!r}')
    if rest:
        add(family, f'{family}{{queue="{q}",publisher="{OTHER}"}} {sum(p.records_per_s for p in rest)!r}')
    shown_subscribers, others = _top(subscribers, lambda s: s.records_per_s, top)
    for sub in shown_subscribers:
        labels = f'queue="{q}",subscriber="{label(sub.id)}"'
        add("roq_subscriber_records_per_second",
            f"roq_subscriber_records_per_second{{{labels}}} {float(sub.records_per_s or 0)!r}")
        add("roq_subscriber_lost_records_total", f"roq_subscriber_lost_records_total{{{labels}}} {float(sub.lost or 0)!r}")
        for family, ms in (("roq_subscriber_latency_p50_seconds", sub.latency_p50_ms),
                           ("roq_subscriber_latency_p99_seconds", sub.latency_p99_ms)):
            if ms is not None and ms >= 0:
                add(family, f"{family}{{{labels}}} {ms / 1000!r}")
    if others:
        labels = f'queue="{q}",subscriber="{OTHER}"'
        add("roq_subscriber_records_per_second",
            f"roq_subscriber_records_per_second{{{labels}}} {sum(float(s.records_per_s or 0) for s in others)!r}")
        add("roq_subscriber_lost_records_total",
            f"roq_subscriber_lost_records_total{{{labels}}} {sum(float(s.lost or 0) for s in others)!r}")
    journal = status.journal
    if journal.journal:
        add("roq_journal_up", f'roq_journal_up{{queue="{q}"}} {1.0 if journal.alive else 0.0!r}')
        records = float(journal.next_offset or 0) - float(journal.first_offset or 0)
        add("roq_journal_records", f'roq_journal_records{{queue="{q}"}} {records!r}')
        for family, figure, scale in _JOURNAL:
            add(family, f'{family}{{queue="{q}"}} {float(figure(journal) or 0) * scale!r}')
        for r in journal.replicas or []:
            labels = f'queue="{q}",replica="{_label(r.replica)}"'
            for family, value in (("roq_journal_replica_up", r.alive), ("roq_journal_replica_leader", r.role == "leader"),
                                  ("roq_journal_replica_epoch", r.epoch), ("roq_journal_replica_lag", r.lag),
                                  ("roq_journal_replica_in_sync", r.in_sync),
                                  ("roq_journal_replica_learner", r.learner)):
                add(family, f"{family}{{{labels}}} {float(value)!r}")
        if journal.elections is not None:
            add("roq_journal_elections_total", f'roq_journal_elections_total{{queue="{q}"}} {float(journal.elections)!r}')
    buckets, total = _histogram(status.latency_histogram)
    for le, count in buckets:
        add("roq_queue_latency_seconds", f'roq_queue_latency_seconds_bucket{{queue="{q}",le="{le}"}} {count!r}')
    add("roq_queue_latency_seconds", f'roq_queue_latency_seconds_count{{queue="{q}"}} {buckets[-1][1]!r}')
    add("roq_queue_latency_seconds", f'roq_queue_latency_seconds_sum{{queue="{q}"}} {total!r}')
    return out


class Exposition:
    """The cluster's metrics as text; each queue's lines are made once per status (:meth:`update`, as the census
    gets it, or at the scrape that first needs them).

    Args:
        top: publishers and subscribers per queue with series of their own.
        labels: what names a publisher or a subscriber in its series.
    """

    def __init__(self, top: int, labels: Labels) -> None:
        self.top = top
        self.labels = labels
        self._lines: dict[str, tuple[Snapshot, dict[str, list[str]]]] = {}

    def update(self, snapshot: Snapshot) -> None:
        self._lines[snapshot.queue] = (snapshot, queue_lines(snapshot.queue, snapshot.status, self.top, self.labels))

    def text(self, view: View, snapshots: dict[str, Snapshot], *, gcm: str, leading: bool, now: float,
             links: Links = ()) -> bytes:
        """The whole exposition (a standby's is its ``roq_gcm_leader`` 0 alone)."""
        head = render(families(view, gcm=gcm, leading=leading, links=links))
        if not leading:
            return head
        for name in [n for n in self._lines if n not in snapshots]:
            del self._lines[name]
        blocks = []
        for name, snap in sorted(snapshots.items()):
            cached = self._lines.get(name)
            if cached is None or cached[0] is not snap:
                self.update(snap)
            blocks.append(self._lines[name][1])
        parts = [head.decode()]
        for family, kind, text in QUEUE_FAMILIES:
            parts.append(f"# HELP {family} {text}\n# TYPE {family} {kind}\n")
            if family == "roq_queue_status_age_seconds":
                parts.extend(f'{family}{{queue="{_label(n)}"}} {max(0.0, now - s.at)!r}\n'
                             for n, s in sorted(snapshots.items()))
                continue
            for block in blocks:
                lines = block.get(family)
                if lines:
                    parts.append("\n".join(lines) + "\n")
        return "".join(parts).encode()


def _histogram(histogram: LatencyHistogram) -> tuple[list[tuple[str, float]], float]:
    """A monitor's latency histogram as Prometheus's cumulative buckets (seconds) and sum."""
    buckets, total = [], 0.0
    for bound, count in zip([*histogram.bounds_ms, None], histogram.counts):
        total += float(count)
        buckets.append(("+Inf" if bound is None else repr(bound / 1000), total))
    return buckets, histogram.sum_ms / 1000


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
