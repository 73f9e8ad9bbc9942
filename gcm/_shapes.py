"""The shapes of the HTTP API's answers that several of its parts share: field names in snake case, and a
queue's traffic from its monitor's status."""

from __future__ import annotations

import re
from typing import Any, Mapping

__all__ = ["snake", "number", "rate", "traffic"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def snake(value: Any) -> Any:
    """``value`` with the keys of its documents in snake case where they are in camel case (``NetBytesPerS``
    -> ``net_bytes_per_s``); lower-case keys (rules, ids, addresses) are left as they are."""
    if isinstance(value, Mapping):
        return {(_CAMEL.sub("_", k).lower() if isinstance(k, str) and k[:1].isupper() else k): snake(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [snake(v) for v in value]
    return value


def number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def rate(status: Mapping[str, Any] | None, key: str) -> float:
    return sum(number(x.get(key)) for x in (status or {}).get("exchanges", []) if isinstance(x, dict))


def traffic(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """A queue's traffic from its monitor's status (zeros without one)."""
    live = [s for s in (status or {}).get("subscribers", []) if isinstance(s, dict) and s.get("live")]
    return {
        "records_in_per_s": round(rate(status, "records_per_s"), 1),
        "records_out_per_s": round(rate(status, "records_out_per_s"), 1),
        "bytes_in_per_s": round(rate(status, "bytes_per_s"), 1),
        "bytes_out_per_s": round(rate(status, "bytes_out_per_s"), 1),
        "publishers": len((status or {}).get("publishers", [])),
        "subscribers": len(live),
    }
