"""An exchange told by its host manager that the queue's monitor moved: it reports there, garbage changes nothing."""

from __future__ import annotations

import zmq

from roq import control
from roq.process import spawn


def heartbeat_on(sock: zmq.Socket, timeout_ms: int) -> control.Heartbeat | None:
    """The first heartbeat that arrives on ``sock`` within ``timeout_ms``, skipping other reports."""
    while sock.poll(timeout_ms):
        _, body = sock.recv_multipart()
        msg = control.decode(body)
        if isinstance(msg, control.Heartbeat):
            return msg
    return None


def test_an_exchange_follows_its_monitor_when_told_and_ignores_garbage():
    ctx = zmq.Context()
    old, new = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER)
    child = None
    try:
        for s in (old, new):
            s.setsockopt(zmq.LINGER, 0)
        old_port = old.bind_to_random_port("tcp://127.0.0.1")
        new_port = new.bind_to_random_port("tcp://127.0.0.1")
        child = spawn("exchange", "exchange", ["--monitor", f"tcp://127.0.0.1:{old_port}", "--address", "127.0.0.1",
                                               "--id", "xt", "--commands-on-stdin"], commands=True)
        child.wait_ready(15)
        assert heartbeat_on(old, 5000).exchange == "xt"
        # garbage first: not JSON, JSON of the wrong shape, a bad endpoint; then one right command
        for line in (b"\xff\xfe not json", b"[1, 2]", b'{"monitor": 5}', b'{"monitor": "127.0.0.1:1"}'):
            child._popen.stdin.write(line + b"\n")
            child._popen.stdin.flush()
        assert child.tell(monitor=f"tcp://127.0.0.1:{new_port}")
        beat = heartbeat_on(new, 5000)
        assert beat is not None and beat.exchange == "xt" and beat.frontend.startswith("tcp://127.0.0.1:")
        # from now on it reports to the new monitor only
        while old.poll(300):
            old.recv_multipart()
        assert heartbeat_on(old, 1000) is None
        assert child.alive()
    finally:
        if child is not None:
            child.stop(5)
        for s in (old, new):
            s.close()
        ctx.term()
