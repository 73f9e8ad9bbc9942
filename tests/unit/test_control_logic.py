"""Pure logic of the control plane: rules, settings, the GCM's protocol, znode names, placement, ports.

No process, no ZooKeeper, no mocks: every function here is called on values built in the test (the port
allocator binds loopback sockets of the test's own).
"""

from __future__ import annotations

import dataclasses
import math
import socket

import bson
import pytest

from gcm._placement import choose_host
from gcm._view import HostView, QueueView, View, broadcast_docs
from hostmanager._children import Assignment
from hostmanager._ports import PortAllocator
from roq import management
from roq.control import Result, decode, encode
from roq.errors import (
    BadRequestError,
    BrokerConnectionError,
    ConfigError,
    ManagementError,
    NotFoundError,
    NotLeaderError,
    ProtocolError,
    UnavailableError,
    UnknownCommandError,
)
from roq.management import CreateQueue, ListQueues, SetRules, broadcast_frames, parse_broadcast, parse_reply, raise_for, reply
from roq.rules import DEFAULT_RULES, check_thresholds, merge_rules
from roq.settings import build, read_toml
from roq.zk import Paths, check_hosts, check_queue_name, dumps, loads

# =========================================================================== roq.rules


def test_empty_update_gives_the_defaults_as_a_fresh_copy():
    merged = merge_rules(None, {})
    assert merged == DEFAULT_RULES
    merged["max_exchanges"] = 99
    assert DEFAULT_RULES["max_exchanges"] == 4


def test_whole_float_is_coerced_to_int_for_an_int_rule():
    merged = merge_rules(None, {"max_exchanges": 6.0})
    assert merged["max_exchanges"] == 6
    assert type(merged["max_exchanges"]) is int


def test_int_is_coerced_to_float_for_a_float_rule():
    merged = merge_rules(None, {"smoothing": 1})
    assert merged["smoothing"] == 1.0
    assert type(merged["smoothing"]) is float


def test_update_keeps_the_current_rules_it_does_not_name():
    current = merge_rules(None, {"max_exchanges": 7, "cooldown_s": 3.0})
    merged = merge_rules(current, {"smoothing": 0.25})
    assert (merged["max_exchanges"], merged["cooldown_s"], merged["smoothing"]) == (7, 3.0, 0.25)


def test_unknown_keys_of_current_rules_are_dropped():
    assert "legacy" not in merge_rules({"legacy": 1}, {})


def test_fractional_value_of_an_int_rule_is_refused_by_name():
    with pytest.raises(ConfigError, match="'max_exchanges'.*whole"):
        merge_rules(None, {"max_exchanges": 2.5})


@pytest.mark.parametrize(
    "key, value",
    [
        ("min_exchanges", 0),
        ("publishers_per_exchange", -1),
        ("host_cpu_percent", 100.5),
        ("host_memory_percent", 0.5),
        ("smoothing", 0.0),
        ("smoothing", 1.01),
        ("kpi_period_s", 0.01),
        ("sustain_s", 3601),
        ("cooldown_s", -0.1),
    ],
)
def test_out_of_range_value_is_refused_by_name(key, value):
    with pytest.raises(ConfigError, match=repr(key)):
        merge_rules(None, {key: value})


@pytest.mark.parametrize(
    "key, value",
    [("smoothing", 0.01), ("smoothing", 1.0), ("host_cpu_percent", 100), ("publishers_per_exchange", 0),
     ("sustain_s", 0.5), ("cooldown_s", 1), ("kpi_period_s", 0.25), ("max_exchanges", 256)],
)
def test_range_bounds_are_inclusive(key, value):
    assert merge_rules(None, {key: value})[key] == value


@pytest.mark.parametrize(
    "key, value",
    [("max_exchanges", 2**40), ("exchange_records_per_s", 1), ("kpi_period_s", 0.05), ("sustain_s", 0),
     ("cooldown_s", 0), ("min_exchanges", 65), ("scale_out_records_per_s", 5), ("host_cpu_percent", 5)],
)
def test_values_that_were_accepted_once_and_made_no_sense_are_refused_with_the_range(key, value):
    with pytest.raises(ConfigError, match=rf"'{key}' must be .*between"):
        merge_rules(None, {key: value})


def test_unknown_rule_is_refused_by_name():
    with pytest.raises(ConfigError, match="unknown rule 'max_exchange'"):
        merge_rules(None, {"max_exchange": 3})


def test_min_above_max_in_one_update_is_refused():
    with pytest.raises(ConfigError, match="min_exchanges.*max_exchanges"):
        merge_rules(None, {"min_exchanges": 5, "max_exchanges": 3})


def test_min_above_the_current_max_is_refused():
    current = merge_rules(None, {"max_exchanges": 2})
    with pytest.raises(ConfigError, match="min_exchanges"):
        merge_rules(current, {"min_exchanges": 3})


def test_min_and_max_raised_together_are_accepted():
    merged = merge_rules(None, {"min_exchanges": 6, "max_exchanges": 8})
    assert (merged["min_exchanges"], merged["max_exchanges"]) == (6, 8)


@pytest.mark.parametrize("value", [True, False])
def test_bool_is_refused_for_a_numeric_rule(value):
    with pytest.raises(ConfigError, match="'max_exchanges'"):
        merge_rules(None, {"max_exchanges": value})


@pytest.mark.parametrize("value", ["3", None, [3], {"v": 3}])
def test_non_number_is_refused_by_name(value):
    with pytest.raises(ConfigError, match="'cooldown_s'.*number"):
        merge_rules(None, {"cooldown_s": value})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_for_a_float_rule(value):
    with pytest.raises(ConfigError, match="'exchange_records_per_s'"):
        merge_rules(None, {"exchange_records_per_s": value})


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_nan_and_infinity_are_refused_for_an_int_rule(value):
    with pytest.raises(ConfigError, match="'max_exchanges'"):
        merge_rules(None, {"max_exchanges": value})


def test_a_refused_update_leaves_the_current_rules_untouched():
    current = merge_rules(None, {"max_exchanges": 6})
    before = dict(current)
    with pytest.raises(ConfigError):
        merge_rules(current, {"max_exchanges": 8, "smoothing": 2.0})
    assert current == before


def test_an_accepted_update_does_not_mutate_the_current_rules():
    current = merge_rules(None, {})
    before = dict(current)
    merge_rules(current, {"max_exchanges": 9})
    assert current == before


@pytest.mark.parametrize("update", [None, [("smoothing", 0.5)], "smoothing=0.5"])
def test_rules_that_are_not_a_document_are_refused(update):
    with pytest.raises(ConfigError, match="document"):
        merge_rules(None, update)


def test_an_integer_too_large_for_a_float_rule_is_refused_as_config_error():
    with pytest.raises(ConfigError, match="exchange_records_per_s"):
        merge_rules(None, {"exchange_records_per_s": 10**400})


def test_thresholds_are_checked_and_coerced_without_defaults():
    assert check_thresholds({"exchange_records_per_s": 5000, "max_exchanges": 3.0}) == {
        "exchange_records_per_s": 5000.0,
        "max_exchanges": 3,
    }
    assert check_thresholds({}) == {}


def test_unknown_threshold_is_refused_by_name():
    with pytest.raises(ConfigError, match="unknown threshold 'records'"):
        check_thresholds({"records": 1.0})


@pytest.mark.parametrize("value", [0.0, True, "1", math.nan])
def test_bad_threshold_value_is_refused(value):
    with pytest.raises(ConfigError, match="exchange_records_per_s"):
        check_thresholds({"exchange_records_per_s": value})


def test_thresholds_that_are_not_a_document_are_refused():
    with pytest.raises(ConfigError, match="document"):
        check_thresholds([1.0])


# =========================================================================== roq.settings


@dataclasses.dataclass(frozen=True)
class _Settings:
    name: str
    port: int = 5000
    ratio: float = 0.5
    verbose: bool = False
    peers: tuple[str, ...] = ()


def test_build_takes_typed_values_from_the_section():
    file = {"svc": {"name": "a", "port": 7, "ratio": 2, "verbose": True, "peers": ["x", "y"]}}
    s = build(_Settings, file=file, section="svc")
    assert s == _Settings("a", 7, 2.0, True, ("x", "y"))
    assert type(s.ratio) is float and type(s.peers) is tuple


def test_build_uses_defaults_for_keys_not_given():
    assert build(_Settings, file={"svc": {"name": "a"}}, section="svc") == _Settings("a")


def test_build_ignores_other_sections():
    assert build(_Settings, file={"svc": {"name": "a"}, "other": {"zzz": 1}}, section="svc").name == "a"


def test_unknown_key_is_named_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"roq\.toml: \[svc\] unknown key 'prot' \(did you mean 'port'\?\)"):
        build(_Settings, file={"svc": {"name": "a", "prot": 1}}, section="svc", source="roq.toml")


def test_unknown_key_without_a_close_match_lists_the_known_keys():
    with pytest.raises(ConfigError, match="unknown key 'zzzz'; known keys: name, peers, port, ratio, verbose"):
        build(_Settings, file={"svc": {"name": "a", "zzzz": 1}}, section="svc")


@pytest.mark.parametrize(
    "key, value",
    [("port", "80"), ("port", True), ("port", 1.5), ("ratio", "0.5"), ("ratio", False), ("verbose", 1),
     ("name", 3), ("peers", "x"), ("peers", ["x", 2])],
)
def test_wrong_type_is_named_with_section_and_key(key, value):
    with pytest.raises(ConfigError, match=rf"f\.toml: \[svc\] key '{key}' must be"):
        build(_Settings, file={"svc": {"name": "a", key: value}}, section="svc", source="f.toml")


def test_missing_required_key_is_named():
    with pytest.raises(ConfigError, match=r"\[svc\] missing key 'name'.*--name"):
        build(_Settings, file={"svc": {"port": 1}}, section="svc")


def test_missing_section_still_requires_the_required_key():
    with pytest.raises(ConfigError, match="missing key 'name'"):
        build(_Settings, file={}, section="svc")


def test_flags_override_the_file():
    s = build(_Settings, file={"svc": {"name": "a", "port": 1, "verbose": True}}, section="svc",
              flags={"port": 2, "verbose": False, "peers": ["p"]})
    assert (s.port, s.verbose, s.peers) == (2, False, ("p",))


def test_none_flags_are_ignored():
    s = build(_Settings, file={"svc": {"name": "a", "port": 1}}, section="svc", flags={"port": None, "name": None})
    assert (s.name, s.port) == ("a", 1)


def test_flags_alone_can_give_the_required_key():
    assert build(_Settings, flags={"name": "b", "ratio": 3}, section="svc") == _Settings("b", ratio=3.0)


def test_wrong_type_of_a_flag_names_the_option():
    with pytest.raises(ConfigError, match="option --port must be an integer"):
        build(_Settings, flags={"name": "a", "port": "x"}, section="svc")


def test_a_section_that_is_not_a_table_is_refused():
    with pytest.raises(ConfigError, match=r"\[svc\] must be a table"):
        build(_Settings, file={"svc": 3}, section="svc")


def test_read_toml_parses_a_file(tmp_path):
    path = tmp_path / "roq.toml"
    path.write_text('[svc]\nname = "a"\nport = 9\npeers = ["h:1", "h:2"]\n')
    s = build(_Settings, file=read_toml(str(path)), section="svc", source=str(path))
    assert s == _Settings("a", 9, peers=("h:1", "h:2"))


def test_read_toml_of_an_invalid_file_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[svc\nname = \n")
    with pytest.raises(ConfigError, match=r"broken\.toml: not valid TOML"):
        read_toml(str(path))


def test_read_toml_of_a_missing_file_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"absent\.toml: cannot read"):
        read_toml(str(tmp_path / "absent.toml"))


def test_an_error_in_a_read_file_names_the_file(tmp_path):
    path = tmp_path / "roq.toml"
    path.write_text('[svc]\nname = "a"\nport = "high"\n')
    with pytest.raises(ConfigError, match=r"roq\.toml: \[svc\] key 'port'"):
        build(_Settings, file=read_toml(str(path)), section="svc", source=str(path))


# =========================================================================== roq.management


def test_reply_round_trips():
    assert parse_reply(reply(Result.OK, "done", Leader="tcp://h:1", Queues=["a", "b"])) == (
        0,
        "done",
        {"Leader": "tcp://h:1", "Queues": ["a", "b"]},
    )


def test_reply_without_comment_parses_to_an_empty_comment():
    assert parse_reply(reply(Result.NOT_FOUND)) == (1104, "", {})


@pytest.mark.parametrize("frame", [b"", b"garbage", b"\x05\x00\x00\x00", bson.encode({"a": 1})[:-1]])
def test_parse_reply_of_garbage_raises_protocol_error(frame):
    with pytest.raises(ProtocolError):
        parse_reply(frame)


@pytest.mark.parametrize("doc", [{"COMMENT": "x"}, {"RESULT": "0"}, {"RESULT": True}, {"RESULT": 1.0}])
def test_parse_reply_without_an_integer_result_raises_protocol_error(doc):
    with pytest.raises(ProtocolError, match="RESULT"):
        parse_reply(bson.encode(doc))


def test_raise_for_ok_does_not_raise():
    assert raise_for(Result.OK, "", {}) is None


def test_not_leader_names_the_leader():
    with pytest.raises(NotLeaderError) as info:
        raise_for(Result.NOT_LEADER, "standby", {"Leader": "tcp://10.0.0.1:5000"})
    assert (info.value.leader, info.value.code, str(info.value)) == ("tcp://10.0.0.1:5000", 8, "standby")


def test_not_leader_without_a_leader_has_an_empty_leader():
    with pytest.raises(NotLeaderError) as info:
        raise_for(Result.NOT_LEADER, "", {})
    assert info.value.leader == ""


@pytest.mark.parametrize(
    "code, kind",
    [(1101, ManagementError), (1102, BadRequestError), (1103, BadRequestError), (1104, NotFoundError),
     (1105, UnavailableError), (4242, ManagementError)],
)
def test_raise_for_maps_codes_to_error_classes(code, kind):
    with pytest.raises(ManagementError) as info:
        raise_for(code, "why", {})
    assert type(info.value) is kind
    assert info.value.code == code
    assert str(info.value) == "why"


def test_raise_for_without_comment_gives_the_code_in_the_message():
    with pytest.raises(UnavailableError, match="1105"):
        raise_for(1105, "", {})


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


# =========================================================================== roq.zk


@pytest.mark.parametrize("name", ["q", "orders", "a.b-c_D9", "x" * 64, "...", ".hidden", "-"])
def test_valid_queue_names_are_returned(name):
    assert check_queue_name(name) == name


@pytest.mark.parametrize("name", ["", "a/b", "a@b", ".", "..", "x" * 65, "a b", "é", None, 3, b"q"])
def test_bad_queue_names_are_refused(name):
    with pytest.raises(ConfigError, match="bad queue name"):
        check_queue_name(name)


def test_queue_name_with_a_trailing_newline_is_refused():
    with pytest.raises(ConfigError):
        check_queue_name("q\n")


@pytest.mark.parametrize(
    "hosts", ["localhost:2181", "127.0.0.1:1", "h:65535", "a:1,b.example:2,c-3:3", "h:2181/roq", "a:1,b:2/roq/test"]
)
def test_valid_zookeeper_addresses_are_returned(hosts):
    assert check_hosts(hosts) == hosts


@pytest.mark.parametrize("hosts", ["", "host", "h:0", "h:99999", "h:65536", ":2181", "h:", "a:1,", "a:1,,b:2", "/roq", None, 2181])
def test_bad_zookeeper_addresses_are_refused(hosts):
    with pytest.raises(ConfigError, match="bad ZooKeeper address"):
        check_hosts(hosts)


def test_zookeeper_address_with_a_trailing_newline_is_refused():
    with pytest.raises(ConfigError):
        check_hosts("h:2181\n")


def test_default_paths_are_under_roq():
    p = Paths()
    assert (p.root, p.gcm, p.election, p.leader, p.hosts, p.assignments, p.queues) == (
        "/roq", "/roq/gcm", "/roq/gcm/election", "/roq/gcm/leader", "/roq/hosts", "/roq/assignments", "/roq/queues",
    )


def test_paths_layout_under_a_custom_root():
    p = Paths("/t/r")
    assert p.host("h:1") == "/t/r/hosts/h:1"
    assert p.host_assignments("h:1") == "/t/r/assignments/h:1"
    assert p.assignment("h:1", "q", "monitor") == "/t/r/assignments/h:1/q@monitor"
    assert p.assignment("h:1", "q", "x3") == "/t/r/assignments/h:1/q@x3"
    assert p.queue("q") == "/t/r/queues/q"
    assert p.rules("q") == "/t/r/queues/q/rules"
    assert p.thresholds("q") == "/t/r/queues/q/thresholds"
    assert p.monitor("q") == "/t/r/queues/q/monitor"
    assert p.exchanges("q") == "/t/r/queues/q/exchanges"
    assert p.exchange("q", "x2") == "/t/r/queues/q/exchanges/x2"


@pytest.mark.parametrize("root", ["roq", "", "/roq/", "/", "/a//b"])
def test_relative_or_trailing_slash_roots_are_refused(root):
    with pytest.raises(ConfigError, match="bad ZooKeeper root"):
        Paths(root)


def test_dumps_is_compact_sorted_json():
    assert dumps({"b": 1, "a": [1, "x"]}) == b'{"a":[1,"x"],"b":1}'


@pytest.mark.parametrize("value", [{"state": "running", "placement": {"x1": "h:1"}, "n": 3}, {}, [1, 2], "s", 1.5, None])
def test_dumps_loads_round_trip(value):
    assert loads(dumps(value)) == value


@pytest.mark.parametrize("data", [b"", None, b"not json", b"{", b"\x80\x81"])
def test_loads_of_empty_or_unreadable_data_is_an_empty_document(data):
    assert loads(data) == {}


# =========================================================================== gcm._view


def _host(address: str, max_exchanges: int = 4, cpu: float = 10.0, **extra) -> HostView:
    return HostView(address, {"max_exchanges": max_exchanges,
                              "kpis": {"cpu_percent": cpu, "memory_percent": 5.0, "net_bytes_per_s": 0.0}, **extra})


def _queue(name: str, placement: dict[str, str], state: str = "running", host: str = "h:1",
           monitor: dict | None = None, exchanges: dict | None = None) -> QueueView:
    return QueueView(name=name, state=state, host=host, placement=placement, next_exchange=len(placement) + 1,
                     version=0, monitor=monitor, exchanges=exchanges or {})


def _view(queues: list[QueueView], hosts: list[HostView]) -> View:
    return View({q.name: q for q in queues}, {h.address: h for h in hosts})


def test_host_with_most_free_slots_wins_over_lower_cpu():
    view = _view([_queue("q", {"x1": "a:1", "x2": "a:1", "x3": "a:1"})], [_host("a:1", 4, cpu=1.0), _host("b:1", 2, cpu=90.0)])
    assert choose_host(view) == "b:1"


def test_tie_on_free_slots_goes_to_lower_cpu():
    view = _view([], [_host("a:1", cpu=50.0), _host("b:1", cpu=10.0)])
    assert choose_host(view) == "b:1"


def test_tie_on_free_slots_and_cpu_goes_to_lower_address():
    view = _view([], [_host("c:1"), _host("a:1"), _host("b:1")])
    assert choose_host(view) == "a:1"


def test_full_host_is_skipped():
    view = _view([_queue("q", {"x1": "a:1", "x2": "a:1"})], [_host("a:1", 2, cpu=0.0), _host("b:1", 1, cpu=89.0)])
    assert choose_host(view) == "b:1"


def test_excluded_host_is_skipped():
    view = _view([], [_host("a:1", 8), _host("b:1", 1)])
    assert choose_host(view, exclude=frozenset({"a:1"})) == "b:1"


def test_no_host_fits_gives_none():
    view = _view([_queue("q", {"x1": "a:1", "x2": "b:1"})], [_host("a:1", 1), _host("b:1", 1)])
    assert choose_host(view) is None
    assert choose_host(_view([], [])) is None
    assert choose_host(_view([], [_host("a:1")]), exclude=frozenset({"a:1"})) is None


def test_host_with_no_exchange_slots_is_never_chosen():
    assert choose_host(_view([], [_host("a:1", 0, cpu=0.0)])) is None
    assert choose_host(_view([], [HostView("a:1", {})])) is None
    assert choose_host(_view([], [_host("a:1", 0, cpu=0.0), _host("z:1", 1, cpu=89.0)])) == "z:1"


def test_slots_of_a_removing_queue_are_free_for_placement():
    view = _view([_queue("old", {"x1": "a:1"}, state="removing")], [_host("a:1", 1)])
    assert choose_host(view) == "a:1"


def test_assigned_counts_placements_of_queues_not_being_removed():
    view = _view(
        [
            _queue("q1", {"x1": "a:1", "x2": "b:1", "x3": "a:1"}),
            _queue("q2", {"x1": "a:1"}, state="stopped"),
            _queue("q3", {"x1": "a:1", "x2": "c:1"}, state="removing"),
        ],
        [],
    )
    assert view.assigned() == {"a:1": 3, "b:1": 1}


def test_queue_is_ready_when_running_with_monitor_and_every_placed_exchange():
    live = {"x1": {"host": "a:1"}, "x2": {"host": "b:1"}}
    assert _queue("q", {"x1": "a:1", "x2": "b:1"}, monitor={"endpoint": "tcp://a:1"}, exchanges=live).ready


def test_an_extra_live_exchange_does_not_stop_readiness():
    live = {"x1": {}, "x9": {}}
    assert _queue("q", {"x1": "a:1"}, monitor={}, exchanges=live).ready


@pytest.mark.parametrize(
    "state, monitor, placement, exchanges",
    [
        ("running", {"endpoint": "e"}, {"x1": "a:1", "x2": "a:1"}, {"x1": {}}),
        ("running", None, {"x1": "a:1"}, {"x1": {}}),
        ("stopped", {"endpoint": "e"}, {"x1": "a:1"}, {"x1": {}}),
        ("removing", {"endpoint": "e"}, {"x1": "a:1"}, {"x1": {}}),
        ("running", {"endpoint": "e"}, {}, {"x1": {}}),
    ],
)
def test_queue_is_not_ready_when_anything_is_missing(state, monitor, placement, exchanges):
    assert not _queue("q", placement, state=state, monitor=monitor, exchanges=exchanges).ready


def test_queue_is_quiet_only_without_monitor_and_exchanges():
    assert _queue("q", {"x1": "a:1"}, state="stopped").quiet
    assert not _queue("q", {}, monitor={"endpoint": "e"}).quiet
    assert not _queue("q", {}, exchanges={"x1": {}}).quiet


def test_broadcast_docs_are_sorted_and_shaped():
    view = _view(
        [
            _queue("zeta", {"x1": "b:1"}, state="stopped", host="b:1"),
            _queue("alpha", {"x1": "a:1", "x2": "b:1"}, host="a:1", monitor={"endpoint": "tcp://a:7"},
                   exchanges={"x2": {"name": "x2-1", "host": "b:1", "frontend": "tcp://b:8", "backend": "tcp://b:9"},
                              "x1": {"host": "a:1"}}),
        ],
        [_host("b:1", 3, cpu=20.0, endpoint="tcp://b:1", exchanges=2, monitors=1), _host("a:1", 5)],
    )
    queues, hosts = broadcast_docs(view)
    assert [q["Name"] for q in queues] == ["alpha", "zeta"]
    assert all(set(q) == {"Name", "Host", "State", "Running", "Monitor", "Exchanges"} for q in queues)
    alpha, zeta = queues
    assert (alpha["Host"], alpha["State"], alpha["Running"], alpha["Monitor"]) == ("a:1", "running", True, "tcp://a:7")
    assert alpha["Exchanges"] == [
        {"Id": "x1", "Name": "x1", "Host": "a:1", "Frontend": "", "Backend": ""},
        {"Id": "x2", "Name": "x2-1", "Host": "b:1", "Frontend": "tcp://b:8", "Backend": "tcp://b:9"},
    ]
    assert (zeta["Running"], zeta["Monitor"], zeta["Exchanges"]) == (False, "", [])

    assert [h["Address"] for h in hosts] == ["a:1", "b:1"]
    assert all(
        set(h) == {"Address", "Endpoint", "MaxExchanges", "AssignedExchanges", "Exchanges", "Monitors",
                   "CpuPercent", "MemoryPercent", "NetBytesPerS"}
        for h in hosts
    )
    a, b = hosts
    assert (a["MaxExchanges"], a["AssignedExchanges"], a["Endpoint"]) == (5, 1, "")
    assert (b["MaxExchanges"], b["AssignedExchanges"], b["Endpoint"], b["Exchanges"], b["Monitors"]) == (3, 2, "tcp://b:1", 2, 1)
    assert (b["CpuPercent"], b["MemoryPercent"], b["NetBytesPerS"]) == (20.0, 5.0, 0.0)


def test_broadcast_docs_survive_the_broadcast_frames():
    view = _view([_queue("q", {"x1": "a:1"}, exchanges={"x1": {"host": "a:1"}})], [_host("a:1")])
    queues, hosts = broadcast_docs(view)
    assert parse_broadcast(broadcast_frames(queues, hosts)) == (queues, hosts)


# =========================================================================== hostmanager._ports

LOCAL = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return s.getsockname()[1]


@pytest.fixture
def listener():
    """A listening socket of the test's own on a loopback port."""
    s = socket.socket()
    s.bind((LOCAL, 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_os_chosen_ports_are_never_handed_twice_while_held():
    ports = PortAllocator(LOCAL)
    handed = [ports.allocate() for _ in range(30)]
    assert len(set(handed)) == len(handed)
    assert all(0 < p < 65536 for p in handed)
    assert ports.in_use == set(handed)


def test_a_port_of_a_range_is_not_handed_again_until_released():
    port = _free_port()
    ports = PortAllocator(LOCAL, port, port)
    assert ports.allocate() == port
    with pytest.raises(BrokerConnectionError, match=f"{port}-{port}"):
        ports.allocate()
    ports.release(port)
    assert ports.allocate() == port


def test_release_of_unknown_ports_is_harmless():
    ports = PortAllocator(LOCAL)
    held = ports.allocate()
    ports.release(1, 2, held)
    assert ports.in_use == set()


def test_a_port_held_by_a_listener_is_never_handed_out(listener):
    low, high = max(1, listener - 3), min(65535, listener + 3)
    ports = PortAllocator(LOCAL, low, high)
    handed = []
    with pytest.raises(BrokerConnectionError):
        for _ in range(high - low + 2):
            handed.append(ports.allocate())
    assert listener not in handed
    assert len(set(handed)) == len(handed)
    assert all(low <= p <= high for p in handed)


def test_a_range_of_only_a_listened_port_is_full(listener):
    with pytest.raises(BrokerConnectionError):
        PortAllocator(LOCAL, listener, listener).allocate()


def test_preferred_port_is_honoured_when_free():
    port = _free_port()
    ports = PortAllocator(LOCAL)
    assert ports.allocate(preferred=port) == port
    assert port in ports.in_use


def test_preferred_port_is_skipped_when_a_listener_holds_it(listener):
    port = PortAllocator(LOCAL).allocate(preferred=listener)
    assert port != listener and port > 0


def test_preferred_port_is_skipped_when_already_handed_out():
    ports = PortAllocator(LOCAL)
    first = ports.allocate()
    assert ports.allocate(preferred=first) != first


@pytest.mark.parametrize("low, high", [(0, 5000), (5000, 0), (6000, 5000), (1, 65536), (-1, 10), (-10, -1)])
def test_bad_port_ranges_are_refused(low, high):
    with pytest.raises(ConfigError, match="bad port range"):
        PortAllocator(LOCAL, low, high)


# =========================================================================== hostmanager._children


@pytest.mark.parametrize(
    "name, queue, role, ident",
    [
        ("q@monitor", "q", "monitor", "monitor"),
        ("q@x3", "q", "exchange", "x3"),
        ("q.a-b@x1", "q.a-b", "exchange", "x1"),
    ],
)
def test_assignment_names_are_parsed(name, queue, role, ident):
    assert Assignment.parse(name) == Assignment(name, queue, role, ident)


@pytest.mark.parametrize("name", ["nope", "@x", "q@", "@", ""])
def test_malformed_assignment_names_give_none(name):
    assert Assignment.parse(name) is None
