"""Control messages: one frozen dataclass per message, encoded as a BSON document with an int32 ``CMD``.

Control traffic between exchanges, monitors and clients is one ZeroMQ frame holding one BSON document.
Each message class declares its command number with :func:`message`; :func:`encode` and :func:`decode`
are the only ways in and out, and :func:`decode` checks every field's presence and type, so a process
never acts on a half-understood command.

Command numbers keep those of the original system where the command existed there (1 relocate, 2
publisher init, 3 panic, 5 heartbeat, 6 exchange shut down, 7 publisher disconnect, 1100 shutdown).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Callable, ClassVar, TypeVar

import bson
from bson.errors import BSONError

from roq.errors import ProtocolError, UnknownCommandError

__all__ = [
    "Result",
    "message",
    "encode",
    "decode",
    "Message",
    "Heartbeat",
    "ExchangeBye",
    "ExchangeKpi",
    "PublisherRate",
    "Shutdown",
    "PublisherHello",
    "Relocate",
    "Moved",
    "Panic",
    "PublisherBye",
    "NoExchange",
    "SubscriberHello",
    "ExchangeInfo",
    "Exchanges",
    "Prepare",
    "Ready",
    "SubscriberBye",
    "Ping",
    "Status",
    "ForceRelocate",
    "Reply",
]


class Result(enum.IntEnum):
    """RESULT codes of replies. 0 is success."""

    OK = 0
    NOT_LEADER = 8
    FAIL = 1101
    BAD_REQUEST = 1102
    UNKNOWN_COMMAND = 1103
    NOT_FOUND = 1104
    UNAVAILABLE = 1105


class Message:
    """Base of every control message; subclasses are frozen dataclasses registered with :func:`message`."""

    CMD: ClassVar[int]
    _fields: ClassVar[tuple[tuple[str, Callable[[Any, str], Any], bool], ...]]


_REGISTRY: dict[int, type[Message]] = {}
M = TypeVar("M", bound=type)


def message(cmd: int) -> Callable[[M], M]:
    """Class decorator: make ``cls`` a frozen dataclass and register it under command number ``cmd``."""

    def register(cls: M) -> M:
        if cmd in _REGISTRY:
            raise ValueError(f"command {cmd} registered twice ({_REGISTRY[cmd].__name__}, {cls.__name__})")
        dc = dataclasses.dataclass(frozen=True)(cls)
        dc.CMD = cmd
        _compile(dc)
        _REGISTRY[cmd] = dc
        return dc

    return register


def _compile(cls: type) -> None:
    hints = typing.get_type_hints(cls)
    spec = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        spec.append((f.name, _checker(hints[f.name]), required))
    cls._fields = tuple(spec)


def _checker(hint: Any) -> Callable[[Any, str], Any]:
    """Return a function that validates (and, for nested records, builds) a decoded value of type ``hint``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = _checker(args[0])
        return lambda v, name: None if v is None else inner(v, name)
    if origin is list:
        (item_hint,) = typing.get_args(hint)
        item = _checker(item_hint)

        def check_list(v: Any, name: str) -> list:
            if not isinstance(v, list):
                raise ProtocolError(f"field {name!r} must be a list, got {type(v).__name__}")
            return [item(x, f"{name}[{i}]") for i, x in enumerate(v)]

        return check_list
    if dataclasses.is_dataclass(hint):
        _compile(hint)
        return lambda v, name: _build(hint, v, name)
    if hint is float:

        def check_float(v: Any, name: str) -> float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ProtocolError(f"field {name!r} must be a number, got {type(v).__name__}")
            return float(v)

        return check_float
    if hint is int:

        def check_int(v: Any, name: str) -> int:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ProtocolError(f"field {name!r} must be an integer, got {type(v).__name__}")
            return v

        return check_int
    if hint in (str, bool, bytes, dict):

        def check_plain(v: Any, name: str) -> Any:
            if not isinstance(v, hint):
                raise ProtocolError(f"field {name!r} must be {hint.__name__}, got {type(v).__name__}")
            return v

        return check_plain
    raise TypeError(f"unsupported field type {hint!r}")


def _build(cls: type, doc: Any, where: str) -> Any:
    if not isinstance(doc, dict):
        raise ProtocolError(f"{where or cls.__name__} must be a document, got {type(doc).__name__}")
    values = {}
    for name, check, required in cls._fields:
        if name in doc:
            values[name] = check(doc[name], f"{where}.{name}" if where else name)
        elif required:
            raise ProtocolError(f"{cls.__name__} lacks field {name!r}")
    return cls(**values)


def _to_doc(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _to_doc(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [_to_doc(x) for x in obj]
    return obj


def encode(msg: Message) -> bytes:
    """Encode a control message as one BSON document.

    Raises:
        ProtocolError: a value cannot be represented in BSON (e.g. an integer beyond 64 bits).
    """
    doc = {"CMD": msg.CMD}
    doc.update(_to_doc(msg))
    try:
        return bson.encode(doc)
    except (BSONError, OverflowError, TypeError) as exc:
        raise ProtocolError(f"cannot encode {type(msg).__name__}: {exc}") from exc


def decode(data: bytes) -> Message:
    """Decode and validate one control message.

    Raises:
        UnknownCommandError: a valid document with a command number nobody registered.
        ProtocolError: not BSON, no int ``CMD``, or a field missing or of the wrong type.
    """
    try:
        doc = bson.decode(data)
    except (BSONError, ValueError, TypeError, OverflowError, IndexError, KeyError) as exc:
        raise ProtocolError(f"not a BSON document ({len(data)} bytes): {exc}") from exc
    cmd = doc.get("CMD")
    if isinstance(cmd, bool) or not isinstance(cmd, int):
        raise ProtocolError(f"document without an integer CMD (got {type(cmd).__name__})")
    cls = _REGISTRY.get(cmd)
    if cls is None:
        err = UnknownCommandError(f"unknown command {cmd}")
        err.cmd = cmd  # type: ignore[attr-defined]
        raise err
    return _build(cls, doc, "")


# --------------------------------------------------------------------------- exchange <-> monitor


@message(5)
class Heartbeat(Message):
    """Exchange -> monitor, every heartbeat interval; also registers the exchange."""

    exchange: str
    frontend: str
    backend: str
    pid: int
    draining: bool = False


@message(6)
class ExchangeBye(Message):
    """Exchange -> monitor: the exchange is stopping; move its publishers now."""

    exchange: str


@dataclasses.dataclass(frozen=True)
class PublisherRate:
    publisher: str  # hex id
    records: int
    bytes: int


@message(21)
class ExchangeKpi(Message):
    """Exchange -> monitor, every KPI period: counts over the last ``period`` seconds."""

    exchange: str
    period: float
    records_in: int
    bytes_in: int
    records_out: int
    bytes_out: int
    publishers: list[PublisherRate]
    cpu_percent: float
    rss_bytes: int
    busy: float  # fraction of the period the forward loop spent working (0..1)
    dropped: int  # malformed frames dropped in the period


@message(1100)
class Shutdown(Message):
    """Monitor -> exchange: stop."""

    reason: str = ""


@message(1106)
class KpiPeriod(Message):
    """Monitor -> exchange: report KPIs every ``period`` seconds from now on (the queue's ``kpi_period_s``)."""

    period: float


# --------------------------------------------------------------------------- publisher <-> monitor


@message(2)
class PublisherHello(Message):
    """Publisher -> monitor at start and every heartbeat; ``exchange`` is "" until one is assigned."""

    publisher: str
    exchange: str = ""
    epoch: int = 0


@message(1)
class Relocate(Message):
    """Monitor -> publisher: send through ``exchange`` from now on.

    ``reason`` is "assign" (first exchange), "relocate" (make before break: marker through the old one)
    or "failover" (the old exchange is dead: resend the unacknowledged window).
    """

    publisher: str
    exchange: str
    frontend: str
    reason: str
    relocation: int = 0


@message(10)
class Moved(Message):
    """Publisher -> monitor: the move ``relocation`` is complete."""

    publisher: str
    exchange: str
    relocation: int
    epoch: int


@message(3)
class Panic(Message):
    """Publisher -> monitor: ``exchange`` stopped acknowledging; give me another one."""

    publisher: str
    exchange: str
    reason: str = ""


@message(7)
class PublisherBye(Message):
    publisher: str


@message(12)
class NoExchange(Message):
    """Monitor -> publisher: no live exchange right now; keep buffering, one will be assigned."""

    publisher: str
    comment: str = ""


# --------------------------------------------------------------------------- subscriber <-> monitor


@message(30)
class SubscriberHello(Message):
    """Subscriber -> monitor at start and every heartbeat; ``confirmed`` lists the exchanges it hears.

    Its KPIs ride along: over the ``period`` seconds since its previous hello, the ``records`` it delivered
    and the p50 / p99 end-to-end latency of their batches (ms; -1 = no batch); since it started, the
    ``gaps`` it found, the records ``lost`` in them and the ``duplicates`` it dropped. ``period`` 0 = no KPIs.
    """

    subscriber: str
    prefix: bytes
    confirmed: list[str]
    period: float = 0.0
    records: int = 0
    latency_p50_ms: float = -1.0
    latency_p99_ms: float = -1.0
    gaps: int = 0
    lost: int = 0
    duplicates: int = 0


@dataclasses.dataclass(frozen=True)
class ExchangeInfo:
    exchange: str
    backend: str


@message(32)
class Exchanges(Message):
    """Monitor -> subscriber: the live exchanges of the queue (sent on every change)."""

    exchanges: list[ExchangeInfo]
    lost: list[str]  # exchanges declared dead since the last list


@message(33)
class Prepare(Message):
    """Monitor -> subscriber: ``publisher`` is about to move from ``source`` to ``target``."""

    relocation: int
    publisher: str
    source: str
    target: str
    target_backend: str


@message(34)
class Ready(Message):
    """Subscriber -> monitor: noted ``relocation`` and hears its target exchange."""

    subscriber: str
    relocation: int


@message(35)
class SubscriberBye(Message):
    subscriber: str


# --------------------------------------------------------------------------- administration


@message(42)
class Ping(Message):
    """Anyone -> monitor: are you there? Answered with a :class:`Reply`."""


@message(40)
class Status(Message):
    """Anyone -> monitor: the queue's state, counters and recent events, in a :class:`Reply`."""


@message(41)
class ForceRelocate(Message):
    """Operator -> monitor: move a publisher now ("" = the busiest one; target "" = the least loaded)."""

    publisher: str = ""
    target: str = ""


@message(9000)
class Reply(Message):
    """Reply to a request; ``result`` is a :class:`Result` code, ``comment`` a human sentence."""

    request: int
    result: int
    comment: str = ""
    data: dict = dataclasses.field(default_factory=dict)
