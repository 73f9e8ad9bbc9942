"""The global configuration manager: leader-elected through ZooKeeper, it owns the queues' lifecycle.

``python -m gcm --zk 127.0.0.1:2181 --address 127.0.0.1`` (see ``--help``). Run two or more for fail-over.

:class:`Gcm` is the process (sockets, session, loop); what it knows of the cluster is a :class:`View`, and
every change it makes is decided by a pure function of the view and the request that returns an
:class:`Outcome`. Those cores are exported for the tests and for tools that want the same answers.
"""

from gcm._acl import bootstrap, check, get_acl, grant, required, revoke
from gcm._api import DECISIONS, READS, Api
from gcm._audit import AuditTrail
from gcm._audit import entry as audit_entry
from gcm._broadcast import Broadcaster
from gcm._config import GcmConfig
from gcm._events import MAX_LIMIT, appended, merge_events
from gcm._gcm import Gcm
from gcm._hostloss import HostLoss, LostHosts
from gcm._lifecycle import MAX_AT_ONCE, create, create_exchange, finish_removals, remove, start, stop
from gcm._outcome import READY, REMOVED, STOPPED, Event, Outcome, Wait
from gcm._placement import Blocked, Move, Placer, choose_host, explain_no_host, plan_replacements, slot_order
from gcm._reads import exists, get_events, get_rules, get_thresholds, list_hosts, list_queues, lookup
from gcm._rules import MAX_EVIDENCE, set_rules, set_thresholds
from gcm._scaling import remove_exchange, scale_out
from gcm._stats import StatsAsks, stats_reply
from gcm._tokens import Tokens
from gcm._view import HostView, QueueView, View, checked_name
from gcm._census import Census, Snapshot
from gcm._feed import LiveFeed
from gcm._labels import Labels
from gcm._http import ANONYMOUS, STATUS, HttpApi, read_token
from gcm._metrics import Exposition, families, queue_lines, render
from gcm._openapi import ROUTES, document
from gcm._shapes import snake

__all__ = [
    # the process
    "Gcm",
    "GcmConfig",
    # what it knows
    "View",
    "QueueView",
    "HostView",
    "checked_name",
    # what it decides
    "Outcome",
    "Event",
    "Wait",
    "READY",
    "STOPPED",
    "REMOVED",
    "create",
    "stop",
    "start",
    "remove",
    "create_exchange",
    "finish_removals",
    "scale_out",
    "remove_exchange",
    "set_rules",
    "set_thresholds",
    "grant",
    "revoke",
    "get_acl",
    "required",
    "check",
    "bootstrap",
    "AuditTrail",
    "audit_entry",
    "HostLoss",
    "LostHosts",
    "MAX_AT_ONCE",
    "MAX_EVIDENCE",
    # where things go
    "Placer",
    "Move",
    "Blocked",
    "choose_host",
    "explain_no_host",
    "plan_replacements",
    "slot_order",
    # what it answers
    "Api",
    "DECISIONS",
    "READS",
    "lookup",
    "exists",
    "list_queues",
    "list_hosts",
    "get_rules",
    "get_thresholds",
    "get_events",
    "stats_reply",
    "StatsAsks",
    "Broadcaster",
    "merge_events",
    "appended",
    "MAX_LIMIT",
    # over HTTP
    "HttpApi",
    "STATUS",
    "ROUTES",
    "document",
    "read_token",
    "ANONYMOUS",
    "Tokens",
    "snake",
    "Census",
    "Snapshot",
    "LiveFeed",
    "Labels",
    "families",
    "render",
    "Exposition",
    "queue_lines",
]
