"""monitor demand: what a queue wants, told to the links that carry records into it (the core on a simulated clock)."""

from __future__ import annotations

from monitor._demand import LINK_TIMEOUT, MAX_WANTS, RETELL_S
from monitor.testing import Driver
from roq.wire import control
from roq.wire.control import Interest, QueueInterest
from roq.errors import Result


def wants(*prefixes: bytes, side: str, whole: bool = True) -> Interest:
    return Interest(queues=[QueueInterest("", add=list(prefixes))], whole=whole, side=side)


def told(d: Driver, link: bytes) -> list[list[bytes]]:
    return [m.queues[0].add for m in d.to(link, Interest)]


def test_a_link_is_told_what_the_subscribers_want_once_and_on_every_change():
    d = Driver()
    d.send(wants(side="store-1"), b"in")  # a link carrying store-1's records into the queue: wants none of them
    assert told(d, b"in") == [[]]  # nobody wants anything yet
    d.send(control.SubscriberHello("s1", b"eu.", []), b"s1")
    d.send(control.SubscriberHello("s2", b"eu.fr", []), b"s2")  # covered by eu.: nothing new to tell
    d.send(control.SubscriberHello("s1", b"eu.", []), b"s1")  # a hello again: nothing
    d.send(wants(side="store-1"), b"in")  # the link's own hello again: nothing
    assert told(d, b"in") == [[], [b"eu."]]
    d.send(control.SubscriberBye("s1"), b"s1")
    assert told(d, b"in")[-1] == [b"eu.fr"]  # the last one on eu. left: the narrower one is what is left
    d.send(control.SubscriberBye("s2"), b"s2")
    assert told(d, b"in")[-1] == [] and d.core.demand.adverts == 3
    status = d.status()  # in the status: the link, and what it was told
    assert status.count("interest_adverts") == 3
    assert [(x.side, x.wants, x.told) for x in status.links or []] == [("store-1", [], [])]


def test_what_a_side_wants_is_told_to_every_other_side_never_back_to_its_own():
    d = Driver()
    d.send(wants(side="store-1"), b"in-1")  # store-1's records come in here...
    d.send(wants(side="store-2"), b"in-2")
    d.send(wants(b"orders.", side="store-1"), b"down-1")  # ...and a link reading this queue carries to store-1
    assert told(d, b"in-2")[-1] == [b"orders."]  # store-2's link carries orders. in, for store-1
    assert told(d, b"in-1")[-1] == []  # never store-1's own wants back to store-1
    for _ in range(int(LINK_TIMEOUT / 0.5) + 2):  # the reader goes silent, the others say hello twice a second
        d.run(0.5)
        d.send(wants(side="store-1"), b"in-1")
        d.send(wants(side="store-2"), b"in-2")
    # forgotten, and its wants with it
    assert told(d, b"in-2")[-1] == []


def test_a_link_is_told_again_after_a_while_and_bad_wants_are_refused():
    d = Driver()
    d.send(wants(side="a"), b"in")
    d.now += RETELL_S
    d.send(wants(side="a"), b"in")
    assert told(d, b"in") == [[], []]  # in case the first was lost
    reply = d.send(wants(*[b"k%d" % i for i in range(MAX_WANTS + 1)], side="a"), b"in")
    assert reply is not None and reply.result != Result.OK
    reply = d.send(Interest(queues=[QueueInterest("another", add=[b"x"])], side="a"), b"in")
    assert reply is not None and "serves queue" in reply.comment


def edge(*prefixes: bytes, side: str, way: str, reads: bool) -> Interest:
    return Interest(queues=[QueueInterest("", add=list(prefixes))], whole=True, side=side, way=way, reads=reads)


def test_on_a_trees_edges_interest_from_below_goes_up_and_from_above_goes_down_never_sideways():
    d = Driver()  # a branch's queue: a link up to its parent (side "branch"), links to two leaves
    d.send(edge(side="branch", way="down", reads=False), b"from-parent")  # the parent's records come down here
    d.send(edge(side="branch", way="up", reads=True), b"to-parent")  # this queue's records go up
    for leaf in ("leaf-1", "leaf-2"):
        d.send(edge(side=leaf, way="up", reads=False), f"from-{leaf}".encode())  # a leaf's records come up
        d.send(edge(side=leaf, way="down", reads=True), f"to-{leaf}".encode())  # this queue's go down to it
    assert told(d, b"to-parent") == told(d, b"to-leaf-1") == []  # links that read the queue are never told
    adverts = d.core.demand.adverts
    # a subscriber at leaf-1 wants a.: its link down wants it of this queue; only the link from the parent hears
    d.send(edge(b"a.", side="leaf-1", way="down", reads=True), b"to-leaf-1")
    assert told(d, b"from-parent")[-1] == [b"a."]
    assert told(d, b"from-leaf-1")[-1] == told(d, b"from-leaf-2")[-1] == []  # never sideways to leaf-2
    assert d.core.demand.adverts == adverts + 1
    # the parent wants b.: the link up wants it of this queue; both leaves' links up hear it, not the parent's
    d.send(edge(b"b.", side="branch", way="up", reads=True), b"to-parent")
    assert told(d, b"from-leaf-1")[-1] == told(d, b"from-leaf-2")[-1] == [b"b."]
    assert told(d, b"from-parent")[-1] == [b"a."]
    assert d.core.demand.adverts == adverts + 3
    # a subscriber here wants c.: every link that carries records in hears it
    d.send(control.SubscriberHello("s1", b"c.", []), b"s1")
    assert told(d, b"from-parent")[-1] == [b"a.", b"c."]
    assert told(d, b"from-leaf-2")[-1] == [b"b.", b"c."]
    assert [(x.side, x.way, x.reads) for x in d.status().links or []][:2] == [("branch", "down", False),
                                                                              ("branch", "up", True)]
    reply = d.send(edge(side="branch", way="across", reads=False), b"bad")
    assert reply is not None and reply.result == Result.BAD_REQUEST and "up, down" in reply.comment
