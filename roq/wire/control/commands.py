"""Host manager -> its children: the commands it writes on a child's command pipe (:mod:`roq.wire.pipe`).

An exchange and a journal read them from their host manager alone, never from the network.
"""

from __future__ import annotations

from roq.wire.control.codec import Message, message

__all__ = ["Retarget"]


@message(1107)
class Retarget(Message):
    """Host manager -> its exchange or journal (on the command pipe): the queue's monitor is now at
    ``monitor``."""

    monitor: str
