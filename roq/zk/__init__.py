"""ZooKeeper: the layout of RoQ's znodes, the operations on them, and the session a poll loop watches.

* :mod:`roq.zk.paths`: where each znode lives (:class:`Paths`, under :data:`roq.defaults.ROOT`) and the names
  in its paths (queue names, exchange incarnations, event sources).
* :mod:`roq.zk.ops`: reads and writes with their versions, and operations as data (:class:`Create`,
  :class:`SetData`, :class:`Delete`) committed as one transaction; kazoo's exceptions become
  :class:`~roq.errors.ZooKeeperError` there.
* :mod:`roq.zk.session`: the :class:`Session`, the only maker of a kazoo client: it connects, authenticates
  with :class:`ZkAuth`, and turns its watches and its state (suspended, lost, connected) into a file
  descriptor a poll loop reads.

What each node holds is a typed document of :mod:`roq.wire.documents`, written and read only through it.
"""

from __future__ import annotations

from roq.zk.ops import Create, Delete, Op, SetData
from roq.zk.paths import EVENT_SOURCES, MAX_EVENTS, Paths, check_queue_name, exchange_slot, incarnation
from roq.zk.session import Session, ZkAuth, check_hosts

__all__ = [
    # the layout
    "Paths",
    "check_queue_name",
    "incarnation",
    "exchange_slot",
    "EVENT_SOURCES",
    "MAX_EVENTS",
    # the operations
    "Create",
    "SetData",
    "Delete",
    "Op",
    # the session
    "Session",
    "ZkAuth",
    "check_hosts",
]
