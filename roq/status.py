"""Reading a monitor's status (the reply to ``Status``, also in the GCM's ``QueueStats``): the queue's
traffic and its subscribers' latency, summed the one way the HTTP API, the metrics, the live feed and
``roq status`` all show them. A status comes from a peer: anything missing or of the wrong type reads as 0.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["number", "rate", "traffic", "latency", "live_subscribers"]


def number(value: Any) -> float:
    """``value`` if it is a number (not a bool), else 0."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def rate(status: Mapping[str, Any] | None, key: str) -> float:
    """The sum of ``key`` over the status's exchanges (``records_per_s``, ``bytes_out_per_s``...)."""
    return sum(number(x.get(key)) for x in (status or {}).get("exchanges", []) if isinstance(x, dict))


def live_subscribers(status: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [s for s in (status or {}).get("subscribers", []) if isinstance(s, dict) and s.get("live")]


def traffic(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """A queue's traffic from its monitor's status (zeros without one)."""
    return {
        "records_in_per_s": round(rate(status, "records_per_s"), 1),
        "records_out_per_s": round(rate(status, "records_out_per_s"), 1),
        "bytes_in_per_s": round(rate(status, "bytes_per_s"), 1),
        "bytes_out_per_s": round(rate(status, "bytes_out_per_s"), 1),
        "publishers": len((status or {}).get("publishers", [])),
        "subscribers": len(live_subscribers(status)),
    }


def latency(status: Mapping[str, Any] | None) -> dict[str, float | None]:
    """The median of the live subscribers' p50 and the highest of their p99, ms, over their last KPI period
    (None where no subscriber received a record in it)."""
    live = live_subscribers(status)
    p50 = sorted(number(s["latency_p50_ms"]) for s in live if number(s.get("latency_p50_ms", -1)) >= 0)
    p99 = [number(s["latency_p99_ms"]) for s in live if number(s.get("latency_p99_ms", -1)) >= 0]
    return {"p50_median": p50[len(p50) // 2] if p50 else None, "p99_max": max(p99) if p99 else None}
