"""One queue across one link: what crosses, under which ids, and that a flapping link, a restarted link and a
moved relay lose nothing and double nothing where the records land.

The far side here is a model of what a relayed batch meets there: the queue's journal keeps each publisher's
highest seq, writes a batch beyond it and drops one at or below it (a relayed id's seqs are sparse, so a jump
is no gap), and acknowledges each publisher's highest seq."""

from __future__ import annotations

import collections
import random

import pytest

from roq.federation import Prefixes
from roq.federation import Entry, Relay, relay_id
from roq.federation.relay import MAX_IDS, TAG_BYTES
from roq.wire import batch

LINK = b"L" * TAG_BYTES  # the tag of the key the link publishes under on the far side
SIBLING = b"S" * TAG_BYTES  # the far side's other link: what it put into the source never goes back


def entry(offset: int, publisher: bytes, seq: int, key: bytes, count: int = 1, key_prev: int = 0) -> Entry:
    header = batch.pack_header(batch.DATA, publisher, seq, count, epoch=3, key_prev=key_prev, timestamp_ns=77)
    body = batch.encode_body([b"%d" % (seq + i) for i in range(count)])
    return Entry(offset, key, header, body)


def test_a_relayed_id_carries_the_links_tag_and_is_the_same_for_the_same_origin():
    a, b = b"a" * 16, b"b" * 16
    assert relay_id(LINK, a) == relay_id(LINK, a) != relay_id(LINK, b)
    assert relay_id(LINK, a)[:TAG_BYTES] == LINK and len(relay_id(LINK, a)) == 16
    assert relay_id(SIBLING, a) != relay_id(LINK, a)
    with pytest.raises(ValueError):
        relay_id(b"short", a)


def test_a_batch_crosses_as_it_is_but_for_its_id_epoch_and_flags():
    relay = Relay(LINK, excluded=[SIBLING], epoch=40)
    relay.wanted = Prefixes.of([b"eu."])
    origin = b"o" * 16
    source = entry(10, origin, 5, b"eu.fr", count=3, key_prev=2)
    frames = relay.take(source)
    assert frames is not None
    key, header, body = frames
    h = batch.parse_header(header)
    assert (key, body) == (b"eu.fr", source.body)
    assert h.publisher == relay_id(LINK, origin) and h.epoch == 40
    assert (h.first_seq, h.count, h.key_prev, h.timestamp_ns) == (5, 3, 2, 77)
    assert h.flags & batch.FLAG_RELAYED
    assert relay.take(entry(13, origin, 8, b"us.ny")) is None  # not wanted: does not cross
    assert relay.take(entry(14, SIBLING + b"x" * 8, 1, b"eu.de")) is None  # came from the far side's own link
    assert relay.want(Prefixes.of([b"us."])) and not relay.want(Prefixes.of([b"us."]))  # (told again: no change)
    assert relay.take(entry(15, origin, 9, b"us.ny")) is not None  # wanted now
    assert relay.take(entry(16, origin, 10, b"eu.fr")) is None  # and no longer


def test_the_position_passes_only_what_is_done():
    relay = Relay(LINK)
    relay.wanted = Prefixes.of([b"a"])
    relay.start(100)
    p, q = b"p" * 16, b"q" * 16
    relay.take(entry(100, p, 1, b"a1", count=2))  # 100-101
    relay.take(entry(102, q, 1, b"b1"))  # not wanted: done at once, but behind 100
    relay.take(entry(103, q, 2, b"a2"))  # 103
    relay.passed(110)  # the fetch skipped up to 110
    assert relay.position() == 100
    relay.acked(relay_id(LINK, q), 2)
    assert relay.position() == 100  # p's entry still on its way
    relay.acked(relay_id(LINK, p), 1)  # part of it only
    assert relay.position() == 100
    relay.acked(relay_id(LINK, p), 2)
    assert relay.position() == 110 and relay.on_the_way() == 0 and relay.in_flight_bytes == 0


def test_a_move_resends_what_is_on_its_way_under_a_new_epoch_after_markers_for_the_exchange_left():
    relay = Relay(LINK, epoch=7)
    relay.wanted = Prefixes.of([b""])
    p = b"p" * 16
    relay.take(entry(0, p, 1, b"k"))
    relay.take(entry(1, p, 2, b"k"))
    relay.acked(relay_id(LINK, p), 1)
    markers = relay.markers()
    assert [batch.parse_header(m[1])[1:] [:6] for m in markers] == [
        (batch.MARKER, batch.FLAG_RELAYED, 0, relay_id(LINK, p), 7, 3)]
    again = relay.moved(failover=False)
    assert len(again) == 1 and relay.epoch == 8
    h = batch.parse_header(again[0][1])
    assert (h.first_seq, h.epoch) == (2, 8) and h.flags & batch.FLAG_RETRANSMIT and h.flags & batch.FLAG_RELAYED


def test_a_fail_over_also_resends_what_was_acknowledged_within_the_grace():
    """The dead exchange may have had those on their way to subscribers after its journal acknowledged them."""
    relay = Relay(LINK, grace=0.25)
    relay.wanted = Prefixes.of([b""])
    p = b"p" * 16
    for seq in (1, 2, 3):
        relay.take(entry(seq - 1, p, seq, b"k"))
    relay.acked(relay_id(LINK, p), 1, now=10.0)
    relay.acked(relay_id(LINK, p), 2, now=10.2)
    relay.trim(10.3)  # seq 1 was acknowledged 0.3 s ago: past the grace
    again = relay.moved()
    assert [batch.parse_header(f[1]).first_seq for f in again] == [2, 3]  # in order
    assert relay.position() == 2  # what the grace keeps is done all the same
    relay.trim(11.0)
    assert [batch.parse_header(f[1]).first_seq for f in relay.moved()] == [3]


def test_what_may_be_on_its_way_is_bounded_in_bytes():
    relay = Relay(LINK, max_bytes=1000)
    relay.wanted = Prefixes.of([b""])
    p = b"p" * 16
    seq = 1
    while not relay.full:
        assert relay.take(entry(seq, p, seq, b"k" * 100)) is not None
        seq += 1
    assert seq < 12
    relay.acked(relay_id(LINK, p), seq - 1)
    assert not relay.full


def test_origins_remembered_are_bounded():
    relay = Relay(LINK)
    relay.wanted = Prefixes.of([b""])
    for i in range(MAX_IDS + 50):
        origin = i.to_bytes(16, "big")
        relay.take(entry(i, origin, 1, b"k"))
        relay.acked(relay_id(LINK, origin), 1)
    assert len(relay._ids) <= MAX_IDS + 1


class FarSide:
    """What relayed batches meet on the far side: each publisher's highest seq written, the records written."""

    def __init__(self) -> None:
        self.high: dict[bytes, int] = {}
        self.written: list[tuple[bytes, int]] = []  # (relayed id, seq), in the order written
        self.duplicates = 0

    def receive(self, frames: list[bytes]) -> tuple[bytes, int]:
        h = batch.parse_header(frames[1])
        assert h.flags & batch.FLAG_RELAYED
        high = self.high.get(h.publisher, 0)
        if h.first_seq > high:
            self.written.extend((h.publisher, h.first_seq + i) for i in range(h.count))
            self.high[h.publisher] = h.last_seq
        else:
            assert h.last_seq <= high  # resent whole, never cut differently
            self.duplicates += 1
        return h.publisher, self.high[h.publisher]


@pytest.mark.parametrize("seed", range(12))
def test_a_flapping_link_a_restarted_link_and_moves_lose_nothing_and_double_nothing(seed):
    rng = random.Random(seed)
    origins = [bytes([65 + i]) * 16 for i in range(5)]
    keys = [b"eu.fr", b"eu.de", b"us.ny", b"asia.jp"]
    wanted = Prefixes.of([b"eu.", b"asia."])
    # the source journal: batches of five publishers (and some of the far side's own link), in order
    source: list[Entry] = []
    seqs = collections.Counter()
    offset = 0
    for _ in range(600):
        who = rng.choice(origins + [SIBLING + b"z" * 8])
        count = rng.randint(1, 4)
        source.append(entry(offset, who, seqs[who] + 1, rng.choice(keys), count=count))
        seqs[who] += count
        offset += count
    expected_at = [(e.offset, (relay_id(LINK, batch.parse_header(e.header).publisher),
                                batch.parse_header(e.header).first_seq + i))
                   for e in source for i in range(batch.parse_header(e.header).count)
                   if wanted.match(e.key) and batch.parse_header(e.header).publisher[:TAG_BYTES] != SIBLING]
    expected = [(relay_id(LINK, batch.parse_header(e.header).publisher), batch.parse_header(e.header).first_seq + i)
                for e in source for i in range(batch.parse_header(e.header).count)
                if wanted.match(e.key) and batch.parse_header(e.header).publisher[:TAG_BYTES] != SIBLING]

    far = FarSide()
    committed = 0  # the source position the link committed (in the source journal, durable)
    epoch_base = 0

    def new_relay() -> Relay:
        nonlocal epoch_base
        epoch_base += 100  # each incarnation's epochs are past every earlier one's
        r = Relay(LINK, excluded=[SIBLING], epoch=epoch_base, max_bytes=rng.choice([300, 2000, 1 << 20]))
        r.wanted = wanted
        r.start(committed)
        return r

    relay = new_relay()
    read_at = committed
    wire: collections.deque[list[bytes]] = collections.deque()  # to the far side, in order
    acks: collections.deque[tuple[bytes, int]] = collections.deque()  # back
    flaps = restarts = moves = 0
    for step in range(4000):
        faults = step < 3000
        roll = rng.random()
        if faults and roll < 0.01:  # the link flaps: what was on the wire either way is lost; once it is
            wire.clear()            # back, what is on its way goes again (a new path: a new epoch)
            acks.clear()
            flaps += 1
            wire.extend(relay.moved())
        elif faults and roll < 0.015:  # the link's process is killed: all it knew is gone but the commit
            wire.clear()
            acks.clear()
            restarts += 1
            relay = new_relay()
            read_at = committed
        elif faults and roll < 0.02:  # the relay moves to another exchange of the far side
            moves += 1
            if rng.random() < 0.5:  # the exchange it leaves forwards what it had first
                while wire:
                    acks.append(far.receive(wire.popleft()))
            else:  # or dies with it
                wire.clear()
            wire.extend(relay.moved())
        elif roll < 0.5 and not relay.full:  # read a few entries of the source
            i = next((j for j, e in enumerate(source) if e.offset >= read_at), len(source))
            for e in source[i:i + rng.randint(1, 5)]:
                frames = relay.take(e)
                if frames is not None:
                    wire.append(frames)
                read_at = e.offset + batch.parse_header(e.header).count
            relay.passed(read_at)
        elif roll < 0.8 and wire:  # the far side takes what arrived
            for _ in range(rng.randint(1, 4)):
                if wire:
                    acks.append(far.receive(wire.popleft()))
        elif acks:  # acknowledgements come back
            while acks:
                relay.acked(*acks.popleft())
        if rng.random() < 0.05:  # the link commits where it is: everything before it is on the far side
            position = relay.position()
            written = set(far.written)
            assert all(r in written for at, r in expected_at if at < position), step
            committed = max(committed, position)
    # then quiet until everything is across
    for _ in range(100_000):
        if read_at >= offset and not wire and not acks and relay.on_the_way() == 0:
            break
        if not relay.full and read_at < offset:
            i = next(j for j, e in enumerate(source) if e.offset >= read_at)
            for e in source[i:i + 8]:
                frames = relay.take(e)
                if frames is not None:
                    wire.append(frames)
                read_at = e.offset + batch.parse_header(e.header).count
        while wire:
            acks.append(far.receive(wire.popleft()))
        while acks:
            relay.acked(*acks.popleft())
    assert flaps and restarts and moves
    assert far.written == expected  # every record once, each publisher in order: as the source had them
    assert relay.position() == offset


def test_on_a_trees_edge_what_came_down_never_goes_back_up_and_what_came_up_never_goes_down_again():
    local = entry(1, b"p" * 16, 1, b"k")  # published in the source's own cluster
    came_up = Entry(2, b"k", batch.pack_header(batch.DATA, b"c" * 16, 1, 1, flags=batch.FLAG_RELAYED),
                    batch.encode_body([b"x"]))  # relayed up from one of its children
    came_down = Entry(3, b"k", batch.pack_header(batch.DATA, b"d" * 16, 1, 1,
                                                 flags=batch.FLAG_RELAYED | batch.FLAG_DESCENDED),
                      batch.encode_body([b"x"]))  # relayed down from its parent
    up, down, flat = Relay(LINK, way="up"), Relay(LINK, way="down"), Relay(LINK)
    for relay in (up, down, flat):
        relay.wanted = Prefixes.of([b""])
    crossed = {name: [e.offset for e in (local, came_up, came_down) if relay.take(e) is not None]
               for name, relay in (("up", up), ("down", down), ("flat", flat))}
    assert crossed == {"up": [1, 2], "down": [1, 3], "flat": [1, 2, 3]}
    # what goes down says so, so that it never comes back up and goes on down at the next cluster
    frames = Relay(LINK, way="down", epoch=1)
    frames.wanted = Prefixes.of([b""])
    sent = frames.take(local)
    assert sent is not None and batch.parse_header(sent[1]).flags & batch.FLAG_DESCENDED
    assert all(batch.parse_header(m[1]).flags & batch.FLAG_DESCENDED for m in frames.markers())
    again = Relay(LINK, way="up")
    again.wanted = Prefixes.of([b""])
    assert again.take(Entry(9, sent[0], sent[1], sent[2])) is None
    assert Relay(LINK, way="down").way == "down"
    with pytest.raises(ValueError):
        Relay(LINK, way="sideways")


def test_records_for_a_named_cluster_follow_their_address_and_lose_it_where_they_arrive():
    from roq.federation import address
    origin = b"o" * 16
    # a branch's link: up into the root, down from it; its subtree is the branch and its two stores
    subtree = Prefixes.of(address(n) for n in ("eu", "store-1", "store-2"))
    up, down = Relay(LINK, way="up"), Relay(LINK, way="down")
    assert up.route(Prefixes.of([batch.ADDRESSED]), subtree, address("hq"))
    assert not up.route(Prefixes.of([batch.ADDRESSED]), subtree, address("hq"))  # (the same again: no change)
    down.route(subtree, arrival=address("eu"))
    # nothing wanted by interest: addresses alone decide
    assert up.take(entry(0, origin, 1, address("store-9") + b"k")) is not None  # for another subtree: up
    assert up.take(entry(1, origin, 2, address("store-1") + b"k")) is None  # for its own: it stays
    frames = up.take(entry(2, origin, 3, address("hq") + b"k"))  # for the root: it arrives there
    assert frames is not None and frames[0] == b"k"
    assert batch.parse_header(frames[1]).flags & batch.FLAG_ADDRESSED
    came_down = batch.FLAG_RELAYED | batch.FLAG_DESCENDED
    h = batch.pack_header(batch.DATA, origin, 4, 1, flags=came_down)
    assert up.take(Entry(3, address("store-9") + b"k", h, batch.encode_body([b"x"]))) is None  # never back up
    # down: those for its subtree, whichever way they came (a store's record for its sibling came up)
    came_up = batch.pack_header(batch.DATA, origin, 5, 1, flags=batch.FLAG_RELAYED)
    assert down.take(Entry(4, address("store-2") + b"k", came_up, batch.encode_body([b"x"]))) is not None
    assert down.take(entry(5, origin, 6, address("store-9") + b"k")) is None  # not below
    frames = down.take(entry(6, origin, 7, address("eu") + b"k"))
    assert frames is not None and frames[0] == b"k"  # it arrives at the branch
    # arrived: no relay carries it further, whatever is wanted
    arrived = batch.pack_header(batch.DATA, origin, 8, 1, flags=batch.FLAG_RELAYED | batch.FLAG_ADDRESSED)
    for relay in (up, down, Relay(LINK)):
        relay.want(Prefixes.of([b""]))
        assert relay.take(Entry(7, b"k", arrived, batch.encode_body([b"x"]))) is None
