"""Cluster files: a valid one is read whole; every kind of mistake names the entry and the key."""

from __future__ import annotations

import pytest

from deploy.cluster_file import OFFICIAL_ZOOKEEPER, parse_cluster_file
from roq.errors import ConfigError

GOOD = """
[deployment]
name = "prod"
image = "roq:1"

[[docker_hosts]]
name = "a"
url = "unix:///var/run/docker.sock"

[[docker_hosts]]
name = "b"
url = "tcp://127.0.0.1:2375"

[[zookeeper]]
docker_host = "a"
address = "127.0.0.21"

[[gcm]]
docker_host = "a"
address = "127.0.0.21"

[[hostmanager]]
docker_host = "a"
address = "127.0.0.22"

[[hostmanager]]
docker_host = "b"
address = "127.0.0.23"
max_exchanges = 8
"""


def test_a_cluster_file_is_read_with_its_defaults():
    c = parse_cluster_file(GOOD, "c.toml")
    assert c.deployment.name == "prod" and c.deployment.zookeeper_image == OFFICIAL_ZOOKEEPER
    assert c.zk == "127.0.0.21:2181" and c.gcms[0].management_port == 5003
    assert [(h.docker_host, h.address, h.max_exchanges) for h in c.hostmanagers] == [
        ("a", "127.0.0.22", 4), ("b", "127.0.0.23", 8)]
    assert c.host("b").url == "tcp://127.0.0.1:2375"


@pytest.mark.parametrize("change, message", [
    (("max_exchanges = 8", "max_exchange = 8"), r"\[\[hostmanager\]\] #2 key 'max_exchange': unknown key \(did you mean 'max_exchanges'\?\)"),
    (('docker_host = "b"', 'docker_host = "c"'), r"\[\[hostmanager\]\] #2 key 'docker_host': no \[\[docker_hosts\]\] named 'c'"),
    (('name = "prod"', 'name = "Prod Cluster"'), r"\[deployment\] key 'name'"),
    (('name = "prod"', 'name = "prod\\n"'), r"\[deployment\] key 'name'"),  # a trailing newline is no name
    (('url = "tcp://127.0.0.1:2375"', 'url = "127.0.0.1:2375"'), r"\[\[docker_hosts\]\] #2 key 'url': .* expected unix"),
    (('address = "127.0.0.23"', 'address = "127.0.0.22"'), r"\[\[hostmanager\]\] #2 key 'address': 127.0.0.22 has a host manager"),
    (('address = "127.0.0.23"', 'address = "localhost:1"'), r"key 'address': 'localhost:1' is not an IP address"),
    (('max_exchanges = 8', 'max_exchanges = "8"'), r"\[\[hostmanager\]\] #2 key 'max_exchanges'"),
    (('[[gcm]]\ndocker_host = "a"\naddress = "127.0.0.21"', '[[gcm]]\ndocker_host = "a"\naddress = "127.0.0.21"\nlookup_port = 2181'),
     r"\[\[gcm\]\] #1 key 'lookup_port': 127.0.0.21:2181 on a is also \[\[zookeeper\]\] #1 port"),
    (("[deployment]", "[deploymnet]"), r"unknown table 'deploymnet'"),
])
def test_mistakes_name_the_entry_and_the_key(change, message):
    with pytest.raises(ConfigError, match=message):
        parse_cluster_file(GOOD.replace(*change), "c.toml")


def test_missing_parts_are_named():
    with pytest.raises(ConfigError, match=r"missing table \[deployment\]"):
        parse_cluster_file("[[docker_hosts]]\nname='a'\nurl='unix:///x'\n", "c.toml")
    without_gcm = GOOD.replace('[[gcm]]\ndocker_host = "a"\naddress = "127.0.0.21"\n', "")
    with pytest.raises(ConfigError, match=r"at least one \[\[gcm\]\]"):
        parse_cluster_file(without_gcm, "c.toml")
    with pytest.raises(ConfigError, match="c.toml: not valid TOML"):
        parse_cluster_file("[deployment\n", "c.toml")
