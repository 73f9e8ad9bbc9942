"""Helpers of the control-plane tests: waiting on conditions, raw requests to the GCM, process checks."""

from __future__ import annotations

import json
from typing import Any, Callable

import bson
import psutil
import pytest
import zmq

from kazoo.exceptions import NoNodeError

from roq.wire.control import Reply
from roq.errors import BrokerTimeoutError
from roq.zk import Paths
from roqcli.embedded import wait_for


def registered(kz: Any, root: str, queue: str) -> dict[str, dict]:
    """The queue's live exchanges by slot, as their host managers registered them (one that goes between the
    listing and the reading, stopping or restarting, is left out)."""
    paths = Paths(root)
    out = {}
    try:
        slots = kz.get_children(paths.exchanges(queue))
    except NoNodeError:
        return out
    for slot in slots:
        try:
            out[slot] = json.loads(kz.get(paths.exchange(queue, slot))[0])
        except NoNodeError:
            continue
    return out


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``condition()`` until true; fail the test with ``what`` at the deadline."""
    try:
        return wait_for(condition, timeout, what, interval)
    except BrokerTimeoutError as exc:
        pytest.fail(str(exc))


def ask(endpoint: str, *frames: bytes, timeout: float = 10.0) -> tuple[int, str, dict]:
    """Send raw frames to a GCM port from a DEALER and parse the reply."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        sock.send_multipart(list(frames))
        assert sock.poll(int(timeout * 1000)), f"no reply from {endpoint} within {timeout}s"
        reply = Reply.parse(sock.recv())
        return reply.result, reply.comment, dict(reply.data)
    finally:
        sock.close()


def doc(**fields: Any) -> bytes:
    return bson.encode(fields)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
