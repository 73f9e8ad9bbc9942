"""The global configuration manager: leader-elected through ZooKeeper, it owns the queues' lifecycle.

``python -m gcm --zk 127.0.0.1:2181 --address 127.0.0.1`` (see ``--help``). Run two or more for fail-over.
"""

from gcm._gcm import Gcm, GcmConfig
from gcm._placement import choose_host

__all__ = ["Gcm", "GcmConfig", "choose_host"]
