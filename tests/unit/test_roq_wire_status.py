"""A monitor's status: decoded once and checked field by field (a malformed one is a ProtocolError naming the
field), then summed over its exchanges and live subscribers. (What a monitor builds decodes and reads back:
tests/unit/test_monitor_operators.py.)"""

from __future__ import annotations

import pytest

from roq.errors import ProtocolError
from roq.wire.shape import to_document
from roq.wire.status import Shown, decode, latency, of_stats, rate, traffic
from tests.unit.standins import queue_status

STATUS = to_document(queue_status(
    exchanges=[{"id": "x1", "records_per_s": 10.0, "records_out_per_s": 20.0}, {"id": "x2", "bytes_per_s": 5.0}],
    publishers=[{"id": "p1"}, {"id": "p2"}],
    subscribers=[{"id": "s1", "live": True, "latency_p50_ms": 3.0, "latency_p99_ms": 9.0},
                 {"id": "s2", "live": True, "latency_p50_ms": 1.0, "latency_p99_ms": 4.0},
                 {"id": "s3", "live": True, "latency_p50_ms": -1.0, "latency_p99_ms": -1.0},
                 {"id": "s4", "live": True},
                 {"id": "s5", "live": False, "latency_p50_ms": 50.0, "latency_p99_ms": 90.0}],
    counters={"relocations": 4},
))


def test_traffic_and_latency_of_a_status_and_of_none():
    status = decode(STATUS)
    assert traffic(status) == {"records_in_per_s": 10.0, "records_out_per_s": 20.0, "bytes_in_per_s": 5.0,
                               "bytes_out_per_s": 0.0, "publishers": 2, "subscribers": 4}
    assert latency(status) == {"p50_median": 3.0, "p99_max": 9.0}  # the silent, the new and the gone ones left out
    assert latency(None) == {"p50_median": None, "p99_max": None} and traffic(None)["subscribers"] == 0
    assert rate(None, "records_per_s") == 0 and status.count("relocations") == 4 and status.count("flaps") == 0
    with pytest.raises(ValueError):
        rate(status, "pid")


def test_a_status_reads_back_as_it_came_and_says_what_was_cut():
    assert to_document(decode(STATUS)) == STATUS
    cut = decode({**STATUS, "truncated": {"publishers": {"shown": 2, "total": 9}}})
    assert cut.shown("publishers") == Shown(shown=2, total=9) and cut.shown("exchanges") is None
    assert decode(STATUS).shown("publishers") is None and "truncated" not in STATUS
    assert of_stats({"Queue": {}, "Monitor": STATUS}) == decode(STATUS) and of_stats({"Queue": {}}) is None


@pytest.mark.parametrize("change, says", [
    (lambda d: d.pop("counters"), "QueueStatus lacks field 'counters'"),
    (lambda d: d["exchanges"][0].pop("busy"), r"status.exchanges\[0\]: ExchangeStatus lacks field 'busy'"),
    (lambda d: d.update(pid="7"), "field 'status.pid' must be an integer, got str"),
    (lambda d: d.update(pid=7.0), "field 'status.pid' must be an integer, got float"),
    (lambda d: d["exchanges"][1].update(records_per_s=True), r"'status.exchanges\[1\].records_per_s' must be a number, got bool"),
    (lambda d: d["subscribers"][0].update(lost=False), r"'status.subscribers\[0\].lost' must be an integer, got bool"),
    (lambda d: d["totals"].update(records_in=2**64), "'status.totals.records_in' does not fit in 64 bits"),
    (lambda d: d["journal"].update(alive=1), "'status.journal.alive' must be true or false, got int"),
    (lambda d: d.update(subscribers={"s1": {}}), "'status.subscribers' must be a list, got dict"),
    (lambda d: d["subscribers"][0].update(prefix="text"), r"'status.subscribers\[0\].prefix' must be binary"),
    (lambda d: d["counters"].update(relocations=1.5), "'status.counters.relocations' must be an integer"),
    (lambda d: d["latency_histogram"]["counts"].pop(), "a latency histogram of 14 bounds has 14 counts, not 15"),
    (lambda d: d.update(events=[{"seq": 1, "time": 0.5, "kind": "relocated"}]),
     r"status.events\[0\]: Event lacks field 'text'"),
    (lambda d: d.update(events=[{"seq": "1", "time": 0.5, "kind": "k", "text": ""}]), r"'status.events\[0\].seq'"),
    (lambda d: d.update(truncated={"events": {"shown": 1}}), "status.truncated.events: Shown lacks field 'total'"),
])
def test_a_malformed_status_is_a_protocol_error_naming_the_field(change, says):
    doc = to_document(decode(STATUS))  # a copy to spoil
    change(doc)
    with pytest.raises(ProtocolError, match=says):
        decode(doc)


@pytest.mark.parametrize("garbage", [None, [], "status", {"Exchanges": 1}])
def test_what_is_not_a_status_document_at_all_is_a_protocol_error(garbage):
    with pytest.raises(ProtocolError):
        decode(garbage)
