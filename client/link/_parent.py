"""A link's hello to the parent cluster: who the child is, said to the parent's GCM leader again and again.

The hello (:class:`~roq.wire.control.links.LinkHello`) goes to the management port of whichever GCM leads the
parent cluster (found in the parent's ZooKeeper, :class:`client._leader.GcmLeader`), every
:data:`HELLO_INTERVAL`: whole each time, so that a new leader, which knows no child, learns it again, and a
child silent for long is forgotten there. The answer is the welcome (the parent's path to the root) or a
refusal (its reason and the detail naming both ends); a standby's NOT_LEADER sends the next hello to the leader
it names, found again. With CURVE, a parent whose keyring does not admit the link's key refuses it at the
handshake (ZAP's status; no hello ever arrives): that is a refusal too (``unknown_key``), said once and kept until
a hello is answered. Nothing here blocks the loop longer than a read of ZooKeeper when the leader is looked up.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import zmq

from client._leader import GcmLeader
from roq.config import CurveClient
from roq.errors import ProtocolError, RoQError, Result
from roq.loop import Loop
from roq.sockets import RefusalWatch
from roq.wire.control import Reply, encode
from roq.wire.control.links import LinkHello
from roq.zk import Paths

log = logging.getLogger(__name__)

__all__ = ["Parent", "HELLO_INTERVAL"]

#: seconds between two hellos (the parent forgets a child silent for 15 s)
HELLO_INTERVAL = 1.0
#: longest read of ZooKeeper for the leader, seconds
FIND_TIMEOUT = 0.5
#: a leader that answered nothing for this long is looked up again, seconds
SILENT_S = 3 * HELLO_INTERVAL


class Parent:
    """The parent cluster as a link sees it: welcomed (``path``), refused (``refused``: why), or not answered yet.

    Args:
        context: the ZeroMQ context.
        zk, root: the parent cluster's ZooKeeper and root.
        hello: makes the hello to send (the child's name, role, incarnation, subtree and interest).
        on_change: called when the parent's answer turns from a welcome to a refusal or back.
        curve: the link's keys in the parent cluster (None: plaintext).
        who: how log lines name the link.
    """

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], zk: str, root: str, hello: Callable[[], LinkHello],
                 *, on_change: Callable[[], None] = lambda: None, curve: CurveClient | None = None,
                 who: str = "link") -> None:
        self.path: list[str] | None = None  # the parent's path to the root, once welcomed
        self.refused: tuple[str, str] | None = None  # (reason, detail) of the last refusal
        self._context = context
        self._leader = GcmLeader(zk, Paths(root), curve)
        self._hello = hello
        self._on_change = on_change
        self._curve = curve
        self._who = who
        self._socket: zmq.Socket[bytes] | None = None
        self._watch: RefusalWatch | None = None  # with CURVE: whether the parent refuses the key at the handshake
        self._endpoint = ""
        self._answered = 0.0  # when the leader last answered (monotonic)
        self._loop: Loop | None = None

    def attach(self, loop: Loop) -> None:
        self._loop = loop
        loop.every(HELLO_INTERVAL, self.say_hello, f"{self._who}: hello to the parent", first=0.0)

    def say_hello(self, now: float = 0.0) -> None:
        """Send the hello to the parent's leader (looked up first if not known)."""
        if self._socket is not None and time.monotonic() - self._answered > SILENT_S:
            self._disconnect()  # the leader does not answer (gone?): look it up again
        if self._socket is None and not self._connect():
            return
        assert self._socket is not None
        try:
            self._socket.send(encode(self._hello()), zmq.NOBLOCK)
        except zmq.Again:  # the leader is not reading: asked again at the next hello, maybe of another
            self._disconnect()

    def readable(self) -> None:
        sock = self._socket
        while sock is not None:
            try:
                frame = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                reply = Reply.parse(frame)
            except ProtocolError as exc:
                log.warning("%s: the parent's GCM answered garbage: %s", self._who, exc)
                continue
            self._answered = time.monotonic()
            was_refused = self.refused is not None
            if reply.result == Result.OK:
                path = [str(p) for p in reply.data.get("Path", [])]
                if path != self.path:
                    log.info("%s: welcomed by %s (its path to the root: %s)", self._who, path[0] if path else "?",
                             " / ".join(path))
                self.path, self.refused = path, None
            elif reply.result == Result.NOT_LEADER:
                self._disconnect()  # the next hello goes to the leader, found again
                return
            else:
                refused = (str(reply.data.get("Reason", reply.result)), reply.comment)
                if refused != self.refused:
                    log.error("%s: the parent refused the link (%s): %s", self._who, *refused)
                self.path, self.refused = None, refused
            if (self.refused is not None) != was_refused:
                self._on_change()

    def close(self) -> None:
        self._disconnect()
        self._leader.close()

    def _connect(self) -> bool:
        try:
            leader, _ = self._leader.find(time.monotonic() + FIND_TIMEOUT, "management")
        except RoQError as exc:
            log.debug("%s: no parent leader yet: %s", self._who, exc)
            return False
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 16)
        if self._curve is not None:
            self._curve.apply(sock)
        self._watch = RefusalWatch(sock) if self._curve is not None else None
        self._endpoint = leader.endpoint("management")
        sock.connect(self._endpoint)
        self._socket = sock
        self._answered = time.monotonic()
        if self._loop is not None:
            self._loop.add(sock, self.readable, f"{self._who}: the parent's GCM")
            if self._watch is not None:
                self._loop.add(self._watch.socket, self._handshake, f"{self._who}: the parent's handshake")
        return True

    def _handshake(self) -> None:
        """The parent's GCM refused the link's key at the CURVE handshake: a refusal, said once."""
        assert self._watch is not None
        status = self._watch.refused()
        if status is None:
            return
        refused = ("unknown_key", f"the parent cluster's GCM at {self._endpoint} refused the key of {self._who} at "
                                  f"the CURVE handshake (ZAP status {status}): its keyring does not admit this "
                                  "cluster's key (the parent's operator admits it with the cluster's public key)")
        if refused != self.refused:
            log.error("%s: the parent refused the link (%s): %s", self._who, *refused)
        was_refused, self.path, self.refused = self.refused is not None, None, refused
        if not was_refused:
            self._on_change()

    def _disconnect(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            if self._loop is not None and self._loop.has(watch.socket):
                self._loop.remove(watch.socket)
            watch.close()
        sock, self._socket = self._socket, None
        if sock is not None:
            if self._loop is not None and self._loop.has(sock):
                self._loop.remove(sock)
            sock.close(linger=0)
