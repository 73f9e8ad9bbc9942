"""Leader election among GCMs: the lowest ephemeral sequential candidate node leads.

Every GCM creates ``<root>/gcm/election/n_<seq>`` (ephemeral, sequential). The one with the lowest sequence
number is the leader and publishes its endpoints in the ephemeral ``<root>/gcm/leader``; the others are
standbys and read that node to name the leader in their "not leader" replies. A leader whose session
expires loses both nodes at once, so a standby's node becomes the lowest and it takes over; the old leader,
when it reconnects, joins again as a new candidate at the end of the line.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from roq.zk import Paths, dumps, loads

__all__ = ["Election"]

log = logging.getLogger("gcm")


class Election:
    def __init__(self, zk: KazooClient, paths: Paths, me: dict[str, Any], session_id: Callable[[], int]) -> None:
        self.zk = zk
        self.paths = paths
        self.me = me
        self._session_id = session_id
        self.candidate = ""  # the name of our candidate node
        self.leading = False
        self.leader: dict[str, Any] = {}  # the leader's endpoints, as published

    def lost(self) -> None:
        """Our session expired: we lead no more and must stand again."""
        if self.leading:
            log.warning("GCM %s: ZooKeeper session lost; no longer the leader", self.me.get("id"))
        self.leading = False
        self.candidate = ""
        self.leader = {}

    def update(self, watch: Callable[..., Any]) -> bool:
        """Stand if we do not, find out who leads; return whether leadership changed. Raises KazooException."""
        zk, paths = self.zk, self.paths
        zk.ensure_path(paths.election)
        children = zk.get_children(paths.election, watch=watch)
        if not self.candidate or self.candidate not in children:
            path = zk.create(f"{paths.election}/n_", dumps(self.me), ephemeral=True, sequence=True)
            self.candidate = path.rsplit("/", 1)[1]
            children = zk.get_children(paths.election, watch=watch)
        first = min(children, key=lambda n: n.rsplit("_", 1)[-1])
        was = self.leading
        if first == self.candidate:
            self.leading = self._claim()
            if self.leading:
                self.leader = dict(self.me)
            else:
                zk.exists(paths.leader, watch=watch)  # wake when the previous leader's node is gone
        else:
            self.leading = False
            try:
                data, _ = zk.get(paths.leader, watch=watch)
                self.leader = loads(data)
            except NoNodeError:
                zk.exists(paths.leader, watch=watch)
                self.leader = {}
        if self.leading != was:
            log.info("GCM %s is %s", self.me.get("id"), "the leader" if self.leading else "a standby")
        return self.leading != was

    def _claim(self) -> bool:
        try:
            self.zk.create(self.paths.leader, dumps(self.me), ephemeral=True)
            return True
        except NodeExistsError:
            try:
                _, stat = self.zk.get(self.paths.leader)
            except NoNodeError:
                return False
            return stat.ephemeralOwner == self._session_id()
