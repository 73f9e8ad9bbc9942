"""Who is on the other end of a CURVE connection: ZAP (ZeroMQ's authentication protocol, RFC 27) answered from
a process's own poll loop, keys mapped to principals, and routing ids bound to the key that owns them.

libzmq asks ``inproc://zeromq.zap.01`` of the socket's context about every handshake on a CURVE server
socket, and waits for the answer before the connection carries anything. :class:`ZapServer` is that
endpoint as a ROUTER the process polls beside its other sockets (no thread, unlike ``zmq.auth``'s
authenticators); the decisions are :class:`Authenticator`'s, pure:

* the key must be in the :class:`Keyring` (a directory of public key files, ``NAME.key`` for the principal
  ``NAME``, read again when it changes: a key removed there stops opening connections, nothing restarts);
* anything else (another mechanism, a malformed request) is refused.

Every refusal is counted under its reason and answered 400 (500 for a request that cannot be read), so the
handshake fails at once on the client's side. An accepted connection carries its principal as the
``User-Id`` property of every message it sends.

A routing id a peer chose is **bound to its key**: the first 8 bytes of a publisher's or subscriber's id are
a digest of its public key (:func:`identity_for`), so that a server can tell, from a message's ``User-Id``
alone, whether the id it came with is the sender's own (:meth:`Keyring.owns`), whichever connected first.
ZAP cannot check it: the request's "identity" frame is the *server* socket's routing id, not the peer's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import time
from typing import Callable, Iterable

import zmq
import zmq.auth
import zmq.utils.z85

from roq.errors import ConfigError, ProtocolError
from roq.security.keys import PUBLIC_SUFFIX, expiry
from roq.runtime import DropCounter
from roq.sockets import send_frames

log = logging.getLogger(__name__)

__all__ = ["ZAP_ENDPOINT", "ZapRequest", "encode_reply", "public_key", "identity_for", "seeded_id", "owns", "Keyring",
           "Decision", "Authenticator", "ZapServer", "TAG_BYTES", "CLUSTER", "recv_from", "KEY_REMOVED"]

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
VERSION = b"1.0"
#: The bytes of a routing id that name its key's digest.
TAG_BYTES = 8
#: The length of a routing id a ROUTER gives a peer that chose none (a zero byte, then 4).
ROUTER_ID_BYTES = 5
#: ZAP requests answered at most per turn of the loop.
MAX_PER_TURN = 1000
#: Key files read at most from a keyring directory.
MAX_KEYS = 100_000
#: What a message from a connection whose key left the keyring is counted under (its sender is told).
KEY_REMOVED = "refused: key removed"
#: An unknown key makes the keyring's directory be looked at again, at most this often (seconds).
RECHECK_S = 0.01
#: The principal of the cluster's own key: its processes (a monitor, an exchange, a GCM) talking to each other.
CLUSTER = "cluster"


@dataclasses.dataclass(frozen=True)
class ZapRequest:
    """One ZAP request: the envelope to answer on, and what the handshake presented."""

    envelope: tuple[bytes, ...]  # the ROUTER's routing id and the empty delimiter
    request_id: bytes
    domain: str
    address: str
    identity: bytes  # the routing id the peer asked for (b"" = none)
    mechanism: str
    credentials: tuple[bytes, ...]

    @classmethod
    def parse(cls, frames: list[bytes]) -> ZapRequest:
        """Read a request as a ROUTER receives it.

        Raises:
            ProtocolError: not a ZAP 1.0 request.
        """
        if len(frames) < 8 or frames[1] != b"":
            raise ProtocolError(f"a ZAP request of {len(frames)} frames")
        envelope, (version, request_id, domain, address, identity, mechanism, *credentials) = frames[:2], frames[2:]
        if version != VERSION:
            raise ProtocolError(f"ZAP version {version[:10]!r}")
        try:
            return cls(tuple(envelope), request_id, domain.decode(), address.decode(), identity, mechanism.decode(),
                       tuple(credentials))
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"a ZAP request with text that is not UTF-8: {exc}") from exc


def public_key(credentials: tuple[bytes, ...]) -> str:
    """The CURVE public key a handshake presented (Z85), or "" when ``credentials`` are not one 32-byte key."""
    if len(credentials) != 1 or len(credentials[0]) != 32:
        return ""
    return zmq.utils.z85.encode(credentials[0]).decode()


def encode_reply(request: ZapRequest, status: int, text: str, user_id: str = "") -> list[bytes]:
    """The frames that answer ``request`` (metadata empty)."""
    return [*request.envelope, VERSION, request.request_id, str(status).encode(), text.encode()[:255],
            user_id.encode(), b""]


def _tag(public_key: bytes) -> bytes:
    return hashlib.blake2b(public_key, digest_size=TAG_BYTES).digest()


def identity_for(public_key: bytes, seed: bytes = b"") -> bytes:
    """A 16-byte routing id owned by ``public_key`` (Z85 text or 32 raw bytes): its digest, then random bytes (with
    ``seed``: bytes derived from it, the same seed giving the same id)."""
    raw = zmq.utils.z85.decode(public_key) if len(public_key) == 40 else public_key
    rest = seeded_id(seed)[:16 - TAG_BYTES] if seed else os.urandom(16 - TAG_BYTES)
    return _tag(raw) + rest


def seeded_id(seed: bytes) -> bytes:
    """A 16-byte id derived from ``seed`` (the same seed, the same id)."""
    return hashlib.sha256(b"roq publisher id\0" + seed).digest()[:16]


def owns(public_key: bytes, identity: bytes) -> bool:
    """Whether ``identity`` is one of ``public_key``'s (32 raw bytes)."""
    return len(identity) == 16 and identity[:TAG_BYTES] == _tag(public_key)


def recv_from(sock: zmq.Socket, flags: int) -> tuple[list[bytes], str]:
    """A message from the CURVE server socket ``sock`` (a ROUTER: its first frame is the routing id), as
    ``recv_multipart`` reads it, and the principal its sender's handshake gave it ("" for a lone frame).

    Raises:
        zmq.Again: nothing to read.
    """
    recv = sock.recv
    frames: list = [recv(flags)]
    principal = ""
    if sock.getsockopt(zmq.RCVMORE):
        first = recv(flags, copy=False)
        user_id = first.get("User-Id")
        assert isinstance(user_id, str)  # a message's properties are text (only "routing_id" is a number)
        principal = user_id
        frames.append(first.bytes)
        while sock.getsockopt(zmq.RCVMORE):
            frames.append(recv(flags))
    return frames, principal


class Keyring:
    """Public keys and the principals they stand for (one key each): a directory of ``NAME.key`` files
    (:mod:`roq.security.keys`), or given pairs. :meth:`refresh` reads the directory again when it changed, or when a
    key's expiry (``expires`` in its file's metadata, :func:`roq.security.keys.expiry`) has passed: an expired key is
    one removed.

    Raises:
        ConfigError: the directory cannot be read.
    """

    def __init__(self, directory: str | None = None, keys: Iterable[tuple[str, bytes]] = (), *,
                 clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self._clock = clock
        self._next_expiry = float("inf")  # the earliest expiry of a key held
        self._stamp: tuple[int, int] | None = None
        self._given = {public: principal for principal, public in keys}
        self._by_key: dict[bytes, str] = dict(self._given)
        self._tags = self._tags_of(self._by_key)
        self._removed: dict[str, bytes] = {}  # principals whose key left the keyring, with their keys' tags
        self.skipped: list[str] = []  # files that could not be read, with why
        if directory is not None:
            self.refresh()

    def principal(self, public_key: bytes) -> str | None:
        """The principal of ``public_key`` (Z85 text), or None."""
        return self._by_key.get(public_key)

    def has(self, principal: str) -> bool:
        """Whether ``principal`` has a key in the keyring (a key removed since its connection was made has not)."""
        return principal in self._tags

    def removed(self, principal: str, identity: bytes) -> bool:
        """Whether ``identity`` belongs to ``principal`` whose key was removed from the keyring since this
        process read it (its connections made before still stand: they are told, then ignored)."""
        tag = self._removed.get(principal)
        return tag is not None and len(identity) == 16 and identity[:TAG_BYTES] == tag

    def why_not(self, principal: str, identity: bytes) -> str:
        """Why a message from ``principal`` with the id ``identity``, which is not its key's own, is dropped:
        :data:`KEY_REMOVED` (its key left the keyring since it connected) or ``forged id``."""
        return KEY_REMOVED if self.removed(principal, identity) else "forged id"

    def owns(self, principal: str, identity: bytes) -> bool:
        """Whether ``identity`` (a routing id) is one of ``principal``'s key's own (:func:`identity_for`)."""
        tag = self._tags.get(principal)
        return tag is not None and len(identity) == 16 and identity[:TAG_BYTES] == tag

    def may_use(self, principal: str, identity: bytes) -> str:
        """Why ``principal`` may not send with the routing id ``identity`` ("" = it may): its key was removed from
        the keyring since it connected (:data:`KEY_REMOVED`), or the id is another key's (``forged id``). Its
        key's own ids are its, any the ROUTER gave (a zero byte and four more: libzmq lets a peer choose such an id too,
        but never one in use, and there is no handover), and any for the cluster's own processes."""
        given = len(identity) == ROUTER_ID_BYTES and identity[:1] == b"\0"
        if not self.has(principal):
            return KEY_REMOVED if given else self.why_not(principal, identity)
        if given or principal == CLUSTER or self.owns(principal, identity):
            return ""
        return "forged id"


    def may_claim(self, principal: str, identity: bytes) -> str:
        """Why ``principal`` may not name the peer id ``identity`` (16 bytes: a publisher's, a subscriber's) in a
        message it sends ("" = it may): the id is another key's (``forged id``), or its key was removed
        (:data:`KEY_REMOVED`). The cluster's own processes may name any."""
        if principal == CLUSTER or self.owns(principal, identity):
            return ""
        return self.why_not(principal, identity)


    def may_name(self, principal: str, name: str) -> str:
        """:meth:`may_claim` for an id named by its hex text (a control message's ``publisher`` or ``subscriber``)."""
        try:
            identity = bytes.fromhex(name)
        except ValueError:
            return "" if principal == CLUSTER else "forged id"
        return self.may_claim(principal, identity)

    def __len__(self) -> int:
        return len(self._by_key)

    @staticmethod
    def _tags_of(by_key: dict[bytes, str]) -> dict[str, bytes]:
        return {principal: _tag(zmq.utils.z85.decode(public)) for public, principal in by_key.items()}

    def refresh(self) -> bool:
        """Read the directory again if it changed since; True if it was read."""
        if self.directory is None:
            return False
        try:
            st = os.stat(self.directory)
            names = sorted(os.listdir(self.directory))
        except OSError as exc:
            raise ConfigError(f"keyring {self.directory!r} cannot be read: {exc.strerror or exc}") from exc
        stamp = (st.st_mtime_ns, len(names))
        now = self._clock()
        if stamp == self._stamp and now < self._next_expiry:
            return False
        by_key: dict[bytes, str] = {}
        skipped = []
        next_expiry = float("inf")
        for name in names[:MAX_KEYS]:
            if not name.endswith(PUBLIC_SUFFIX):
                continue
            path = os.path.join(self.directory, name)
            try:
                public, _ = zmq.auth.load_certificate(path)
                expires = expiry(path)
            except (OSError, ValueError, ConfigError) as exc:
                skipped.append(f"{name}: {exc}")
                continue
            if expires is not None and expires <= now:
                skipped.append(f"{name}: expired")
                continue
            if expires is not None:
                next_expiry = min(next_expiry, expires)
            if public and len(public) == 40:
                by_key[public] = name[: -len(PUBLIC_SUFFIX)]
            else:
                skipped.append(f"{name}: no public key")
        by_key.update(self._given)  # a key given outright keeps its principal
        if skipped and skipped != self.skipped:
            log.warning("keyring %s: %d files skipped: %s", self.directory, len(skipped), "; ".join(skipped[:5]))
        tags = self._tags_of(by_key)
        gone = {p: t for p, t in self._tags.items() if p not in tags}
        self._removed = {p: t for p, t in {**self._removed, **gone}.items() if p not in tags}
        if len(self._removed) > MAX_KEYS:  # bounded: the oldest forgotten (their connections then read as forged)
            self._removed = dict(list(self._removed.items())[-MAX_KEYS:])
        self._by_key, self._tags, self.skipped, self._stamp = by_key, tags, skipped, stamp
        self._next_expiry = next_expiry
        return True


@dataclasses.dataclass(frozen=True)
class Decision:
    status: int  # 200 accepted, 400 refused
    reason: str  # what a refusal is counted under ("" when accepted)
    principal: str = ""


class Authenticator:
    """Decides a ZAP request (pure but for the keyring's files). A key it does not know makes it look at the
    keyring's directory again first (at most every :data:`RECHECK_S`): a key added there is admitted at once,
    not at the next periodic read.

    Args:
        keyring: the keys that may connect.
        clock: monotonic time.
    """

    def __init__(self, keyring: Keyring, clock: Callable[[], float] = time.monotonic) -> None:
        self.keyring = keyring
        self._clock = clock
        self._next_recheck = 0.0

    def decide(self, request: ZapRequest) -> Decision:
        if request.mechanism != "CURVE":
            return Decision(400, f"mechanism {request.mechanism[:20]} refused")
        public = public_key(request.credentials).encode()
        if not public:
            return Decision(400, "bad CURVE credentials")
        principal = self.keyring.principal(public)
        if principal is None and self.keyring.directory is not None and self._clock() >= self._next_recheck:
            self._next_recheck = self._clock() + RECHECK_S
            try:
                if self.keyring.refresh():
                    principal = self.keyring.principal(public)
            except ConfigError:  # unreadable now: the keys known stay, counted by the next periodic read
                pass
        if principal is None:
            return Decision(400, "unknown key")
        return Decision(200, "", principal)


class ZapServer:
    """The ZAP endpoint of one ZeroMQ context, answered from its process's poll loop.

    Bind it (:meth:`start`) before any CURVE server socket of the context accepts a connection; register
    :attr:`socket` in the loop's poller and call :meth:`readable` when it is.

    Args:
        context: the context whose CURVE sockets it answers for.
        authenticator: the decisions.
        drops: where refusals and unreadable requests are counted, under their reasons.

        on_refused: told of every refusal, ``(request, decision)``, after it is counted (e.g. for an audit trail).
    """

    def __init__(self, context: zmq.Context, authenticator: Authenticator, drops: DropCounter,
                 on_refused: Callable[[ZapRequest, Decision], None] | None = None) -> None:
        self.authenticator = authenticator
        self.drops = drops
        self.on_refused = on_refused
        self.accepted = 0
        self.refused: dict[str, int] = {}
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)

    def start(self) -> None:
        """Bind the context's ZAP endpoint.

        Raises:
            ConfigError: another ZAP handler has it already.
        """
        try:
            self.socket.bind(ZAP_ENDPOINT)
        except zmq.ZMQError as exc:
            raise ConfigError(f"the context has a ZAP handler already: {exc}") from exc

    def readable(self) -> None:
        """Answer the requests waiting (at most :data:`MAX_PER_TURN`)."""
        recv, sock = self.socket.recv_multipart, self.socket
        for _ in range(MAX_PER_TURN):
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                request = ZapRequest.parse(frames)
            except ProtocolError as exc:
                self.drops.drop("bad ZAP request", str(exc))
                if len(frames) >= 4 and frames[1] == b"":  # answer what can be answered: the handshake fails now
                    send_frames(sock, [frames[0], b"", VERSION, frames[3], b"500", b"bad request", b"", b""],
                                zmq.NOBLOCK)
                continue
            decision = self.authenticator.decide(request)
            if decision.status == 200:
                self.accepted += 1
            else:
                self.refused[decision.reason] = self.refused.get(decision.reason, 0) + 1
                self.drops.drop(f"refused: {decision.reason}", f"{request.address} ({request.domain or 'no domain'})")
                if self.on_refused is not None:
                    self.on_refused(request, decision)
            try:
                send_frames(sock, encode_reply(request, decision.status, decision.reason or "OK", decision.principal),
                            zmq.NOBLOCK)
            except zmq.ZMQError:  # the handshake gave up meanwhile
                pass

    def close(self) -> None:
        self.socket.close()
