"""A cluster process's CURVE: the sockets it serves and the ones it connects to its peers with.

Every process of a cluster holds the cluster's key pair (``--secret-key``): it serves its bound sockets with
it (the one server key its clients are given) and connects to the other processes of the cluster with it, so
that they know it as the principal :data:`roq.security.zap.CLUSTER`. Who else may connect is the keyring
(``--keyring``, a directory of public keys, :class:`roq.security.zap.Keyring`), decided by the process's own ZAP
handler (:class:`roq.security.zap.ZapServer`), served by its loop beside its other sockets (:meth:`Curve.attach`).

Why one key for all: the clients of a cluster know one server key, so every server of it holds that key's
secret; a second key per process for its outgoing connections would not keep a host that leaked its files
from speaking for the cluster (it holds the server's secret already). Keys of its own are for the
cluster's clients, which is where the principals and their permissions are.
"""

from __future__ import annotations

import logging
from typing import Callable

import zmq

from roq.errors import ConfigError
from roq.security.keys import load_secret
from roq.loop import Loop
from roq.runtime import DropCounter
from roq.sockets import HandshakeWatch
from roq.security.zap import CLUSTER, Authenticator, Decision, Keyring, ZapRequest, ZapServer

log = logging.getLogger(__name__)

__all__ = ["Curve", "DOMAIN"]

#: The ZAP domain of every CURVE socket of a cluster.
DOMAIN = b"roq"
#: Seconds between looks at the keyring directory (a key removed there is refused as soon).
REFRESH_PERIOD = 0.25


class Curve:
    """One process's CURVE: the cluster's key pair, the keyring of who may connect, the context's ZAP handler.

    Args:
        context: the process's ZeroMQ context (its CURVE server sockets are made in it).
        secret_key: the cluster's secret key file.
        keyring: the directory of the public keys that may connect.
        drops: where refusals are counted.
        on_refused: told of every key refused at the handshake (after it is counted).

    Raises:
        ConfigError: the key file is unsafe or unreadable, or the keyring cannot be read.
    """

    def __init__(self, context: zmq.Context, secret_key: str, keyring: str, drops: DropCounter,
                 on_refused: Callable[[ZapRequest, Decision], None] | None = None) -> None:
        pair = load_secret(secret_key)
        self.public = pair.public
        self._secret = pair.secret or b""
        self.keyring = Keyring(keyring, keys=[(CLUSTER, pair.public)])
        self.zap = ZapServer(context, Authenticator(self.keyring), drops, on_refused)
        self._drops = drops
        self._watches: list[HandshakeWatch] = []

    @classmethod
    def of(cls, context: zmq.Context, secret_key: str, keyring: str, drops: DropCounter,
           on_refused: Callable[[ZapRequest, Decision], None] | None = None) -> Curve | None:
        """A process's CURVE from its settings; None (plaintext) when ``secret_key`` is empty.

        Raises:
            ConfigError: as the constructor.
        """
        if not secret_key:
            return None
        if not keyring:
            raise ConfigError("secret_key and keyring go together (CURVE needs the server's key and the keys "
                              "that may connect)")
        return cls(context, secret_key, keyring, drops, on_refused)

    def start(self) -> None:
        """Answer ZAP for the context: before any CURVE socket of it is bound (nobody gets in without it).

        Raises:
            ConfigError: the context has a ZAP handler already.
        """
        self.zap.start()

    def serve(self, sock: zmq.Socket, name: str = "") -> None:
        """Make ``sock`` a CURVE server with the cluster's key; before it is bound. With ``name``, a peer that
        fails the handshake there (no CURVE, another server key, garbage) is counted as ``bad connection``
        (a process that watches its sockets itself gives none)."""
        if name:
            self._watches.append(HandshakeWatch(sock, name, self._drops))
        sock.curve_server = True
        sock.curve_secretkey = self._secret
        sock.setsockopt(zmq.ZAP_DOMAIN, DOMAIN)
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no ZAP handler: nobody gets in

    def connect(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE client of another process of the cluster, as the cluster; before it connects."""
        sock.curve_serverkey = self.public
        sock.curve_publickey = self.public
        sock.curve_secretkey = self._secret

    def refresh(self) -> bool:
        """Read the keyring again if it changed (a key removed there opens no more connections); True if it
        was. A keyring that cannot be read any more is counted and the keys known stay."""
        try:
            if self.keyring.refresh():
                log.info("keyring %s read again: %d keys", self.keyring.directory, len(self.keyring))
                return True
        except ConfigError as exc:
            self._drops.drop("keyring unreadable", str(exc))
        return False

    def attach(self, loop: Loop, on_change: Callable[[], object] | None = None) -> None:
        """Serve in ``loop``: ZAP when asked, the handshake watches of :meth:`serve`, and the keyring read again
        every :data:`REFRESH_PERIOD` (``on_change()`` when it changed)."""
        loop.add(self.zap.socket, self.zap.readable, "ZAP")
        for watch in self._watches:
            loop.add(watch.socket, watch.handle, "a handshake watch")

        def refresh(now: float) -> None:
            if self.refresh() and on_change is not None:
                on_change()

        loop.every(REFRESH_PERIOD, refresh, "the keyring", first=0.0)

    def describe(self) -> str:
        return f"CURVE on, {len(self.keyring)} keys may connect (keyring {self.keyring.directory})"

    def close(self) -> None:
        """Close the ZAP handler and the watches (before the sockets they watch are closed)."""
        for watch in self._watches:
            watch.close()
        self.zap.close()
