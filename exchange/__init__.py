"""The exchange process: carries one logical queue's traffic from publishers to subscribers.

Run it with ``python -m exchange --monitor tcp://HOST:PORT --address ADDR`` (see ``--help``).
"""

from __future__ import annotations

from exchange._accounting import MAX_PUBLISHERS, Accounting
from exchange._acks import MAX_PENDING_ACKS, Acks
from exchange._admission import Admission
from exchange._control import CommandPipe, MonitorLink
from exchange._exchange import Exchange
from exchange._journaling import JOURNAL_HWM, MAX_UNCONFIRMED_BYTES, RESEND_S, JournalFeed
from exchange._forwarder import BURST, MIN_PUBLISHER_HWM, PUBLISHER_QUEUE_BYTES, Forwarder
from exchange._subscribers import BEHIND_HOLD, MAX_SUBSCRIBERS, Subscriber, Subscribers

__all__ = [
    # the process
    "Exchange",
    # its data plane and its bounds
    "Forwarder", "Accounting", "Acks", "BURST", "MAX_PENDING_ACKS", "MAX_PUBLISHERS", "PUBLISHER_QUEUE_BYTES",
    "MIN_PUBLISHER_HWM", "Subscribers", "Subscriber", "MAX_SUBSCRIBERS", "BEHIND_HOLD", "Admission",
    # its feed of a durable queue's journal
    "JournalFeed", "RESEND_S", "MAX_UNCONFIRMED_BYTES", "JOURNAL_HWM",
    # its control path
    "MonitorLink", "CommandPipe",
]
