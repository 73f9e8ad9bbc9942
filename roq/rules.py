"""A queue's rules: what the management API accepts, checked before anything is stored.

Rules are a flat document of documented keys (units in the names). :func:`merge_rules` checks an update
against the current rules and returns the new whole, or raises :class:`~roq.errors.ConfigError` naming the
offending key, so bad values never replace the rules in force.

Where a value comes from, strongest first: the rules an operator set through the management API (stored as
just the keys set, see :func:`update_rules`), the thresholds the KPI tuner wrote, the defaults below
(:func:`effective_rules`).
"""

from __future__ import annotations

from typing import Any, Mapping

from roq.errors import ConfigError

__all__ = ["DEFAULT_RULES", "RULE_DOCS", "RULE_RANGES", "RULE_CHOICES", "merge_rules", "update_rules", "effective_rules", "check_thresholds"]

# key -> (type, default, lowest allowed, highest allowed, description); every key has both bounds, and a
# value outside them is refused naming the key and the range. Keys whose description says "0 = ..." also
# take 0, below their lowest.
_SPEC: dict[str, tuple[type, Any, float, float, str]] = {
    "min_exchanges": (int, 1, 1, 64, "fewest exchanges the queue keeps"),
    "max_exchanges": (int, 4, 1, 256, "most exchanges the queue may have"),
    "max_exchanges_per_host": (int, 4, 1, 64, "most exchanges of this queue on one host"),
    "exchange_records_per_s": (float, 200_000.0, 10.0, 1e9, "high-water mark of one exchange, records/s (smoothed)"),
    "exchange_busy": (float, 0.85, 0.1, 1.0,
                      "an exchange busy for more than this fraction of its time is saturated: its own mark comes "
                      "down to what it forwards at this fraction, so it counts as hot and takes no more publishers "
                      "(1 = records/s only)"),
    "publishers_per_exchange": (int, 0, 1, 100_000,
                                "the queue scales out when it has more publishers per exchange than this (0 = no limit)"),
    "scale_out_records_per_s": (float, 0.0, 10.0, 1e9,
                                "the queue scales out when its average load per exchange stays above this, records/s "
                                "(0 = only when an exchange is hot and no other can take its publishers)"),
    "scale_in_ratio": (float, 0.6, 0.05, 0.95,
                       "the queue scales in when its load fits in one exchange fewer at this fraction of "
                       "exchange_records_per_s each"),
    "host_cpu_percent": (float, 90.0, 10.0, 100.0, "a host above this CPU % takes no new exchange"),
    "host_memory_percent": (float, 90.0, 10.0, 100.0, "a host above this memory % takes no new exchange"),
    "host_net_percent": (float, 90.0, 10.0, 100.0,
                         "a host whose link is busier than this % of its rate takes no new exchange"),
    "kpi_period_s": (float, 1.0, 0.25, 60.0, "seconds between KPI reports and rule evaluations"),
    "smoothing": (float, 0.5, 0.01, 1.0, "EWMA weight of the newest KPI sample"),
    "sustain_s": (float, 2.0, 0.5, 3600.0, "seconds a condition must hold before the monitor acts"),
    "cooldown_s": (float, 10.0, 1.0, 86400.0,
                   "seconds a moved publisher stays put, and the least time between two scaling decisions"),
    "durability": (str, "none", 0, 0,
                   "none: nothing is kept; interval: a journal keeps every record, acknowledged once written and "
                   "synced every sync_interval_ms; always: acknowledged once on disk"),
    "sync_interval_ms": (int, 100, 1, 60_000, "with durability interval, milliseconds between two syncs of the journal"),
    "retention_bytes": (int, 0, 1_000_000, 10**15,
                        "the journal's oldest segments go while it is larger than this (0 = no bound)"),
    "retention_s": (float, 0.0, 1.0, 10 * 365 * 86400.0,
                    "the journal's segments whose records are all older than this many seconds go (0 = no bound)"),
    "replicas": (int, 1, 1, 5,
                 "copies of a durable queue's journal, each on its own host; a record is acknowledged once a majority "
                 "of them hold it, and the queue's journal survives the loss of a minority of their hosts"),
    "replica_replace_s": (float, 120.0, 1.0, 7 * 86400.0,
                          "a journal replica silent this long, its host lost, is replaced by a new one on another "
                          "live host, which copies the journal (one at a time; 0 = never)"),
    "link": (str, "none", 0, 0,
             "none: the queue stays in this cluster; parent: in a cluster with a parent, a link carries the queue's "
             "records to the parent's queue of the same name and the parent's back, as far as subscribers want "
             "them (the queue must be durable)"),
}
#: rules whose value is one of a few words, not a number
_CHOICES: dict[str, tuple[str, ...]] = {"durability": ("none", "interval", "always"), "link": ("none", "parent")}
_ZERO_MEANS_OFF = {key for key, spec in _SPEC.items() if "(0 = " in spec[4]}

DEFAULT_RULES: dict[str, Any] = {key: spec[1] for key, spec in _SPEC.items()}
RULE_DOCS: dict[str, str] = {
    key: f"{doc} [{'|'.join(_CHOICES[key]) if key in _CHOICES else ('0, or ' if key in _ZERO_MEANS_OFF else '') + f'{low:g}..{high:g}'}]"
    for key, (_kind, _default, low, high, doc) in _SPEC.items()
}
#: key -> (lowest, highest) allowed (and 0 for the keys where 0 turns the rule off); numeric rules only
RULE_RANGES: dict[str, tuple[float, float]] = {key: (spec[2], spec[3]) for key, spec in _SPEC.items()
                                               if key not in _CHOICES}
#: key -> the words allowed, for the rules that take a word
RULE_CHOICES: dict[str, tuple[str, ...]] = dict(_CHOICES)


def _value(key: str, value: Any) -> Any:
    kind, _default, low, high, _doc = _SPEC[key]
    if key in _CHOICES:
        if value not in _CHOICES[key]:
            raise ConfigError(f"rule {key!r} must be one of {', '.join(_CHOICES[key])}, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"rule {key!r} must be a number, got {type(value).__name__} {value!r}")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"rule {key!r} must be a whole number, got {value!r}")
        value = int(value)
    else:
        try:
            value = float(value)
        except OverflowError as exc:
            raise ConfigError(f"rule {key!r} is out of range: {value!r}") from exc
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError(f"rule {key!r} must be finite, got {value!r}")
    if not low <= value <= high and not (value == 0 and key in _ZERO_MEANS_OFF):
        zero = "0 (off) or " if key in _ZERO_MEANS_OFF else ""
        raise ConfigError(f"rule {key!r} must be {zero}between {low:g} and {high:g}, got {value!r}")
    return value


def merge_rules(current: dict[str, Any] | None, update: Any) -> dict[str, Any]:
    """Return ``current`` (default: :data:`DEFAULT_RULES`) with ``update`` applied, all checked.

    Raises:
        ConfigError: ``update`` is not a document, names an unknown key, has a value of the wrong type or
            out of range, or leaves ``min_exchanges`` above ``max_exchanges``.
    """
    if not isinstance(update, dict):
        raise ConfigError(f"rules must be a document of key: value, got {type(update).__name__}")
    merged = dict(DEFAULT_RULES)
    merged.update({k: v for k, v in (current or {}).items() if k in _SPEC})
    for key, value in update.items():
        if key not in _SPEC:
            raise ConfigError(f"unknown rule {key!r}; known rules: {', '.join(sorted(_SPEC))}")
        merged[key] = _value(key, value)
    if merged["min_exchanges"] > merged["max_exchanges"]:
        raise ConfigError(
            f"rule 'min_exchanges' ({merged['min_exchanges']}) is above 'max_exchanges' ({merged['max_exchanges']})"
        )
    if merged["link"] != "none" and merged["durability"] == "none":
        raise ConfigError("rule 'link' is parent, and a link reads the queue's journal: the queue must be durable "
                          "(durability interval or always)")
    return merged


def update_rules(explicit: dict[str, Any] | None, update: Any, thresholds: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rules an operator has set (just those keys) after ``update``; a ``None`` value unsets a key.

    The effective whole (see :func:`effective_rules`) is checked, so e.g. a ``min_exchanges`` above the
    ``max_exchanges`` in force is refused even when only one of them is in ``update``.

    Raises:
        ConfigError: as :func:`merge_rules`.
    """
    if not isinstance(update, dict):
        raise ConfigError(f"rules must be a document of key: value, got {type(update).__name__}")
    unset = [k for k, v in update.items() if v is None]
    for key in unset:
        if key not in _SPEC:
            raise ConfigError(f"unknown rule {key!r}; known rules: {', '.join(sorted(_SPEC))}")
    kept = {k: v for k, v in (explicit or {}).items() if k in _SPEC and k not in unset}
    changes = {k: v for k, v in update.items() if v is not None}
    merge_rules({**effective_rules(None, thresholds), **kept}, changes)  # raises on any bad value
    new = {**kept, **{k: _value(k, v) for k, v in changes.items()}}
    merge_rules({**effective_rules(None, thresholds), **new}, {})
    return new


def effective_rules(explicit: dict[str, Any] | None, thresholds: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rules in force: defaults, overridden by the tuner's thresholds, overridden by the operator's rules.

    Values that do not check (e.g. written by an older version) are skipped. A threshold that would put
    ``min_exchanges`` above ``max_exchanges`` is ignored.
    """
    rules = dict(DEFAULT_RULES)
    for source in (thresholds or {}, explicit or {}):
        for key, value in source.items():
            if key in _SPEC:
                try:
                    rules[key] = _value(key, value)
                except ConfigError:
                    continue
    if rules["min_exchanges"] > rules["max_exchanges"]:
        for key in ("min_exchanges", "max_exchanges"):
            rules[key] = (explicit or {}).get(key, DEFAULT_RULES[key])
        if rules["min_exchanges"] > rules["max_exchanges"]:
            rules["max_exchanges"] = rules["min_exchanges"]
    return rules


def check_thresholds(update: Any, current: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Thresholds (set by an operator or the KPI tuner): names of rules with numbers in their ranges.

    Checked as a whole with the thresholds stored (``current``), as rules are: a ``min_exchanges`` above the
    ``max_exchanges`` among them is refused, not stored to be ignored later.

    Raises:
        ConfigError: not a document, an unknown name, a value that is not a number in range, or a
            ``min_exchanges`` above ``max_exchanges`` once merged with ``current``.
    """
    if not isinstance(update, dict):
        raise ConfigError(f"thresholds must be a document of name: number, got {type(update).__name__}")
    out = {}
    for key, value in update.items():
        if key not in _SPEC or key in _CHOICES:
            raise ConfigError(f"unknown threshold {key!r}; known names: {', '.join(sorted(RULE_RANGES))}")
        out[key] = _value(key, value)
    merged = {**(current or {}), **out}
    least, most = merged.get("min_exchanges"), merged.get("max_exchanges")
    if least is not None and most is not None and least > most:
        raise ConfigError(f"threshold 'min_exchanges' ({least}) is above 'max_exchanges' ({most})")
    return out
