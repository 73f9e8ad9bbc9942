"""The queue's rules in force in its monitor, and their adoption without a restart.

A monitor on its own (no ZooKeeper) keeps its flags as rules (:meth:`Rules.of`). In a cluster it adopts what
ZooKeeper says (operator rules over tuner thresholds over defaults, :class:`~monitor._topology.QueueView`)
each time that changes: marks, smoothing, sustain and cool-down at once; a new KPI period is sent to every
exchange. New thresholds are an event of their own (``thresholds_adopted``): which are now in force, and
which the queue's explicit rules override.
"""

from __future__ import annotations

from typing import Any, Mapping

from monitor._outbox import Outbox
from monitor._topology import QueueView, Topology
from roq.wire import control
from roq.config import MonitorConfig
from roq.rules import DEFAULT_RULES

__all__ = ["Rules", "Adoption"]


class Rules:
    """The rules in force and the settings they give (shared by every part of the core, read at each use).

    Attributes:
        values: every rule in force (:data:`roq.rules.DEFAULT_RULES`' keys).
        high: relocation mark, records/s (``exchange_records_per_s``).
        busy: the busy fraction above which an exchange is saturated (``exchange_busy``).
        kpi_period, smoothing, sustain, cooldown: from ``kpi_period_s``, ``smoothing``, ``sustain_s``,
            ``cooldown_s``.
    """

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values: dict[str, Any] = {}
        self.high = self.busy = self.kpi_period = self.smoothing = self.sustain = self.cooldown = 0.0
        self.replace(values)

    @classmethod
    def of(cls, config: MonitorConfig) -> Rules:
        """The rules of a monitor on its own: its flags."""
        return cls({
            **DEFAULT_RULES,
            "exchange_records_per_s": config.high_records_per_s,
            "kpi_period_s": config.kpi_period,
            "smoothing": config.smoothing,
            "sustain_s": config.sustain,
            "cooldown_s": config.cooldown,
            "durability": config.durability,
        })

    def replace(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Put ``values`` in force; the rules that changed (name -> new value)."""
        changed = {k: v for k, v in values.items() if self.values.get(k) != v}
        self.values = dict(values)
        self.high = float(self.values["exchange_records_per_s"])
        self.busy = float(self.values["exchange_busy"])
        self.kpi_period = float(self.values["kpi_period_s"])
        self.smoothing = float(self.values["smoothing"])
        self.sustain = float(self.values["sustain_s"])
        self.cooldown = float(self.values["cooldown_s"])
        return changed


class Adoption:
    """Adopts the rules and thresholds ZooKeeper holds for the queue.

    Args:
        rules: the rules in force (changed in place).
        topology: whose exchanges' averages take the new smoothing and are sent a new KPI period.
        outbox: where the KPI periods and the events go.
    """

    def __init__(self, rules: Rules, topology: Topology, outbox: Outbox) -> None:
        self.rules = rules
        self.topology = topology
        self.outbox = outbox
        self.thresholds_seen: dict[str, Any] = {}

    def adopt(self, view: QueueView) -> bool:
        """Put the rules of ``view`` in force now; True if any changed (then the scaler starts over)."""
        period = self.rules.kpi_period
        changed = self.rules.replace(view.rules)
        if not changed:
            return False
        for x in self.topology.exchanges.values():
            for ewma in (x.load, x.bytes_load, *x.rates.values()):
                ewma.alpha = self.rules.smoothing
            if self.rules.kpi_period != period:
                self.outbox.send(x.identity, control.KpiPeriod(period=self.rules.kpi_period))
        self.outbox.event("rules_changed",
                          "rules in force: " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())), rules=changed)
        return True

    def seen(self, view: QueueView) -> None:
        """The thresholds ``view`` holds are known already (a monitor that starts reports none as new)."""
        self.thresholds_seen = dict(view.thresholds)

    def note_thresholds(self, view: QueueView) -> None:
        """New thresholds (from the KPI tuner) are an event of their own: which are now in force, which the
        queue's rules override."""
        changed = {k: v for k, v in view.thresholds.items() if self.thresholds_seen.get(k) != v}
        self.thresholds_seen = dict(view.thresholds)
        if not changed:
            return
        adopted = {k: v for k, v in changed.items() if k not in view.explicit and self.rules.values.get(k) == v}
        overridden = {k: view.explicit[k] for k in changed if k in view.explicit}
        text = "new thresholds: " + ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                                              for k, v in sorted(changed.items()))
        if adopted:
            text += "; in force: " + ", ".join(sorted(adopted))
        if overridden:
            text += "; the queue's rules override " + ", ".join(f"{k} (rule {v})" for k, v in sorted(overridden.items()))
        self.outbox.event("thresholds_adopted", text, thresholds=changed, adopted=sorted(adopted),
                          overridden=sorted(overridden))
