"""A durable queue's journal as the ``roq`` data source reads it: where it is, its offsets, and one range of its
records, fetched from its reads port as any reader does (only what a majority of a replicated journal's replicas
hold is served).

Nothing here needs Spark: the driver finds the journal and splits its offsets; each task reads its range.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

import zmq

from client._connection import connect
from client._management import QueueManager
from client._replay import CONTINUE
from client.spark._options import Position, ReadOptions
from roq.config import CurveClient
from roq.errors import BrokerTimeoutError, ConfigError, JournalError, NotFoundError, ProtocolError
from roq.wire import batch, control

__all__ = ["locate", "JournalReader", "Piece"]

#: seconds a fetch may take before the read fails
FETCH_TIMEOUT_S = 30.0


def locate(options: ReadOptions) -> str:
    """The reads endpoint of the queue's journal (its leader's, when replicated).

    Raises:
        NotFoundError: no such queue, or it has no journal running. ConfigError: the queue is not durable.
        BrokerConnectionError, BrokerTimeoutError: the cluster cannot be reached.
    """
    if options.journal:
        return options.journal
    # asked of the queue's monitor as a reader of the prefix: the permission to subscribe is enough
    credentials = options.credentials or None
    with QueueManager(options.zk, root=options.root, credentials=credentials) as qm:
        monitor = qm.lookup(options.queue)
    with connect(monitor, credentials=credentials, timeout=10.0) as conn:
        journal = conn.journal(options.prefix)
    if journal.durability == "none" or not journal.journal:
        raise ConfigError(f"queue {options.queue!r} is not durable: it keeps no journal to read (set its rule "
                          "durability to interval or always; records published before that are not kept)")
    if not journal.reads or not journal.alive:
        raise NotFoundError(f"queue {options.queue!r}: its journal is not running (heard "
                            f"{journal.silent_s or 0:.0f}s ago)")
    return journal.reads


class JournalReader:
    """A DEALER to a journal's reads port (a context of its own: one per Spark task). :meth:`records` leaves a
    fetch's answer unread when it ends: it is the reader's last call.

    Args:
        endpoint: the reads port.
        credentials: the client's credentials directory ("" plaintext).
        fetch_bytes: what one fetch asks for.
    """

    def __init__(self, endpoint: str, credentials: str = "", fetch_bytes: int = 4 << 20) -> None:
        self.endpoint = endpoint
        self.fetch_bytes = fetch_bytes
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        if credentials:
            CurveClient.load(credentials).apply(self._sock)
        self._sock.connect(endpoint)

    def close(self) -> None:
        self._sock.close()
        self._ctx.term()

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fetch(self, msg: control.Fetch) -> tuple[control.Fetched, list[bytes]]:
        self._sock.send(control.encode(msg))
        return self._answer()

    def _answer(self) -> tuple[control.Fetched, list[bytes]]:
        """The next answer to a fetch sent."""
        if not self._sock.poll(int(FETCH_TIMEOUT_S * 1000)):
            raise BrokerTimeoutError(f"the journal at {self.endpoint} did not answer a fetch within "
                                     f"{FETCH_TIMEOUT_S:.0f}s")
        frames = self._sock.recv_multipart()
        meta = control.decode(frames[0])
        if isinstance(meta, control.Reply):
            raise ProtocolError(f"the journal at {self.endpoint} refused the read: {meta.comment}")
        if not isinstance(meta, control.Fetched):
            raise ProtocolError(f"the journal at {self.endpoint} answered a fetch with {type(meta).__name__}")
        if meta.error:
            raise JournalError(f"the journal at {self.endpoint}: {meta.error}")
        if len(frames) != 1 + 3 * meta.count or len(meta.offsets) != meta.count:
            raise ProtocolError(f"the journal at {self.endpoint} announced {meta.count} entries and sent "
                                f"{len(frames) - 1} frames")
        return meta, frames[1:]

    def bounds(self) -> tuple[int, int]:
        """The journal's first offset and its end (what a reader may read: committed, when replicated)."""
        meta, _ = self._fetch(control.Fetch(offset=-2, max_bytes=1))
        return meta.first_offset, meta.end_offset

    def offset(self, position: Position, first: int, end: int) -> int:
        """Where ``position`` is in a journal from ``first`` to ``end``."""
        if position == "earliest":
            return first
        if position == "latest":
            return end
        if isinstance(position, int):
            return min(max(position, first), end)
        meta, _ = self._fetch(control.Fetch(offset=-1, since=float(position), max_bytes=1))
        return min(max(meta.start_offset, first), end)

    def records(self, start: int, end: int, prefix: bytes = b"") -> Iterator[list[Piece]]:
        """The records at offsets ``start`` to ``end`` (excluded) whose key starts with ``prefix``, in order, a
        fetch's worth at a time, entry by entry. Two fetches are in flight: the journal reads the next while this
        one is taken apart."""
        if start >= end:
            return
        sock, encode = self._sock, control.encode
        sock.send(encode(control.Fetch(offset=start, prefix=prefix, max_bytes=self.fetch_bytes)))
        going_on = encode(control.Fetch(offset=CONTINUE, prefix=prefix, max_bytes=self.fetch_bytes))
        sock.send(going_on)  # from where the one before ends
        while True:
            meta, frames = self._answer()
            done = (meta.next_offset >= end or (meta.offsets and meta.offsets[-1] >= end)
                    or (not meta.count and meta.next_offset >= meta.end_offset))
            if not done:
                sock.send(going_on)
            out: list[Piece] = []
            for i, first in enumerate(meta.offsets):
                key, header, body = frames[3 * i:3 * i + 3]
                h = batch.parse_header(header)
                if first >= end:
                    break
                skip = max(0, start - first)
                count = min(h.count, end - first) - skip
                if count > 0:
                    out.append(Piece(key, body, h.count, skip, count, h.publisher, h.first_seq + skip, first + skip,
                                     h.timestamp_ns // 1000))
            if out:
                yield out
            if done:  # past ``end``, or nothing further: the journal's end (or what it serves) is before it
                return


class Piece(NamedTuple):
    """The records a read takes of one entry (a batch as its publisher sent it): ``records`` of the ``total`` in
    ``body``, from the ``skip``-th; the first of them has seq ``seq`` and offset ``offset``; ``time_us`` is the
    publisher's time of the batch (microseconds since the epoch). No object is made per record: the caller takes
    the payloads out of ``body`` (:func:`roq.wire.batch.decode_body`'s layout) as it needs them."""

    key: bytes
    body: bytes
    total: int
    skip: int
    records: int
    publisher: bytes
    seq: int
    offset: int
    time_us: int
