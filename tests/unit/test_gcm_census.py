"""gcm's census: every running queue's monitor asked over a real DEALER (loopback) each round, its answer decoded
into a snapshot; a monitor that answers garbage or a malformed status leaves its queue's last status in place, and
the others' rounds, the metrics and the feed go on."""

from __future__ import annotations

import time

import pytest
import zmq

from gcm._census import Census
from gcm._feed import LiveFeed
from gcm._labels import Labels
from gcm._metrics import Exposition
from gcm._view import QueueView, View
from roq.wire.control import Reply, Status, decode, encode
from roq.wire.documents import RUNNING, MonitorDoc, QueueDoc
from roq.wire.shape import to_document
from tests.unit.standins import queue_status


@pytest.fixture
def ctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def _monitor(ctx: zmq.Context) -> tuple[zmq.Socket, str]:
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    return sock, f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}"


def _answer(monitor: zmq.Socket, frame: bytes) -> bytes:
    """The monitor answers ``frame``; the routing id of the connection it was asked on."""
    assert monitor.poll(5000), "the monitor was not asked"
    identity, body = monitor.recv_multipart()
    assert isinstance(decode(body), Status)
    monitor.send_multipart([identity, frame])
    return identity


def _round(census: Census, view: View, answers: dict[zmq.Socket, bytes], now: float) -> dict[zmq.Socket, bytes]:
    """One census round: every monitor asked, each answering its frame, every answer read; the connections each
    monitor was asked on."""
    rounds = []
    census.follow(lambda snapshot: None, lambda: rounds.append(1))
    census.round(view, now)
    asked_on = {monitor: _answer(monitor, frame) for monitor, frame in answers.items()}
    poller = zmq.Poller()
    for sock in census.sockets():
        poller.register(sock, zmq.POLLIN)
    end = time.monotonic() + 5
    while census.sockets() and time.monotonic() < end:
        for sock, _ in poller.poll(100):
            census.readable(sock)
    assert rounds == [1], "the round did not close"
    return asked_on


def _view(**monitors: str) -> View:
    """Running queues, each named as its monitor's endpoint is given."""
    return View(queues={name: QueueView(name, QueueDoc(state=RUNNING), monitor=MonitorDoc(endpoint=at, host="h"))
                        for name, at in monitors.items()})


def _status(rate: float) -> bytes:
    return encode(Reply(data=to_document(queue_status(exchanges=[{"id": "x1", "records_per_s": rate}]))))


def test_a_monitor_answering_garbage_keeps_its_last_status_and_the_others_are_served(ctx):
    (good, good_at), (bad, bad_at) = _monitor(ctx), _monitor(ctx)
    view = _view(good=good_at, bad=bad_at)
    census = Census(ctx, period=1.0)
    try:
        _round(census, view, {good: _status(10.0), bad: _status(20.0)}, 1.0)
        first = census.snapshots["bad"]
        assert census.snapshots["good"].status.exchanges[0].records_per_s == 10.0
        broken = to_document(queue_status())
        del broken["exchanges"]
        _round(census, view, {good: _status(30.0), bad: encode(Reply(data=broken))}, 2.0)
        assert census.snapshots["good"].status.exchanges[0].records_per_s == 30.0
        assert census.snapshots["bad"] is first  # its last status, with its age
        _round(census, view, {good: _status(40.0), bad: b"\xff garbage"}, 3.0)
        assert census.snapshots["good"].status.exchanges[0].records_per_s == 40.0
        assert census.snapshots["bad"] is first and census.asks.unreadable == 2
        metrics = Exposition(top=5, labels=Labels()).text(view, census.snapshots, gcm="g", leading=True,
                                                          now=time.time()).decode()
        assert 'roq_exchange_records_in_per_second{queue="good",exchange="x1"} 40.0' in metrics
        assert 'roq_exchange_records_in_per_second{queue="bad",exchange="x1"} 20.0' in metrics
        shell = type("Shell", (), {"id": "g", "view": view, "census": census})()
        state = LiveFeed(shell, labels=Labels()).state()
        assert {q["name"]: q["records_in_per_s"] for q in state["queues"]} == {"bad": 20.0, "good": 40.0}
    finally:
        census.close()
        good.close()
        bad.close()


def test_a_monitor_is_asked_round_after_round_on_one_connection_until_it_answers_wrong_or_its_queue_goes(ctx):
    (good, good_at), (bad, bad_at) = _monitor(ctx), _monitor(ctx)
    view = _view(good=good_at, bad=bad_at)
    census = Census(ctx, period=1.0)
    try:
        first = _round(census, view, {good: _status(10.0), bad: _status(20.0)}, 1.0)
        second = _round(census, view, {good: _status(11.0), bad: b"\xff garbage"}, 2.0)
        assert second == first  # the same connections: no handshake per round
        third = _round(census, view, {good: _status(12.0), bad: _status(21.0)}, 3.0)
        assert third[good] == first[good] and third[bad] != first[bad]  # one that answered garbage: a new one
        assert census.snapshots["bad"].status.exchanges[0].records_per_s == 21.0
        assert _round(census, _view(bad=bad_at), {bad: _status(22.0)}, 4.0)[bad] == third[bad]
        assert census.asks._kept.keys() == {bad_at}  # the queue that went: its connection closed
    finally:
        census.close()
        good.close()
        bad.close()
