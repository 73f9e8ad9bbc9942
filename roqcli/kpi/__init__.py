"""``roq kpi report`` and ``roq kpi tune``: PySpark jobs over the KPI archive (:mod:`roq.kpi.archive`).

:mod:`roqcli.kpi.job` imports PySpark only when it runs; :mod:`roqcli.kpi.capacity` is the pure tuning rule.
"""
