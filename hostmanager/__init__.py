"""The host manager: one per host; runs the monitors and exchanges ZooKeeper assigns to its host.

``python -m hostmanager --zk 127.0.0.1:2181 --address 127.0.0.12`` (see ``--help``).
"""

from __future__ import annotations

from hostmanager._config import HostManagerConfig
from hostmanager._hostmanager import HostManager, main

__all__ = ["HostManager", "HostManagerConfig", "main"]
