"""Exchange <-> monitor: the exchange's heartbeat, KPIs and goodbye; the monitor's orders and what it tells it.

An exchange registers with its queue's monitor by its first :class:`Heartbeat` and reports its traffic every KPI
period (:class:`ExchangeKpi`, at the rate :class:`KpiPeriod` sets). The monitor tells it whether and where the
queue is journaled (:class:`Journaling`) and stops it (:class:`Shutdown`); an exchange that stops by itself
says so first (:class:`ExchangeBye`) so that its publishers move at once.
"""

from __future__ import annotations

import dataclasses

from roq.wire.control.codec import Message, message

__all__ = ["Heartbeat", "ExchangeBye", "ExchangeKpi", "PublisherRate", "KpiPeriod", "Journaling", "Shutdown"]


@message(5)
class Heartbeat(Message):
    """Exchange -> monitor, every heartbeat interval; also registers the exchange."""

    exchange: str
    frontend: str
    backend: str
    pid: int
    draining: bool = False
    permissions: str = "-"  # the digest of the permissions it holds (AclRules.digest); "" none yet; "-" plaintext
    journal: str = "?"  # the durability and journal it holds (Journaling.digest); "?" not told yet
    journal_end: int = -1  # its journal's end (next offset) as its last acknowledgement said; -1 none
    journal_waiting: int = 0  # bytes it sent its journal that the journal has not acknowledged yet


@message(6)
class ExchangeBye(Message):
    """Exchange -> monitor: the exchange is stopping; move its publishers now."""

    exchange: str


@dataclasses.dataclass(frozen=True)
class PublisherRate:
    publisher: str  # hex id
    records: int
    bytes: int


@message(21)
class ExchangeKpi(Message):
    """Exchange -> monitor, every KPI period: counts over the last ``period`` seconds."""

    exchange: str
    period: float
    records_in: int
    bytes_in: int
    records_out: int
    bytes_out: int
    publishers: list[PublisherRate]
    cpu_percent: float
    rss_bytes: int
    busy: float  # fraction of the period the forward loop spent working (0..1)
    dropped: int  # malformed frames dropped in the period


@message(1106)
class KpiPeriod(Message):
    """Monitor -> exchange: report KPIs every ``period`` seconds from now on (the queue's ``kpi_period_s``)."""

    period: float


@message(1109)
class Journaling(Message):
    """Monitor -> exchange, when it joins, whenever it changes and whenever its heartbeat shows another: the
    queue's durability and its journal's intake. With a journal the exchange sends it every batch it
    forwards and acknowledges a publisher only with what the journal acknowledged; ``durability`` "none" (and
    ``journal`` ""): the exchange acknowledges by itself. An exchange reads no publisher before it is told."""

    journal: str = ""
    durability: str = "none"

    def digest(self) -> str:
        """What an exchange's heartbeat says it holds: the durability, then the journal fed if any."""
        return f"{self.durability} {self.journal}".rstrip()


@message(1100)
class Shutdown(Message):
    """Monitor -> exchange: stop."""

    reason: str = ""
