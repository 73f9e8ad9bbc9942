"""gcm's rules and thresholds decisions: only what the operator set is stored, the whole is checked, a bad
value changes nothing, evidence goes beside the thresholds in the same transaction (pure)."""

from __future__ import annotations

import json

import pytest

from gcm._rules import MAX_EVIDENCE, set_rules, set_thresholds
from gcm._view import QueueView, View
from roq.wire import management as m
from roq.wire.documents import QueueDoc, RulesDoc, TuningDoc
from roq.errors import BadRequestError, NotFoundError
from roq.rules import DEFAULT_RULES, effective_rules
from roq.zk import Create, Paths, SetData

NOW = 1234.5


def _view(explicit: dict | None = None, thresholds: dict | None = None, *, tuning_version: int = -1) -> View:
    q = QueueView("q", QueueDoc(host="a", placement={"x1": "a"}), version=3, explicit_rules=explicit or {},
                  thresholds=thresholds or {}, rules_version=4, thresholds_version=5, tuning_version=tuning_version)
    return View({"q": q}, paths=Paths("/roq"))


def test_set_rules_stores_only_the_keys_set_at_the_version_read():
    out = set_rules(_view(), m.SetRules(QName="q", Rules={"max_exchanges": 6, "cooldown_s": 2}), NOW)
    assert out.ops == (SetData("/roq/queues/q/rules", RulesDoc({"max_exchanges": 6, "cooldown_s": 2.0}).encode(), 4),)
    assert out.reply.comment == "rules set" and out.reply.data["Explicit"] == {"max_exchanges": 6, "cooldown_s": 2.0}
    assert out.reply.data["Rules"] == {**DEFAULT_RULES, "max_exchanges": 6, "cooldown_s": 2.0}


def test_a_none_value_unsets_a_rule_and_the_threshold_applies_again():
    out = set_rules(_view({"cooldown_s": 3.0, "max_exchanges": 6}, {"cooldown_s": 4.0}),
                    m.SetRules(QName="q", Rules={"cooldown_s": None}), NOW)
    assert json.loads(out.ops[0].data) == {"max_exchanges": 6}
    assert out.reply.data["Rules"]["cooldown_s"] == 4.0


def test_min_above_max_is_refused_across_sources():
    with pytest.raises(BadRequestError, match="min_exchanges"):
        set_rules(_view(thresholds={"max_exchanges": 2}), m.SetRules(QName="q", Rules={"min_exchanges": 3}), NOW)
    with pytest.raises(BadRequestError, match="min_exchanges"):
        set_rules(_view({"min_exchanges": 3}), m.SetRules(QName="q", Rules={"max_exchanges": 2}), NOW)
    both = set_rules(_view(thresholds={"max_exchanges": 2}),
                     m.SetRules(QName="q", Rules={"min_exchanges": 3, "max_exchanges": 3}), NOW)
    assert json.loads(both.ops[0].data) == {"min_exchanges": 3, "max_exchanges": 3}


@pytest.mark.parametrize("bad", [{"max_exchanges": 0}, {"nope": 1}, {"nope": None}, {"smoothing": "x", "cooldown_s": 1},
                                 {"max_exchanges": -1}, {"k" * 100_000: 1}, {"cooldown_s": 10**30}])
def test_a_refused_update_changes_nothing_and_says_why_briefly(bad):
    with pytest.raises(BadRequestError, match="rules of 'q' unchanged") as err:
        set_rules(_view({"max_exchanges": 5}), m.SetRules(QName="q", Rules=bad), NOW)
    assert len(str(err.value)) < 1000


def test_a_threshold_that_contradicts_the_operator_is_ignored():
    rules = effective_rules({"min_exchanges": 3}, {"max_exchanges": 2})
    assert (rules["min_exchanges"], rules["max_exchanges"]) == (3, DEFAULT_RULES["max_exchanges"])


def test_rules_of_an_unknown_queue_are_not_found():
    with pytest.raises(NotFoundError):
        set_rules(View(), m.SetRules(QName="q", Rules={}), NOW)


def test_thresholds_are_merged_into_those_stored():
    out = set_thresholds(_view(thresholds={"cooldown_s": 7.0}),
                         m.SetThresholds(QName="q", Thresholds={"exchange_records_per_s": 4000}), NOW)
    value = {"cooldown_s": 7.0, "exchange_records_per_s": 4000.0}
    assert out.ops == (SetData("/roq/queues/q/thresholds", RulesDoc(value).encode(), 5),)
    assert out.reply.data == {"Thresholds": value}


def test_evidence_goes_beside_the_thresholds_in_the_same_transaction():
    msg = m.SetThresholds(QName="q", Thresholds={"cooldown_s": 5}, Evidence={"samples": 120, "p99": [1.5, 2]})
    first = set_thresholds(_view(), msg, NOW)
    tuning = TuningDoc(thresholds={"cooldown_s": 5.0}, evidence={"samples": 120, "p99": [1.5, 2]}, time=NOW)
    assert first.ops[1] == Create("/roq/queues/q/tuning", tuning.encode())
    again = set_thresholds(_view(tuning_version=2), msg, NOW)
    assert again.ops[1] == SetData("/roq/queues/q/tuning", tuning.encode(), 2)


def test_evidence_too_large_is_refused_and_nothing_is_written():
    msg = m.SetThresholds(QName="q", Thresholds={"cooldown_s": 5}, Evidence={"x": "e" * MAX_EVIDENCE})
    with pytest.raises(BadRequestError, match=f"at most {MAX_EVIDENCE} are kept"):
        set_thresholds(_view(), msg, NOW)


@pytest.mark.parametrize("bad", [{"nope": 1}, {"cooldown_s": "x"}, {"cooldown_s": -1}])
def test_bad_thresholds_change_nothing(bad):
    with pytest.raises(BadRequestError, match="thresholds of 'q' unchanged"):
        set_thresholds(_view(), m.SetThresholds(QName="q", Thresholds=bad), NOW)
