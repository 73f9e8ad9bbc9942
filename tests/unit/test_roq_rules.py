"""roq.rules: checking and merging a queue's rules and thresholds (pure)."""

from __future__ import annotations

import math

import pytest

from roq.errors import ConfigError
from roq.rules import DEFAULT_RULES, check_thresholds, merge_rules


def test_empty_update_gives_the_defaults_as_a_fresh_copy():
    merged = merge_rules(None, {})
    assert merged == DEFAULT_RULES
    merged["max_exchanges"] = 99
    assert DEFAULT_RULES["max_exchanges"] == 4


def test_whole_float_is_coerced_to_int_for_an_int_rule():
    merged = merge_rules(None, {"max_exchanges": 6.0})
    assert merged["max_exchanges"] == 6
    assert type(merged["max_exchanges"]) is int


def test_int_is_coerced_to_float_for_a_float_rule():
    merged = merge_rules(None, {"smoothing": 1})
    assert merged["smoothing"] == 1.0
    assert type(merged["smoothing"]) is float


def test_update_keeps_the_current_rules_it_does_not_name():
    current = merge_rules(None, {"max_exchanges": 7, "cooldown_s": 3.0})
    merged = merge_rules(current, {"smoothing": 0.25})
    assert (merged["max_exchanges"], merged["cooldown_s"], merged["smoothing"]) == (7, 3.0, 0.25)


def test_unknown_keys_of_current_rules_are_dropped():
    assert "legacy" not in merge_rules({"legacy": 1}, {})


def test_fractional_value_of_an_int_rule_is_refused_by_name():
    with pytest.raises(ConfigError, match="'max_exchanges'.*whole"):
        merge_rules(None, {"max_exchanges": 2.5})


@pytest.mark.parametrize(
    "key, value",
    [
        ("min_exchanges", 0),
        ("publishers_per_exchange", -1),
        ("host_cpu_percent", 100.5),
        ("host_memory_percent", 0.5),
        ("smoothing", 0.0),
        ("smoothing", 1.01),
        ("kpi_period_s", 0.01),
        ("sustain_s", 3601),
        ("cooldown_s", -0.1),
    ],
)
def test_out_of_range_value_is_refused_by_name(key, value):
    with pytest.raises(ConfigError, match=repr(key)):
        merge_rules(None, {key: value})


@pytest.mark.parametrize(
    "key, value",
    [("smoothing", 0.01), ("smoothing", 1.0), ("host_cpu_percent", 100), ("publishers_per_exchange", 0),
     ("sustain_s", 0.5), ("cooldown_s", 1), ("kpi_period_s", 0.25), ("max_exchanges", 256)],
)
def test_range_bounds_are_inclusive(key, value):
    assert merge_rules(None, {key: value})[key] == value


@pytest.mark.parametrize(
    "key, value",
    [("max_exchanges", 2**40), ("exchange_records_per_s", 1), ("kpi_period_s", 0.05), ("sustain_s", 0),
     ("cooldown_s", 0), ("min_exchanges", 65), ("scale_out_records_per_s", 5), ("host_cpu_percent", 5)],
)
def test_values_that_were_accepted_once_and_made_no_sense_are_refused_with_the_range(key, value):
    with pytest.raises(ConfigError, match=rf"'{key}' must be .*between"):
        merge_rules(None, {key: value})


def test_unknown_rule_is_refused_by_name():
    with pytest.raises(ConfigError, match="unknown rule 'max_exchange'"):
        merge_rules(None, {"max_exchange": 3})


def test_min_above_max_in_one_update_is_refused():
    with pytest.raises(ConfigError, match="min_exchanges.*max_exchanges"):
        merge_rules(None, {"min_exchanges": 5, "max_exchanges": 3})


def test_min_above_the_current_max_is_refused():
    current = merge_rules(None, {"max_exchanges": 2})
    with pytest.raises(ConfigError, match="min_exchanges"):
        merge_rules(current, {"min_exchanges": 3})


def test_min_and_max_raised_together_are_accepted():
    merged = merge_rules(None, {"min_exchanges": 6, "max_exchanges": 8})
    assert (merged["min_exchanges"], merged["max_exchanges"]) == (6, 8)


@pytest.mark.parametrize("value", [True, False])
def test_bool_is_refused_for_a_numeric_rule(value):
    with pytest.raises(ConfigError, match="'max_exchanges'"):
        merge_rules(None, {"max_exchanges": value})


@pytest.mark.parametrize("value", ["3", None, [3], {"v": 3}])
def test_non_number_is_refused_by_name(value):
    with pytest.raises(ConfigError, match="'cooldown_s'.*number"):
        merge_rules(None, {"cooldown_s": value})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_for_a_float_rule(value):
    with pytest.raises(ConfigError, match="'exchange_records_per_s'"):
        merge_rules(None, {"exchange_records_per_s": value})


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_nan_and_infinity_are_refused_for_an_int_rule(value):
    with pytest.raises(ConfigError, match="'max_exchanges'"):
        merge_rules(None, {"max_exchanges": value})


def test_a_refused_update_leaves_the_current_rules_untouched():
    current = merge_rules(None, {"max_exchanges": 6})
    before = dict(current)
    with pytest.raises(ConfigError):
        merge_rules(current, {"max_exchanges": 8, "smoothing": 2.0})
    assert current == before


def test_an_accepted_update_does_not_mutate_the_current_rules():
    current = merge_rules(None, {})
    before = dict(current)
    merge_rules(current, {"max_exchanges": 9})
    assert current == before


@pytest.mark.parametrize("update", [None, [("smoothing", 0.5)], "smoothing=0.5"])
def test_rules_that_are_not_a_document_are_refused(update):
    with pytest.raises(ConfigError, match="document"):
        merge_rules(None, update)


def test_an_integer_too_large_for_a_float_rule_is_refused_as_config_error():
    with pytest.raises(ConfigError, match="exchange_records_per_s"):
        merge_rules(None, {"exchange_records_per_s": 10**400})


def test_thresholds_are_checked_and_coerced_without_defaults():
    assert check_thresholds({"exchange_records_per_s": 5000, "max_exchanges": 3.0}) == {
        "exchange_records_per_s": 5000.0,
        "max_exchanges": 3,
    }
    assert check_thresholds({}) == {}


def test_unknown_threshold_is_refused_by_name():
    with pytest.raises(ConfigError, match="unknown threshold 'records'"):
        check_thresholds({"records": 1.0})


@pytest.mark.parametrize("value", [0.0, True, "1", math.nan])
def test_bad_threshold_value_is_refused(value):
    with pytest.raises(ConfigError, match="exchange_records_per_s"):
        check_thresholds({"exchange_records_per_s": value})


def test_thresholds_that_are_not_a_document_are_refused():
    with pytest.raises(ConfigError, match="document"):
        check_thresholds([1.0])


def test_the_protocol_document_gives_every_rule_with_its_default_and_range():
    import pathlib
    import re

    from roq.rules import RULE_CHOICES, RULE_RANGES

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
    rows = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|", text, re.M)}
    assert set(rows) >= set(DEFAULT_RULES)
    for key, (default, span) in rows.items():
        if key not in DEFAULT_RULES:
            continue
        if key in RULE_CHOICES:
            assert default.strip() == DEFAULT_RULES[key] and span.strip() == ", ".join(RULE_CHOICES[key]), key
            continue
        low, high = RULE_RANGES[key]
        assert float(default) == DEFAULT_RULES[key], key
        assert span.strip().endswith(f"{low:g} .. {high:g}"), (key, span)


def test_thresholds_are_checked_as_a_whole_with_those_stored():
    with pytest.raises(ConfigError, match="'min_exchanges' .64. is above 'max_exchanges' .1."):
        check_thresholds({"min_exchanges": 64, "max_exchanges": 1})
    with pytest.raises(ConfigError, match="min_exchanges"):
        check_thresholds({"min_exchanges": 5}, {"max_exchanges": 3})
    assert check_thresholds({"max_exchanges": 8}, {"min_exchanges": 5}) == {"max_exchanges": 8}


def test_durability_is_one_of_three_words_and_no_threshold():
    assert merge_rules(None, {"durability": "always", "sync_interval_ms": 5})["durability"] == "always"
    with pytest.raises(ConfigError, match="'durability' must be one of none, interval, always, got 'sometimes'"):
        merge_rules(None, {"durability": "sometimes"})
    with pytest.raises(ConfigError, match="'durability' must be one of"):
        merge_rules(None, {"durability": 1})
    with pytest.raises(ConfigError, match="unknown threshold 'durability'"):
        check_thresholds({"durability": "always"})


def test_a_queue_is_linked_to_its_parent_only_if_it_is_durable():
    assert merge_rules(None, {"durability": "always", "link": "parent"})["link"] == "parent"
    assert merge_rules(None, {})["link"] == "none"
    with pytest.raises(ConfigError, match="a link reads the queue's journal: the queue must be durable"):
        merge_rules(None, {"link": "parent"})
    with pytest.raises(ConfigError, match="must be one of none, parent"):
        merge_rules(None, {"durability": "always", "link": "child"})
