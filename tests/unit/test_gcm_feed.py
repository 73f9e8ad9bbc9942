"""The live feed's sending: a feed whose stream fails is dropped, and the others still get every state."""

from __future__ import annotations

from gcm._feed import LiveFeed
from gcm._labels import Labels
from gcm._view import QueueView, View
from roq.wire.documents import RUNNING, QueueDoc
from roq.http import EventStream


class Shell:
    id = "gcm1"
    view = View(queues={"q": QueueView("q", QueueDoc(state=RUNNING, host="127.0.0.11"))})
    census = type("Census", (), {"snapshots": {}})()


class Broken(EventStream):
    """A stream whose connection broke in a way its server did not catch."""

    def send(self, data, event="", id=""):
        raise RuntimeError("the connection broke")


def test_a_stream_that_raises_is_dropped_and_every_other_feed_gets_its_state_each_round():
    feed = LiveFeed(Shell(), clock=lambda: 1000.0, labels=Labels())
    first = feed.open()
    broken = Broken()
    feed.streams.insert(0, broken)  # as if it had opened before the others
    second = feed.open()
    for _ in range(3):
        feed.tick()  # a census round
    assert broken.closed and feed.streams == [first, second]
    for stream in (first, second):
        assert sum(chunk.startswith(b"event: state") for chunk in stream.take()) == 4  # on opening, then each round
