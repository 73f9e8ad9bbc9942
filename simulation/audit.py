"""Independent audit of what a subscriber received (pure).

Load publishers put their own counters in every payload (:func:`make_payload`): a counter over all
their records and one per key. The audit checks those, not the broker's sequence numbers, so that a
bug in sequencing cannot hide itself:

* per publisher, the overall counter must strictly increase (per-publisher FIFO across keys);
* per (publisher, key), the key counter must go up by exactly one (nothing lost, nothing twice).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PAYLOAD_HEADER", "make_payload", "read_payload", "Audit", "compare", "holes"]

#: overall counter u64, key counter u64, send time ns i64
PAYLOAD_HEADER = struct.Struct("<QQq")


def make_payload(overall: int, per_key: int, sent_ns: int, size: int) -> bytes:
    head = PAYLOAD_HEADER.pack(overall, per_key, sent_ns)
    return head + b"\x00" * (size - len(head)) if size > len(head) else head


def read_payload(payload: bytes) -> tuple[int, int, int]:
    return PAYLOAD_HEADER.unpack_from(payload)


@dataclass
class _KeyStream:
    first: int  # key counter of the first record received
    next: int  # next key counter expected
    received: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    holes: list[tuple[int, int, float]] = field(default_factory=list)  # the first few: from, to, sent (epoch s)


#: holes remembered per (publisher, key): where the first ones were is what explains a loss
MAX_HOLES = 5


@dataclass
class _PublisherStream:
    last_overall: int = -1
    received: int = 0
    reordered: int = 0  # a new record whose overall counter is below one already seen (across keys)
    keys: dict[bytes, _KeyStream] = field(default_factory=dict)


class Audit:
    """Checks records as they arrive; :meth:`summary` reports per publisher and in total."""

    def __init__(self) -> None:
        self.publishers: dict[str, _PublisherStream] = {}
        self.malformed = 0

    def record(self, publisher: str, key: bytes, payload: bytes) -> None:
        if len(payload) < PAYLOAD_HEADER.size:
            self.malformed += 1
            return
        overall, per_key, sent_ns = PAYLOAD_HEADER.unpack_from(payload)
        p = self.publishers.get(publisher)
        if p is None:
            p = self.publishers[publisher] = _PublisherStream()
        p.received += 1
        k = p.keys.get(key)
        if k is None:
            k = p.keys[key] = _KeyStream(first=per_key, next=per_key)
        k.received += 1
        if per_key >= k.next:
            if per_key > k.next:
                k.lost += per_key - k.next
                if len(k.holes) < MAX_HOLES:
                    k.holes.append((k.next, per_key - 1, sent_ns / 1e9))
            k.next = per_key + 1
            if overall <= p.last_overall:
                p.reordered += 1
            p.last_overall = max(p.last_overall, overall)
        elif per_key == k.next - 1:
            k.duplicated += 1
        else:
            k.reordered += 1  # an older record after a newer one (or an older duplicate)

    def summary(self) -> dict[str, Any]:
        """Per publisher and in total: received, lost (holes), duplicated, reordered; per key: first/next, and the
        first holes (key counters from and to, and when the record after the hole was sent)."""
        per_publisher = {}
        totals = dict(received=0, lost=0, duplicated=0, reordered=0)
        for name, p in self.publishers.items():
            row: dict[str, Any] = {
                "received": p.received,
                "lost": sum(s.lost for s in p.keys.values()),
                "duplicated": sum(s.duplicated for s in p.keys.values()),
                "reordered": sum(s.reordered for s in p.keys.values()) + p.reordered,
                "keys": {
                    k.decode("utf-8", "backslashreplace"): {
                        "received": s.received,
                        "first": s.first,
                        "next": s.next,
                        "lost": s.lost,
                        "duplicated": s.duplicated,
                        "reordered": s.reordered,
                        "holes": s.holes,
                    }
                    for k, s in p.keys.items()
                },
            }
            per_publisher[name] = row
            for field_name in totals:
                totals[field_name] += row[field_name]
        return {"totals": totals, "publishers": per_publisher, "malformed": self.malformed}


def compare(summary: dict[str, Any], sent: dict[str, dict[str, int]], prefix: bytes = b"") -> dict[str, int]:
    """Hold a subscriber's audit summary against what the publishers say they sent.

    Args:
        summary: :meth:`Audit.summary` of a subscriber that joined before the publishers started.
        sent: publisher id -> key -> records sent with that key.
        prefix: the subscriber's prefix; only keys starting with it count.

    Returns:
        expected, received, lost, duplicated, reordered; and lost split in two: ``dropped``, records
        missing before one that arrived (holes, a missing head), and ``undelivered``, records sent after
        the last one that arrived (a tail still queued when the subscriber stopped, or a key never seen).
    """
    want = prefix.decode("utf-8", "backslashreplace")
    out = dict(expected=0, received=0, lost=0, dropped=0, undelivered=0, duplicated=0, reordered=0)
    for pub, keys in sent.items():
        row = summary["publishers"].get(pub, {"keys": {}, "duplicated": 0, "reordered": 0})
        out["duplicated"] += row["duplicated"]
        out["reordered"] += row["reordered"]
        for key, count in keys.items():
            if not key.startswith(want):
                continue
            out["expected"] += count
            got = row["keys"].get(key)
            if got is None:
                out["undelivered"] += count
                continue
            out["received"] += got["received"] - got["duplicated"] - got["reordered"]
            out["dropped"] += got["lost"] + got["first"]
            out["undelivered"] += max(0, count - got["next"])
    out["lost"] = out["dropped"] + out["undelivered"]
    return out


def holes(summary: dict[str, Any]) -> list[str]:
    """Where a subscriber's audit summary found holes, a line per (publisher, key) that has any: what a failed test
    prints, so that a loss can be placed in time (the send time of the record after each hole)."""
    lines = []
    for pub, row in summary["publishers"].items():
        for key, k in row["keys"].items():
            if k["lost"]:
                where = ", ".join(f"{a}..{b} (the next sent at {sent:.3f})" for a, b, sent in k.get("holes", ()))
                lines.append(f"publisher {pub} key {key!r}: {k['lost']} lost of {k['next'] - k['first']} from "
                             f"{k['first']}; holes {where}")
    return lines
