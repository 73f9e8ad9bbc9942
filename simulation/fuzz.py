"""Garbage for every listening socket of a cluster, deterministic per seed (the fuzz test, ``make fuzz``).

What a stranger on the network can send, in five families:

* **raw bytes** on a TCP connection: random bytes, an HTTP request, ZeroMQ greetings that are broken (a bad
  signature, an unknown security mechanism, a truncated greeting, a greeting followed by garbage);
* **random ZeroMQ messages** from DEALER, REQ, PUSH, PUB, SUB and XSUB sockets: random frame counts and
  sizes, random bytes, and BSON documents of random content;
* **every command with one field wrong**: for every message class of :mod:`roq.wire.control` and
  :mod:`roq.wire.management`, a document that is valid but for one field, replaced by a value of each other type
  (text, integers, floats, NaN, booleans, null, binary, lists, documents, ``bson.Code``, binary of a user
  subtype, datetimes, ObjectIds, regular expressions, timestamps, decimals, min/max keys...), or missing;
  unknown command numbers, commands that are not integers, documents without a command;
* **bad values of the right type** where a server checks values: negative and huge counts, queue names
  that are not names, rules out of range, unknown rules, evidence nested too deep;
* **huge and nested documents**: strings of megabytes (up to 50 MB once a run), documents nested deeper
  than any limit, lists of a hundred thousand items; for an exchange's frontend and a journal's intake,
  batches broken in every way its check knows (version, kind, counts, bodies, keys, sequence numbers); for
  an exchange's backend, subscriptions broken the same way, and others' ids;
* **broken HTTP** for the HTTP ports (a GCM's API, a host manager's health checks): bad request lines and
  methods, headers without colons or of 70 KB, bodies whose length lies or is over the limit, broken chunked
  bodies, paths that climb out of the static files, percent garbage, bad query parameters, pipelined
  floods, live feeds left open, and writes without a token or with a wrong one (each must be refused).

Nothing generated is a valid request: a server must refuse each one (or drop it) and go on serving. Every
send is non-blocking, and every socket lingers a moment when closed so that what was sent is delivered, but
no longer: a server that stops reading cannot stall the fuzzer. :func:`sweep` sends the systematic families
once and reads each server's answers (it must answer every request that fits its size limit: documents
beyond that limit go on sockets of their own, as ZeroMQ drops the connection that carried one);
:func:`fuzz_round` sends a seed's random mix.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import os
import random
import socket
import struct
import time
import types
import typing
from collections.abc import Iterator
from typing import Any

import bson
import zmq

from roq.wire import batch, compression, control, management  # noqa: F401  (management registers the GCM's commands)
from roq.config import CurveClient
from roq.security.zap import identity_for

__all__ = ["Target", "sweep", "fuzz_round", "wrong_values", "command_variants", "broken_batches",
           "broken_subscriptions", "Tally"]

ZMTP_SIGNATURE = b"\xff" + b"\x00" * 8 + b"\x7f"
LINGER_MS = 2000  # how long a closed socket may still deliver what it was given
ANSWER_S = 30.0  # how long a server may take to answer everything the sweep asked
HTTP_ANSWER_S = 5.0  # how long an HTTP server may take to answer one broken request (only a hang takes it)
ANSWERS = ("asked", "answered", "accepted", "garbled answers")  # what a tally counts beside the garbage
HUGE = 50 << 20  # the largest string sent (once per sweep, to each server)
READS_WINDOW = 32  # requests a sweep keeps unanswered at a journal's reads port, at most
# requests a sweep keeps unanswered at any other server, at most: a ROUTER drops what it cannot queue to a peer
# that does not read (1,000 in its pipe, 1,000 in the peer's), so a client sending thousands before reading
# any would lose answers to its own high-water marks on a busy machine, not to the server
SERVER_WINDOW = 500


@dataclasses.dataclass(frozen=True)
class Target:
    """A listening socket to fuzz: ``kind`` is "server" (a ROUTER answering control messages: GCM look-up
    and management, monitor, host manager), "reads" (a journal's reads port: a server whose answers to one
    reader wait in a pipe of a few dozen, so the sweep keeps at most :data:`READS_WINDOW` requests unanswered),
    "frontend" (an exchange's batches, a journal's intake), "backend" (an exchange's subscribers), "pub" (the
    GCM's broadcast) or "http" (a GCM's HTTP API, a host manager's health checks)."""

    name: str
    endpoint: str
    kind: str


@dataclasses.dataclass
class Tally:
    """What was sent, by family (for the test's log and the fuzzer's report)."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, family: str, n: int = 1) -> None:
        self.counts[family] = self.counts.get(family, 0) + n

    @property
    def total(self) -> int:
        """Pieces of garbage sent (the counts of answers are not garbage)."""
        return sum(n for family, n in self.counts.items()
                   if family not in ANSWERS and family != "http answered" and not family.startswith("unanswered"))


# ---------------------------------------------------------------------- values of every wrong type


def _deep(levels: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        doc = {"d": doc}
    return doc


def wrong_values() -> list[tuple[str, Any]]:
    """(type name, value) of every BSON type a field may wrongly hold."""
    return [
        ("text", "fuzz"), ("empty text", ""), ("int", 7), ("negative int", -5), ("int64", bson.int64.Int64(2**62)),
        ("float", 1.5), ("nan", float("nan")), ("infinity", float("inf")), ("bool", True), ("null", None),
        ("bytes", b"\x00\xff"), ("list", [1, "a"]), ("document", {"a": 1}), ("code", bson.Code("q1")),
        ("code with scope", bson.Code("q1", {"s": 1})), ("user binary", bson.Binary(b"x", 0x80)),
        ("uuid binary", bson.Binary(b"0123456789abcdef", 4)), ("datetime", datetime.datetime(2026, 11, 23)),
        ("objectid", bson.ObjectId(b"0123456789ab")), ("regex", bson.Regex("^q", "i")),
        ("timestamp", bson.Timestamp(1, 1)), ("decimal", bson.Decimal128("1.5")), ("minkey", bson.MinKey()),
        ("maxkey", bson.MaxKey()), ("deep document", _deep(60)), ("long list", list(range(2000))),
        ("long text", "x" * (100 << 10)),
    ]


def _kind_of(value: Any) -> type:
    return bool if isinstance(value, bool) else type(value)


def _valid(hint: Any) -> Any:
    """A valid value of a field of type ``hint`` (used for the fields left right)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _valid([a for a in typing.get_args(hint) if a is not type(None)][0])
    if origin is list:
        return []
    if origin is dict or hint is dict:
        return {}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):  # a hint that is a dataclass is its class
        return _base(hint)
    return {str: "fuzz-zz", int: 1, float: 1.0, bool: False, bytes: b"fuzz"}[hint]


def _base(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: _valid(hints[f.name]) for f in dataclasses.fields(cls)}


def _same_type(value: Any, hint: Any) -> bool:
    """Whether ``value`` would pass as a value of ``hint`` (such a replacement is not wrong: skipped)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return value is None or any(_same_type(value, a) for a in typing.get_args(hint) if a is not type(None))
    if origin is list:
        return type(value) is list
    if origin is dict or hint is dict:
        return type(value) is dict
    if hint is float:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number and value == value and abs(value) != float("inf")
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is bytes:
        return isinstance(value, bytes)  # a Binary of any subtype is bytes with a tag: taken as bytes
    return type(value) is hint


def command_variants() -> Iterator[tuple[str, bytes]]:
    """(label, frame) for every registered command with one field wrong or missing, and documents whose
    command is unknown, not an integer, or missing."""
    values = wrong_values()
    for cmd, cls in sorted(control.registered().items()):
        if cls is control.Reply:
            continue
        base = _base(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            for label, value in values:
                if _same_type(value, hints[f.name]):
                    continue
                yield f"{cls.__name__}.{f.name}={label}", _encode({"CMD": cmd, **base, f.name: value})
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                yield f"{cls.__name__} without {f.name}", _encode({"CMD": cmd, **{k: v for k, v in base.items() if k != f.name}})
    for cmd in (-1, 0, 4, 99, 1500, 2008, 8999, 9001, 2**31 - 1, -(2**31)):
        yield f"unknown CMD {cmd}", _encode({"CMD": cmd, "QName": "fuzz-zz"})
    for label, value in values:
        if not (isinstance(value, int) and not isinstance(value, bool)):
            yield f"CMD={label}", _encode({"CMD": value})
    yield "no CMD", _encode({"QName": "fuzz-zz"})


def bad_values(queue: str) -> Iterator[tuple[str, bytes]]:
    """Requests with every field of the right type but a value a server must refuse (on ``queue``, the
    queue under load: each is refused, none may change it)."""
    names = ["", "a/b", "x" * 100, "..", "q@monitor", "\x00", "é", "fuzz zz"]
    for name in names:
        for cmd in (2000, 2001, 2002, 2005, 2007, 2011, 2013, 2016):
            yield f"{cmd} QName={name[:8]!r}", _encode({"CMD": cmd, "QName": name})
    for count in (-3, 0, 65, 10**9, -(2**62)):
        yield f"create Exchanges={count}", _encode({"CMD": 2010, "QName": "fuzz-zz", "Exchanges": count})
        yield f"create on host Exchanges={count}", _encode({"CMD": 2003, "QName": "fuzz-zz", "Host": "127.0.0.11",
                                                             "Exchanges": count})
        yield f"scale out {count}", _encode({"CMD": 2017, "QName": queue, "Exchanges": count if count < 1 else 10**6})
    for limit in (-1, 0, 1001, 2**62):
        yield f"events Limit={limit}", _encode({"CMD": 2019, "QName": queue, "Limit": limit})
    for host in ("", "256.1.1.1", "x" * 1000, "127.0.0.99"):
        yield f"create exchange on {host[:10]!r}", _encode({"CMD": 2004, "QName": queue, "Host": host or "nowhere"})
        yield f"create on {host[:10]!r}", _encode({"CMD": 2003, "QName": "fuzz-zz", "Host": host, "Exchanges": 1})
    for rules in ({"max_exchanges": 2**40}, {"nope": 1}, {"sustain_s": -1}, {"kpi_period_s": 0.001},
                  {"min_exchanges": 64, "max_exchanges": 1}, {"smoothing": "x"}, {"cooldown_s": [1]},
                  {"exchange_records_per_s": 1}, _deep(40)):
        yield f"rules {list(rules)[:1]}", _encode({"CMD": 2006, "QName": queue, "Rules": rules})
        yield f"thresholds {list(rules)[:1]}", _encode({"CMD": 2015, "QName": queue, "Thresholds": rules})
    yield "evidence too deep", _encode({"CMD": 2015, "QName": queue, "Thresholds": {}, "Evidence": _deep(40)})
    yield "evidence too big", _encode({"CMD": 2015, "QName": queue, "Thresholds": {},
                                        "Evidence": {"x": "y" * (900 << 10)}})
    yield "remove no exchange", _encode({"CMD": 2018, "QName": queue, "Exchange": ""})
    yield "relocate nobody", _encode({"CMD": 41, "publisher": "0" * 32, "target": "nowhere"})
    yield "KPI period 0", _encode({"CMD": 1106, "period": 0.0})
    yield "retarget garbage", _encode({"CMD": 1107, "monitor": "not an endpoint"})


def _encode(doc: dict[str, Any]) -> bytes:
    return bson.encode(doc)


def nested_bson(levels: int) -> bytes:
    """A BSON document nested ``levels`` deep, built by hand (bson.encode would recurse as deep)."""
    inner = b"\x05\x00\x00\x00\x00"  # {}
    for _ in range(levels):
        body = b"\x03d\x00" + inner + b"\x00"
        inner = struct.pack("<i", len(body) + 4) + body
    body = b"\x10CMD\x00" + struct.pack("<i", 2006) + b"\x03Rules\x00" + inner + b"\x00"
    return struct.pack("<i", len(body) + 4) + body


def huge_documents() -> Iterator[tuple[str, bytes]]:
    """Megabytes of text, deep nesting, long lists."""
    yield "2 MB text", _encode({"CMD": 2000, "QName": "x" * (2 << 20)})
    yield "nested 200", nested_bson(200)
    yield "nested 5000", nested_bson(5000)
    yield "100,000 item list", _encode({"CMD": 30, "subscriber": "s", "prefix": b"", "confirmed": list(range(100_000))})
    yield "50 MB text", _encode({"CMD": 2006, "QName": "q", "Rules": {"x": "y" * HUGE}})


# ---------------------------------------------------------------------- broken data-plane frames


@functools.cache
def _bomb() -> bytes:
    """A compressed body of a few kilobytes that says it holds 64 MiB (made once: compressing it takes a while)."""
    return compression.compress(bytes(64 << 20))


def broken_batches(rng: random.Random) -> list[tuple[str, list[bytes]]]:
    """Frames an exchange's frontend must drop: a batch broken in each way, and random frames."""
    me = os.urandom(16)  # not the identity the batches are sent with: that alone is a reason to drop them
    good = batch.encode_body([b"x", b"yy"])

    def header(kind: int = batch.DATA, count: int = 2, first: int = 1, version: int = batch.VERSION,
               publisher: bytes = me, flags: int = 0) -> bytes:
        return batch.HEADER.pack(version, kind, flags, count, publisher, 0, first, 0, 0)

    squeezed = batch.FLAG_COMPRESSED

    out = [
        ("one frame", [b"k"]), ("two frames", [b"k", header()]), ("five frames", [b"k", header(), good, b"", b""]),
        ("short header", [b"k", header()[:20], good]), ("long header", [b"k", header() + b"\x00", good]),
        ("version 9", [b"k", header(version=9), good]), ("kind 77", [b"k", header(kind=77), good]),
        ("count 0", [b"k", header(count=0), b""]), ("first 0", [b"k", header(first=0), good]),
        ("seq overflow", [b"k", header(first=2**64 - 1), good]), ("count beyond body", [b"k", header(count=9), good]),
        ("lengths beyond body", [b"k", header(count=2), struct.pack("<2I", 99, 99)]),
        ("marker with body", [batch.CONTROL_TOPIC, header(kind=batch.MARKER, count=0), b"body"]),
        ("marker off topic", [b"k", header(kind=batch.MARKER, count=0), b""]),
        ("beacon", [batch.CONTROL_TOPIC, header(kind=batch.BEACON, count=0), b"x1"]),
        ("huge key", [b"k" * (1 << 17), header(), good]), ("empty", [b"", b"", b""]),
        ("someone else's id", [b"k", header(publisher=b"\x01" * 16), good]),
        ("compressed, not zstd", [b"k", header(flags=squeezed), good]),
        ("compressed bomb", [b"k", header(flags=squeezed), _bomb()]),
        ("compressed, no batch inside", [b"k", header(flags=squeezed), compression.compress(b"\xff")]),
    ]
    for i in range(8):
        frames = [os.urandom(rng.choice((0, 1, 52, 200, 5000))) for _ in range(rng.randint(1, 5))]
        out.append((f"random frames {i}", frames))
    return out


def broken_subscriptions(rng: random.Random) -> list[tuple[str, list[bytes]]]:
    """Frames an exchange's backend must drop: a subscription broken in each way, and random frames."""
    me = os.urandom(16)  # not the identity they are sent with: that alone is a reason to drop them

    def header(kind: int = batch.SUBSCRIBE, count: int = 0, first: int = 0, version: int = batch.VERSION) -> bytes:
        return batch.HEADER.pack(version, kind, 0, count, me, 0, first, 0, 0)

    out = [
        ("one frame", [batch.CONTROL_TOPIC]), ("four frames", [batch.CONTROL_TOPIC, header(), b"", b""]),
        ("short header", [batch.CONTROL_TOPIC, header()[:20], b""]), ("version 9", [batch.CONTROL_TOPIC,
                                                                                   header(version=9), b""]),
        ("a batch", [batch.CONTROL_TOPIC, header(kind=batch.DATA, count=1, first=1), b""]),
        ("a beacon", [batch.CONTROL_TOPIC, header(kind=batch.BEACON), b""]),
        ("off topic", [b"k", header(), b""]), ("with a count", [batch.CONTROL_TOPIC, header(count=3), b""]),
        ("huge prefix", [batch.CONTROL_TOPIC, header(), b"p" * (batch.MAX_KEY + 1)]),
        ("someone else's id", batch.pack_subscription(b"\x01" * 16, b"")),
    ]
    for i in range(4):
        out.append((f"random frames {i}", [os.urandom(rng.choice((0, 1, 52, 200))) for _ in range(rng.randint(1, 4))]))
    return out


# ---------------------------------------------------------------------- sending


def _host_port(endpoint: str) -> tuple[str, int]:
    host, port = endpoint.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def send_raw(endpoint: str, payload: bytes, wait: float = 0.02, *, half_close: bool = False) -> bytes:
    """Connect over TCP, write ``payload``, read what comes back for ``wait`` seconds (b"" if nothing, or
    if the server closed on us, which is its right), close. ``half_close``: say that nothing more comes once
    ``payload`` is out, so that a server answers (or closes) at once instead of waiting for the rest."""
    got = b""
    try:
        with socket.create_connection(_host_port(endpoint), timeout=max(1.0, wait)) as conn:
            try:
                conn.sendall(payload)
                if half_close:
                    conn.shutdown(socket.SHUT_WR)
            except OSError:  # the server answered before it read it all, and closed: its answer may be there
                pass
            conn.settimeout(wait)
            try:
                got = conn.recv(4096)
            except OSError:
                pass
    except OSError:
        pass
    return got


def http_requests(rng: random.Random) -> list[tuple[str, bytes, bool]]:
    """Broken HTTP: (family, bytes, whether it asks for a write, which must never succeed without the token)."""
    wrong = b"authorization: Bearer " + os.urandom(24).hex().encode() + b"\r\n"
    create = b'{"name": "fuzz-made", "exchanges": 1}'

    def post(path: bytes, body: bytes, extra: bytes = b"") -> bytes:
        return (b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-length: " + str(len(body)).encode() + b"\r\n"
                + extra + b"\r\n" + body)

    return [
        ("http: bad request line", b"GET\r\n\r\n", False),
        ("http: version 0.9", b"GET /\r\n\r\n", False),
        ("http: unknown method", b"BREW /api/v1/queues HTTP/1.1\r\nhost: x\r\n\r\n", False),
        ("http: header without colon", b"GET / HTTP/1.1\r\nno colon\r\n\r\n", False),
        ("http: 70 KB header", b"GET / HTTP/1.1\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n", False),
        ("http: length lies", b"POST /api/v1/queues HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999\r\n\r\n{", True),
        ("http: negative length", b"POST /api/v1/queues HTTP/1.1\r\nhost: x\r\ncontent-length: -1\r\n\r\n", True),
        ("http: broken chunks", b"PUT /api/v1/queues/fuzzq/rules HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked"
                                b"\r\n\r\nzz\r\n" + os.urandom(40), True),
        ("http: 2 MB chunk", b"PUT /api/v1/queues/fuzzq/rules HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked"
                             b"\r\n\r\n200000\r\n" + b"{" * (2 << 20) + b"\r\n0\r\n\r\n", True),
        ("http: write without token", post(b"/api/v1/queues", create), True),
        ("http: write with a wrong token", post(b"/api/v1/queues", create, wrong), True),
        ("http: remove with a wrong token", b"DELETE /api/v1/queues/fuzzq HTTP/1.1\r\nhost: x\r\n" + wrong + b"\r\n",
         True),
        ("http: bad rules with a wrong token", post(b"/api/v1/queues/fuzzq/stop", b"\x00\xff" * 50, wrong), True),
        ("http: out of the static files", b"GET /static/../../../etc/passwd HTTP/1.1\r\nhost: x\r\n\r\n", False),
        ("http: encoded climb", b"GET /static/..%2f..%2fgcm%2f_http.py HTTP/1.1\r\nhost: x\r\n\r\n", False),
        ("http: percent garbage", b"GET /api/v1/queues/%ff%fe%00%zz HTTP/1.1\r\nhost: x\r\n\r\n", False),
        ("http: bad query", b"GET /api/v1/queues/fuzzq/events?limit=-1&since=nan&offset=1e99&kind=%00 HTTP/1.1"
                            b"\r\nhost: x\r\n\r\n", False),
        ("http: pipelined flood", b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n" * 300, False),
        ("http: 2,000 pipelined", b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n" * 2000, False),
        ("http: HEAD of the live feed", b"HEAD /api/v1/stream HTTP/1.1\r\nhost: x\r\n\r\n", False),
        ("http: rules nested 100,000 deep", b"PUT /api/v1/queues/fuzzq/rules HTTP/1.1\r\nhost: x\r\n" + wrong
         + b"content-length: 200000\r\n\r\n" + b"[" * 100_000 + b"]" * 100_000, True),
        ("http: feed then garbage", b"GET /api/v1/stream HTTP/1.1\r\nhost: x\r\n\r\n" + os.urandom(500), False),
        ("http: random bytes", os.urandom(rng.choice((1, 64, 4096))), False),
    ]


def raw_payloads(rng: random.Random) -> list[tuple[str, bytes]]:
    greeting = ZMTP_SIGNATURE + b"\x03\x00"
    return [
        ("random bytes", os.urandom(rng.choice((1, 10, 64, 300, 4096)))),
        ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 3),
        ("bad signature", b"\xfe" + os.urandom(63)),
        ("unknown mechanism", greeting + b"GARBAGE".ljust(20, b"\x00") + b"\x00" * 32),
        ("truncated greeting", greeting + b"NULL"),
        ("greeting then garbage", greeting + b"NULL".ljust(20, b"\x00") + b"\x00" * 32 + os.urandom(200)),
        ("zmtp 1.0", b"\x01\x00" + os.urandom(30)),
        ("zmtp 2.0", ZMTP_SIGNATURE + b"\x01\x05" + os.urandom(40)),
    ]


class _Sockets:
    """ZeroMQ sockets of the fuzzer, every one closed at once with linger 0; with ``curve``, CURVE clients with
    those keys (their garbage then gets past the handshake and the ZAP handler, as a principal's)."""

    def __init__(self, ctx: zmq.Context, curve: CurveClient | None = None) -> None:
        self.ctx = ctx
        self.curve = curve
        self.open: list[zmq.Socket] = []

    def connect(self, kind: int, endpoint: str, *, replies: bool = False, peer: int = zmq.ROUTER) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        # what was sent to a peer that accepts this kind of socket is delivered; a peer that refuses it at the
        # handshake never takes anything, so waiting would only stall the fuzzer
        accepted = kind in ({zmq.DEALER, zmq.REQ, zmq.ROUTER} if peer == zmq.ROUTER else {zmq.SUB, zmq.XSUB})
        sock.setsockopt(zmq.LINGER, LINGER_MS if accepted else 0)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        # replies that are not read are dropped at the peer
        sock.setsockopt(zmq.RCVHWM, 100_000 if replies else 10)
        if kind == zmq.DEALER:  # with CURVE, some with an id of the key's own: past the forgery check
            pick = random.random()
            if self.curve is not None and pick < 0.4:
                sock.setsockopt(zmq.ROUTING_ID, identity_for(self.curve.public_key.encode()))
            elif pick < 0.7:
                sock.setsockopt(zmq.ROUTING_ID, os.urandom(16))
            elif pick < 0.8:  # one of the ROUTER's own form, as a peer may choose it too
                sock.setsockopt(zmq.ROUTING_ID, b"\0" + os.urandom(4))
            # else none, as the clients connect: the ROUTER names the connection
        if self.curve is not None:
            self.curve.apply(sock)
        if kind == zmq.SUB:
            sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(endpoint)
        self.open.append(sock)
        return sock

    def send(self, sock: zmq.Socket, frames: list[bytes]) -> None:
        try:
            sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # a REQ out of step, a full pipe: both the fuzzer's problem, not the server's

    def close(self) -> None:
        for sock in self.open:
            sock.close()
        self.open.clear()


def strangers(targets: list[Target], seed: int, server_key: bytes, *, per_target: int = 10) -> Tally:
    """CURVE handshakes that must fail, to every ZeroMQ target: keys no keyring holds (ZAP refuses them), a
    wrong server key (the server cannot read the hello), the NULL and PLAIN mechanisms, each then sending
    random frames that must never arrive."""
    rng = random.Random(seed)
    tally = Tally()
    ctx = zmq.Context()
    open_: list[zmq.Socket] = []
    try:
        for target in targets:
            if target.kind == "http":
                continue
            for i in range(per_target):
                sock = ctx.socket(zmq.SUB if target.kind == "pub" else zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                open_.append(sock)
                how = ("unknown key", "wrong server key", "plain", "null")[i % 4]
                if how in ("unknown key", "wrong server key"):
                    public, secret = zmq.curve_keypair()
                    sock.curve_serverkey = server_key if how == "unknown key" else zmq.curve_keypair()[0]
                    sock.curve_publickey, sock.curve_secretkey = public, secret
                elif how == "plain":
                    sock.plain_username, sock.plain_password = b"admin", os.urandom(8)
                if target.kind == "pub":
                    sock.setsockopt(zmq.SUBSCRIBE, b"")
                sock.connect(target.endpoint)
                if target.kind != "pub":
                    frames = [os.urandom(rng.choice((0, 1, 52, 300))) for _ in range(rng.randint(1, 4))]
                    try:
                        sock.send_multipart(frames, zmq.NOBLOCK)
                    except zmq.ZMQError:
                        pass
                tally.add(f"CURVE handshakes: {how}")
        time.sleep(0.2)  # let the handshakes be made (and refused) before the sockets close
    finally:
        for sock in open_:
            sock.close()
        ctx.term()
    return tally


def sweep(targets: list[Target], queue: str, *, huge: bool = True) -> Tally:
    """The systematic families, once to every target they fit: every command with each field wrong, bad
    values, huge and nested documents (servers); every broken batch (frontends); broken greetings (all).

    Every request to a server that fits its size limit is answered: the tally counts ``asked`` and
    ``answered``, and the answers that were not refusals (``accepted``: there should be none)."""
    tally = Tally()
    rng = random.Random(0)
    ctx = zmq.Context()
    socks = _Sockets(ctx)
    try:
        variants = list(command_variants()) + list(bad_values(queue))
        big = list(huge_documents()) if huge else []
        for target in targets:
            if target.kind in ("server", "reads"):
                dealer = socks.connect(zmq.DEALER, target.endpoint, replies=True)
                window = READS_WINDOW if target.kind == "reads" else SERVER_WINDOW
                for i in range(0, len(variants), window):  # (a reader that reads its answers)
                    for _, frame in variants[i:i + window]:
                        socks.send(dealer, [frame])
                    _answers(dealer, len(variants[i:i + window]), tally, target.name)
                tally.add("commands with a field wrong, bad values", len(variants))
                tally.add("asked", len(variants))
                for _, frame in big:
                    socks.send(socks.connect(zmq.DEALER, target.endpoint), [frame])
                tally.add("huge and nested documents", len(big))
            elif target.kind == "frontend":
                dealer = socks.connect(zmq.DEALER, target.endpoint)
                for _, frames in broken_batches(rng):
                    socks.send(dealer, frames)
                tally.add("broken batches", len(broken_batches(rng)))
            elif target.kind == "backend":
                dealer = socks.connect(zmq.DEALER, target.endpoint)
                for _, frames in broken_subscriptions(rng):
                    socks.send(dealer, frames)
                tally.add("broken subscriptions", len(broken_subscriptions(rng)))
            elif target.kind == "http":
                for family, payload, write in http_requests(rng):
                    # half-closed: answered or closed at once, so the generous wait costs nothing but on a hang
                    _http_answer(send_raw(target.endpoint, payload, wait=HTTP_ANSWER_S, half_close=True), write, tally,
                                 family, target.name)
            else:
                xsub = socks.connect(zmq.XSUB, target.endpoint, peer=zmq.PUB)
                for frame in (b"\x07 not a subscription", b"", b"\x01" + b"p" * 70_000, os.urandom(100)):
                    socks.send(xsub, [frame])
                tally.add("garbage subscriptions", 4)
            for _, payload in raw_payloads(rng):
                send_raw(target.endpoint, payload)
            tally.add("raw bytes and broken greetings", len(raw_payloads(rng)))
    finally:
        socks.close()
        ctx.term()
    return tally


def _http_answer(answer: bytes, write: bool, tally: Tally, family: str, server: str) -> None:
    """Count an HTTP answer (one that never came, by ``server`` and its request's ``family``); a write that
    succeeded without the token counts as ``accepted``."""
    tally.add("broken HTTP")
    if answer.startswith(b"HTTP/1.1 "):
        tally.add("http answered")
        if write and answer[9:10] == b"2":
            tally.add("accepted")
    else:
        tally.add(f"unanswered at {server}, {family}")


def _answers(sock: zmq.Socket, expected: int, tally: Tally, server: str) -> None:
    """Read up to ``expected`` replies (at most :data:`ANSWER_S`); count them, those that were not refusals,
    and those that never came (by ``server``, so a failure says where)."""
    deadline = time.monotonic() + ANSWER_S
    got = 0
    while got < expected:
        left = deadline - time.monotonic()
        if left <= 0 or not sock.poll(int(min(left, 1.0) * 1000) + 1):
            if left <= 0:
                break
            continue
        frame = sock.recv()
        got += 1
        try:
            if control.Reply.parse(frame).ok:
                tally.add("accepted")
        except Exception:  # noqa: BLE001 - an answer that is not a reply is one the test should see
            tally.add("garbled answers")
    tally.add("answered", got)
    if got < expected:
        tally.add(f"unanswered at {server}", expected - got)


def fuzz_round(targets: list[Target], seed: int, queue: str, *, per_target: int = 40,
               curve: CurveClient | None = None) -> Tally:
    """One seed's random mix: ``per_target`` items for each target, each a random pick of a family (random
    frames from a random socket type, a command variant, a bad value, a broken batch, raw bytes); with
    ``curve``, sent by CURVE clients with those keys."""
    rng = random.Random(seed)
    tally = Tally()
    variants = list(command_variants())
    values = list(bad_values(queue))
    ctx = zmq.Context()
    socks = _Sockets(ctx, curve)
    try:
        for target in targets:
            if target.kind == "http":
                requests = http_requests(rng)
                for _ in range(per_target // 4):  # each a connection of its own: fewer, as they cost more
                    if rng.random() < 0.75:
                        family, payload, write = rng.choice(requests)
                        _http_answer(send_raw(target.endpoint, payload, wait=HTTP_ANSWER_S, half_close=True), write,
                                     tally, family, target.name)
                    else:
                        send_raw(target.endpoint, rng.choice(raw_payloads(rng))[1])
                        tally.add("raw bytes and broken greetings")
                continue
            kinds = {"server": (zmq.DEALER, zmq.REQ, zmq.PUSH, zmq.PUB), "reads": (zmq.DEALER, zmq.REQ, zmq.PUSH),
                     "frontend": (zmq.DEALER, zmq.PUSH, zmq.REQ),
                     "backend": (zmq.DEALER, zmq.SUB, zmq.XSUB), "pub": (zmq.SUB, zmq.XSUB, zmq.DEALER)}[target.kind]
            peer = zmq.PUB if target.kind == "pub" else zmq.ROUTER
            sockets = {kind: socks.connect(kind, target.endpoint, peer=peer) for kind in kinds}
            for _ in range(per_target):
                pick = rng.random()
                if pick < 0.08:
                    payload = rng.choice(raw_payloads(rng))[1]
                    send_raw(target.endpoint, payload)
                    tally.add("raw bytes and broken greetings")
                    continue
                kind = rng.choice(kinds)
                if target.kind in ("server", "reads") and pick < 0.6:
                    frames = [rng.choice(variants)[1]] if pick < 0.45 else [rng.choice(values)[1]]
                    family = "commands with a field wrong, bad values"
                elif target.kind == "frontend" and pick < 0.6:
                    frames = rng.choice(broken_batches(rng))[1]
                    family = "broken batches"
                elif target.kind == "backend" and pick < 0.6:
                    frames = rng.choice(broken_subscriptions(rng))[1]
                    family = "broken subscriptions"
                elif pick < 0.8:
                    doc = {rng.choice(("CMD", "QName", "x", "")): rng.choice(wrong_values())[1]
                           for _ in range(rng.randint(0, 4))}
                    frames = [_encode(doc)] * rng.randint(1, 3)
                    family = "random BSON"
                else:
                    frames = [os.urandom(rng.choice((0, 1, 5, 52, 300, 70_000))) for _ in range(rng.randint(1, 6))]
                    family = "random frames"
                socks.send(sockets[kind], frames)
                tally.add(family)
    finally:
        socks.close()
        ctx.term()
    return tally
