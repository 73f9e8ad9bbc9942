"""The host manager: one per host; runs the monitors and exchanges ZooKeeper assigns to its host.

``python -m hostmanager --zk 127.0.0.1:2181 --address 127.0.0.12`` (see ``--help``).
"""

from hostmanager._hostmanager import HostManager, HostManagerConfig
from hostmanager._ports import PortAllocator

__all__ = ["HostManager", "HostManagerConfig", "PortAllocator"]
