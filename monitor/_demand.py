"""What the queue wants of other clusters' records, told to the links that carry them in: demand forwarding.

A link (``python -m client.link``) tells the monitor of each queue it touches what it wants of that queue's
records (:class:`~roq.wire.control.links.Interest`, whole, with every hello): the queue it reads wants what the
link's far side wants; the queue it carries records into, none. It says so under a *side*, the child end of the
edge it is on (a cluster's name). The monitor answers each link that carries records into the queue with what
the queue wants, whole: the prefixes its subscribers subscribed to, and what every link of **another** side
that reads the queue wants, so that what a side wants is never told back to that side. On a tree's edge a link
also says which *way* it carries records: a link that carries records up into the queue (from a child) is told
the wants of the links that read it up (toward the parent), one that carries them down (from the parent) the
wants of those that read it down (toward the children); so interest made at a leaf reaches the root along its
path and nowhere else, and interest made at the root reaches every child, but never sideways from one child
to another. It answers when the link is new to it, when that changes (a subscriber joined or left, another
link's wants changed), and again every :data:`RETELL_S` in case a message was lost; an unchanged hello gets
nothing. A link with ``--on-demand`` carries only what the queue it carries into wants, so a record crosses a
link only while a subscriber somewhere beyond it wants its key, however many links away.

Links silent for :data:`LINK_TIMEOUT` are forgotten (their wants with them: a link says hello twice a second, and
one killed and started again comes back on a new connection); the table is bounded
(:data:`MAX_LINKS` links, :data:`MAX_WANTS` prefixes each, prefixes of at most ``MAX_PREFIX`` bytes).
"""

from __future__ import annotations

import dataclasses
import logging

from monitor._outbox import Outbox
from monitor._topology import MAX_PREFIX, Topology
from roq.errors import BadRequestError, ConflictError
from roq.federation import minimal
from roq.wire import control
from roq.wire.status import LinkDemand

log = logging.getLogger(__name__)

__all__ = ["Demand", "LINK_TIMEOUT", "MAX_LINKS", "MAX_WANTS", "RETELL_S"]

#: links one monitor keeps, at most
MAX_LINKS = 256
#: prefixes one link may want of the queue, at most
MAX_WANTS = 1024
#: a link is told the queue's interest again after this many seconds, changed or not
RETELL_S = 5.0
#: seconds of silence after which a link is forgotten (it says what it wants every half second)
LINK_TIMEOUT = 3.0


@dataclasses.dataclass
class _Link:
    side: str
    wants: tuple[bytes, ...]
    last_seen: float
    way: str = ""
    reads: bool = False
    told: tuple[bytes, ...] | None = None  # what it was last told (None: nothing yet)
    told_at: float = 0.0


class Demand:
    """The links of a queue's monitor and what they want (see the module's doc).

    Attributes:
        adverts: Interest messages sent because what a link is told changed (not the retellings).
    """

    def __init__(self, queue: str, topology: Topology, outbox: Outbox, *, forget_after: float = LINK_TIMEOUT) -> None:
        self.queue = queue
        self.topology = topology
        self.outbox = outbox
        self.forget_after = forget_after
        self.links: dict[bytes, _Link] = {}  # a link's connection (routing identity) -> its entry
        self.adverts = 0

    def told(self, msg: control.Interest, identity: bytes, now: float) -> None:
        """A link says what it wants of the queue (whole; changes apply to what it said before).

        Raises:
            BadRequestError: a side or prefixes beyond the bounds, or another queue named.
            ConflictError: :data:`MAX_LINKS` links are known already.
        """
        if len(msg.side) > 64:
            raise BadRequestError(f"side of {len(msg.side)} characters (64 at most)")
        if msg.way not in control.WAYS:
            raise BadRequestError(f"a link carries records up, down or (outside a tree) neither, not {msg.way[:16]!r}")
        link = self.links.get(identity)
        if link is None:
            if len(self.links) >= MAX_LINKS:
                raise ConflictError(f"{MAX_LINKS} links are known to the monitor of {self.queue} already")
            link = self.links[identity] = _Link(msg.side, (), now)
            log.info("link of side %r: says what it wants of queue %s", msg.side[:64], self.queue)
        wants = set() if msg.whole else set(link.wants)
        for q in msg.queues:
            if q.queue not in ("", self.queue):
                raise BadRequestError(f"this monitor serves queue {self.queue}, not {q.queue[:64]!r}")
            if any(len(p) > MAX_PREFIX for p in q.add):
                raise BadRequestError(f"a prefix over {MAX_PREFIX} bytes")
            wants.difference_update(q.remove)
            wants.update(q.add)
        if len(wants) > MAX_WANTS:
            raise BadRequestError(f"{len(wants)} prefixes wanted ({MAX_WANTS} at most)")
        kept = minimal(wants)
        changed = (kept, msg.side, msg.way, msg.reads) != (link.wants, link.side, link.way, link.reads)
        link.side, link.wants, link.last_seen, link.way, link.reads = msg.side, kept, now, msg.way, msg.reads
        if changed:
            self.changed(now)
        if not link.reads and (link.told is None or now - link.told_at >= RETELL_S):
            self._tell(identity, link, self.wanted_by(link.side, link.way), now)

    def changed(self, now: float) -> None:
        """What the queue wants may have changed (a subscriber came or went, a link's wants changed): tell each
        link that carries records in whose view changed."""
        for identity, link in self.links.items():
            if link.reads or link.told is None:
                continue
            view = self.wanted_by(link.side, link.way)
            if view != link.told:
                self.adverts += 1
                self._tell(identity, link, view, now)

    def wanted_by(self, side: str, way: str = "") -> tuple[bytes, ...]:
        """What the queue wants, as told to a link of ``side`` that carries records in ``way``: its subscribers'
        prefixes and the wants of the links of every other side (on a tree's edge, of those that read the queue
        the same way)."""
        prefixes = {s.prefix for s in self.topology.subscribers.values()}
        for link in self.links.values():
            if link.side != side and (not way or link.way in (way, "")):
                prefixes.update(link.wants)
        return minimal(prefixes)

    def forget_silent(self, now: float) -> None:
        gone = [i for i, link in self.links.items() if now - link.last_seen > self.forget_after]
        wanted = False
        for identity in gone:
            link = self.links.pop(identity)
            wanted |= bool(link.wants)
            log.info("link of side %r silent for %.1fs: forgotten", link.side[:64], now - link.last_seen)
        if wanted:
            self.changed(now)

    def describe(self, now: float) -> list[LinkDemand]:
        """Every link known, for the status."""
        def text(prefixes: tuple[bytes, ...] | None) -> list[str]:
            return [p.decode("utf-8", "backslashreplace") for p in prefixes or ()]
        return [LinkDemand(side=link.side, wants=text(link.wants), told=text(link.told),
                           heard_s=round(max(0.0, now - link.last_seen), 3), way=link.way, reads=link.reads)
                for link in self.links.values()]

    def _tell(self, identity: bytes, link: _Link, view: tuple[bytes, ...], now: float) -> None:
        link.told, link.told_at = view, now
        self.outbox.send(identity, control.Interest(queues=[control.QueueInterest(self.queue, add=list(view))],
                                                    whole=True))
