"""hostmanager config: children started from their settings objects; options checked when the host manager starts."""

from __future__ import annotations

import pytest

from hostmanager import HostManagerConfig
from hostmanager._config import MODULES, ChildSettings
from roq.config import ExchangeConfig, JournalConfig, MonitorConfig, ShipperConfig
from roq.errors import ConfigError
from roq.settings import from_args, parser_for, to_args


def settings(**options) -> ChildSettings:
    return ChildSettings(HostManagerConfig(zk="127.0.0.1:2181", address="127.0.0.12", root="/r",
                                           session_timeout=4.0, kpi_archive="/tmp/kpi", **options))


def rebuilt(cls, config):
    """What the child makes of the flags it is started with."""
    args = parser_for(cls, prog="x", description="", section="x").parse_args(to_args(config))
    return from_args(cls, "x", args)


def test_an_exchange_gets_its_settings_and_the_options_back_from_its_flags():
    s = settings(exchange_options=("backend_hwm=100", "subscriber_queue_bytes=1048576", "kpi_period=0.5"))
    config = s.exchange("tcp://127.0.0.12:5500", 7001, 7002, "x1-ab12")
    assert config == ExchangeConfig(monitor="tcp://127.0.0.12:5500", address="127.0.0.12", frontend_port=7001,
                                    backend_port=7002, exchange_id="x1-ab12", commands=True, backend_hwm=100,
                                    subscriber_queue_bytes=1 << 20, kpi_period=0.5)
    assert rebuilt(ExchangeConfig, config) == config
    assert "--commands-on-stdin" in to_args(config) and "--id=x1-ab12" in to_args(config)


def test_a_monitor_gets_its_settings_and_the_options_back_from_its_flags():
    s = settings(monitor_options=("sustain=1", "relocation_rule=false", "high_records_per_s=6000"))
    config = s.monitor("orders", 5500)
    assert config == MonitorConfig(address="127.0.0.12", port=5500, queue="orders", zk="127.0.0.1:2181", root="/r",
                                   session_timeout=4.0, kpi_archive="/tmp/kpi", sustain=1.0, relocation_rule=False,
                                   high_records_per_s=6000.0)
    assert rebuilt(MonitorConfig, config) == config


def test_a_journal_gets_the_queues_journal_generation_on_its_command_line(tmp_path):
    config = settings(journal_dir=str(tmp_path)).journal("orders", "tcp://127.0.0.12:5500", 7003, generation=2)
    assert config.generation == 2 and config.directory == str(tmp_path / "127.0.0.12" / "orders")
    assert "--generation=2" in to_args(config) and rebuilt(JournalConfig, config) == config


def test_a_replica_placed_in_place_of_a_lost_one_gets_learner_on_its_command_line(tmp_path):
    s = settings(journal_dir=str(tmp_path))
    config = s.journal("orders", "tcp://127.0.0.12:5500", 7003, replicas=3, learner=True)
    assert config.learner and config.journal_id == "127.0.0.12" and config.replicas == 3
    assert "--learner" in to_args(config) and rebuilt(JournalConfig, config) == config
    member = s.journal("orders", "tcp://127.0.0.12:5500", 7003, replicas=3)
    assert not member.learner and not any("learner" in arg for arg in to_args(member))
    with pytest.raises(ConfigError, match="set by the host manager"):
        settings(journal_options=("learner=true",))


def test_the_module_of_a_role_comes_from_a_fixed_table():
    assert MODULES == {"monitor": "monitor", "exchange": "exchange", "journal": "exchange.journal", "link": "client.link",
                       "shipper": "client.shipper"}


@pytest.mark.parametrize("options, named", [
    ({"exchange_options": ("backend_hwm=-1",)}, "backend_hwm"),
    ({"exchange_options": ("backend_hwn=3",)}, "did you mean 'backend_hwm'"),
    ({"exchange_options": ("backend_hwm=abc",)}, "backend_hwm"),
    ({"exchange_options": ("backend_hwm",)}, "KEY=VALUE"),
    ({"exchange_options": ("monitor=tcp://127.0.0.1:1",)}, "set by the host manager"),
    ({"exchange_options": ("exchange_id=x9",)}, "set by the host manager"),
    ({"monitor_options": ("smoothing=2",)}, "smoothing"),
    ({"monitor_options": ("zk=127.0.0.1:1",)}, "set by the host manager"),
    ({"monitor_options": ("sustain=[1]",)}, "sustain"),
    ({"link_options": ("compress=maybe",)}, "compress"),
    ({"link_options": ("rate_limit=-1",)}, "rate_limit"),
    ({"link_options": ("down=false",)}, "set by the host manager"),
])
def test_a_bad_option_stops_the_host_manager_with_its_name(options, named):
    with pytest.raises(ConfigError, match=named):
        settings(**options)


def test_the_options_are_flags_of_the_host_manager():
    args = parser_for(HostManagerConfig, prog="x", description="", section="hostmanager").parse_args(
        ["--zk", "127.0.0.1:2181", "--exchange-option", "backend_hwm=100", "--exchange-option", "kpi_period=2",
         "--monitor-option", "sustain=1"])
    config = from_args(HostManagerConfig, "hostmanager", args)
    assert config.exchange_options == ("backend_hwm=100", "kpi_period=2")
    assert config.monitor_options == ("sustain=1",)


@pytest.mark.parametrize("zk", ["", "localhost", "h:99999"])
def test_a_bad_zookeeper_address_is_refused(zk):
    with pytest.raises(ConfigError, match="ZooKeeper address"):
        HostManagerConfig(zk=zk)


def test_a_link_gets_the_clusters_place_and_its_parent_and_speaks_as_the_cluster_with_curve(tmp_path):
    from roq.config import LinkConfig
    from roq.wire.documents import FederationDoc

    tree = FederationDoc(name="store-1", role="leaf", parent_zk="127.0.0.1:2181", parent_root="/hq",
                         parent_credentials="/etc/roq/hq-creds")
    config = settings().link("orders", "tcp://127.0.0.12:5500", tree)
    assert config == LinkConfig(name="store-1@orders", source="tcp://127.0.0.12:5500", queue="orders",
                                cluster="store-1", role="leaf", parent_zk="127.0.0.1:2181", parent_root="/hq",
                                target_credentials="/etc/roq/hq-creds", on_demand=True, down=True,
                                zk=settings().config.zk, root=settings().config.root)  # (its own cluster's place)
    assert rebuilt(LinkConfig, config) == config
    long = settings().link("q" * 64, "tcp://127.0.0.12:5500", FederationDoc(name="s" * 60, role="leaf",
                                                                            parent_zk="127.0.0.1:2181", parent_root="/hq"))
    assert len(long.name) <= 118 and long.name.startswith("s" * 60 + "@")  # a digest of the queue's name
    (tmp_path / "keyring").mkdir()
    secure = settings(secret_key=str(tmp_path / "c.key_secret"), keyring=str(tmp_path / "keyring"))
    assert secure.link("orders", "tcp://127.0.0.12:5500", tree).cluster_key == str(tmp_path / "c.key_secret")


def test_a_placed_link_takes_the_link_options_compress_and_rate_limit():
    from roq.config import LinkConfig
    from roq.wire.documents import FederationDoc

    tree = FederationDoc(name="store-1", role="leaf", parent_zk="127.0.0.1:2181", parent_root="/hq")
    config = settings(link_options=("compress=true", "rate_limit=250000")).link("orders", "tcp://127.0.0.12:5500",
                                                                                tree)
    assert config.compress and config.rate_limit == 250_000 and config.down and config.on_demand
    assert rebuilt(LinkConfig, config) == config and "--compress" in to_args(config)


def test_a_kpi_queue_gives_the_host_a_shipper_of_its_own_files_and_the_monitors_the_rotation(tmp_path):
    assert settings().shipper() is None  # no KPI queue: no shipper
    s = settings(kpi_queue="roq.kpi", kpi_rotate_s=2.0)
    shipper = s.shipper()
    assert shipper is not None and (shipper.archive, shipper.host, shipper.queue, shipper.zk, shipper.root) == (
        "/tmp/kpi", "127.0.0.12", "roq.kpi", "127.0.0.1:2181", "/r")
    assert rebuilt(ShipperConfig, shipper) == shipper
    assert s.monitor("q", 5500).archive_rotate_s == 2.0
    with pytest.raises(ConfigError, match="give kpi_archive too"):
        HostManagerConfig(zk="127.0.0.1:2181", kpi_queue="roq.kpi")
    with pytest.raises(ConfigError, match="bad queue name"):
        HostManagerConfig(zk="127.0.0.1:2181", kpi_archive="/tmp/kpi", kpi_queue="no/such")
    with pytest.raises(ConfigError, match="set by the host manager"):
        settings(monitor_options=("archive_rotate_s=1",))
