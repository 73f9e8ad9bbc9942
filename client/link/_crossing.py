"""One queue, one way across a link: its journal on this side, the relay, the outlet into the far side's queue.

What the source journal gives goes through the :class:`~roq.federation.Relay` (what is wanted, under which
ids) to the :class:`~client.link.Outlet`; the reader is paused while what is on its way is at the relay's
bound, and what the relay says is done is committed in the source journal every ``commit_interval``: where a
restarted link goes on from. A crossing started again (its process killed, its host lost) sends again what
it had sent since its last commit, and the far side drops what it had.
"""

from __future__ import annotations

from typing import Callable

import zmq

from client._locator import MonitorLocator
from client.link._outlet import Outlet
from client.link._source import JournalSource
from roq.config import CurveClient
from roq.federation import Entry, Pace, Relay
from roq.loop import Loop
from roq.wire import control

__all__ = ["Crossing"]

#: seconds between two commits of the source position
COMMIT_INTERVAL = 0.2


class Crossing:
    """The journal at ``source`` (read as ``name``) into the queue whose monitor is ``monitor``, through
    ``relay``; ``identity``: the outlet's publisher id on the far side. ``compress_out``: batches go compressed into
    the far queue's exchanges; ``compress_in``: the source journal answers compressed (whichever is across the
    network)."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], source: str, name: str, monitor: str | MonitorLocator,
                 relay: Relay,
                 identity: bytes, *, curve_here: CurveClient | None = None, curve_there: CurveClient | None = None,
                 commit_interval: float = COMMIT_INTERVAL, who: str = "link",
                 interest: Callable[[], control.Interest] | None = None,
                 on_interest: Callable[[control.Interest], None] | None = None, pace: Pace | None = None,
                 wait_for_interest: bool = False, compress_out: bool = False, compress_in: bool = False) -> None:
        self.relay = relay
        self._monitor = MonitorLocator.of(monitor)
        self.commit_interval = commit_interval
        self.held = False  # told to carry nothing for now (the parent refused the link)
        # on demand, nothing is read before the far side said what it wants: what is read meanwhile would pass as
        # unwanted, skipped for good (a link started again after an outage would lose what came meanwhile)
        self.waiting_interest = wait_for_interest
        self._on_interest = on_interest
        self.source = JournalSource(context, source, name, self._entries, curve=curve_here, keys=self._keys,
                                    compressed=compress_in)
        self.outlet = Outlet(context, self._monitor, relay, identity, curve=curve_there, who=who, interest=interest,
                             on_interest=self._interest if on_interest is not None else None, pace=pace,
                             compress=compress_out)
        self._pace()

    @property
    def target(self) -> str:
        """The endpoint of the far queue's monitor, now."""
        return self._monitor.endpoint

    def attach(self, loop: Loop) -> None:
        self.source.attach(loop)
        self.outlet.attach(loop)
        loop.every(self.commit_interval, self._commit, "the link's commit")

    def hold(self, held: bool) -> None:
        """Read nothing more from the source (True) until told otherwise; what is on its way goes on."""
        self.held = held
        self._pace()

    def close(self) -> None:
        self.source.close()
        self.outlet.close()

    def _entries(self, entries: list[Entry], next_offset: int, start_offset: int) -> None:
        relay, outlet = self.relay, self.outlet
        if relay.position() < 0:  # not started: from the position kept, or the journal's end for a new link
            relay.start(start_offset)
        for entry in entries:
            frames = relay.take(entry)
            if frames is not None:
                outlet.send(frames)
        relay.passed(next_offset)
        self._pace()

    def _commit(self, now: float) -> None:
        self.source.poke(now)
        if self.relay.position() >= 0:
            self.source.commit(self.relay.position())
        if self.source.paused:
            self._pace()

    def _keys(self) -> list[bytes] | None:
        """What the journal is asked for: the keys the relay lets cross and the addresses it carries (None: every
        key, and no address)."""
        wanted, addresses = self.relay.wanted.items, self.relay.addresses.items
        if b"" in wanted and not addresses:
            return None
        return [*addresses, *wanted][:control.MAX_PREFIXES]

    def _interest(self, msg: control.Interest) -> None:
        """The far queue's monitor said what it wants (the relay now lets that cross): reading may begin."""
        assert self._on_interest is not None
        self._on_interest(msg)
        self.waiting_interest = False
        self._pace()  # (and a fetch at once for what is wanted now)

    def _pace(self) -> None:
        """The source reads while the relay has room, the crossing is not held, and (on demand) the far side said
        what it wants."""
        self.source.pause(self.relay.full or self.held or self.waiting_interest)
