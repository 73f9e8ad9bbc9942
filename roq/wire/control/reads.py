"""Reader <-> journal, on the journal's reads port: fetches, a durable subscriber's position, a check.

A subscriber that replays (``start=``) or reads for good (``durable=``) asks the journal for its entries
(:class:`Fetch`, answered by :class:`Fetched` and the entries' frames); a durable one keeps its position there
(:class:`Commit`, :class:`Position`). An operator may have the journal check its files (:class:`Verify`).
"""

from __future__ import annotations

import dataclasses
import re

from roq.wire.control.codec import Message, message

__all__ = ["Fetch", "Fetched", "MAX_PREFIXES", "MAX_FETCH_BYTES", "MAX_WAIT_MS", "NO_CURSOR", "Commit", "DURABLE_NAME", "Position", "Verify", "Promise"]


@message(50)
class Fetch(Message):
    """Reader -> journal (its reads port): the entries from ``offset`` (-1: from the first record appended at
    or after ``since``, seconds since the epoch; -2: from the end; -3: from where the answer to this reader's
    previous fetch ended, so that a reader keeps two in flight), about ``max_bytes`` of them whose key starts
    with ``prefix``. At the end, the journal waits up to ``wait_ms`` for more before it answers. ``subscriber``
    (its id, hex) names the seams the exchanges marked for it (see :data:`roq.wire.batch.SEAM`). With ``filtered``
    the entries are those whose key starts with one of ``prefixes`` instead (none when it is empty: the journal
    answers only where the next fetch goes on; a link that wants nothing of the queue reads nothing of it), at
    most :data:`MAX_PREFIXES` of them. With ``release``, a fetch of this reader waiting at the end is answered
    first, with what it read (a link whose far side came to want other keys asks for them from there on, without
    waiting out ``wait_ms``). With ``compressed`` (a link across a slow network) the entries may come
    packed in one compressed frame (:attr:`Fetched.packed`). ``replica`` names a follower replica of the journal
    (``replicas`` > 1): it is served what the leader wrote, not only what is committed, with each entry's append
    time, and ``offset`` says that it holds everything before it; ``epoch`` is the newest epoch it promised (a
    leader of an older one learns that it is fenced)."""

    offset: int
    prefix: bytes = b""
    max_bytes: int = 1 << 20
    wait_ms: int = 0
    since: float = 0.0
    subscriber: str = ""
    prefixes: list[bytes] = dataclasses.field(default_factory=list)
    filtered: bool = False
    release: bool = False
    compressed: bool = False
    replica: str = ""
    epoch: int = 0


#: the prefixes one filtered fetch may name, at most
MAX_PREFIXES = 1024
#: what one fetch may ask for (``max_bytes``), at most, and the longest it may wait at the end (``wait_ms``)
MAX_FETCH_BYTES, MAX_WAIT_MS = 16 << 20, 30_000


#: the error of a fetch that goes on from a previous one (offset -3) the journal does not know (it restarted)
NO_CURSOR = "no previous fetch to go on from"


@message(51)
class Fetched(Message):
    """Journal -> reader, the first frame of the answer to a :class:`Fetch`; ``count`` entries follow, three
    frames each (key, header, body: the batch as its publisher sent it), ``offsets`` giving each one's first
    record's offset. ``next_offset``: where the next fetch goes on (past entries the prefix skipped too);
    ``end_offset``, ``first_offset``: the journal's extent now; ``seams``: exchange -> the offset before which
    the journal holds everything that exchange forwarded before this subscriber's subscription to it went
    live; ``error``: why nothing could be read (a corrupt entry at ``next_offset``...), "" none. With ``packed``
    (asked for by :attr:`Fetch.compressed`, where it is smaller) one frame follows instead of the entries': their
    frames packed and compressed (:func:`roq.wire.compression.pack_frames`). To a replica's fetch: ``times``, each
    entry's append time (ns), ``committed``, the end of what a majority of the replicas hold (-1: not
    replicated), the leader's ``epoch`` and the ``history`` of its log: ``[epoch, first offset, end]`` for each
    epoch, the last one's end -1 (see :class:`exchange.journal._replication.EpochHistory`), and the replicas it
    counts (``members``: a learner votes once one that counts it told it a commit end it holds)."""

    next_offset: int
    end_offset: int
    first_offset: int
    count: int = 0
    start_offset: int = -1  # where the fetch read from (one that waited skipped, from there, what it did not want)
    offsets: list[int] = dataclasses.field(default_factory=list)
    seams: dict[str, int] = dataclasses.field(default_factory=dict)
    error: str = ""
    packed: bool = False
    times: list[int] = dataclasses.field(default_factory=list)
    committed: int = -1
    epoch: int = 0
    history: list[list[int]] = dataclasses.field(default_factory=list)
    members: list[str] = dataclasses.field(default_factory=list)


#: a durable subscriber's name (its position in a journal is kept under it)
DURABLE_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,128}\Z")


@message(52)
class Commit(Message):
    """Reader -> journal: the durable subscriber ``name`` has processed everything before ``offset``; answered
    with a :class:`~roq.wire.control.Reply` once the position is on disk."""

    name: str
    offset: int


@message(53)
class Position(Message):
    """Reader -> journal: where the durable subscriber ``name`` goes on; answered with a
    :class:`~roq.wire.control.Reply` whose data is ``{"offset": int}`` (-1: it never committed)."""

    name: str


@message(54)
class Verify(Message):
    """Operator -> journal (its reads port): read every segment whole and say what does not check; answered with a
    :class:`~roq.wire.control.Reply` whose data is ``{"problems": [...], "segments", "first_offset", "end_offset",
    "size_bytes"}`` (the journal serves nothing else meanwhile: seconds for gigabytes)."""


@message(55)
class Promise(Message):
    """Candidate -> replica of a journal (its reads port): promise ``epoch``, and from now on take no entry of an
    older one (see :mod:`exchange.journal._replication`); answered with a :class:`~roq.wire.control.Reply` whose data
    is ``{"epoch", "last_epoch", "end", "history"}`` (the replica's log), or CONFLICT when it promised that epoch or
    a newer one already."""

    epoch: int
    candidate: str
