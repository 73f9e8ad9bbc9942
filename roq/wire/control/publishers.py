"""Publisher <-> monitor: which exchange a publisher sends through, and every move.

A publisher says hello on its channel to the queue's monitor (:class:`PublisherHello`); the monitor assigns it
an exchange and moves it (:class:`Relocate`: make before break, or failover from a dead exchange), or says
there is none for now (:class:`NoExchange`). The publisher confirms a move (:class:`Moved`), asks for another
exchange when its own stops acknowledging (:class:`Panic`) and says goodbye (:class:`PublisherBye`).
"""

from __future__ import annotations

from roq.wire.control.codec import Message, message

__all__ = ["PublisherHello", "Relocate", "Moved", "Panic", "PublisherBye", "NoExchange"]


@message(2)
class PublisherHello(Message):
    """Publisher -> monitor at start and every heartbeat; ``exchange`` is "" until one is assigned.

    ``pressure``: the fraction of the time since the previous hello (0..1) that its batches waited for the
    exchange (its pipe full, or every batch it may have in flight unacknowledged): the demand the exchange
    does not serve, which its forwarded records/s cannot show.

    ``moving``: the relocation it is carrying out (0: none): its old exchange has not acknowledged the end of
    its epoch yet (one that holds its publishers back for a slow reader may take long), and the monitor waits.
    """

    publisher: str
    exchange: str = ""
    epoch: int = 0
    pressure: float = 0.0
    moving: int = 0


@message(1)
class Relocate(Message):
    """Monitor -> publisher: send through ``exchange`` from now on.

    ``reason`` is "assign" (first exchange), "relocate" (make before break: marker through the old one)
    or "failover" (the old exchange is dead: resend the unacknowledged window).
    """

    publisher: str
    exchange: str
    frontend: str
    reason: str
    relocation: int = 0


@message(10)
class Moved(Message):
    """Publisher -> monitor: the move ``relocation`` is complete."""

    publisher: str
    exchange: str
    relocation: int
    epoch: int


@message(3)
class Panic(Message):
    """Publisher -> monitor: ``exchange`` stopped acknowledging; give me another one."""

    publisher: str
    exchange: str
    reason: str = ""


@message(7)
class PublisherBye(Message):
    publisher: str


@message(12)
class NoExchange(Message):
    """Monitor -> publisher: no live exchange right now; keep buffering, one will be assigned."""

    publisher: str
    comment: str = ""
