"""roq.sockets: endpoints given by users, poll timeouts."""

from __future__ import annotations

import pytest
import zmq

from roq.errors import ConfigError
from roq.sockets import check_endpoint, poll_ms, send_frames


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:5500", "tcp://h:1", "tcp://[::1]:65535"])
def test_endpoints_of_the_form_tcp_host_port_are_returned(endpoint):
    assert check_endpoint(endpoint) == endpoint


@pytest.mark.parametrize("endpoint", ["", "127.0.0.1:5500", "tcp://h", "tcp://:1", "tcp://h:0", "tcp://h:65536",
                                      "tcp://h:x", "udp://h:1", None, 5500, "tcp://h:" + "9" * 5000])
def test_anything_else_is_a_config_error(endpoint):
    with pytest.raises(ConfigError):
        check_endpoint(endpoint)


def test_poll_timeouts_round_up_to_whole_milliseconds():
    assert (poll_ms(None), poll_ms(0), poll_ms(0.0004), poll_ms(1.0), poll_ms(-1)) == (-1, 0, 1, 1000, 0)


def test_frames_go_as_one_message_or_not_at_all():
    ctx = zmq.Context()
    try:
        router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        dealer.setsockopt(zmq.SNDHWM, 2)
        dealer.setsockopt(zmq.IDENTITY, b"d")
        router.bind("inproc://frames")
        dealer.connect("inproc://frames")
        send_frames(dealer, (b"k", b"h", b"b"), zmq.NOBLOCK)
        assert router.poll(1000) and router.recv_multipart() == [b"d", b"k", b"h", b"b"]
        send_frames(router, [b"d", b"one"])  # a lone frame after the peer's id
        assert dealer.poll(1000) and dealer.recv_multipart() == [b"one"]
        with pytest.raises(zmq.ZMQError) as unknown:  # ROUTER_MANDATORY: refused at the first frame
            send_frames(router, [b"nobody", b"x", b"y"], zmq.NOBLOCK)
        assert unknown.value.errno == zmq.EHOSTUNREACH
        sent = 0
        with pytest.raises(zmq.Again):  # a full pipe: nothing of the message is queued
            for sent in range(1, 10_000):
                send_frames(dealer, (b"k", b"h", b"%d" % sent), zmq.NOBLOCK)
        got = []
        while router.poll(100):
            got.append(router.recv_multipart())
        assert got and all(len(frames) == 4 for frames in got)
        assert [frames[3] for frames in got] == [b"%d" % i for i in range(1, sent)]
    finally:
        ctx.destroy(0)
