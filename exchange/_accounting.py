"""What an exchange counts between two KPI reports (pure; the forward loop updates the fields)."""

from __future__ import annotations

from roq.control import ExchangeKpi, PublisherRate


class Accounting:
    """Counters of one KPI period.

    The forward loop increments the public fields directly (no method call per batch);
    :meth:`report` turns them into an :class:`~roq.control.ExchangeKpi` and starts a new period.
    """

    __slots__ = ("records_in", "bytes_in", "records_out", "bytes_out", "publishers", "busy", "started")

    def __init__(self, now: float) -> None:
        self.records_in = 0
        self.bytes_in = 0
        self.records_out = 0
        self.bytes_out = 0
        self.publishers: dict[bytes, list[int]] = {}  # publisher id -> [records, bytes]
        self.busy = 0.0  # seconds spent handling traffic
        self.started = now

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
        self.__init__(now)  # type: ignore[misc]
        return kpi
