"""exchange control: the monitor link and the command pipe run every input through a Dispatcher; garbage is
counted and dropped, never answered (real pipe and loopback sockets)."""

from __future__ import annotations

import logging
import os

import bson
import pytest
import zmq

from exchange._control import CommandPipe, MonitorLink
from roq.wire import control, pipe
from roq.runtime import DropCounter
from roq.server import Dispatcher
from tests.unit.standins import monitor_routers

log = logging.getLogger("test")


class Orders:
    """A dispatcher whose handlers note what they got."""

    def __init__(self, *types: type) -> None:
        self.got: list[control.Message] = []
        self.drops = DropCounter(log, "test")
        self.dispatcher = Dispatcher("test", {t: self.note for t in types}, self.drops)

    def note(self, msg: control.Message, _request) -> None:
        self.got.append(msg)


@pytest.fixture
def command_pipe():
    r, w = os.pipe()
    orders = Orders(control.Retarget)
    yield CommandPipe(r, orders.dispatcher, orders.drops), w, orders
    os.close(r)
    try:
        os.close(w)
    except OSError:
        pass


def test_commands_arrive_through_garbage_and_each_bad_one_is_counted(command_pipe):
    commands, w, orders = command_pipe
    right = control.Retarget(monitor="tcp://127.0.0.1:5501")
    os.write(w, b"\xff\xfe garbage\n")
    os.write(w, bson.encode({"CMD": control.Retarget.CMD, "monitor": bson.Code("x")}))
    os.write(w, control.encode(control.Shutdown("not taken here")))
    assert pipe.send(w, right)
    commands.readable(0.0)
    assert orders.got == [right]
    assert orders.drops.by_reason == {"garbage on the command pipe": 1, "malformed message": 1,
                                      "command not served here": 1}


def test_the_end_of_the_stream_is_only_noted(command_pipe):
    commands, w, orders = command_pipe
    os.close(w)
    commands.readable(0.0)
    assert commands.closed and orders.got == [] and orders.drops.total == 0


def test_a_partial_frame_is_given_up_on_the_timer(command_pipe):
    commands, w, orders = command_pipe
    os.write(w, (1000).to_bytes(4, "little") + b"never ends")
    commands.readable(0.0)
    commands.expire(0.5)
    assert orders.drops.total == 0
    commands.expire(5.0)
    right = control.Retarget(monitor="tcp://127.0.0.1:5501")
    assert pipe.send(w, right)
    commands.readable(5.1)
    assert orders.got == [right] and orders.drops.by_reason == {"garbage on the command pipe": 1}


@pytest.fixture
def monitors():
    ctx = zmq.Context()
    (old, old_end), (new, new_end) = monitor_routers(ctx)
    orders = Orders(control.Shutdown, control.KpiPeriod)
    link = MonitorLink(ctx, old_end, orders.dispatcher)
    link.socket.setsockopt(zmq.LINGER, 0)
    link.connect()
    yield link, (old, old_end), (new, new_end), orders
    link.close()
    for s in (old, new):
        s.close()
    ctx.term()


def test_the_link_follows_the_monitor_and_takes_its_orders_but_nothing_else(monitors):
    link, (old, old_end), (new, new_end), orders = monitors
    link.send(control.ExchangeBye(exchange="x1"))
    assert old.poll(2000)
    ident, body = old.recv_multipart()
    assert control.decode(body) == control.ExchangeBye(exchange="x1")
    for frames in ([os.urandom(30)], [b"a", b"b"], [control.encode(control.Retarget("tcp://127.0.0.1:9"))],
                   [control.encode(control.KpiPeriod(2.0))]):
        old.send_multipart([ident, *frames])
    for _ in range(50):
        if link.socket.poll(100):
            link.readable()
        if orders.got:
            break
    assert orders.got == [control.KpiPeriod(2.0)]
    assert orders.drops.by_reason == {"malformed message": 1, "bad control message": 1, "command not served here": 1}
    assert not old.poll(200)  # nothing answered

    assert link.retarget(new_end) and not link.retarget(new_end)
    link.send(control.ExchangeBye(exchange="x1"))
    assert new.poll(2000) and control.decode(new.recv_multipart()[1]) == control.ExchangeBye(exchange="x1")
    assert link.endpoint == new_end


def test_a_refused_endpoint_changes_nothing(monitors):
    link, (old, old_end), _, _ = monitors
    with pytest.raises(zmq.ZMQError):
        link.retarget("tcp://a b:1")
    assert link.endpoint == old_end
