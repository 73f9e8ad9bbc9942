"""A link between two clusters of a tree: a child and its parent, what they tell each other.

A cluster of a federation is the tree's root, a branch or a leaf; a branch or a leaf is linked to one parent.
The child opens the link: its :class:`LinkHello` says who it is and what its subtree holds, and the parent
answers with :class:`LinkWelcome` (where it sits in the tree) or :class:`LinkRefused` (why not, naming both
ends). After that, each side tells the other what it wants (:class:`Interest`) and the child tells the parent
which clusters are below it (:class:`Names`); an ancestor that finds one of those names already in the tree
answers :class:`NamesRefused`. Every whole statement (a hello, a welcome, an ``Interest`` or ``Names`` with
``whole``) replaces what the other side held, so that a reconnect re-sends everything and nothing is left
over from before it.

The rules that decide what goes into these messages are :mod:`roq.federation`'s.
"""

from __future__ import annotations

import dataclasses

from roq.wire.control.codec import Message, message

__all__ = ["ROLES", "WAYS", "REFUSALS", "QueueInterest", "ClusterName", "LinkStats", "Interest", "Names", "NamesRefused",
           "LinkHello", "LinkWelcome", "LinkRefused"]

#: a cluster's place in its tree
ROLES = ("root", "branch", "leaf")
#: why a link or a name is refused
#: which way a link carries records on a tree's edge ("": outside a tree)
WAYS = ("", "up", "down")
REFUSALS = ("cycle", "second_parent", "duplicate_name", "unknown_key", "not_a_parent", "stale", "malformed")


@dataclasses.dataclass(frozen=True)
class QueueInterest:
    """The key prefixes of one queue that a side adds to what it wants and takes back (``b""``: every key)."""

    queue: str
    add: list[bytes] = dataclasses.field(default_factory=list)
    remove: list[bytes] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class ClusterName:
    """A cluster of the sender's subtree: its name, its parent's and its key's digest (who it is, beyond the
    name)."""

    name: str
    parent: str
    key: str = ""


@dataclasses.dataclass(frozen=True)
class LinkStats:
    """What one crossing of a link carried since the link process started, said with each hello: the monitor of
    the queue it carries into (``target``), the records and bytes it sent there (resent ones too), the bytes on
    their way not acknowledged yet (``backlog``), its moves and fail-overs there, its rate limit (bytes a second,
    0: none), the key prefixes it carries now, why the far queue's monitor refuses it ("": it does not), the bytes
    of its source journal's answers as they came (``bytes_read``), and whether it compresses what crosses."""

    target: str
    records_sent: int = 0
    bytes_sent: int = 0
    backlog: int = 0
    moves: int = 0
    rate_limit: int = 0
    carrying: list[bytes] = dataclasses.field(default_factory=list)
    refused: str = ""
    bytes_read: int = 0
    compressed: bool = False


@message(60)
class Interest(Message):
    """Either way on a link: what the sender wants of the receiver's records, as changes per queue; with
    ``whole``, everything it wants (what the receiver held before is replaced).

    Between a link and a queue's monitor (``queue`` "": the monitor's own): the link says what it wants of the
    queue's records (it reads them, or wants none: it carries records into the queue), under ``side``, the
    child end of the edge it is on; ``reads``: it reads the queue (what it wants is what it carries away), else
    it carries records into it. ``way``: on a tree's edge, which way the link carries records ("up" from a child
    to its parent, "down" from a parent to its child; "" outside a tree). The monitor answers each link that
    carries records in with what the queue wants, whole, and again on every change: its subscribers' prefixes
    and what the links of every other side that read it the same way want (records that came up go on up, records
    that came down go on down: never sideways)."""

    queues: list[QueueInterest]
    whole: bool = False
    side: str = ""
    way: str = ""
    reads: bool = False


@message(61)
class Names(Message):
    """Child -> parent: the clusters of its subtree that it adds and takes back (``whole``: all of them, itself
    first)."""

    add: list[ClusterName]
    remove: list[str]
    whole: bool = False


@message(62)
class NamesRefused(Message):
    """Parent -> child: these names of the child's subtree are refused (``reason`` one of :data:`REFUSALS`;
    ``detail`` says where in the tree they already are)."""

    names: list[str]
    reason: str
    detail: str


@message(63)
class LinkHello(Message):
    """Child -> parent, opening a link: the child's name and role (``branch`` or ``leaf``), the link's
    ``incarnation`` (a newer one replaces an older; an older one is stale), the clusters of its subtree (itself
    first), everything it wants, and what each of its crossings carried so far."""

    cluster: str
    role: str
    incarnation: int
    names: list[ClusterName]
    interest: list[QueueInterest]
    stats: list[LinkStats] = dataclasses.field(default_factory=list)
    link: str = ""  # the link's name: a child has a link per queue it links, each with its own incarnations


@message(64)
class LinkWelcome(Message):
    """Parent -> child, the link admitted: the parent's ``path`` to the root (the parent first, the root last)
    and everything the parent wants of the child's records."""

    path: list[str]
    interest: list[QueueInterest]


@message(65)
class LinkRefused(Message):
    """Parent -> child, the link refused: ``reason`` one of :data:`REFUSALS`, ``detail`` naming both ends."""

    reason: str
    detail: str
