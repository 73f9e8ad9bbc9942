"""Short opaque labels that stand for clients' ids where anyone may read (the metrics, the live feed).

A publisher's or subscriber's id (the hex of its 16 random bytes) is what an operator names it by, to move it
(``relocate``) or to find it in the logs; the metrics and the live feed need no token, so they show a label
instead: the first 8 hex characters of a BLAKE2b digest of the id under a key drawn when the GCM starts. A label
is the same for the same id as long as that GCM runs (a series in Prometheus, a row on the page), another GCM
(a restart, a new leader) gives other labels, and nobody without the key can tell which id a label stands for,
nor check a guess. The full ids are read through the API with a bearer token (``/publishers``,
``/subscribers``, ``/events``).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

__all__ = ["Labels", "LABEL_CHARS", "ID_FIELDS"]

LABEL_CHARS = 8  # hex characters: 4 billion labels, two of a queue's 200 shown alike once in 200,000 queues
#: the fields of a monitor's event that name a client by its id
ID_FIELDS = ("publisher", "subscriber")
_SHOWN = 8  # hex characters of an id that the monitor's texts name a client by (``p.id[:8]``)


class Labels:
    """Client id -> its label (see the module).

    Args:
        key: the digest's key (default: 16 random bytes; a test may give its own).
    """

    #: labels kept, so that a client is digested once, not at every census round in the feed's state and the
    #: metrics: a digest costs 0.8 us, a look-up 0.04 (the state of 1,000 queues may name 400,000 clients)
    MAX_KEPT = 100_000

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else os.urandom(16)
        self._kept: dict[str, str] = {}

    def __call__(self, client: Any) -> str:
        """The label of the id ``client`` (any value: what the status holds is not trusted to be text)."""
        text = client if type(client) is str else str(client)
        label = self._kept.get(text)
        if label is None:
            if len(self._kept) >= self.MAX_KEPT:  # clients come and go: start again rather than keep the departed
                self._kept.clear()
            digest = hashlib.blake2b(text.encode(), key=self._key, digest_size=LABEL_CHARS // 2)
            label = self._kept[text] = digest.hexdigest()
        return label

    def event(self, event: dict[str, Any]) -> dict[str, Any]:
        """``event`` with the ids it names replaced by their labels: in its :data:`ID_FIELDS`, and in its texts
        (which name a client by the first 8 characters of its id)."""
        ids = [event[f] for f in ID_FIELDS if isinstance(event.get(f), str) and event[f]]
        if not ids:
            return event
        out = {k: self(v) if k in ID_FIELDS and v in ids else v for k, v in event.items()}
        for key, value in out.items():
            if isinstance(value, str) and key not in ID_FIELDS:
                for client in ids:
                    value = value.replace(client, self(client))
                    if len(client) >= _SHOWN:  # an id so short would be a word of the text too
                        value = value.replace(client[:_SHOWN], self(client))
                out[key] = value
        return out
