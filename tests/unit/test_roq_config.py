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


def test_an_exchange_bounds_each_subscriber_in_bytes_down_to_the_floor_zeromq_needs():
    from roq.wire.batch import HEADER_SIZE, MAX_KEY
    from roq.config import DEFAULT_SUBSCRIBER_QUEUE_BYTES, MIN_SUBSCRIBER_HWM, ExchangeConfig, PublisherConfig

    e = ExchangeConfig(monitor="tcp://127.0.0.1:1")
    assert e.subscriber_hwm == MIN_SUBSCRIBER_HWM  # 64 MiB of 4 MiB batches would be 15: too few for ZeroMQ
    assert PublisherConfig().batch_bytes * MIN_SUBSCRIBER_HWM <= DEFAULT_SUBSCRIBER_QUEUE_BYTES  # exact for ours
    small = ExchangeConfig(monitor="tcp://127.0.0.1:1", max_batch_bytes=16 << 10)
    assert small.subscriber_hwm == DEFAULT_SUBSCRIBER_QUEUE_BYTES // ((16 << 10) + MAX_KEY + HEADER_SIZE) > 512
    assert ExchangeConfig(monitor="tcp://127.0.0.1:1", max_batch_bytes=1024, backend_hwm=100).subscriber_hwm == 100
