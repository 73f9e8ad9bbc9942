"""The shape of the HTTP API's answers that its parts share: field names in snake case (a queue's traffic
and latency from its monitor's status are :mod:`roq.wire.status`)."""

from __future__ import annotations

import re
from typing import Any, Mapping

__all__ = ["snake"]

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
