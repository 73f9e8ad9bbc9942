"""What an exchange counts between two KPI reports (pure; the forward loop updates the fields)."""

from __future__ import annotations

from roq.wire.control import ExchangeKpi, PublisherRate

__all__ = ["Accounting", "MAX_PUBLISHERS"]

#: Publishers counted one by one in a KPI period; the traffic of any more is in the totals only, so that a
#: flood of identities neither grows the table nor makes the report too long for the monitor.
MAX_PUBLISHERS = 1000


class Accounting:
    """Counters of one KPI period.

    The forward loop increments the public fields directly (no method call per batch) and adds a
    publisher to :attr:`publishers` only while it holds fewer than :attr:`max_publishers`;
    :meth:`report` turns them into an :class:`~roq.wire.control.ExchangeKpi` and starts a new period.
    """

    __slots__ = ("records_in", "bytes_in", "records_out", "bytes_out", "publishers", "busy", "started",
                 "max_publishers")

    def __init__(self, now: float, *, max_publishers: int = MAX_PUBLISHERS) -> None:
        self.records_in = 0
        self.bytes_in = 0
        self.records_out = 0
        self.bytes_out = 0
        self.publishers: dict[bytes, list[int]] = {}  # publisher id -> [records, bytes]
        self.busy = 0.0  # seconds spent handling traffic
        self.started = now
        self.max_publishers = max_publishers

    def spent(self, seconds: float) -> None:
        """Count ``seconds`` spent handling traffic."""
        self.busy += seconds

    def restart(self, now: float) -> None:
        """Begin the period at ``now`` (counting nothing of what came before)."""
        self.__init__(now, max_publishers=self.max_publishers)  # type: ignore[misc]

    def count_publisher(self, publisher: bytes, records: int, size: int) -> None:
        """Count one batch of ``publisher`` (off the hot path, which does the same inline)."""
        stat = self.publishers.get(publisher)
        if stat is not None:
            stat[0] += records
            stat[1] += size
        elif len(self.publishers) < self.max_publishers:
            self.publishers[publisher] = [records, size]

    def report(self, exchange: str, now: float, *, cpu_percent: float, rss_bytes: int, dropped: int) -> ExchangeKpi:
        """Build the KPI record of the period that ends at ``now`` and reset the counters."""
        period = max(now - self.started, 1e-6)
        kpi = ExchangeKpi(
            exchange=exchange,
            period=period,
            records_in=self.records_in,
            bytes_in=self.bytes_in,
            records_out=self.records_out,
            bytes_out=self.bytes_out,
            publishers=[PublisherRate(p.hex(), r, b) for p, (r, b) in self.publishers.items()],
            cpu_percent=cpu_percent,
            rss_bytes=rss_bytes,
            busy=min(1.0, self.busy / period),
            dropped=dropped,
        )
        self.restart(now)
        return kpi
