"""hostmanager._ports: ports are never handed out while in use (binds loopback sockets of its own)."""

from __future__ import annotations

import socket

import pytest

from hostmanager._ports import PortAllocator
from roq.errors import BrokerConnectionError, ConfigError


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
