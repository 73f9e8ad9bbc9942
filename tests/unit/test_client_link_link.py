"""The link process's settings and first epoch (pure parts of :mod:`client.link._link`)."""

from __future__ import annotations

import pytest

from client.link import LinkConfig
from client.link._link import EPOCH_ORIGIN, first_epoch
from roq.errors import ConfigError

SOURCE, TARGET = "tcp://127.0.0.16:5500", "tcp://127.0.0.17:5500"


def test_a_link_is_named_and_joins_two_monitors():
    config = LinkConfig(name="eu-hq", source=SOURCE, target=TARGET, prefix=("eu.", "gb."))
    assert config.prefix == ("eu.", "gb.") and config.max_bytes == 16 << 20


@pytest.mark.parametrize("fields, message", [
    ({"name": ""}, "name must be 1-118"),
    ({"name": "eu/hq"}, "name must be 1-118"),
    ({"name": "x" * 119}, "name must be 1-118"),
    ({"target": "", "queue": "orders"}, "give the parent's ZooKeeper"),
    ({"target": ""}, "target must be a monitor's tcp:// endpoint, got '' \\(or give the parent's queue by name"),
    ({"down": True}, "down carries records down a tree's edge: name the child cluster"),
    ({"cluster_key": "/k.key_secret", "source_credentials": "/creds"}, "cluster_key.*or with credentials"),
    ({"source": "127.0.0.16:5500"}, "source must be a monitor's tcp:// endpoint"),
    ({"target": ""}, "target must be a monitor's tcp:// endpoint"),
    ({"target": SOURCE}, "the source and the target are the same queue"),
    ({"prefix": ("eu.", "")}, "prefix must be non-empty"),
    ({"max_bytes": 1000}, "max_bytes must be at least 65536"),
    ({"connect_timeout": 0}, "connect_timeout must be above 0"),
])
def test_a_link_with_bad_settings_is_refused_naming_the_setting(fields, message):
    with pytest.raises(ConfigError, match=message):
        LinkConfig(**{"name": "eu-hq", "source": SOURCE, "target": TARGET, **fields})


def test_a_later_start_begins_above_the_epochs_of_an_earlier_one_that_moved_less_than_ten_times_a_second():
    start = EPOCH_ORIGIN + 86400 * 300.25
    earlier = first_epoch(start)
    assert earlier == 259_416_000  # tenths of a second since 2026
    assert first_epoch(start + 60) > earlier + 599  # a minute later: above 599 moves of the first
    assert 0 <= first_epoch(EPOCH_ORIGIN + 13 * 365 * 86400) < 1 << 32
