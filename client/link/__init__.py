"""A link between two clusters of a tree, itself a client of both: it relays what one side wants of the
other's queues (:mod:`roq.federation` decides what; this package carries it).

:class:`Crossing`: one queue, one way: its journal on this side (:class:`JournalSource`, read from the position
the link keeps there), the relay, and the :class:`Outlet` where the relay's batches enter the far side's queue,
as one publisher of many relayed ids, following that queue's monitor through its moves and fail-overs.

:class:`Link` (``python -m client.link``, settings :class:`LinkConfig`): the process that runs one crossing.
"""

from client.link._crossing import Crossing
from client.link._link import Link, LinkConfig, main
from client.link._outlet import Outlet
from client.link._source import JournalSource

__all__ = ["Crossing", "Outlet", "JournalSource", "Link", "LinkConfig", "main"]
