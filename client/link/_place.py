"""The child cluster's place in its tree, as its GCM leader writes it (``/federation``), followed by its link.

The GCM leader writes the clusters of its subtree there (:class:`~roq.wire.documents.FederationDoc`: itself first,
then every cluster its children's hellos named) and every cluster that was ever below it (``known``). A link reads
them to say them to the parent (names climb the tree so, one link at a time) and to carry the records addressed to
them: down, those for a cluster of its child's subtree; up, those for any other (:func:`roq.federation.address`).
Updated on the ZooKeeper client's thread, read on the link's loop: each update replaces whole values, never
mutates one in place.
"""

from __future__ import annotations

import logging

from client._locator import watch
from roq.errors import ProtocolError
from roq.wire.control.links import ClusterName
from roq.wire.documents import FederationDoc
from roq.zk import Paths, Session

log = logging.getLogger(__name__)

__all__ = ["Place"]

class Place:
    """The cluster ``name``'s subtree (itself first) and every cluster ever below it, as its GCM last wrote them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.subtree: list[ClusterName] = [ClusterName(name, "")]
        self.known: frozenset[str] = frozenset((name,))
        self._session: Session | None = None

    def follow(self, zk: str, root: str, timeout: float) -> None:
        """Watch the cluster's place in its ZooKeeper.

        Raises:
            BrokerConnectionError: ZooKeeper could not be reached within ``timeout``.
        """
        self._session = watch(zk, Paths(root).federation, self.update, timeout)

    def update(self, data: bytes | None) -> None:
        """The place's node now holds ``data`` (None: no node yet); a document of another cluster, or none that
        reads, changes nothing."""
        if data is None:
            return
        try:
            doc = FederationDoc.decode(data)
        except ProtocolError as exc:
            log.warning("the cluster's place does not read (%s): the link keeps what it knew", exc)
            return
        if doc.name != self.name or not doc.subtree or doc.subtree[0].name != self.name:
            return
        subtree = list(doc.subtree)
        self.known = frozenset((*self.known, *doc.known, *(n.name for n in subtree)))
        self.subtree = subtree

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
