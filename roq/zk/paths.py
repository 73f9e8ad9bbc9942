"""The layout of RoQ's tree in ZooKeeper: where each znode lives, and the names that appear in its paths.

Everything durable about a cluster lives under one root (default :data:`roq.defaults.ROOT`, ``/roq``)::

    /roq/gcm/election/n_0000000007   ephemeral sequential: a GCM candidate, data = its endpoints
    /roq/gcm/leader                  ephemeral: the active GCM's endpoints (clients read this)
    /roq/hosts/<address>             ephemeral: a host manager, its capacity and latest host KPIs
    /roq/assignments/<address>/<q>@<role>   persistent: a process the host must run (monitor or exchange id)
    /roq/queues/<q>                  persistent: state (running / stopped / removing), placement
    /roq/queues/<q>/rules            persistent: the queue's rules (management API)
    /roq/queues/<q>/thresholds       persistent: thresholds (management API, the KPI tuner)
    /roq/queues/<q>/tuning           persistent: the evidence behind the thresholds last set with some
    /roq/queues/<q>/monitor          ephemeral (host manager's session): the monitor's endpoint
    /roq/queues/<q>/exchanges/<id>   ephemeral (host manager's session): an exchange's endpoints
    /roq/queues/<q>/journal          ephemeral (host manager's session): the queue's journal's endpoints
    /roq/queues/<q>/events/<source>  persistent: the recent topology events and counters written by
                                     ``monitor`` or ``gcm`` ({"events": [...], "counters": {...}})
    /roq/acl                         persistent: who may do what
    /roq/audit                       persistent: who did what, when, with what result

What each node holds is a typed document of :mod:`roq.wire.documents`, written and read only through it.

An exchange *slot* (``x3``) is a place in the queue's placement; each process started for it has a name
of its own, its *incarnation* (``x3-1a2b``, see :func:`incarnation` and :func:`exchange_slot`).
"""

from __future__ import annotations

import os
import re
from typing import Any

from roq import defaults
from roq.errors import ConfigError

__all__ = ["Paths", "check_queue_name", "incarnation", "exchange_slot", "EVENT_SOURCES", "MAX_EVENTS"]

_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")


def check_queue_name(name: Any) -> str:
    """Return ``name`` if it can name a queue (1-64 of ``A-Z a-z 0-9 _ . -``), else raise ConfigError."""
    if not isinstance(name, str) or not _QUEUE_NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(f"bad queue name {name!r}: use 1 to 64 characters among A-Z a-z 0-9 _ . -")
    return name


EVENT_SOURCES = ("monitor", "gcm")
MAX_EVENTS = 200  # events kept per source in ZooKeeper


def incarnation(slot: str) -> str:
    """A fresh name for a process started for exchange ``slot``: ``x3`` -> ``x3-1a2b``."""
    return f"{slot}-{os.urandom(2).hex()}"


def exchange_slot(name: str) -> str:
    """The slot of an exchange's incarnation name (``x3-1a2b`` -> ``x3``); a name of another form is its own."""
    slot, sep, tail = name.rpartition("-")
    return slot if sep and slot and len(tail) == 4 and all(c in "0123456789abcdef" for c in tail) else name


class Paths:
    """Znode paths under ``root``."""

    def __init__(self, root: str = defaults.ROOT) -> None:
        if not root.startswith("/") or root.endswith("/") or "//" in root:
            raise ConfigError(f"bad ZooKeeper root {root!r}: expected an absolute path like /roq")
        self.root = root
        self.gcm = f"{root}/gcm"
        self.election = f"{root}/gcm/election"
        self.leader = f"{root}/gcm/leader"
        self.hosts = f"{root}/hosts"
        self.assignments = f"{root}/assignments"
        self.queues = f"{root}/queues"
        self.acl = f"{root}/acl"  # who may do what (an AclDoc)
        self.audit = f"{root}/audit"  # who did what, when, with what result (an AuditDoc)
        self.federation = f"{root}/federation"  # the cluster's place in a tree of clusters (a FederationDoc)

    def host(self, address: str) -> str:
        return f"{self.hosts}/{address}"

    def host_assignments(self, address: str) -> str:
        return f"{self.assignments}/{address}"

    def assignment(self, address: str, queue: str, role: str) -> str:
        return f"{self.assignments}/{address}/{queue}@{role}"

    def queue(self, name: str) -> str:
        return f"{self.queues}/{name}"

    def rules(self, name: str) -> str:
        return f"{self.queues}/{name}/rules"

    def thresholds(self, name: str) -> str:
        return f"{self.queues}/{name}/thresholds"

    def tuning(self, name: str) -> str:
        return f"{self.queues}/{name}/tuning"

    def monitor(self, name: str) -> str:
        return f"{self.queues}/{name}/monitor"

    def exchanges(self, name: str) -> str:
        return f"{self.queues}/{name}/exchanges"

    def journal(self, name: str) -> str:
        return f"{self.queues}/{name}/journal"

    def exchange(self, name: str, exchange_id: str) -> str:
        return f"{self.queues}/{name}/exchanges/{exchange_id}"

    def events(self, name: str, source: str | None = None) -> str:
        return f"{self.queues}/{name}/events" + (f"/{source}" if source else "")
