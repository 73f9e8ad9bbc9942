"""A link between two clusters of a tree, itself a client of both: it relays what one side wants of the
other's queues (:mod:`roq.federation` decides what; this package carries it).

:class:`Outlet`: where a relay's batches enter a queue of the far cluster, as one publisher of many relayed
ids, following that queue's monitor through its moves and fail-overs.
"""

from client.link._outlet import Outlet

__all__ = ["Outlet"]
