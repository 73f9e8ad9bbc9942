"""The one event loop of every process: what it reads, what it does on time, and how it stops.

A process is a table of registrations over its cores, run by a :class:`Loop`:

* **sources**: a ZeroMQ socket or a file descriptor with the handler called when it is ready
  (:meth:`Loop.add`); what is polled for can change (:meth:`Loop.want`: 0 pauses a source, which keeps its
  place), and a source can go (:meth:`Loop.remove`);
* **timers**: a handler called every so often (:meth:`Loop.every`, whose period may change between runs),
  or whenever a deadline that the process keeps moving has come (:meth:`Loop.deadline`);
* **turn steps**: handlers run before every poll (:meth:`Loop.before_poll`: to bring registrations in step
  with sockets that come and go) or after every turn (:meth:`Loop.after_turn`);
* **signals**: SIGTERM/SIGINT through a :class:`~roq.runtime.SignalWakeup` (:meth:`Loop.on_signal`).

Each turn polls once, until the nearest deadline; then calls the handler of each ready source once, in the
order the sources were registered (a source added ``late`` after the others), then each timer that is due,
then the turn steps. So the hot path costs one dispatch per ready socket per turn, however many messages
the handler then reads.

**The error boundary.** Whatever a handler raises is caught, counted in the process's
:class:`~roq.runtime.DropCounter` ("internal error") and logged with its traceback at most every
:data:`TRACE_INTERVAL`; the loop goes on. A process may first look at the exception (``on_error``: True when
it dealt with it, e.g. ZooKeeper being away).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Union

import zmq

from roq.runtime import TRACE_INTERVAL, DropCounter, LogLimit, SignalWakeup
from roq.sockets import poll_ms

__all__ = ["Loop", "Timer"]

log = logging.getLogger(__name__)

Source = Union["zmq.Socket[Any]", int]
Step = Callable[[], object]
Timed = Callable[[float], object]


@dataclasses.dataclass
class _Source:
    handler: Callable[..., object]
    what: str
    flags: int
    late: bool
    with_flags: bool


class Timer:
    """A handler run at ``due`` (monotonic seconds); :meth:`Loop.every` moves it on after each run."""

    __slots__ = ("fn", "what", "due", "period")

    def __init__(self, fn: Timed, what: str, due: float, period: float | Callable[[], float]) -> None:
        self.fn = fn
        self.what = what
        self.due = due
        self.period = period

    def at(self, due: float) -> None:
        """Run next at ``due`` instead (sooner or later)."""
        self.due = due


class _Deadline:
    """A handler run whenever ``due()`` has come: the process moves the deadline itself."""

    __slots__ = ("fn", "what", "due")

    def __init__(self, fn: Timed, what: str, due: Callable[[], float]) -> None:
        self.fn = fn
        self.what = what
        self.due = due


class Loop:
    """One process's event loop (see the module's documentation).

    Args:
        name: the process, as its log lines name it.
        drops: where failures of handlers are counted.
        on_error: looks at what a handler raised first; True when it dealt with it (nothing more is logged).
        idle: the longest poll when nothing is due (a loop with no timer still comes round).
    """

    def __init__(self, name: str, drops: DropCounter, *, on_error: Callable[[str, Exception], bool] | None = None,
                 idle: float = 1.0) -> None:
        self.name = name
        self.drops = drops
        self.on_error = on_error
        self.idle = idle
        self.stopped = False
        self.polled = 0.0  # when the last poll began
        self.woke = 0.0  # when it returned
        self.ready = 0  # sources it found ready
        self._items: list[tuple[Source, int]] | None = []  # what zmq_poll is given (None: to be made again)
        self._sources: dict[Source, _Source] = {}
        self._every: list[Timer] = []
        self._deadlines: list[_Deadline] = []
        self._before: list[tuple[Step, str]] = []
        self._after: list[tuple[Timed, str]] = []
        self._traces = LogLimit(TRACE_INTERVAL)
        self.failures = 0

    # ------------------------------------------------------------------ registrations

    def add(self, source: Source, handler: Callable[..., object], what: str, *, flags: int = zmq.POLLIN,
            late: bool = False, with_flags: bool = False) -> None:
        """Call ``handler()`` when ``source`` is ready for ``flags`` (``handler(flags)`` ``with_flags``); a
        ``late`` source is served after the others of its turn. Adding a source again replaces it."""
        self._sources.pop(source, None)  # (added again: it goes last)
        self._sources[source] = _Source(handler, what, flags, late, with_flags)
        self._items = None

    def want(self, source: Source, flags: int) -> None:
        """Poll ``source`` for ``flags`` from now on (0: paused)."""
        entry = self._sources[source]
        if entry.flags != flags:
            entry.flags = flags  # a paused source stays in the poll with no events asked: it keeps its place
            self._items = None

    def wants(self, source: Source) -> int:
        """What ``source`` is polled for (0: paused or not registered)."""
        entry = self._sources.get(source)
        return entry.flags if entry is not None else 0

    def remove(self, source: Source) -> None:
        """Poll ``source`` no more (nothing happens if it is not registered; a closed socket may be removed)."""
        if self._sources.pop(source, None) is not None:
            self._items = None

    def has(self, source: Source) -> bool:
        return source in self._sources

    def every(self, period: float | Callable[[], float], fn: Timed, what: str, *, first: float | None = None) -> Timer:
        """Run ``fn(now)`` every ``period`` seconds (a callable: read again after each run), the first time at
        ``first`` (default: one period from now)."""
        start = time.monotonic() + (period() if callable(period) else period) if first is None else first
        timer = Timer(fn, what, start, period)
        self._every.append(timer)
        return timer

    def deadline(self, due: Callable[[], float], fn: Timed, what: str) -> None:
        """Run ``fn(now)`` whenever ``due()`` (monotonic seconds; ``inf``: nothing due) has come."""
        self._deadlines.append(_Deadline(fn, what, due))

    def before_poll(self, fn: Step, what: str) -> None:
        """Run ``fn()`` before every poll."""
        self._before.append((fn, what))

    def after_turn(self, fn: Timed, what: str) -> None:
        """Run ``fn(now)`` at the end of every turn, after the sources and the timers."""
        self._after.append((fn, what))

    def on_signal(self, wakeup: SignalWakeup, fn: Step) -> None:
        """Call ``fn()`` when SIGTERM or SIGINT arrives (a second one ends the process: see
        :class:`~roq.runtime.SignalWakeup`)."""

        def signalled() -> None:
            if wakeup.consume():
                fn()

        self.add(wakeup.fd, signalled, "a signal")

    def stop(self) -> None:
        """End :meth:`run` at the end of this turn."""
        self.stopped = True

    # ------------------------------------------------------------------ running

    def run(self) -> None:
        """Turn until :meth:`stop`."""
        while not self.stopped:
            self.turn()

    def turn(self) -> None:
        """One turn: the steps before the poll, the poll (until the nearest deadline, at most :attr:`idle`),
        the ready sources, the timers due, the steps after."""
        for step, what in self._before:
            self.guarded(what, step)
        now = time.monotonic()
        due = now + self.idle
        for timer in self._every:
            if timer.due < due:
                due = timer.due
        for deadline in self._deadlines:
            at = deadline.due()
            if at < due:
                due = at
        self.polled = now
        items = self._items
        if items is None:
            items = self._items = [(source, entry.flags) for source, entry in self._sources.items()]
        ready = zmq.zmq_poll(items, poll_ms(max(0.0, due - now)))
        self.woke = time.monotonic()
        self.ready = len(ready)
        if ready:
            self._dispatch(ready, self._sources)
        now = time.monotonic()
        for timer in self._every:
            if now >= timer.due:
                period = timer.period
                timer.due = now + (period() if callable(period) else period)
                self.guarded(timer.what, timer.fn, now)
        for deadline in self._deadlines:
            if now >= deadline.due():
                self.guarded(deadline.what, deadline.fn, now)
        for fn, what in self._after:
            self.guarded(what, fn, now)

    def _dispatch(self, ready: list[tuple[Any, int]], sources: dict[Source, _Source]) -> None:
        later = None
        for source, flags in ready:
            entry = sources.get(source)
            if entry is None:  # removed by a handler earlier in this turn
                continue
            if entry.late:
                later = (later or []) + [(source, flags)]
                continue
            self._serve(entry, flags)
        for source, flags in later or ():
            entry = sources.get(source)
            if entry is not None:
                self._serve(entry, flags)

    def _serve(self, entry: _Source, flags: int) -> None:
        try:
            if entry.with_flags:
                entry.handler(flags)
            else:
                entry.handler()
        except Exception as exc:  # noqa: BLE001 - the boundary: one input's failure, never the loop's
            self.failed(entry.what, exc)

    def guarded(self, what: str, fn: Callable[..., object], *args: Any) -> bool:
        """Run ``fn(*args)`` inside the boundary (for a step a handler takes apart from the rest of its work);
        True if it ran through."""
        try:
            fn(*args)
            return True
        except Exception as exc:  # noqa: BLE001 - the boundary
            self.failed(what, exc)
            return False

    def failed(self, what: str, exc: Exception) -> None:
        """What a handler raised, at the boundary: ``on_error`` first, else counted and logged (rate-limited)."""
        if self.on_error is not None and self.on_error(what, exc):
            return
        self.failures += 1
        self.drops.drop("internal error", what)
        if self._traces.due():
            log.error("%s: %s failed", self.name, what, exc_info=exc)
