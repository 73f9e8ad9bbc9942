"""Port allocation that never hands out a port still in use.

The original counted queues and exchanges to compute ports, so a port came back while its first owner
still held it. Here a port is handed out only if this host manager has not handed it to a live child and
the operating system lets us bind it right now (with ``SO_REUSEADDR``, as ZeroMQ binds); it is released
when the child that held it has exited.
"""

from __future__ import annotations

import socket

from roq.errors import BrokerConnectionError, ConfigError

__all__ = ["PortAllocator"]


def _bindable(address: str, port: int) -> int:
    """Bind (address, port) and return the port bound (0 when it is taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return 0
        return s.getsockname()[1]


class PortAllocator:
    """Ports on ``address``, from ``low``..``high`` (inclusive) or, without a range, any free port.

    Args:
        address: the host's bind address.
        low, high: the range to allocate from; both 0 = let the OS choose among free ports.
    """

    def __init__(self, address: str, low: int = 0, high: int = 0) -> None:
        if (low == 0) != (high == 0) or (low and not 0 < low <= high < 65536):
            raise ConfigError(f"bad port range {low}-{high}: need 0 < low <= high < 65536 (or both 0)")
        self.address = address
        self.low, self.high = low, high
        self.in_use: set[int] = set()
        self._next = low

    def allocate(self, preferred: int = 0) -> int:
        """A port nobody holds. ``preferred`` (e.g. the port of a restarted monitor) is tried first.

        Raises:
            BrokerConnectionError: every port of the range is in use.
        """
        if preferred and preferred not in self.in_use and _bindable(self.address, preferred):
            self.in_use.add(preferred)
            return preferred
        if not self.low:
            for _ in range(100):
                port = _bindable(self.address, 0)
                if port and port not in self.in_use:
                    self.in_use.add(port)
                    return port
            raise BrokerConnectionError(f"no free port on {self.address}")
        size = self.high - self.low + 1
        for _ in range(size):
            port, self._next = self._next, self.low + (self._next - self.low + 1) % size
            if port not in self.in_use and _bindable(self.address, port):
                self.in_use.add(port)
                return port
        raise BrokerConnectionError(f"every port of {self.low}-{self.high} on {self.address} is in use")

    def release(self, *ports: int) -> None:
        for port in ports:
            self.in_use.discard(port)
