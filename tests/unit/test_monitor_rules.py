"""Rules in force: a monitor on its own keeps its flags; in a cluster it adopts ZooKeeper's without a restart."""

from __future__ import annotations

from monitor._rules import Rules
from monitor._topology import QueueView
from monitor.testing import Driver, Peers
from roq.wire import control
from roq.config import MonitorConfig
from roq.rules import DEFAULT_RULES, effective_rules


def clustered(explicit=None, thresholds=None) -> QueueView:
    return QueueView(state="running", rules=effective_rules(explicit or {}, thresholds or {}),
                     thresholds=thresholds or {}, explicit=explicit or {})


def test_a_monitor_on_its_own_keeps_its_flags_as_rules():
    rules = Rules.of(MonitorConfig(high_records_per_s=5000, kpi_period=0.5, smoothing=0.25, sustain=3, cooldown=4))
    assert (rules.high, rules.kpi_period, rules.smoothing, rules.sustain, rules.cooldown) == (5000, 0.5, 0.25, 3, 4)
    assert rules.values["max_exchanges"] == DEFAULT_RULES["max_exchanges"]


def test_new_rules_take_effect_at_once_and_a_new_kpi_period_is_sent_to_every_exchange():
    q = Peers(Driver(MonitorConfig(), view=clustered()), ("x1", "x2"), ())
    assert [m.period for m in q.d.to(b"x1", control.KpiPeriod)] == [1.0]  # a newcomer learns the period in force
    q.d.cluster(clustered({"smoothing": 0.2, "kpi_period_s": 0.5, "exchange_records_per_s": 3000}))
    assert [m.period for m in q.d.to(b"x2", control.KpiPeriod)] == [1.0, 0.5]
    assert q.d.core.topology.exchanges["x1"].load.alpha == 0.2 and q.d.core.rules.high == 3000
    [changed] = q.d.events("rules_changed")
    assert changed["rules"] == {"smoothing": 0.2, "kpi_period_s": 0.5, "exchange_records_per_s": 3000}
    q.d.cluster(clustered({"smoothing": 0.2, "kpi_period_s": 0.5, "exchange_records_per_s": 3000}))
    assert len(q.d.events("rules_changed")) == 1  # nothing new, no event


def test_new_thresholds_are_an_event_naming_what_is_in_force_and_what_the_rules_override():
    d = Driver(MonitorConfig(), view=clustered(thresholds={"exchange_records_per_s": 1000.0}))
    assert not d.events("thresholds_adopted")  # what was there at start is no news
    d.cluster(clustered(thresholds={"exchange_records_per_s": 1500.0}))
    [adopted] = d.events("thresholds_adopted")
    assert adopted["adopted"] == ["exchange_records_per_s"] and adopted["overridden"] == []
    assert d.status().rules["exchange_records_per_s"] == 1500.0
    explicit = {"exchange_records_per_s": 50_000}
    d.cluster(clustered(explicit, {"exchange_records_per_s": 1200.0}))
    second = d.events("thresholds_adopted")[-1]
    assert second["overridden"] == ["exchange_records_per_s"] and "rule 50000" in second["text"]
    assert d.core.rules.high == 50_000


def test_a_monitor_started_in_a_cluster_announces_itself():
    d = Driver(MonitorConfig(queue="q"), view=clustered({"sustain_s": 1.0}))
    kinds = [e["kind"] for e in d.events()]
    assert kinds == ["rules_changed", "monitor_started"]
    assert d.events("monitor_started")[0]["endpoint"] == "tcp://127.0.0.1:5500"
