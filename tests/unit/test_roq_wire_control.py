import bson
import pytest

from roq.wire import control
from roq.wire.control import Reply, Result, decode, encode
from roq.errors import (
    BadRequestError,
    ManagementError,
    NotFoundError,
    NotLeaderError,
    ProtocolError,
    UnavailableError,
    UnknownCommandError,
)


def test_every_message_round_trips():
    samples = [
        control.Heartbeat("x1", "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", 42, draining=True),
        control.ExchangeKpi("x1", 1.0, 10, 1000, 10, 1000, [control.PublisherRate("ab", 3, 30)], 12.5, 1 << 30, 0.25, 2),
        control.PublisherHello("ab", "x1", 3),
        control.Relocate("ab", "x2", "tcp://127.0.0.1:3", "relocate", 9),
        control.Moved("ab", "x2", 9, 4),
        control.Panic("ab", "x1", "silence"),
        control.SubscriberHello("cd", b"orders.", ["x1", "x2"]),
        control.Exchanges([control.ExchangeInfo("x1", "tcp://127.0.0.1:2")], ["x0"]),
        control.Prepare(9, "ab", "x1", "x2", "tcp://127.0.0.1:4"),
        control.Ready("cd", 9),
        control.Reply(40, 0, "ok", {"nested": {"a": [1, 2]}}),
        control.Ping(),
        control.Shutdown("bye"),
    ]
    for msg in samples:
        data = control.encode(msg)
        assert bson.decode(data)["CMD"] == msg.CMD
        assert control.decode(data) == msg


def test_original_command_numbers_are_kept():
    assert control.Relocate.CMD == 1
    assert control.PublisherHello.CMD == 2
    assert control.Panic.CMD == 3
    assert control.Heartbeat.CMD == 5
    assert control.ExchangeBye.CMD == 6
    assert control.PublisherBye.CMD == 7
    assert control.Shutdown.CMD == 1100


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "not a BSON document"),
        (b"\xff" * 40, "not a BSON document"),
        (control.encode(control.Ping())[:-1], "not a BSON document"),
        (bson.encode({"no": "cmd"}), "without an integer CMD"),
        (bson.encode({"CMD": "5"}), "without an integer CMD"),
        (bson.encode({"CMD": True}), "without an integer CMD"),
        (bson.encode({"CMD": 5, "exchange": "x"}), "lacks field 'frontend'"),
        (bson.encode({"CMD": 5, "exchange": 1, "frontend": "", "backend": "", "pid": 1}), "'exchange' must be text"),
        (bson.encode({"CMD": 5, "exchange": "x", "frontend": "", "backend": "", "pid": 1.5}), "'pid' must be an integer"),
        (bson.encode({"CMD": 30, "subscriber": "s", "prefix": b"", "confirmed": "x1"}), "'confirmed' must be a list"),
        (bson.encode({"CMD": 30, "subscriber": "s", "prefix": b"", "confirmed": [1]}), r"confirmed\[0\]"),
        (bson.encode({"CMD": 21, "exchange": "x", "period": 1, "records_in": 0, "bytes_in": 0, "records_out": 0,
                      "bytes_out": 0, "publishers": [{"publisher": "p"}], "cpu_percent": 0, "rss_bytes": 0,
                      "busy": 0, "dropped": 0}), "lacks field 'records'"),
    ],
)
def test_malformed_messages_are_rejected_with_the_reason(data, message):
    with pytest.raises(ProtocolError, match=message):
        control.decode(data)


def test_unknown_command_is_its_own_error():
    with pytest.raises(UnknownCommandError) as info:
        control.decode(bson.encode({"CMD": 4242}))
    assert info.value.cmd == 4242


def test_integers_beyond_bson_are_an_encoding_error():
    with pytest.raises(ProtocolError):
        control.encode(control.Ready("s", 2**70))


def test_the_package_exports_every_conversation_and_each_message_is_registered_once():
    import importlib
    import pkgutil

    modules = [importlib.import_module(f"roq.wire.control.{m.name}") for m in pkgutil.iter_modules(control.__path__)]
    names = [name for module in modules for name in module.__all__]
    assert sorted(names + ["Result"]) == sorted(control.__all__)
    assert all(getattr(control, name) is getattr(m, name) for m in modules for name in m.__all__)
    classes = [getattr(m, name) for m in modules for name in m.__all__
               if isinstance(getattr(m, name), type) and issubclass(getattr(m, name), control.Message)
               and getattr(m, name) is not control.Message]
    ours = {cmd: cls for cmd, cls in control.registered().items() if cls.__module__.startswith("roq.wire.control.")}
    assert {cls.CMD: cls for cls in classes} == ours  # (the GCM's register from roq.wire.management)


# ---------------------------------------------------------------------- replies


def test_a_reply_is_one_flat_document_that_round_trips():
    reply = Reply(request=2012, result=Result.OK, comment="done", data={"Leader": "tcp://h:1", "Queues": ["a", "b"]})
    assert bson.decode(encode(reply)) == {"CMD": 9000, "REQUEST": 2012, "RESULT": 0, "COMMENT": "done",
                                          "Leader": "tcp://h:1", "Queues": ["a", "b"]}
    assert decode(encode(reply)) == reply == Reply.parse(encode(reply))


def test_a_reply_of_the_original_system_without_cmd_parses_too():
    assert Reply.parse(bson.encode({"RESULT": 1104})) == Reply(result=1104)


@pytest.mark.parametrize("frame", [b"", b"garbage", b"\x05\x00\x00\x00", bson.encode({"a": 1})[:-1]])
def test_parse_of_garbage_raises_protocol_error(frame):
    with pytest.raises(ProtocolError):
        Reply.parse(frame)


@pytest.mark.parametrize("doc", [{"COMMENT": "x"}, {"RESULT": "0"}, {"RESULT": True}, {"RESULT": 1.0},
                                 {"RESULT": 0, "COMMENT": bson.Code("x")}, {"RESULT": 0, "REQUEST": "2000"}])
def test_a_reply_without_an_integer_result_or_with_a_comment_that_is_not_text_is_refused(doc):
    with pytest.raises(ProtocolError):
        Reply.parse(bson.encode(doc))


def test_reply_data_may_not_shadow_its_own_keys():
    with pytest.raises(ProtocolError, match="RESULT"):
        encode(Reply(result=0, data={"RESULT": 1}))


def test_raise_for_gives_the_data_of_a_success():
    assert Reply(result=Result.OK, data={"Exists": True}).raise_for() == {"Exists": True}


def test_not_leader_names_the_leader():
    with pytest.raises(NotLeaderError) as info:
        Reply(result=Result.NOT_LEADER, comment="standby", data={"Leader": "tcp://10.0.0.1:5000"}).raise_for()
    assert (info.value.leader, info.value.code, str(info.value)) == ("tcp://10.0.0.1:5000", 8, "standby")


@pytest.mark.parametrize(
    "code, kind",
    [(1101, ManagementError), (1102, BadRequestError), (1103, BadRequestError), (1104, NotFoundError),
     (1105, UnavailableError), (4242, ManagementError)],
)
def test_raise_for_maps_codes_to_error_classes(code, kind):
    with pytest.raises(ManagementError) as info:
        Reply(result=code, comment="why").raise_for()
    assert type(info.value) is kind and info.value.code == code and str(info.value) == "why"


def test_raise_for_without_comment_gives_the_code_in_the_message():
    with pytest.raises(UnavailableError, match="1105"):
        Reply(result=1105).raise_for()


# ---------------------------------------------------------------------- strict types (garbage that once killed)


@pytest.mark.parametrize("value", [bson.Code("q1"), bson.Code("q1", {"a": 1}), b"q1", 1, None, ["q1"], {"q": 1}])
def test_text_fields_take_text_only_not_a_bson_code_that_looks_like_it(value):
    with pytest.raises(ProtocolError, match="publisher"):
        decode(bson.encode({"CMD": 2, "publisher": value}))


def test_binary_and_int64_are_taken_as_their_builtin_types():
    msg = decode(bson.encode({"CMD": 30, "subscriber": "s", "prefix": bson.Binary(b"p", 0), "confirmed": [],
                              "records": bson.int64.Int64(5)}))
    assert type(msg.prefix) is bytes and type(msg.records) is int and msg.records == 5


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_numbers_must_be_finite(value):
    doc = {"CMD": 21, "exchange": "x", "period": value, "records_in": 0, "bytes_in": 0, "records_out": 0,
           "bytes_out": 0, "publishers": [], "cpu_percent": 0.0, "rss_bytes": 0, "busy": 0.0, "dropped": 0}
    with pytest.raises(ProtocolError, match="period"):
        decode(bson.encode(doc))


@pytest.mark.parametrize("evidence", [{"t": bson.Binary(b"x", 5)}, {"when": __import__("datetime").datetime(2026, 1, 1)},
                                      {"code": bson.Code("x")}, {"oid": bson.ObjectId()}])
def test_document_fields_hold_plain_json_only(evidence):
    with pytest.raises(ProtocolError, match="Evidence"):
        decode(bson.encode({"CMD": 2015, "QName": "q", "Thresholds": {}, "Evidence": evidence}))


def test_documents_nested_too_deep_are_refused():
    deep: dict = {}
    for _ in range(40):
        deep = {"a": deep}
    with pytest.raises(ProtocolError, match="nested"):
        decode(bson.encode({"CMD": 2006, "QName": "q", "Rules": deep}))


def test_a_durable_name_with_a_trailing_newline_is_refused_however_it_is_matched():
    assert control.DURABLE_NAME.fullmatch("reader-1:eu@a.b")
    assert control.DURABLE_NAME.match("reader-1\n") is None and control.DURABLE_NAME.fullmatch("reader-1\n") is None
