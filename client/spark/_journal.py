"""A durable queue's journal as the ``roq`` data source reads it: where it is, its offsets, and one range of its
records, fetched from its reads port as any reader does (only what a majority of a replicated journal's replicas
hold is served).

Nothing here needs Spark: the driver finds the journal and splits its offsets; each task reads its range.
"""

from __future__ import annotations

from typing import Iterator

import zmq

from client._management import QueueManager
from client.spark._options import Position, ReadOptions
from roq.config import CurveClient
from roq.errors import BrokerTimeoutError, ConfigError, JournalError, NotFoundError, ProtocolError
from roq.wire import batch, control

__all__ = ["locate", "JournalReader", "Columns"]

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
    with QueueManager(options.zk, root=options.root, credentials=options.credentials or None) as qm:
        journal = qm.journal(options.queue)
    if journal is None:
        raise BrokerTimeoutError(f"the monitor of queue {options.queue!r} did not answer: its journal is unknown")
    if journal.durability == "none" or not journal.journal:
        raise ConfigError(f"queue {options.queue!r} is not durable: it keeps no journal to read (set its rule "
                          "durability to interval or always; records published before that are not kept)")
    if not journal.reads or not journal.alive:
        raise NotFoundError(f"queue {options.queue!r}: its journal is not running (heard "
                            f"{journal.silent_s or 0:.0f}s ago)")
    return journal.reads


class JournalReader:
    """A DEALER to a journal's reads port (a context of its own: one per Spark task).

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

    def records(self, start: int, end: int, prefix: bytes = b"") -> Iterator[Columns]:
        """The records at offsets ``start`` to ``end`` (excluded) whose key starts with ``prefix``, in order: the
        columns of :data:`client.spark._options.SCHEMA` (the time in microseconds since the epoch), a fetch's worth
        at a time."""
        offset = start
        while offset < end:
            meta, frames = self._fetch(control.Fetch(offset=offset, prefix=prefix, max_bytes=self.fetch_bytes))
            out = Columns()
            for i, first in enumerate(meta.offsets):
                key, header, body = frames[3 * i:3 * i + 3]
                h = batch.parse_header(header)
                if first >= end:
                    break
                skip = max(0, start - first)
                count = min(h.count, end - first) - skip
                if count <= 0:
                    continue
                payloads = batch.decode_body(body, h.count)
                out.keys += [key] * count
                out.payloads += payloads[skip:skip + count] if skip or count < h.count else payloads
                out.publishers += [h.publisher.hex()] * count
                seq, at = h.first_seq + skip, first + skip
                out.seqs += range(seq, seq + count)
                out.offsets += range(at, at + count)
                out.times += [h.timestamp_ns // 1000] * count
            if out.keys:
                yield out
            if (meta.offsets and meta.offsets[-1] >= end) or meta.next_offset <= offset or \
                    (not meta.count and meta.next_offset >= meta.end_offset):
                return  # past ``end``, or nothing further: the journal's end (or what it serves) is before it
            offset = meta.next_offset


class Columns:
    """Records as columns: keys, payloads, publishers (hex), seqs, offsets, times (microseconds since the epoch)."""

    __slots__ = ("keys", "payloads", "publishers", "seqs", "offsets", "times")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.payloads: list[bytes] = []
        self.publishers: list[str] = []
        self.seqs: list[int] = []
        self.offsets: list[int] = []
        self.times: list[int] = []
