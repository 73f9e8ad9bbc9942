"""One queue's records across one link, one way (pure): what crosses, under which ids, and what is done.

A link reads the source queue's journal (entries in order, each the batch as its publisher sent it, with the
offset of its first record) and publishes what the far side wants into the same queue there. It relays each
batch **as it is**, but for two fields of its header:

* the publisher id becomes a *relayed id*: the link's own key's tag (the first :data:`TAG_BYTES` of an id,
  :mod:`roq.security.zap`), then a digest of the origin's id. The far cluster's exchanges accept it as they
  accept any id of the link's key, and the same origin always gets the same relayed id: across reconnects,
  restarts of the link and moves of its process;
* the epoch becomes the relay's: the far cluster's subscribers order each publisher across the relay's moves
  there as across any publisher's;
* the flags gain :data:`roq.wire.batch.FLAG_RELAYED`: only the records whose keys the far side wanted crossed,
  so the seqs of a relayed id are sparse (each key's chain is whole).

**Which way, on a tree's edge.** A link between a child and its parent carries records up (the child's queue
into the parent's) and down (the parent's into the child's), a relay each way. A relay *down* adds
:data:`roq.wire.batch.FLAG_DESCENDED`; a relay up lets no descended record cross (it came from above: never
back up), and a relay down lets no relayed record cross that did not descend (it came up from a child: never
down to another child, nor back to its own). So a record goes up from where it was published, and down from
each cluster it reached, never sideways.

**Records for a named cluster** (keys beginning with :data:`roq.wire.batch.ADDRESSED`, then the cluster's name:
:func:`roq.federation.address`) follow their address, not interest: a relay carries the addresses it was given
(:meth:`Relay.route`: up, every address but those of its own subtree, and never one that came down; down, those
of the child's subtree, whichever way they came), and on the last link of the way the key loses its address and the record gains
:data:`roq.wire.batch.FLAG_ADDRESSED`: it arrived, and no relay carries it further.

The seqs, each key's chain (``key_prev``), the timestamps and the payloads cross untouched. So the far side
removes duplicates as it removes a failed-over publisher's (its journal and its subscribers drop a seq they
have), and keeps each publisher's order: the source journal holds each publisher's records in order and the
relay sends them in that order on one connection.

**Done, and where to go on from.** An entry is done when it did not need to cross (its key is not wanted, or
it came from a cluster that may not have it back) or when the far side acknowledged its last seq under its
relayed id. :meth:`Relay.position` is the offset before which every entry is done: what the link commits
in the source journal, and where it goes on after a reconnect or a restart. Whatever was sent after it is
sent again, and the far side drops what it already had: every record crosses once, counted where it lands.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
from typing import Iterable

from roq.federation.interest import Prefixes
from roq.security.zap import TAG_BYTES
from roq.wire import batch

__all__ = ["TAG_BYTES", "MAX_IDS", "relay_id", "Entry", "Sent", "Relay"]

#: origins whose relayed id and last acknowledged seq are remembered with nothing on the way, at most
MAX_IDS = 65_536


def relay_id(tag: bytes, origin: bytes) -> bytes:
    """The id a link whose key's tag is ``tag`` relays ``origin``'s records under (16 bytes)."""
    if len(tag) != TAG_BYTES:
        raise ValueError(f"a key's tag is {TAG_BYTES} bytes, got {len(tag)}")
    return tag + hashlib.blake2b(origin, digest_size=16 - TAG_BYTES).digest()


@dataclasses.dataclass(frozen=True)
class Entry:
    """A batch read from the source journal: the offset of its first record, and its three frames."""

    offset: int
    key: bytes
    header: bytes
    body: bytes


@dataclasses.dataclass
class Sent:
    """An entry on its way: its relayed id, its last seq, its size, and whether it is done."""

    offset: int
    end: int  # the offset after its last record
    publisher: bytes
    last_seq: int
    size: int
    frames: list[bytes]
    done: bool = False


class Relay:
    """One queue, one way across one link: the entries taken from the source, those on their way, and the
    source position before which everything is done.

    ``tag``: the tag of the key the link publishes under on the far side; ``excluded``: the tags of the keys
    whose records do not cross (what the far side's own links put into the source queue: records that came
    from it, or from a sibling), ``epoch``: the first epoch (the shell's, greater than any earlier
    incarnation's); ``max_bytes``: what may be on its way before :attr:`full`; ``way``: "up" or "down" on a
    tree's edge (see the module's doc), "" outside a tree."""

    def __init__(self, tag: bytes, excluded: Iterable[bytes] = (), epoch: int = 0,
                 max_bytes: int = 16 << 20, grace: float = 0.25, way: str = "") -> None:
        if len(tag) != TAG_BYTES:
            raise ValueError(f"a key's tag is {TAG_BYTES} bytes, got {len(tag)}")
        if way not in ("", "up", "down"):
            raise ValueError(f"a relay goes up, down or (outside a tree) neither, not {way!r}")
        self.tag = tag
        self.way = way
        self._way_flag = batch.FLAG_DESCENDED if way == "down" else 0
        self.excluded = frozenset(excluded)
        self.epoch = epoch
        self.max_bytes = max_bytes
        self.grace = grace
        self._kept: collections.deque[tuple[float, Sent]] = collections.deque()  # acknowledged, within the grace
        self.wanted = Prefixes()  # what the far side wants of this queue
        self.addresses = Prefixes()  # the addresses it carries (records for named clusters that way)
        self._stays = Prefixes()  # addresses that stay (its own subtree's, on the way up)
        self._arrival = b""  # the far cluster's own address: a key beginning with it arrives there
        self._ids: dict[bytes, bytes] = {}  # origin -> relayed id
        self._order: collections.deque[Sent] = collections.deque()  # taken and not yet done, in offset order
        self._waiting: dict[bytes, collections.deque[Sent]] = {}  # relayed id -> its entries on their way
        self._position = -1  # before it, everything is done (-1: nothing taken yet)
        self._frontier = -1  # the offset after the last entry taken or passed
        self._acked: dict[bytes, int] = {}  # relayed id -> highest seq the far side acknowledged
        self._epoch_last: dict[bytes, int] = {}  # relayed id -> the last seq sent in this epoch
        self.in_flight_bytes = 0

    @property
    def full(self) -> bool:
        """Whether the link should read no more of the source until acknowledgements come."""
        return self.in_flight_bytes >= self.max_bytes

    def want(self, prefixes: Prefixes) -> bool:
        """From now on let cross the keys ``prefixes`` match (what is on its way goes on); True if that changed."""
        if prefixes == self.wanted:
            return False
        self.wanted = prefixes
        return True

    def route(self, addresses: Prefixes, kept: Prefixes = Prefixes(), arrival: bytes = b"") -> bool:
        """From now on carry the records for named clusters whose keys ``addresses`` match and ``kept`` does not;
        a key beginning with ``arrival`` (the far cluster's own address) loses it there; True if that changed."""
        if (addresses, kept, arrival) == (self.addresses, self._stays, self._arrival):
            return False
        self.addresses, self._stays, self._arrival = addresses, kept, arrival
        return True

    def start(self, position: int) -> None:
        """Go on from ``position`` (the one committed, or where the source begins)."""
        self._position = self._frontier = position

    def take(self, entry: Entry) -> list[bytes] | None:
        """The frames to send for ``entry`` (its key wanted, its origin not excluded), or None: it is done."""
        header = batch.parse_header(entry.header)
        end = entry.offset + max(header.count, 1)
        key = entry.key
        if batch.is_addressed(key):  # for a named cluster: its address decides (and one that came down goes on down)
            goes = (self.addresses.match(key) and not self._stays.match(key)
                    and not (self.way == "up" and header.flags & batch.FLAG_DESCENDED))
        else:
            goes = self.wanted.match(key) and self._goes_on(header.flags)
        if header.kind != batch.DATA or not goes or header.publisher[:TAG_BYTES] in self.excluded:
            self._passed(end)
            return None
        relayed = self._ids.get(header.publisher)
        if relayed is None:
            relayed = self._ids[header.publisher] = relay_id(self.tag, header.publisher)
            self._forget()
        arrived = 0
        if self._arrival and key.startswith(self._arrival):  # it arrives: delivered there, carried no further
            key, arrived = key[len(self._arrival):], batch.FLAG_ADDRESSED
        frames = [key, self._header(header, relayed, arrived=arrived), entry.body]
        if self._acked.get(relayed, 0) >= header.last_seq:  # acknowledged already (read again after a reconnect)
            self._passed(end)
            return None
        sent = Sent(entry.offset, end, relayed, header.last_seq, len(key) + len(entry.body), frames)
        self._frontier = max(self._frontier, end)
        self._order.append(sent)
        self._waiting.setdefault(relayed, collections.deque()).append(sent)
        self._epoch_last[relayed] = header.last_seq
        self.in_flight_bytes += sent.size
        return frames

    def _goes_on(self, flags: int) -> bool:
        """Whether a record of ``flags`` may cross this way: up, unless it came down; down, unless it came up;
        never, once it arrived where it was addressed."""
        if flags & batch.FLAG_ADDRESSED:
            return False
        if self.way == "up":
            return not flags & batch.FLAG_DESCENDED
        if self.way == "down":
            return not flags & batch.FLAG_RELAYED or bool(flags & batch.FLAG_DESCENDED)
        return True

    def passed(self, next_offset: int) -> None:
        """The source has nothing before ``next_offset`` that was not taken (a fetch skipped the rest)."""
        self._passed(next_offset)

    def acked(self, relayed: bytes, seq: int, now: float = 0.0) -> None:
        """The far side acknowledged every record of ``relayed`` up to ``seq`` (at ``now``: the entries stay
        ``grace`` seconds to be sent again after a fail-over)."""
        if seq <= self._acked.get(relayed, 0):
            return
        self._acked[relayed] = seq
        waiting = self._waiting.get(relayed)
        while waiting and waiting[0].last_seq <= seq:
            sent = waiting.popleft()
            sent.done = True
            self.in_flight_bytes -= sent.size
            if self.grace > 0:
                self._kept.append((now, sent))
        if waiting is not None and not waiting:
            del self._waiting[relayed]
        order = self._order
        while order and order[0].done:
            order.popleft()
        self._position = max(self._position, order[0].offset if order else self._frontier)

    def position(self) -> int:
        """The source offset before which every entry is done: where to go on from."""
        return self._position

    def trim(self, now: float) -> None:
        """Forget the entries acknowledged ``grace`` seconds ago or more."""
        kept = self._kept
        while kept and now - kept[0][0] >= self.grace:
            kept.popleft()

    def moved(self, failover: bool = True) -> list[list[bytes]]:
        """The relay now sends through another exchange: its epoch goes up, and what is on its way is sent
        again, in order (the far side drops what it had). After a ``failover`` (the exchange left is dead, or
        the link was cut) so are the entries acknowledged within the grace: the dead exchange may have had
        them on their way to subscribers when it died, after its journal acknowledged them."""
        self.epoch += 1
        self._epoch_last.clear()
        resend = [sent for sent in self._order if not sent.done]
        if failover and self._kept:
            resend = sorted([sent for _, sent in self._kept] + resend, key=lambda sent: sent.offset)
        again = []
        for sent in resend:
            self._epoch_last[sent.publisher] = max(self._epoch_last.get(sent.publisher, 0), sent.last_seq)
            header = batch.parse_header(sent.frames[1])
            sent.frames[1] = self._header(header, sent.publisher, flags=header.flags | batch.FLAG_RETRANSMIT)
            again.append(sent.frames)
        return again

    def markers(self) -> list[list[bytes]]:
        """The markers a planned move sends through the exchange it leaves: each relayed id's stream there ends
        after the last seq sent (they go before :meth:`moved`)."""
        return [[batch.CONTROL_TOPIC, batch.pack_header(batch.MARKER, relayed, seq + 1, 0, epoch=self.epoch,
                                                        flags=batch.FLAG_RELAYED | self._way_flag), b""]
                for relayed, seq in sorted(self._epoch_last.items())]

    def on_the_way(self) -> int:
        """Entries sent and not acknowledged."""
        return sum(1 for sent in self._order if not sent.done)

    def _forget(self) -> None:
        """Beyond :data:`MAX_IDS` origins, forget the oldest with nothing on the way (what was acknowledged
        of them is only a shortcut: the far side drops what it has)."""
        if len(self._ids) <= MAX_IDS:
            return
        for origin in list(self._ids)[:len(self._ids) - MAX_IDS]:
            relayed = self._ids[origin]
            if relayed not in self._waiting:
                del self._ids[origin]
                self._acked.pop(relayed, None)
                self._epoch_last.pop(relayed, None)

    def _passed(self, end: int) -> None:
        self._frontier = max(self._frontier, end)
        if not self._order:
            self._position = max(self._position, end)

    def _header(self, header: batch.Header, relayed: bytes, flags: int | None = None, arrived: int = 0) -> bytes:
        flags = ((header.flags & batch.FLAG_RETRANSMIT if flags is None else flags) | batch.FLAG_RELAYED | self._way_flag
                 | arrived)
        return batch.pack_header(batch.DATA, relayed, header.first_seq, header.count, epoch=self.epoch,
                                 key_prev=header.key_prev, timestamp_ns=header.timestamp_ns, flags=flags)
