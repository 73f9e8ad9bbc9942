import bson
import pytest

from roq import control
from roq.errors import ProtocolError, UnknownCommandError


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
