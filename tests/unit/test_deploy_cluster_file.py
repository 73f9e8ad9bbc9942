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


SPARK = """
[[spark_master]]
docker_host = "a"
address = "127.0.0.24"

[[spark_worker]]
docker_host = "a"
address = "127.0.0.25"

[[spark_worker]]
docker_host = "b"
address = "127.0.0.26"
cores = 2
memory = "512m"
"""


def test_a_spark_master_and_its_workers_are_planned_after_the_host_managers_from_the_spark_image():
    from deploy.deployer import Deployer

    c = parse_cluster_file(GOOD.replace('image = "roq:1"', 'image = "roq:1"\nspark_image = "roq-spark:1"\n'
                                        'kpi_queue = "roq.kpi"\ninsecure = true') + SPARK, "c.toml")
    assert c.spark_masters[0].url == "spark://127.0.0.24:7077" and c.spark_masters[0].ui == "http://127.0.0.24:8080"
    assert [(w.address, w.cores, w.memory) for w in c.spark_workers] == [("127.0.0.25", 1, "1g"),
                                                                        ("127.0.0.26", 2, "512m")]
    plan = Deployer(c, progress=lambda line: None)._plan()
    assert [(role, image) for _, role, _, image, *_ in plan][-3:] == [
        ("spark-master", "roq-spark:1"), ("spark-worker", "roq-spark:1"), ("spark-worker", "roq-spark:1")]
    worker = plan[-1][4]
    assert worker[:3] == ["spark-worker", "--address", "127.0.0.26"] and "spark://127.0.0.24:7077" in worker
    assert plan[-1][5][-2:] == ["--master-ui", "http://127.0.0.24:8080"]  # healthy: its master counts it alive
    hostmanager = next(command for _, role, _, _, command, *_ in plan if role == "hostmanager")
    assert hostmanager[hostmanager.index("--kpi-queue") + 1] == "roq.kpi" and "--kpi-archive" in hostmanager


@pytest.mark.parametrize("change, message", [
    (('[[spark_master]]\ndocker_host = "a"\naddress = "127.0.0.24"\n', ""),
     r"\[\[spark_worker\]\] #1: a worker needs a master"),
    (('memory = "512m"', 'memory = "lots"'), r"\[\[spark_worker\]\] #2 key 'memory': 'lots'"),
    (("cores = 2", "cores = 0"), r"\[\[spark_worker\]\] #2 key 'cores': 0: at least 1"),
    (('address = "127.0.0.25"', 'address = "127.0.0.24"\nui_port = 8080'),
     r"\[\[spark_worker\]\] #1 key 'ui_port': 127.0.0.24:8080 on a is also \[\[spark_master\]\] #1 ui_port"),
    (('[[spark_worker]]\ndocker_host = "b"\naddress = "127.0.0.26"\ncores = 2\nmemory = "512m"',
      '[[spark_master]]\ndocker_host = "b"\naddress = "127.0.0.26"'), r"\[\[spark_master\]\] #2: one Spark master only"),
])
def test_spark_mistakes_name_the_entry_and_the_key(change, message):
    with pytest.raises(ConfigError, match=message):
        parse_cluster_file(GOOD + SPARK.replace(*change), "c.toml")


def test_a_kpi_queue_must_be_a_queue_name():
    with pytest.raises(ConfigError, match=r"\[deployment\] key 'kpi_queue': bad queue name 'k p i'"):
        parse_cluster_file(GOOD.replace('image = "roq:1"', 'image = "roq:1"\nkpi_queue = "k p i"'), "c.toml")
