"""An exchange told by its host manager that the queue's monitor moved: it reports there; garbage on its
command pipe and on its control link changes nothing."""

from __future__ import annotations

import os
import random
import time

import bson
import zmq

from roq.wire import control
from roq.process import spawn


class StandInMonitor:
    """A ROUTER in place of a queue's monitor that keeps everything the exchange sends it."""

    def __init__(self, ctx: zmq.Context) -> None:
        self.socket = ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"tcp://127.0.0.1:{self.socket.bind_to_random_port('tcp://127.0.0.1')}"
        self.got: list[control.Message] = []
        self.peer = b""

    def next(self, kind: type, timeout: float) -> control.Message | None:
        """The next message of ``kind`` to arrive within ``timeout`` (the others are kept too)."""
        deadline = time.monotonic() + timeout
        while self.socket.poll(max(1, int((deadline - time.monotonic()) * 1000))):
            self.peer, body = self.socket.recv_multipart()
            self.got.append(control.decode(body))
            if isinstance(self.got[-1], kind):
                return self.got[-1]
        return None

    def dropped(self) -> int:
        """The drops the exchange reported here."""
        return sum(m.dropped for m in self.got if isinstance(m, control.ExchangeKpi))


def pipe_garbage() -> list[bytes]:
    """What must not disturb an exchange on its command pipe: bytes, lies about lengths, wrong documents."""
    rng = random.Random(7)
    return [
        b"\xff\xfe not bson at all\n",
        b'{"monitor": "tcp://127.0.0.1:1"}\n',  # the old JSON line: no longer a command
        bytes(rng.randrange(256) for _ in range(3000)),
        (1 << 20).to_bytes(4, "little") + b"a length over the bound",
        (-5).to_bytes(4, "little", signed=True),
        bson.encode({"CMD": 4242}),
        bson.encode({"CMD": control.Retarget.CMD}),  # no monitor
        bson.encode({"CMD": control.Retarget.CMD, "monitor": 5}),
        bson.encode({"CMD": control.Retarget.CMD, "monitor": bson.Code("tcp://127.0.0.1:1")}),
        bson.encode({"CMD": control.Retarget.CMD, "monitor": "127.0.0.1:1"}),  # not an endpoint
        bson.encode({"CMD": control.Retarget.CMD, "monitor": "tcp://" + "9" * 5000}),
        control.encode(control.Shutdown("not on this input")),
        bson.encode({"x": {"y": {"z": [1] * 100}}}),
        b"\x05\x00\x00",  # the start of a frame that never ends: given up after a while
    ]


def link_garbage(new_monitor: str) -> list[list[bytes]]:
    """What must not disturb an exchange on its control link (7 messages, each dropped and counted)."""
    return [
        [os.urandom(64)],
        [b""],
        [b"a", b"b"],
        [control.encode(control.KpiPeriod(float("nan")))],
        [control.encode(control.KpiPeriod(-1.0))],
        [bson.encode({"CMD": control.Shutdown.CMD, "reason": ["not", "text"]})],
        [control.encode(control.Retarget(new_monitor))],  # the host manager's command, not the monitor's
    ]


def test_an_exchange_follows_its_monitor_when_told_and_ignores_garbage():
    ctx = zmq.Context()
    old, new = StandInMonitor(ctx), StandInMonitor(ctx)
    child = None
    try:
        child = spawn("exchange", "exchange", ["--monitor", old.endpoint, "--address", "127.0.0.1", "--id", "xt",
                                               "--heartbeat-interval", "0.1", "--kpi-period", "0.2",
                                               "--commands-on-stdin"], commands=True)
        pid = child.wait_ready(15).pid
        assert old.next(control.Heartbeat, 5).exchange == "xt"
        for frames in link_garbage(new.endpoint):
            old.socket.send_multipart([old.peer, *frames])
        stdin = child._popen.stdin
        for chunk in pipe_garbage():
            stdin.write(chunk)
            stdin.flush()
        # every piece of garbage is counted and reported, the partial frame once it is given up; waited for
        # before the move, as a report on its way to a monitor is lost when the exchange leaves it
        expected = len(link_garbage(new.endpoint)) + 8  # (the pipe's pieces in 8 runs of bytes skipped at least)
        deadline = time.monotonic() + 15  # KPIs every 0.2 s, from an exchange on a busy machine
        while old.dropped() < expected and time.monotonic() < deadline:
            old.next(control.ExchangeKpi, 0.5)
        assert old.dropped() >= expected
        assert child.send(control.Retarget(monitor=new.endpoint))  # after a partial frame, given up
        beat = new.next(control.Heartbeat, 10)
        assert beat is not None and beat.exchange == "xt" and beat.frontend.startswith("tcp://127.0.0.1:")
        assert beat.pid == pid
        # from now on it reports to the new monitor only
        old.next(control.Message, 0.5)
        while old.next(control.Message, 0.3):
            pass
        assert old.next(control.Heartbeat, 1.0) is None
        assert new.next(control.ExchangeKpi, 5) is not None  # it reports to the new monitor
        assert child.alive()
    finally:
        if child is not None:
            child.stop(5)
        for m in (old, new):
            m.socket.close()
        ctx.term()
