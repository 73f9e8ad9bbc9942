"""gcm's API behind the Dispatcher, without sockets or ZooKeeper: every management command with every field
of a wrong type, and with bad values, gets a reply and never an exception; standbys name the leader; the
look-up port serves look-ups only. The view is built here; a stand-in shell applies the outcomes."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import struct
import typing

import bson
import pytest
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp

from gcm._federation import Federation
from gcm._api import Api
from gcm._outcome import Outcome
from gcm._view import HostView, QueueView, View
from roq.wire import management as m
from roq.wire.control.links import LinkHello
from roq.wire.control import Message, Reply, encode
from roq.wire.documents import GcmDoc, HostDoc, MonitorDoc, QueueDoc
from roq.errors import Result, VersionConflictError
from roq.runtime import DropCounter
from roq.server import Dispatcher, Request
from roq.zk import Create, Delete, Paths, SetData

COMMANDS = sorted((c for c in (getattr(m, n) for n in m.__all__) if isinstance(c, type) and issubclass(c, Message)),
                  key=lambda c: c.CMD)
BASE = {"QName": "q1", "Cluster": "", "Host": "h1", "Exchanges": 1, "Exchange": "x1", "Reason": "", "Limit": 10, "Rules": {},
        "Thresholds": {}, "Evidence": {}, "Rule": {"principal": "bob", "permission": "publish"}, "Replica": "h2"}
WRONG: dict[str, object] = {
    "int": 7, "int64": Int64(7), "float": 1.5, "bool": True, "none": None, "text": "q1", "bytes": b"\x00\xff",
    "binary": Binary(b"x", 5), "list": [1, "a"], "document": {"a": 1}, "code": Code("q1"),
    "code with scope": Code("q1", {"a": 1}), "datetime": datetime.datetime(2020, 1, 1), "objectid": ObjectId(),
    "regex": Regex("q.*"), "decimal": Decimal128("1.5"), "minkey": MinKey(), "maxkey": MaxKey(),
    "timestamp": Timestamp(1, 1),
}
RIGHT = {str: {"text"}, int: {"int", "int64"}, dict: {"document"}}
BAD_VALUES = {
    str: ["", " ", "../etc", "x" * 65, "x" * 900_000, "\u00e9\u00e9", "a\x00b", "q1@x1"],
    int: [0, -1, -3, 2**63 - 1, -(2**63), 10**6],
    dict: [{"k" * 100_000: 1}, {"max_exchanges": -1}, {"cooldown_s": None}, {"nope": [1, {"a": None}]},
           {"min_exchanges": 64, "max_exchanges": 1}, {"x": "e" * 500_000}],
}


class Shell:
    """The GCM's side of the API: a view, leadership, and outcomes applied to nothing but checked."""

    def __init__(self, view: View, *, leading: bool = True) -> None:
        self.view = view
        self.leading = leading
        self.leader: GcmDoc | None = GcmDoc(id="gcm1", lookup="tcp://l:5000", management="tcp://l:5003")
        self.federation = Federation("", "")  # in no tree: a look-up of a cluster's queue is refused
        self.applied: list[Outcome] = []
        self.fail: Exception | None = None

    def apply(self, decide, request: Request, cmd: int) -> Reply | None:
        outcome = decide(self.view)
        assert isinstance(outcome, Outcome)
        assert all(isinstance(op, (Create, SetData, Delete)) and isinstance(op.path, str) for op in outcome.ops)
        if self.fail is not None:
            raise self.fail
        self.applied.append(outcome)
        if outcome.wait is not None:
            return outcome.wait.done(self.view.queues.get(outcome.wait.queue))
        return outcome.reply

    def read(self, path, decode):
        return None

    def ask_stats(self, queue: QueueView, request: Request) -> Reply | None:
        return Reply(data={"Queue": queue.summary().document()})


def _view() -> View:
    q1 = QueueView("q1", QueueDoc(host="h1", placement={"x1": "h1"}, next_exchange=2), version=1,
                   monitor=MonitorDoc(endpoint="tcp://h1:7000", host="h1"))
    hosts = {"h1": HostView("h1", HostDoc(address="h1", max_exchanges=4)), "h2": HostView("h2", HostDoc(address="h2"))}
    return View({"q1": q1}, hosts, {"h1": frozenset({"q1@monitor", "q1@x1"})}, Paths("/roq"))


def _dispatcher(shell: Shell, port: str = "management") -> Dispatcher:
    return Dispatcher(f"gcm {port}", Api(shell, clock=lambda: 1000.0).handlers(port),
                      DropCounter(logging.getLogger("test"), "test", interval=3600), max_bytes=m.MAX_REQUEST_BYTES)


def _ask(dispatcher: Dispatcher, doc: dict | bytes) -> Reply | None:
    body = doc if isinstance(doc, bytes) else bson.encode(doc)
    reply = dispatcher.dispatch(body, Request(None, ()))
    assert reply is None or isinstance(reply, Reply)
    if reply is not None:
        encode(reply)  # it can go on the wire
    return reply


def _fields(cls: type) -> list[tuple[str, type]]:
    hints = typing.get_type_hints(cls)
    return [(f.name, hints[f.name]) for f in dataclasses.fields(cls)]


def _wrong_cases():
    for cls in COMMANDS:
        for name, hint in _fields(cls):
            for kind, value in WRONG.items():
                if kind not in RIGHT[hint]:
                    yield pytest.param(cls, name, value, id=f"{cls.__name__}.{name}={kind}")


def test_every_management_command_is_served():
    served = set(Api(Shell(_view())).handlers("management"))
    assert served == set(COMMANDS) | {LinkHello} and len(COMMANDS) == 25  # and a child cluster's link's hello


@pytest.mark.parametrize("cls, field, value", list(_wrong_cases()))
def test_a_field_of_a_wrong_type_is_refused_naming_it(cls, field, value):
    shell = Shell(_view())
    dispatcher = _dispatcher(shell)
    reply = _ask(dispatcher, {"CMD": cls.CMD, **{n: BASE[n] for n, _ in _fields(cls)}, field: value})
    assert reply is not None and reply.result == Result.BAD_REQUEST and field in reply.comment, reply
    assert shell.applied == [] and dispatcher.failures == 0


def _bad_value_cases():
    for cls in COMMANDS:
        for name, hint in _fields(cls):
            for i, value in enumerate(BAD_VALUES[hint]):
                yield pytest.param(cls, name, value, id=f"{cls.__name__}.{name}#{i}")


@pytest.mark.parametrize("cls, field, value", list(_bad_value_cases()))
def test_a_bad_value_is_answered_and_no_handler_fails(cls, field, value):
    shell = Shell(_view())
    dispatcher = _dispatcher(shell)
    reply = _ask(dispatcher, {"CMD": cls.CMD, **{n: BASE[n] for n, _ in _fields(cls)}, field: value})
    assert dispatcher.failures == 0
    if reply is not None:
        assert reply.result != Result.FAIL and len(reply.comment) < 2000, reply.comment[:300]
        if reply.result != Result.OK:
            assert reply.comment  # every refusal says why


@pytest.mark.parametrize("value", [-3, 0, -(2**63)])
def test_negative_counts_are_bad_requests(value):
    dispatcher = _dispatcher(Shell(_view()))
    for doc in ({"CMD": 2003, "QName": "q2", "Host": "h1", "Exchanges": value},
                {"CMD": 2010, "QName": "q2", "Exchanges": value},
                {"CMD": 2017, "QName": "q1", "Exchanges": value},
                {"CMD": 2019, "QName": "q1", "Limit": value}):
        assert _ask(dispatcher, doc).result == Result.BAD_REQUEST


def test_code_where_text_is_expected_is_refused_on_both_ports():
    for port in ("lookup", "management"):
        reply = _ask(_dispatcher(Shell(_view()), port), {"CMD": 2000, "QName": Code("q1")})
        assert reply.result == Result.BAD_REQUEST and "QName" in reply.comment and "Code" in reply.comment


@pytest.mark.parametrize("value, kind", [(b"raw", "bytes"), (datetime.datetime(2020, 1, 1), "datetime"),
                                         (Binary(b"x", 0), "bytes"), (ObjectId(), "ObjectId"), (Code("x"), "Code")])
def test_evidence_holding_what_json_cannot_is_refused_naming_the_field(value, kind):
    reply = _ask(_dispatcher(Shell(_view())), {"CMD": 2015, "QName": "q1", "Thresholds": {"cooldown_s": 5},
                                               "Evidence": {"fit": {"samples": [1, value]}}})
    assert reply.result == Result.BAD_REQUEST and "Evidence.fit.samples[1]" in reply.comment and kind in reply.comment


def test_a_huge_request_is_refused_unread():
    shell = Shell(_view())
    reply = _ask(_dispatcher(shell), {"CMD": 2003, "QName": "q", "Host": "x" * (50 << 20)})
    assert reply.result == Result.BAD_REQUEST and "byte limit" in reply.comment and shell.applied == []


def test_deep_documents_are_refused():
    deep: dict = {"x": 1}
    for _ in range(40):
        deep = {"a": deep}
    assert _ask(_dispatcher(Shell(_view())), {"CMD": 2006, "QName": "q1", "Rules": deep}).result == Result.BAD_REQUEST
    levels = 100_000  # too deep for the BSON decoder itself: {"a": {"a": ... {}}}, level i is 5 + 8 i bytes
    inner = b"".join(struct.pack("<i", 5 + 8 * i) + b"\x03a\x00" for i in range(levels, 0, -1))
    inner += b"\x05\x00\x00\x00\x00" + b"\x00" * levels
    body = b"\x10CMD\x00" + struct.pack("<i", 2006) + b"\x03Rules\x00" + inner
    frame = struct.pack("<i", len(body) + 5) + body + b"\x00"
    assert _ask(_dispatcher(Shell(_view())), frame).result == Result.BAD_REQUEST


def test_garbage_frames_are_bad_requests():
    dispatcher = _dispatcher(Shell(_view()))
    for frame in (b"", b"\x00", b"\xff" * 64, bson.encode({"CMD": "2003"}), bson.encode({"QName": "q1"})):
        assert _ask(dispatcher, frame).result == Result.BAD_REQUEST
    assert _ask(dispatcher, {"CMD": 77777}).result == Result.UNKNOWN_COMMAND


def test_a_standby_names_the_leader_for_the_port_asked():
    shell = Shell(_view(), leading=False)
    for port, endpoint in (("lookup", "tcp://l:5000"), ("management", "tcp://l:5003")):
        reply = _ask(_dispatcher(shell, port), encode(m.Lookup(QName="q1")))
        assert reply.result == Result.NOT_LEADER and reply.data == {"Leader": endpoint, "LeaderId": "gcm1"}
        assert reply.comment == f"not the leader; the leader is gcm1 at {endpoint}"
    for cls in COMMANDS:
        msg = cls(**{n: BASE[n] for n, _ in _fields(cls)})
        assert _ask(_dispatcher(shell), encode(msg)).result == Result.NOT_LEADER
    shell.leader = None
    reply = _ask(_dispatcher(shell), encode(m.ListQueues()))
    assert reply.result == Result.NOT_LEADER and reply.data == {"Leader": "", "LeaderId": ""}
    assert shell.applied == []


def test_the_lookup_port_serves_lookups_only():
    dispatcher = _dispatcher(Shell(_view()), "lookup")
    ok = _ask(dispatcher, encode(m.Lookup(QName="q1")))
    assert ok.ok and ok.request == 2000 and ok.data["Monitor"] == "tcp://h1:7000"
    assert _ask(dispatcher, encode(m.CreateQueue(QName="q", Host="h1"))).result == Result.UNKNOWN_COMMAND
    assert _ask(dispatcher, encode(m.Lookup(QName="nope"))).result == Result.NOT_FOUND


def test_zookeeper_refusing_a_decision_is_unavailable_with_retry():
    shell = Shell(_view())
    shell.fail = VersionConflictError("a transaction: BadVersionError")
    reply = _ask(_dispatcher(shell), encode(m.ScaleOut(QName="q1", Exchanges=2)))
    assert reply.result == Result.UNAVAILABLE and reply.data.get("Retry") is True


def test_an_explicit_placement_beyond_the_hosts_maximum_writes_nothing():
    shell = Shell(_view())
    reply = _ask(_dispatcher(shell), encode(m.CreateQueue(QName="q2", Host="h1", Exchanges=4)))
    assert reply.result == Result.UNAVAILABLE and "h1: has room for 3 of the 4 exchanges asked" in reply.comment
    assert shell.applied == []
    made = _ask(_dispatcher(shell), encode(m.CreateQueue(QName="q2", Host="h1", Exchanges=3)))
    assert made is None and len(shell.applied) == 1  # written, and waiting for the processes
