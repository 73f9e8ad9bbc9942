"""Where a link reads a queue of its own side: the queue's journal, from the position the link keeps there.

The link reads as a durable reader named after itself: it asks the journal where it stands
(:class:`~roq.wire.control.Position`; none kept: from the journal's end, so that a new link carries what is
published from then on), keeps two fetches asked for (:data:`IN_FLIGHT`: the first from its offset, the
next from where the one before ends, so the journal reads the next while the link relays the last), one at
the end of the journal (``wait_ms``: what is journaled is answered at once), hands every entry over whole, as it
was journaled, with its offset, and commits what the relay says is done (:class:`~roq.wire.control.Commit`). A fetch is not asked while the reader is paused (what the
relay has on its way is at its bound): an outage of the far side costs disk here, not memory. With
``compressed`` (the journal is across a slow network) its answers come packed in one compressed frame where that
is smaller; :attr:`JournalSource.read_bytes` counts what came, as it came.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Callable

import zmq

from roq.config import CurveClient
from roq.errors import ProtocolError
from roq.federation import Entry
from roq.loop import Loop
from roq.wire import compression, control

log = logging.getLogger(__name__)

__all__ = ["JournalSource"]

#: bytes one fetch asks for
FETCH_BYTES = 1 << 20
#: how long a fetch at the journal's end waits for more, milliseconds
WAIT_MS = 1000
#: the offset of a fetch from the journal's end
END = -2
#: fetches asked for at once
IN_FLIGHT = 2
#: seconds between two fetches of a reader that wants no key (each only says where the next goes on)
IDLE_FETCH_S = 0.2
#: the offset of a fetch that goes on from where this reader's previous one ended
CONTINUE = -3
#: a packed answer holds at most this much more than the fetch asked for (its last entry goes past what was asked)
PACKED_SLACK = 64 << 20


class JournalSource:
    """A queue's journal, read from a kept position by the durable reader ``name``.

    ``on_entries(entries, next_offset, start_offset)`` gets each answer: the entries in order, where the
    next fetch goes on, and where this answer began. ``keys()``, asked at each fetch, says which keys to read: the
    prefixes (an empty list: none; the journal then only says where the next fetch goes on, asked every
    :data:`IDLE_FETCH_S`), or None for every key: what is not wanted does not cross the network to be dropped here. A
    reader that wanted no key and comes to want some reads on from the journal's end: what was published while it
    wanted nothing passed unwanted."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], endpoint: str, name: str,
                 on_entries: Callable[[list[Entry], int, int], None], *, curve: CurveClient | None = None,
                 fetch_bytes: int = FETCH_BYTES, wait_ms: int = WAIT_MS,
                 keys: Callable[[], list[bytes] | None] | None = None, compressed: bool = False) -> None:
        if not control.DURABLE_NAME.match(name):
            raise ValueError(f"not a durable reader's name: {name!r}")
        self.name = name
        self.endpoint = endpoint
        self.offset = -1  # where the next fetch reads (-1: not known yet)
        self.committed = -1  # the position the journal confirmed
        self.paused = False
        self.error = ""  # why the journal could not be read ("" none)
        self.compressed = compressed
        self.read_bytes = 0  # the answers' bytes, as they came
        self._on_entries = on_entries
        self._keys = keys
        self._next_idle = 0.0  # no key wanted: no fetch before this
        self._idle = False  # the last fetch wanted no key
        self._fetch_bytes = fetch_bytes
        self._wait_ms = wait_ms
        self._in_flight = 0  # fetches asked for and not answered
        self._asked: collections.deque[float] = collections.deque()  # when each of them was asked (monotonic)
        self._end = -1  # the journal's end, as its last answer said
        self._asked_keys: list[bytes] | None = None  # the keys of the last fetch asked for
        self._asked_commit = -1
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.apply(self.socket)
        self.socket.connect(endpoint)

    def attach(self, loop: Loop) -> None:
        """Serve in ``loop``; the position is asked for at once."""
        loop.add(self.socket, self.readable, f"the journal at {self.endpoint}")
        self.socket.send(control.encode(control.Position(name=self.name)))

    def pause(self, paused: bool) -> None:
        """Ask for no more (True) until resumed."""
        self.paused = paused
        if not paused:
            self._fetch()

    def commit(self, offset: int) -> None:
        """Have the journal keep ``offset`` as this reader's position (answered when it is on disk)."""
        if offset > max(self.committed, self._asked_commit):
            self._asked_commit = offset
            self.socket.send(control.encode(control.Commit(name=self.name, offset=offset)), zmq.NOBLOCK)

    def readable(self) -> None:
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                self._answer(frames)
            except ProtocolError as exc:
                log.warning("link: a bad answer from the journal at %s: %s", self.endpoint, exc)
        self._fetch()

    def close(self) -> None:
        self.socket.close(linger=0)

    def asked_since(self, when: float) -> bool:
        """Whether every fetch still on its way was asked at ``when`` (monotonic) or later: what it reads, it
        reads with the keys said since."""
        return not self._asked or self._asked[0] >= when

    def _answered(self) -> None:
        if self._asked:
            self._asked.popleft()

    def poke(self, now: float) -> None:
        """Time passed: a reader that wants no key asks again now and then (its fetches are answered at once)."""
        self._fetch()

    def _fetch(self) -> None:
        while self._in_flight < IN_FLIGHT and not self.paused and self.offset != -1 and not self.error:
            keys = self._keys() if self._keys is not None else None
            at_end = bool(self._in_flight) and (self.offset == END or self.offset >= self._end)
            if at_end and keys == self._asked_keys:
                return  # at the end: one fetch waits there
            # (at the end with other keys: the one waiting there is answered now, and this one goes on from it)
            if keys == []:  # no key wanted: one fetch at a time, every IDLE_FETCH_S, only to go on past what is there
                now = time.monotonic()
                if self._in_flight or now < self._next_idle:
                    return
                self._next_idle = now + IDLE_FETCH_S
            offset = CONTINUE if self._in_flight else self.offset
            if keys != [] and self._idle and not self._in_flight:
                # it wanted nothing and now wants something: from the journal's end, what is published from now on
                # (what came meanwhile passed while nobody wanted it)
                offset = self.offset = END
            self._idle = keys == []
            msg = control.Fetch(offset=offset, max_bytes=self._fetch_bytes, wait_ms=self._wait_ms,
                                prefixes=keys or [], filtered=keys is not None, compressed=self.compressed,
                                release=at_end)
            try:
                self.socket.send(control.encode(msg), zmq.NOBLOCK)
            except zmq.Again:
                return
            self._in_flight += 1
            self._asked.append(time.monotonic())
            self._asked_keys = keys

    def _answer(self, frames: list[bytes]) -> None:
        msg = control.decode(frames[0])
        if isinstance(msg, control.Reply):
            self._reply(msg)
            return
        self._in_flight = max(0, self._in_flight - 1)  # (a bad answer too: the next fetch asks again from where it was)
        self._answered()
        self.read_bytes += sum(map(len, frames))
        if isinstance(msg, control.Fetched) and msg.packed and len(frames) == 2:
            frames = [frames[0], *compression.unpack_frames(frames[1], self._fetch_bytes + PACKED_SLACK)]
        if (not isinstance(msg, control.Fetched) or len(frames) != 1 + 3 * msg.count
                or len(msg.offsets) != msg.count):
            raise ProtocolError(f"not an answer to a fetch: {len(frames)} frames")
        if msg.error == control.NO_CURSOR:  # the journal restarted between two fetches: from our offset again
            return
        if msg.error:
            self.error = msg.error
            log.error("link: the journal at %s cannot be read at offset %d: %s", self.endpoint, msg.next_offset,
                      msg.error)
            return
        self._end = msg.end_offset
        if 0 <= self.offset < msg.first_offset:
            log.warning("link: the journal at %s keeps the offsets from %d on; %d to %d are not in it",
                        self.endpoint, msg.first_offset, self.offset, msg.first_offset - 1)
        elif self.offset >= 0 and msg.start_offset > self.offset:
            return  # it went on from an answer that was not taken: asked again from where the link is
        entries = [Entry(msg.offsets[i], *frames[1 + 3 * i: 4 + 3 * i]) for i in range(msg.count)]
        start = msg.start_offset if msg.start_offset >= 0 else self.offset
        self.offset = msg.next_offset
        self._fetch()  # the journal reads the next while these are relayed
        self._on_entries(entries, msg.next_offset, start)

    def _reply(self, msg: control.Reply) -> None:
        if msg.result != control.Result.OK:
            self.error = msg.comment
            if msg.request == control.Fetch.CMD and self._in_flight > 0:
                self._in_flight -= 1
                self._answered()
            log.error("link: the journal at %s refused: %s", self.endpoint, msg.comment)
            return
        offset = msg.data.get("offset")
        if type(offset) is not int:
            return
        if msg.request == control.Position.CMD:
            self.offset = offset if offset >= 0 else END
            self.committed = offset
            self._fetch()
        elif msg.request == control.Commit.CMD:
            self.committed = max(self.committed, offset)
