"""Following a queue's monitor: what a change of its ZooKeeper node does to the endpoint, and the retarget."""

from __future__ import annotations

import json

import pytest
import zmq

from client._locator import MonitorLocator


def node(**fields):
    return json.dumps(fields).encode()


def test_a_new_endpoint_in_the_node_replaces_the_old_one():
    loc = MonitorLocator("tcp://127.0.0.11:5500")
    loc.update(node(endpoint="tcp://127.0.0.11:5500", host="127.0.0.11"))
    assert loc.endpoint == "tcp://127.0.0.11:5500"
    loc.update(node(endpoint="tcp://127.0.0.12:6600", host="127.0.0.12", pid=7))
    assert loc.endpoint == "tcp://127.0.0.12:6600"


@pytest.mark.parametrize("data", [
    None,  # the node is gone while the monitor's host is being replaced
    b"",
    b"\xff garbage",
    b"[1, 2]",
    node(host="127.0.0.12"),
    node(endpoint=5500),
    node(endpoint="127.0.0.12:6600"),
    node(endpoint="tcp://127.0.0.12:6600\n"),
])
def test_a_missing_or_unusable_node_keeps_the_last_endpoint(data):
    loc = MonitorLocator("tcp://127.0.0.11:5500")
    loc.update(data)
    assert loc.endpoint == "tcp://127.0.0.11:5500"


def test_retarget_moves_a_dealer_to_the_current_endpoint():
    ctx = zmq.Context()
    old, new, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    try:
        for s in (old, new, dealer):
            s.setsockopt(zmq.LINGER, 0)
        old.bind("inproc://old")
        new.bind("inproc://new")
        dealer.connect("inproc://old")
        loc = MonitorLocator("inproc://old")
        assert loc.retarget(dealer, "inproc://old") == "inproc://old"  # nothing moved: nothing done
        loc.endpoint = "inproc://new"
        assert loc.retarget(dealer, "inproc://old") == "inproc://new"
        dealer.send(b"hello")
        assert new.poll(5000) and new.recv_multipart()[1] == b"hello"
        assert not old.poll(100)
    finally:
        for s in (old, new, dealer):
            s.close()
        ctx.term()
