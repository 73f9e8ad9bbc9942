"""KPI archive and the Spark jobs over it: ``roq kpi report`` and ``roq kpi tune``.

The archive writer (:mod:`roq.kpi.archive`) needs nothing beyond the standard library and runs inside
monitors and host managers; the Spark side (:mod:`roq.kpi.job`) imports PySpark only when it runs.
"""

from roq.kpi.archive import HOSTS_PARTITION, KINDS, ArchiveWriter

__all__ = ["ArchiveWriter", "KINDS", "HOSTS_PARTITION"]
