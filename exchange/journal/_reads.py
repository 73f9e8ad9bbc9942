"""Reading a journal (no sockets): fetches answered from the store, parked at the end until more is written,
the seams exchanges marked for replaying subscribers, and durable subscribers' positions.

A fetch (:class:`~roq.wire.control.Fetch`) is answered with :class:`~roq.wire.control.Fetched` and the entries' frames
(:meth:`Reads.fetch`). One at the end of the journal with ``wait_ms`` waits (*parks*, at most
:data:`MAX_PARKED`) until something is written (:meth:`Reads.written`) or its wait runs out
(:meth:`Reads.expire`): a reader that follows the journal is answered as soon as there is something to read.
A fetch that asks for it (``compressed``: a link across a slow network) gets the entries' frames packed in one
compressed frame, where that is smaller. In a replicated journal (:attr:`Reads.limit`) readers are served only
what a majority of the replicas hold; a follower replica (:attr:`~roq.wire.control.Fetch.replica`) everything
written, with the entries' append times.

A **seam** is where the live stream takes over from the journal for one subscriber at one exchange: the
exchange sends it (:data:`roq.wire.batch.SEAM`) once that subscriber's subscription is live there, after every
batch it sent the journal before; the journal notes the offset its next record will get (:meth:`Reads.seam`).
A replaying subscriber that has read up to the seams of every exchange it subscribed to has everything that
did not reach it live. Kept for :data:`SEAM_TTL_S`, for :data:`MAX_SEAMS` subscribers at most.

A durable subscriber's **position** (:class:`Positions`) is the offset it goes on from after a restart: what it
committed, written to ``positions.json`` in the journal's directory (replaced atomically and synced before
the commit is answered).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass

from exchange.journal._files import replace_synced
from exchange.journal._store import POSITIONS, Store
from roq.wire import batch, compression, control
from roq.errors import CorruptJournalError, JournalError, ProtocolError

log = logging.getLogger(__name__)

__all__ = ["Reads", "Positions", "MAX_PARKED", "MAX_SEAMS", "SEAM_TTL_S", "MAX_FETCH_BYTES", "MAX_WAIT_MS"]

#: fetches waiting at the end at most; beyond, they are answered at once (empty)
MAX_PARKED = 1024
#: subscribers whose seams are kept at most, and for how long
MAX_SEAMS, SEAM_TTL_S = 10_000, 600.0
#: the most a fetch may ask for, and the longest it may wait
MAX_FETCH_BYTES, MAX_WAIT_MS = control.MAX_FETCH_BYTES, control.MAX_WAIT_MS
#: readers whose last answer's end is kept (for a fetch that goes on from it), at most
MAX_CURSORS = 10_000
#: durable subscribers' positions kept at most
MAX_POSITIONS = 10_000


@dataclass
class _Parked:
    identity: bytes
    fetch: control.Fetch
    offset: int  # where it reads on from (past what was written since that it did not want)
    until: float
    start: int  # where it asked to read from: its answer's start (nothing it wanted lies between)


class Reads:
    """The read side of one journal.

    Args:
        store: the journal.
        clock: the wall clock (seams expire by it).
    """

    def __init__(self, store: Store, clock=time.monotonic) -> None:
        self.store = store
        self.clock = clock
        self.parked: list[_Parked] = []
        self.seams: dict[str, tuple[float, dict[str, int]]] = {}  # subscriber -> (noted at, exchange -> offset)
        self.cursors: dict[bytes, int] = {}  # reader -> where its last answer ended (a fetch of offset -3 goes on)
        self.fetches = 0
        self.records_read = 0
        self.errors = 0
        self.limit: int | None = None  # a replicated journal's commit end: readers get nothing at or past it
        self.epoch = 0  # a leader's epoch and its log's history, in each answer to a replica
        self.history: list[list[int]] = []
        self.members: list[str] = []  # a leader's replica set, named to its replicas

    def epochs(self, epoch: int, history: list[list[int]]) -> None:
        """The epoch this journal leads (a follower: promised) and its log's epochs (named to replicas)."""
        self.epoch, self.history = epoch, history

    def replica_set(self, members: list[str]) -> None:
        """The replicas a leader counts (named to its replicas)."""
        self.members = list(members)

    def commit(self, end: int) -> None:
        """A replicated journal's commit end is ``end`` now (:meth:`written` answers the readers it lets on)."""
        self.limit = end if self.limit is None else max(self.limit, end)

    def _end(self, msg: control.Fetch) -> int:
        """Where ``msg``'s reading ends: what is written, or for a reader of a replicated journal, committed."""
        end = self.store.end_offset
        return end if self.limit is None or msg.replica else min(end, self.limit)

    # ------------------------------------------------------------------ fetches

    def fetch(self, identity: bytes, msg: control.Fetch, now: float) -> list[bytes] | None:
        """The answer's frames, or None: it waits at the end (answered by :meth:`written` or :meth:`expire`).

        Raises:
            ProtocolError: a fetch out of range (asks for more than :data:`MAX_FETCH_BYTES`, a negative size...).
        """
        if not 0 < msg.max_bytes <= MAX_FETCH_BYTES or not 0 <= msg.wait_ms <= MAX_WAIT_MS or msg.offset < -3:
            raise ProtocolError(f"fetch out of range: max_bytes {msg.max_bytes}, wait_ms {msg.wait_ms}, "
                                f"offset {msg.offset}")
        if len(msg.prefixes) > control.MAX_PREFIXES or any(len(p) > batch.MAX_KEY for p in msg.prefixes):
            raise ProtocolError(f"a fetch names at most {control.MAX_PREFIXES} prefixes of at most {batch.MAX_KEY} "
                                f"bytes, got {len(msg.prefixes)}")
        self.fetches += 1
        store = self.store
        offset = msg.offset
        if offset == -3:  # where this reader's previous fetch ended: a reader keeps two in flight
            offset = self.cursors.get(identity, -1)
            if offset < 0:
                return [control.encode(control.Fetched(next_offset=0, end_offset=store.end_offset,
                                                       first_offset=store.first_offset, error=control.NO_CURSOR))]
        elif offset == -1:
            offset = store.offset_at(int(msg.since * 1e9))
        elif offset == -2:
            offset = self._end(msg)
        offset = max(offset, store.first_offset)
        # (one that wants no key is answered at once: it paces itself)
        if offset >= self._end(msg) and msg.wait_ms and not _no_key(msg) and len(self.parked) < MAX_PARKED:
            self.parked.append(_Parked(identity, msg, offset, now + msg.wait_ms / 1000, offset))
            return None
        return self._answer(identity, msg, offset)

    def release(self, identity: bytes) -> list[list[bytes]]:
        """The fetches ``identity`` has waiting at the end, answered now (:attr:`~roq.wire.control.Fetch.release`:
        it asks for other keys from here on)."""
        mine = [p for p in self.parked if p.identity == identity]
        if not mine:
            return []
        self.parked = [p for p in self.parked if p.identity != identity]
        return [frames for p in mine if (frames := self._answer(identity, p.fetch, p.offset, start=p.start))]

    def _answer(self, identity: bytes, msg: control.Fetch, offset: int, parked: _Parked | None = None,
                start: int = -1) -> list[bytes] | None:
        """The answer to ``msg`` from ``offset`` (which it asked for from ``start``, when it waited: -1, from
        ``offset``); None when ``parked`` found nothing it wants in what was written (it waits on, from past
        it)."""
        store = self.store
        end = self._end(msg)
        frames: list[bytes] = []
        offsets: list[int] = []
        times: list[int] = []
        error = ""
        next_offset = offset
        wanted = tuple(msg.prefixes) if msg.filtered else msg.prefix  # (a tuple: any of them; none when empty)
        # a record for another cluster goes only to a fetch that names its address (a link toward it)
        addresses = tuple(p for p in msg.prefixes if batch.is_addressed(p)) if msg.filtered else (
            (msg.prefix,) if batch.is_addressed(msg.prefix) else ())
        nothing = _no_key(msg)  # on past everything there, nothing read
        if nothing:
            next_offset = max(offset, end)
        try:
            for entry in store.read(offset, msg.max_bytes) if not nothing else ():
                if entry.offset >= end:
                    break
                h = batch.parse_header(entry.header)
                next_offset = entry.offset + h.count
                key = entry.key
                if key in batch.REPLICA_KEYS and not msg.replica:
                    continue  # a new leader's first entry, a durable subscriber's position: the replicas' only
                if not key.startswith(addresses if key[:2] == batch.ADDRESSED else wanted):
                    continue
                offsets.append(entry.offset)
                times.append(entry.time_ns)
                frames += (key, entry.header, entry.body)
                self.records_read += h.count
        except (CorruptJournalError, JournalError) as exc:
            self.errors += 1
            error = str(exc)[:500]
            log.error("a read at offset %d stopped: %s", next_offset, exc)
        if parked is not None and msg.filtered and not offsets and not error and next_offset >= end:
            # a link's fetch that wants none of what was written: no empty answer (to cross the network for
            # nothing at every write of a busy queue), it waits on past it
            parked.offset = next_offset
            self.parked.append(parked)
            return None
        cursors = self.cursors
        cursors.pop(identity, None)
        cursors[identity] = next_offset
        if len(cursors) > MAX_CURSORS:
            del cursors[next(iter(cursors))]
        seams = self.seams.get(msg.subscriber, (0.0, {}))[1] if msg.subscriber else {}
        packed = compression.pack_frames(frames) if msg.compressed and frames else b""
        if packed and len(packed) >= sum(map(len, frames)):
            packed = b""  # (it would not be smaller)
        meta = control.Fetched(next_offset=next_offset, end_offset=end, first_offset=store.first_offset,
                               count=len(offsets), offsets=offsets, seams=dict(seams), error=error,
                               start_offset=start if start >= 0 else offset, packed=bool(packed),
                               times=times if msg.replica else [],
                               committed=self.limit if self.limit is not None and msg.replica else -1,
                               epoch=self.epoch if msg.replica else 0, history=self.history if msg.replica else [],
                               members=self.members if msg.replica else [])
        return [control.encode(meta), packed] if packed else [control.encode(meta), *frames]

    def written(self) -> list[tuple[bytes, list[bytes]]]:
        """The parked fetches that can be answered now that more is written (or committed): (identity, frames)
        each."""
        ready = [p for p in self.parked if p.offset < self._end(p.fetch)]
        if not ready:
            return []
        self.parked = [p for p in self.parked if p.offset >= self._end(p.fetch)]
        answers = [(p.identity, self._answer(p.identity, p.fetch, p.offset, p, p.start)) for p in ready]
        return [(identity, frames) for identity, frames in answers if frames is not None]

    def expire(self, now: float) -> list[tuple[bytes, list[bytes]]]:
        """The parked fetches whose wait ran out, answered (with nothing new, and the seams known)."""
        done = [p for p in self.parked if now >= p.until]
        if not done:
            return []
        self.parked = [p for p in self.parked if now < p.until]
        return [(p.identity, frames) for p in done
                if (frames := self._answer(p.identity, p.fetch, p.offset, start=p.start)) is not None]

    # ------------------------------------------------------------------ seams

    def seam(self, subscriber: bytes, exchange: bytes, offset: int) -> None:
        """``exchange`` says it forwards to ``subscriber`` live from now on: the journal holds what it sent
        before once ``offset`` is written."""
        now = self.clock()
        key = subscriber.hex()
        noted = self.seams.pop(key, (now, {}))[1]
        if len(noted) < 256:
            noted[exchange.decode(errors="replace")[:64]] = offset
        self.seams[key] = (now, noted)
        while len(self.seams) > MAX_SEAMS or (self.seams and next(iter(self.seams.values()))[0] < now - SEAM_TTL_S):
            del self.seams[next(iter(self.seams))]


class Positions:
    """Durable subscribers' positions, in ``<directory>/positions.json``."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, POSITIONS)
        self.offsets: dict[str, int] = {}
        try:
            with open(self.path) as f:
                found = json.load(f)
            if isinstance(found, dict):
                self.offsets = {k: v for k, v in found.items() if isinstance(k, str) and type(v) is int and v >= 0}
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.error("%s does not read (%s): durable subscribers start from where they ask", self.path, exc)

    def get(self, name: str) -> int:
        """Where ``name`` goes on (-1: it never committed)."""
        return self.offsets.get(name, -1)

    def check(self, name: str, offset: int) -> None:
        """Raises: ProtocolError: ``name`` may not have ``offset`` as its position (see :meth:`commit`)."""
        if not control.DURABLE_NAME.fullmatch(name) or offset < 0:
            raise ProtocolError(f"a durable subscriber's name is 1-128 of A-Z a-z 0-9 _ . : @ -, and its offset "
                                f"0 or more: got {name[:40]!r}, {offset}")
        if name not in self.offsets and len(self.offsets) >= MAX_POSITIONS:
            raise ProtocolError(f"{MAX_POSITIONS} durable subscribers already have a position in this journal")

    def commit(self, name: str, offset: int) -> None:
        """Keep ``offset`` as ``name``'s position, on disk before this returns.

        Raises:
            ProtocolError: a name that is not 1-128 letters, digits or ``_.:@-``, or a negative offset.
            JournalError: the file cannot be written (the position stays what it was).
        """
        self.check(name, offset)
        new = {**self.offsets, name: offset}
        try:
            replace_synced(self.path, json.dumps(new).encode())
        except OSError as exc:
            raise JournalError(f"cannot write {self.path}: {exc.strerror}") from exc
        self.offsets = new


def _no_key(msg: control.Fetch) -> bool:
    """Whether a fetch wants no key at all (filtered by an empty list of prefixes)."""
    return msg.filtered and not msg.prefixes
