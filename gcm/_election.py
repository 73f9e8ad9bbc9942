"""Leader election among GCMs: the lowest ephemeral sequential candidate node leads.

Every GCM creates ``<root>/gcm/election/n_<seq>`` (ephemeral, sequential). The one with the lowest sequence
number is the leader and publishes its endpoints in the ephemeral ``<root>/gcm/leader``; the others are
standbys and read that node to name the leader in their "not leader" replies. A leader whose session
expires loses both nodes at once, so a standby's node becomes the lowest and it takes over; the old leader,
when it reconnects, joins again as a new candidate at the end of the line. Both nodes hold a
:class:`~roq.wire.documents.GcmDoc`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TypedDict, Unpack

from roq.wire.documents import GcmDoc
from roq.errors import NodeExistsError
from roq.zk import Paths, Session

__all__ = ["Election", "Endpoints"]

log = logging.getLogger("gcm")


class Endpoints(TypedDict, total=False):
    """The endpoints a GCM publishes once bound (those of a :class:`GcmDoc`; ``http`` only with its HTTP API)."""

    lookup: str
    management: str
    broadcast: str
    http: str


class Election:
    """This GCM's candidacy and what it knows of the leader.

    Args:
        session: the GCM's ZooKeeper session.
        paths: where the cluster lives.
        me: this GCM's endpoints, as published.
    """

    def __init__(self, session: Session, paths: Paths, me: GcmDoc) -> None:
        self.session = session
        self.paths = paths
        self.me = me
        self.candidate = ""  # the name of our candidate node
        self.leading = False
        self.leader: GcmDoc | None = None  # the leader's endpoints, as published (None: none known)

    def publish(self, **endpoints: Unpack[Endpoints]) -> None:
        """This GCM's endpoints, once bound: what its candidate node will say."""
        self.me = dataclasses.replace(self.me, **endpoints)

    def lost(self) -> None:
        """Our session expired: we lead no more and must stand again."""
        if self.leading:
            log.warning("GCM %s: ZooKeeper session lost; no longer the leader", self.me.id)
        self.leading = False
        self.candidate = ""
        self.leader = None

    def update(self) -> bool:
        """Stand if we do not, find out who leads (leaving watches that wake the loop when that may change);
        return whether our leadership changed.

        Raises:
            ZooKeeperError: ZooKeeper could not be read or written (try again on the next wake-up).
        """
        session, paths = self.session, self.paths
        session.ensure(paths.election)
        children = session.children(paths.election, watch=True)
        if not self.candidate or self.candidate not in children:
            path = session.create(f"{paths.election}/n_", self.me.encode(), ephemeral=True, sequence=True)
            self.candidate = path.rsplit("/", 1)[1]
            children = session.children(paths.election, watch=True)
        first = min(children, key=lambda n: n.rsplit("_", 1)[-1])
        was = self.leading
        if first == self.candidate:
            self.leading = self._claim()
            if self.leading:
                self.leader = self.me
            else:
                session.exists(paths.leader, watch=True)  # wake when the previous leader's node is gone
        else:
            self.leading = False
            self.leader, _ = session.read(paths.leader, GcmDoc.decode, watch=True)
        if self.leading != was:
            log.info("GCM %s is %s", self.me.id, "the leader" if self.leading else "a standby")
        return self.leading != was

    def _claim(self) -> bool:
        try:
            self.session.create(self.paths.leader, self.me.encode(), ephemeral=True)
            return True
        except NodeExistsError:
            found = self.session.get(self.paths.leader)
            return found is not None and self.session.owns(found[1])
