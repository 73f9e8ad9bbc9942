"""Control messages: one frozen dataclass per message, encoded as a BSON document with an int32 ``CMD``.

Control traffic between exchanges, monitors, host managers, GCMs and clients is one ZeroMQ frame holding one
BSON document. Each message class declares its command number with :func:`message`; :func:`encode` and
:func:`decode` are the only ways in and out, and :func:`decode` checks every field's presence and type
(:mod:`roq.shape`), so a process never acts on a half-understood command.

Every server answers with one :class:`Reply` type, encoded flat: ``{CMD: 9000, REQUEST: the command answered,
RESULT: int32, COMMENT: str, ...data}``. A management client that only reads ``RESULT`` and ``COMMENT`` (the
original system's reply) reads ours too.

Command numbers keep those of the original system where the command existed there (1 relocate, 2
publisher init, 3 panic, 5 heartbeat, 6 exchange shut down, 7 publisher disconnect, 1100 shutdown).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Callable, ClassVar, TypeVar, dataclass_transform

import bson
from bson.errors import BSONError

from roq import shape
from roq.errors import ManagementError, ProtocolError, Result, UnknownCommandError, error_for

__all__ = [
    "Result",
    "message",
    "encode",
    "decode",
    "decode_document",
    "registered",
    "Message",
    "Heartbeat",
    "ExchangeBye",
    "ExchangeKpi",
    "PublisherRate",
    "Shutdown",
    "KpiPeriod",
    "AclRules",
    "Journaling",
    "JournalHeartbeat",
    "JournalPolicy",
    "Fetch",
    "Fetched",
    "NO_CURSOR",
    "Commit",
    "DURABLE_NAME",
    "Position",
    "Verify",
    "Retarget",
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
    "REPLY",
    "refusal",
]

REPLY = 9000


class Message:
    """Base of every control message; subclasses are frozen dataclasses registered with :func:`message`."""

    CMD: ClassVar[int]

    def document(self) -> dict[str, Any]:
        """The message as the document that is encoded (``CMD`` first)."""
        return {"CMD": self.CMD, **shape.to_document(self)}

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Message:
        """Build the message from a decoded document (its ``CMD`` already matched).

        Raises:
            ProtocolError: a field is missing or of the wrong type.
        """
        return shape.read(cls, doc)


_REGISTRY: dict[int, type[Message]] = {}
M = TypeVar("M", bound=type)


@dataclass_transform(frozen_default=True)
def message(cmd: int) -> Callable[[M], M]:
    """Class decorator: make ``cls`` a frozen dataclass and register it under command number ``cmd``."""

    def register(cls: M) -> M:
        if cmd in _REGISTRY:
            raise ValueError(f"command {cmd} registered twice ({_REGISTRY[cmd].__name__}, {cls.__name__})")
        dc = dataclasses.dataclass(frozen=True)(cls)
        dc.CMD = cmd
        shape.compile_shape(dc)
        _REGISTRY[cmd] = dc
        return dc

    return register


def registered() -> dict[int, type[Message]]:
    """Every message class by command number (control messages, and the GCM's once :mod:`roq.management` is
    imported)."""
    return dict(_REGISTRY)


def encode(msg: Message) -> bytes:
    """Encode a control message as one BSON document.

    Raises:
        ProtocolError: a value cannot be represented in BSON (e.g. an integer beyond 64 bits).
    """
    try:
        return bson.encode(msg.document())
    except (BSONError, OverflowError, TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode {type(msg).__name__}: {exc}") from exc


def decode_document(data: bytes) -> dict[str, Any]:
    """The BSON document in ``data``.

    Raises:
        ProtocolError: not one BSON document.
    """
    try:
        doc = bson.decode(data)
    except (BSONError, ValueError, TypeError, OverflowError, IndexError, KeyError, RecursionError) as exc:
        raise ProtocolError(f"not a BSON document ({len(data)} bytes): {exc}") from exc
    if type(doc) is not dict:  # pragma: no cover - bson.decode gives a dict unless told otherwise
        raise ProtocolError("not a BSON document")
    return doc


def decode(data: bytes) -> Message:
    """Decode and validate one control message.

    Raises:
        UnknownCommandError: a valid document with a command number nobody registered (``cmd`` says which).
        ProtocolError: not BSON, no int ``CMD``, or a field missing or of the wrong type.
    """
    doc = decode_document(data)
    cmd = doc.get("CMD")
    if isinstance(cmd, bool) or not isinstance(cmd, int):
        raise ProtocolError(f"document without an integer CMD (got {type(cmd).__name__})")
    cls = _REGISTRY.get(cmd)
    if cls is None:
        err = UnknownCommandError(f"unknown command {cmd}")
        err.cmd = int(cmd)  # type: ignore[attr-defined]
        raise err
    return cls.from_document(doc)


# --------------------------------------------------------------------------- exchange <-> monitor


@message(5)
class Heartbeat(Message):
    """Exchange -> monitor, every heartbeat interval; also registers the exchange."""

    exchange: str
    frontend: str
    backend: str
    pid: int
    draining: bool = False
    permissions: str = "-"  # the digest of the permissions it holds (AclRules.digest); "" none yet; "-" plaintext
    journal: str = "?"  # the durability and journal it holds (Journaling.digest); "?" not told yet
    journal_end: int = -1  # its journal's end (next offset) as its last acknowledgement said; -1 none
    journal_waiting: int = 0  # bytes it sent its journal that the journal has not acknowledged yet


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


@message(1107)
class Retarget(Message):
    """Host manager -> its exchange (on the command pipe): the queue's monitor is now at ``monitor``."""

    monitor: str


@message(1106)
class KpiPeriod(Message):
    """Monitor -> exchange: report KPIs every ``period`` seconds from now on (the queue's ``kpi_period_s``)."""

    period: float


@message(1108)
class AclRules(Message):
    """Monitor -> exchange, when it joins, whenever they change and whenever its heartbeat shows others: the
    cluster's permissions (rule documents, :mod:`roq.acl`) for ``queue``, which the exchange holds every batch
    and subscription it reads to; ``enforced`` false: none are set, every key of the keyring may publish and
    subscribe."""

    rules: list[dict]
    queue: str = ""
    enforced: bool = True

    def digest(self) -> str:
        """A short digest of these permissions, for a heartbeat to say which the exchange holds."""
        text = json.dumps([self.rules, self.queue, self.enforced], sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@message(1109)
class Journaling(Message):
    """Monitor -> exchange, when it joins, whenever it changes and whenever its heartbeat shows another: the
    queue's durability and its journal's intake. With a journal the exchange sends it every batch it
    forwards and acknowledges a publisher only with what the journal acknowledged; ``durability`` "none" (and
    ``journal`` ""): the exchange acknowledges by itself. An exchange reads no publisher before it is told."""

    journal: str = ""
    durability: str = "none"

    def digest(self) -> str:
        """What an exchange's heartbeat says it holds: the durability, then the journal fed if any."""
        return f"{self.durability} {self.journal}".rstrip()


@message(8)
class JournalHeartbeat(Message):
    """Journal -> monitor, every heartbeat interval; also registers it: where its exchanges send (``intake``),
    where readers fetch (``reads``), which policy and permissions it holds (:meth:`JournalPolicy.digest`, ""
    none yet; :meth:`AclRules.digest`, "" none yet, "-" plaintext) and what it holds.

    ``first_offset``..``next_offset``: the records it keeps; ``unsynced_bytes``: written and not yet on disk;
    ``sync_ms``/``sync_max_ms``: its syncs' mean and longest since the last heartbeat; ``error``: why its
    last write failed ("" none since the last heartbeat)."""

    journal: str
    intake: str
    pid: int
    incarnation: int
    reads: str = ""
    policy: str = ""
    permissions: str = "-"
    first_offset: int = 0
    next_offset: int = 0
    size_bytes: int = 0
    segments: int = 0
    unsynced_bytes: int = 0
    records: int = 0
    duplicates: int = 0
    skipped: int = 0
    syncs: int = 0
    sync_ms: float = 0.0
    sync_max_ms: float = 0.0
    write_failures: int = 0
    error: str = ""


@message(1110)
class JournalPolicy(Message):
    """Monitor -> journal, when it joins, whenever the queue's rules change them and whenever its heartbeat
    shows others: how it acknowledges and syncs (``durability`` "interval" or "always", ``sync_interval_ms``)
    and what it keeps (``retention_bytes``, ``retention_s``; 0 = no bound).

    ``replaces``: how many times the queue's journal was started anew after its host was lost (0: never), the
    queue's journal *generation*: a journal of an earlier one (new and empty, or the files of a lost host that
    came back) begins past every offset the ones before may have given, and past ``last``, the highest offset
    its monitor heard of (neither is in the digest). A journal with a monitor journals nothing before the first
    policy."""

    durability: str = "always"
    sync_interval_ms: int = 100
    retention_bytes: int = 0
    retention_s: float = 0.0
    replaces: int = 0
    last: int = 0

    def digest(self) -> str:
        """A short digest of this policy, for a heartbeat to say which the journal holds."""
        return f"{self.durability}/{self.sync_interval_ms}/{self.retention_bytes}/{self.retention_s:g}"


# --------------------------------------------------------------------------- reader <-> journal


@message(50)
class Fetch(Message):
    """Reader -> journal (its reads port): the entries from ``offset`` (-1: from the first record appended at
    or after ``since``, seconds since the epoch; -2: from the end; -3: from where the answer to this reader's
    previous fetch ended, so that a reader keeps two in flight), about ``max_bytes`` of them whose key starts
    with ``prefix``. At the end, the journal waits up to ``wait_ms`` for more before it answers. ``subscriber``
    (its id, hex) names the seams the exchanges marked for it (see :data:`roq.batch.SEAM`)."""

    offset: int
    prefix: bytes = b""
    max_bytes: int = 1 << 20
    wait_ms: int = 0
    since: float = 0.0
    subscriber: str = ""


#: the error of a fetch that goes on from a previous one (offset -3) the journal does not know (it restarted)
NO_CURSOR = "no previous fetch to go on from"


@message(51)
class Fetched(Message):
    """Journal -> reader, the first frame of the answer to a :class:`Fetch`; ``count`` entries follow, three
    frames each (key, header, body: the batch as its publisher sent it), ``offsets`` giving each one's first
    record's offset. ``next_offset``: where the next fetch goes on (past entries the prefix skipped too);
    ``end_offset``, ``first_offset``: the journal's extent now; ``seams``: exchange -> the offset before which
    the journal holds everything that exchange forwarded before this subscriber's subscription to it went
    live; ``error``: why nothing could be read (a corrupt entry at ``next_offset``...), "" none."""

    next_offset: int
    end_offset: int
    first_offset: int
    count: int = 0
    start_offset: int = -1  # where this answer began
    offsets: list[int] = dataclasses.field(default_factory=list)
    seams: dict[str, int] = dataclasses.field(default_factory=dict)
    error: str = ""


#: a durable subscriber's name (its position in a journal is kept under it)
DURABLE_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,128}\Z")


@message(52)
class Commit(Message):
    """Reader -> journal: the durable subscriber ``name`` has processed everything before ``offset``; answered
    with a :class:`Reply` once the position is on disk."""

    name: str
    offset: int


@message(53)
class Position(Message):
    """Reader -> journal: where the durable subscriber ``name`` goes on; answered with a :class:`Reply` whose
    data is ``{"offset": int}`` (-1: it never committed)."""

    name: str


@message(54)
class Verify(Message):
    """Operator -> journal (its reads port): read every segment whole and say what does not check; answered with a
    :class:`Reply` whose data is ``{"problems": [...], "segments", "first_offset", "end_offset", "size_bytes"}``
    (the journal serves nothing else meanwhile: seconds for gigabytes)."""


# --------------------------------------------------------------------------- publisher <-> monitor


@message(2)
class PublisherHello(Message):
    """Publisher -> monitor at start and every heartbeat; ``exchange`` is "" until one is assigned.

    ``pressure``: the fraction of the time since the previous hello (0..1) that its batches waited for the
    exchange (its pipe full, or every batch it may have in flight unacknowledged): the demand the exchange
    does not serve, which its forwarded records/s cannot show.
    """

    publisher: str
    exchange: str = ""
    epoch: int = 0
    pressure: float = 0.0


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
    and the p50 / p99 end-to-end latency of their batches (ms; -1 = no batch), and every batch's latency
    counted in ``latency_buckets`` (one count per bound of :data:`LATENCY_BOUNDS_MS`, a batch counted under the
    first bound it does not exceed, then one for the batches above the last) with their sum,
    ``latency_sum_ms``; since it started, the ``gaps`` it found, the records ``lost`` in them and the
    ``duplicates`` it dropped. ``period`` 0 = no KPIs.
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
    latency_buckets: list[int] = dataclasses.field(default_factory=list)
    latency_sum_ms: float = 0.0
    journal: str = ""  # the queue's journal as it knows it (Exchanges.journal): a list comes when it differs


#: the upper bounds (ms) of the latency histogram subscribers count their batches in (SubscriberHello)
LATENCY_BOUNDS_MS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0)


@dataclasses.dataclass(frozen=True)
class ExchangeInfo:
    exchange: str
    backend: str


@message(32)
class Exchanges(Message):
    """Monitor -> subscriber: the live exchanges of the queue (sent on every change)."""

    exchanges: list[ExchangeInfo]
    lost: list[str]  # exchanges declared dead since the last list
    journal: str = ""  # where the queue's journal is read (its reads port); "" none


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


@message(REPLY)
class Reply(Message):
    """The answer to a request: ``result`` (a :class:`Result` code), ``comment`` (a sentence), ``data``.

    Encoded flat, ``{CMD: 9000, REQUEST, RESULT, COMMENT, **data}``, so the data's keys must be none of
    those four.
    """

    request: int = 0
    result: int = Result.OK
    comment: str = ""
    data: dict = dataclasses.field(default_factory=dict)

    _OWN: ClassVar[tuple[str, ...]] = ("CMD", "REQUEST", "RESULT", "COMMENT")

    def document(self) -> dict[str, Any]:
        clash = [k for k in self.data if k in self._OWN]
        if clash:
            raise ProtocolError(f"reply data may not use the keys {clash}")
        return {"CMD": REPLY, "REQUEST": int(self.request), "RESULT": int(self.result), "COMMENT": self.comment,
                **self.data}

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Reply:
        """A reply from its document; ``CMD`` and ``REQUEST`` may be missing (a reply of the original system).

        Raises:
            ProtocolError: no integer RESULT, or a COMMENT that is not text.
        """
        rest = {k: v for k, v in doc.items() if k not in cls._OWN}
        result, request, comment = doc.get("RESULT"), doc.get("REQUEST", 0), doc.get("COMMENT", "")
        if isinstance(result, bool) or not isinstance(result, int):
            raise ProtocolError("reply without an integer RESULT")
        if isinstance(request, bool) or not isinstance(request, int):
            raise ProtocolError("reply with a REQUEST that is not an integer")
        if type(comment) is not str:
            raise ProtocolError("reply with a COMMENT that is not text")
        return cls(request=int(request), result=int(result), comment=comment, data=shape.json_value(rest, "reply", binary=True))

    @classmethod
    def parse(cls, frame: bytes) -> Reply:
        """Decode a reply frame (with or without ``CMD``).

        Raises:
            ProtocolError: not a reply.
        """
        return cls.from_document(decode_document(frame))

    @property
    def ok(self) -> bool:
        return self.result == Result.OK

    def raise_for(self) -> dict[str, Any]:
        """The data of a successful reply; raise the :class:`~roq.errors.ManagementError` of a refusal."""
        if self.result != Result.OK:
            raise error_for(self.result, self.comment, self.data)
        return self.data


def refusal(exc: ManagementError, request: int = 0) -> Reply:
    """The reply that answers a request refused with ``exc``."""
    return Reply(request=request, result=exc.code, comment=str(exc), data=exc.data)
