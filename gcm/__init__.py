"""The global configuration manager: leader-elected through ZooKeeper, it owns the queues' lifecycle.

``python -m gcm --zk 127.0.0.1:2181 --address 127.0.0.1`` (see ``--help``). Run two or more for fail-over.

:class:`Gcm` is the process (sockets, session, loop); what it knows of the cluster is a view
(``gcm._view``), and every change it makes is decided by a pure function of the view and the request that
returns an outcome (``gcm._outcome``). The package exports the process, its settings and ``main``; its unit
tests import the cores from their modules.
"""

from __future__ import annotations

from gcm._config import GcmConfig
from gcm._gcm import Gcm, main

__all__ = ["Gcm", "GcmConfig", "main"]
