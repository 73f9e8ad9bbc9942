import pytest

from roq.config import ExchangeConfig, MonitorConfig, PublisherConfig, SubscriberConfig, replace
from roq.errors import ConfigError


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: ExchangeConfig(monitor="tcp://127.0.0.1:1", frontend_port=70000), "frontend_port"),
        (lambda: ExchangeConfig(monitor="tcp://127.0.0.1:1", heartbeat_interval=0), "heartbeat_interval"),
        (lambda: ExchangeConfig(monitor=5), "monitor"),
        (lambda: MonitorConfig(smoothing=1.5), "smoothing"),
        (lambda: MonitorConfig(high_records_per_s=-1), "high_records_per_s"),
        (lambda: MonitorConfig(kpi_period="1"), "kpi_period"),
        (lambda: PublisherConfig(full_policy="drop"), "full_policy"),
        (lambda: PublisherConfig(linger=-0.1), "linger"),
        (lambda: PublisherConfig(buffer_bytes=10, batch_bytes=100), "buffer_bytes"),
        (lambda: SubscriberConfig(hold_timeout=0), "hold_timeout"),
    ],
)
def test_bad_values_name_the_field(make, field):
    with pytest.raises(ConfigError, match=field):
        make()


def test_replace_rejects_unknown_options_by_name():
    with pytest.raises(ConfigError, match="lingr"):
        replace(PublisherConfig(), lingr=0.1)
    assert replace(PublisherConfig(), linger=0.0).linger == 0.0
