"""The monitor process: one per logical queue; places, moves and fails over publishers, scales the queue.

Run it with ``python -m monitor --address ADDR --port PORT``. :class:`Monitor` is the process (a socket
shell); its core (``monitor._core``) is every decision it takes, without sockets, ZooKeeper or a clock
(``monitor.testing`` drives it by hand). The package exports the process, its settings and ``main``.
"""

from __future__ import annotations

from monitor._monitor import Monitor, main
from roq.config import MonitorConfig

__all__ = ["Monitor", "MonitorConfig", "main"]
