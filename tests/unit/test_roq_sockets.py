"""roq.sockets: endpoints given by users, poll timeouts."""

from __future__ import annotations

import pytest

from roq.errors import ConfigError
from roq.sockets import check_endpoint, poll_ms


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:5500", "tcp://h:1", "tcp://[::1]:65535"])
def test_endpoints_of_the_form_tcp_host_port_are_returned(endpoint):
    assert check_endpoint(endpoint) == endpoint


@pytest.mark.parametrize("endpoint", ["", "127.0.0.1:5500", "tcp://h", "tcp://:1", "tcp://h:0", "tcp://h:65536",
                                      "tcp://h:x", "udp://h:1", None, 5500, "tcp://h:" + "9" * 5000])
def test_anything_else_is_a_config_error(endpoint):
    with pytest.raises(ConfigError):
        check_endpoint(endpoint)


def test_poll_timeouts_round_up_to_whole_milliseconds():
    assert (poll_ms(None), poll_ms(0), poll_ms(0.0004), poll_ms(1.0), poll_ms(-1)) == (-1, 0, 1, 1000, 0)
