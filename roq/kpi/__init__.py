"""KPI archive and the Spark jobs over it: ``roq kpi report`` and ``roq kpi tune``.

The archive writer (:mod:`roq.kpi.archive`) needs nothing beyond the standard library and runs inside
monitors and host managers; the Spark jobs that read it are the ``roq kpi`` commands (:mod:`roqcli.kpi`).
"""

from roq.kpi.archive import HOSTS_PARTITION, ArchiveWriter
from roq.kpi.records import (
    KINDS,
    EventRecord,
    ExchangeRecord,
    HostRecord,
    PublisherRecord,
    Record,
    SubscriberRecord,
)

__all__ = ["ArchiveWriter", "HOSTS_PARTITION", "KINDS", "Record", "ExchangeRecord", "PublisherRecord",
           "SubscriberRecord", "HostRecord", "EventRecord"]
