"""gcm's settings: the command line made from GcmConfig keeps the flags callers use, and refuses bad values."""

from __future__ import annotations

import pytest

from gcm import GcmConfig
from roq.errors import ConfigError
from roq.settings import from_args, parser_for, to_args

FLAGS = ["--zk", "--root", "--id", "--address", "--lookup-port", "--management-port", "--broadcast-port",
         "--session-timeout", "--host-grace", "--broadcast-period", "--ready-timeout", "--stop-timeout", "--config",
         "--log-level"]


def _parse(argv: list[str]) -> GcmConfig:
    args = parser_for(GcmConfig, prog="gcm", description="", section="gcm").parse_args(argv)
    return from_args(GcmConfig, "gcm", args)


def test_the_flags_callers_use_are_all_there():
    text = parser_for(GcmConfig, prog="gcm", description="", section="gcm").format_help()
    assert all(flag in text for flag in FLAGS)


def test_flags_build_the_config_and_to_args_gives_them_back():
    config = _parse(["--zk", "127.0.0.1:2181", "--id", "gcm7", "--lookup-port", "0", "--host-grace", "1.5",
                     "--root", "/other"])
    assert (config.gcm_id, config.lookup_port, config.host_grace, config.root) == ("gcm7", 0, 1.5, "/other")
    assert "--id=gcm7" in to_args(config)
    assert _parse(to_args(config)) == config


@pytest.mark.parametrize("argv, named", [
    ([], "missing key 'zk'"),
    (["--zk", "localhost"], "bad ZooKeeper address"),
    (["--zk", "127.0.0.1:1", "--session-timeout", "0"], "session_timeout"),
    (["--zk", "127.0.0.1:1", "--host-grace", "-1"], "host_grace"),
    (["--zk", "127.0.0.1:1", "--lookup-port", "70000"], "lookup_port"),
    (["--zk", "127.0.0.1:1", "--root", "roq"], "bad ZooKeeper root"),
    (["--zk", "127.0.0.1:1", "--parent-zk", "127.0.0.1:2"], "give this cluster a cluster_name"),
    (["--zk", "127.0.0.1:1", "--cluster-name", "hq", "--parent-zk", "127.0.0.1:2"], "cluster_role branch or leaf"),
    (["--zk", "127.0.0.1:1", "--cluster-name", "s1", "--cluster-role", "leaf", "--parent-zk", "nowhere"],
     "bad ZooKeeper address"),
    (["--zk", "127.0.0.1:1", "--parent-credentials", "/c"], "give parent_zk too"),
])
def test_bad_settings_are_named(argv, named):
    with pytest.raises(ConfigError, match=named):
        _parse(argv)
