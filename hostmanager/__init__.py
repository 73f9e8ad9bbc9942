"""The host manager: one per host; runs the monitors and exchanges ZooKeeper assigns to its host.

``python -m hostmanager --zk 127.0.0.1:2181 --address 127.0.0.12`` (see ``--help``).
"""

from __future__ import annotations

from hostmanager._children import KILL_AFTER, SECOND_SIGNAL_AFTER, Supervised
from hostmanager._config import MODULES, ChildSettings, HostManagerConfig
from hostmanager._converge import Action, ChildState, Restart, Start, Stop, Tell, converge, wanted
from hostmanager._host import HostSampler, Registration
from hostmanager._hostmanager import HostManager
from hostmanager._ports import PortAllocator
from hostmanager._supervision import Children

__all__ = [
    # the process
    "HostManager", "HostManagerConfig",
    # its children's settings and supervision
    "ChildSettings", "MODULES", "Children", "Supervised", "SECOND_SIGNAL_AFTER", "KILL_AFTER", "PortAllocator",
    # converging on the assignments (pure)
    "converge", "wanted", "ChildState", "Action", "Start", "Stop", "Tell", "Restart",
    # this host in ZooKeeper
    "HostSampler", "Registration",
]
