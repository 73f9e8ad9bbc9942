"""roq.zk: queue names, ZooKeeper addresses and the znode layout (pure parts)."""

from __future__ import annotations

import pytest

from roq.errors import ConfigError
from roq.zk import Paths, check_hosts, check_queue_name


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
