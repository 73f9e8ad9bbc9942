"""roq.wire.management: the GCM's requests and its configuration broadcast (sans-I/O)."""

from __future__ import annotations

import bson
import pytest

from roq.wire import management
from roq.wire.control import decode, encode
from roq.errors import ProtocolError, UnknownCommandError
from roq.wire.management import CreateQueue, ListQueues, SetRules, broadcast_frames, parse_broadcast


def test_broadcast_round_trips():
    queues = [{"Name": "q", "Exchanges": [{"Id": "x1"}]}]
    hosts = [{"Address": "h:1", "AssignedExchanges": 2}]
    frames = broadcast_frames(queues, hosts)
    assert len(frames) == 3
    assert bson.decode(frames[0]) == {"CMD": management.BROADCAST}
    assert parse_broadcast(frames) == (queues, hosts)


def test_empty_broadcast_round_trips():
    assert parse_broadcast(broadcast_frames([], [])) == ([], [])


@pytest.mark.parametrize("count", [0, 1, 2, 4])
def test_broadcast_with_a_wrong_frame_count_is_refused(count):
    frames = (broadcast_frames([], []) * 2)[:count]
    with pytest.raises(ProtocolError, match="3 frames"):
        parse_broadcast(frames)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_broadcast_with_a_non_bson_frame_is_refused(index):
    frames = broadcast_frames([], [])
    frames[index] = b"not bson"
    with pytest.raises(ProtocolError, match="not BSON"):
        parse_broadcast(frames)


@pytest.mark.parametrize(
    "frames",
    [
        [{"CMD": 1501}, {"Queues": []}, {"Hosts": []}],
        [{}, {"Queues": []}, {"Hosts": []}],
        [{"CMD": 1500}, {"Queues": {}}, {"Hosts": []}],
        [{"CMD": 1500}, {"Queues": []}, {"Hosts": "h"}],
        [{"CMD": 1500}, {"Hosts": []}, {"Queues": []}],
        [{"CMD": 1500}, {"Queues": []}, {}],
    ],
)
def test_broadcast_of_the_wrong_shape_is_refused(frames):
    with pytest.raises(ProtocolError, match="broadcast frames are not"):
        parse_broadcast([bson.encode(f) for f in frames])


def test_create_queue_request_round_trips():
    msg = CreateQueue(QName="q", Host="h:1", Exchanges=3)
    assert decode(encode(msg)) == msg


def test_create_queue_defaults_to_one_exchange():
    assert CreateQueue(QName="q", Host="h").Exchanges == 1
    decoded = decode(bson.encode({"CMD": 2003, "QName": "q", "Host": "h"}))
    assert decoded == CreateQueue(QName="q", Host="h", Exchanges=1)


@pytest.mark.parametrize("qname", [3, None, b"q", ["q"]])
def test_qname_of_the_wrong_type_raises_protocol_error(qname):
    with pytest.raises(ProtocolError, match="QName"):
        decode(bson.encode({"CMD": 2003, "QName": qname, "Host": "h"}))


def test_missing_required_field_raises_protocol_error():
    with pytest.raises(ProtocolError, match="Host"):
        decode(bson.encode({"CMD": 2003, "QName": "q"}))


def test_bool_exchanges_raises_protocol_error():
    with pytest.raises(ProtocolError, match="Exchanges"):
        decode(bson.encode({"CMD": 2003, "QName": "q", "Host": "h", "Exchanges": True}))


def test_set_rules_request_round_trips_its_document():
    msg = SetRules(QName="q", Rules={"max_exchanges": 3, "smoothing": 0.2})
    assert decode(encode(msg)) == msg


def test_request_without_arguments_round_trips():
    assert isinstance(decode(encode(ListQueues())), ListQueues)


def test_unregistered_management_command_raises_unknown_command():
    with pytest.raises(UnknownCommandError):
        decode(bson.encode({"CMD": 2999, "QName": "q"}))


# --------------------------------------------------------------------------- what the GCM says of the cluster


def test_a_queue_summary_is_made_from_its_documents_with_the_live_exchanges_by_slot():
    from roq.wire.documents import ExchangeDoc, MonitorDoc, QueueDoc

    doc = QueueDoc(state="running", host="h1", placement={"x1": "h1", "x2": "h2"})
    live = {"x2": ExchangeDoc(name="x2-00ff", host="h2", frontend="tcp://h2:1", backend="tcp://h2:2"),
            "x1": ExchangeDoc(host="h1")}
    summary = management.QueueSummary.of("q", doc, MonitorDoc(endpoint="tcp://h1:9", host="h1"), live)
    assert summary.document() == {
        "Name": "q", "Host": "h1", "State": "running", "Running": True, "Monitor": "tcp://h1:9",
        "Exchanges": [{"Id": "x1", "Name": "x1", "Host": "h1", "Frontend": "", "Backend": ""},
                      {"Id": "x2", "Name": "x2-00ff", "Host": "h2", "Frontend": "tcp://h2:1", "Backend": "tcp://h2:2"}],
    }
    stopped = management.QueueSummary.of("q", QueueDoc(state="stopped"), None, {})
    assert (stopped.Running, stopped.Monitor, stopped.Exchanges) == (False, "", [])
    assert management.QueueSummary.read(summary.document()) == summary


def test_a_host_summary_is_made_from_its_document_and_the_exchanges_placed_on_it():
    from roq.wire.documents import HostDoc, HostKpis

    doc = HostDoc(address="ignored", endpoint="tcp://h:1", max_exchanges=4, exchanges=2, monitors=1, cpus=0.5,
                  link_bytes_per_s=12.5e6,
                  kpis=HostKpis(cpu_percent=12.5, memory_percent=40.0, net_bytes_per_s=1e6, net_percent=4.0))
    summary = management.HostSummary.of("h", doc, 3)
    assert summary.document() == {"Address": "h", "Endpoint": "tcp://h:1", "MaxExchanges": 4, "AssignedExchanges": 3,
                                  "Exchanges": 2, "Monitors": 1, "Cpus": 0.5, "CpuPercent": 12.5, "MemoryPercent": 40.0,
                                  "NetBytesPerS": 1e6, "LinkBytesPerS": 12.5e6, "NetPercent": 4.0}
    assert management.HostSummary.read(summary.document()) == summary


@pytest.mark.parametrize("doc", [{"Name": bson.Code("q")}, {"Name": "q", "Exchanges": [{"Id": 3}]}, {"Name": "q", "Running": 1}, []])
def test_a_summary_of_the_wrong_shape_is_refused(doc):
    with pytest.raises(ProtocolError):
        management.QueueSummary.read(doc)


def test_a_broadcast_of_summaries_round_trips():
    queue = management.QueueSummary(Name="q", Exchanges=[management.ExchangeSummary(Id="x1")])
    host = management.HostSummary(Address="h", MaxExchanges=2)
    queues, hosts = parse_broadcast(broadcast_frames([queue], [host]))
    assert [management.QueueSummary.read(q) for q in queues] == [queue]
    assert [management.HostSummary.read(h) for h in hosts] == [host]
