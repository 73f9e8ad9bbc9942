"""What every RoQ process shares at run time: exit codes, signals, logging, the ready line, drops.

A process runs one loop (:class:`roq.loop.Loop`). :class:`SignalWakeup` turns SIGTERM/SIGINT into a readable
file descriptor that the loop polls beside its sockets: the first signal asks for a graceful stop, the second
one ends the process at once (as dramatiq's workers do).
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import socket
import sys
import time
from typing import Any, Callable, TypeVar

from roq.wire.ready import Ready

__all__ = ["ExitCode", "SignalWakeup", "StopFlag", "LogLimit", "counted_log_due", "DropCounter", "setup_logging", "announce_ready", "run_node",
           "run_main", "TRACE_INTERVAL"]

TRACE_INTERVAL = 10.0  # seconds between two tracebacks of a boundary (a loop's, a dispatcher's, the HTTP server's)
C = TypeVar("C")  # a process's settings class


class ExitCode(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    CONFIG = 3
    BIND = 4  # the address or port could not be bound
    STORAGE = 5  # a journal's directory or files cannot be used
    SIGNALLED = 130


class StopFlag:
    """``asked`` (and calling it) turns True once SIGTERM or SIGINT arrives: for loops that poll a flag, not a
    descriptor (load generators, a Spark stream). Every signal just sets it; the loop stops cleanly."""

    def __init__(self) -> None:
        self.asked = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, *_: object) -> None:
        self.asked = True

    def __call__(self) -> bool:
        return self.asked


class SignalWakeup:
    """Make SIGTERM and SIGINT visible to a poll loop.

    Register :attr:`fd` in the loop's poller; when it is readable call :meth:`consume` and stop
    gracefully. A second signal exits immediately with :data:`ExitCode.SIGNALLED`.
    """

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)
        self.count = 0
        self._previous = {s: signal.signal(s, self._handle) for s in signals}
        self._old_wakeup = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)

    @property
    def fd(self) -> int:
        return self._read.fileno()

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count > 1:
            os._exit(ExitCode.SIGNALLED)

    def consume(self) -> bool:
        """Drain the wakeup bytes; True when a stop was asked for."""
        try:
            while self._read.recv(512):
                pass
        except BlockingIOError:
            pass
        return self.count > 0

    def close(self) -> None:
        signal.set_wakeup_fd(self._old_wakeup)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._read.close()
        self._write.close()


class LogLimit:
    """A log line that repeats is written at most once every ``interval`` seconds: :meth:`due` says when
    (the one definition of a rate-limited log; :class:`DropCounter` sums what it held back)."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._next = 0.0

    def due(self, now: float | None = None) -> bool:
        """Whether the line may be written now (and then not again for ``interval``)."""
        now = time.monotonic() if now is None else now
        if now < self._next:
            return False
        self._next = now + self.interval
        return True


def counted_log_due(count: int) -> bool:
    """Whether the ``count``-th occurrence of a repeated event is logged: the first ten, then every hundredth
    (for an event whose count the line reports)."""
    return count <= 10 or count % 100 == 0


class DropCounter:
    """Counts input dropped as malformed, per reason, and logs it without flooding.

    The first drop of each reason is logged at once; later ones are summed into at most one line per
    ``interval`` seconds.
    """

    def __init__(self, logger: logging.Logger, where: str, interval: float = 5.0) -> None:
        self._log = logger
        self._where = where
        self._interval = interval
        self.total = 0
        self.by_reason: dict[str, int] = {}
        self._unlogged = 0
        self._limit = LogLimit(interval)

    def drop(self, reason: str, detail: str = "") -> None:
        self.total += 1
        first = reason not in self.by_reason
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        if self._limit.due() or first:
            extra = f" (+{self._unlogged} more since last report)" if self._unlogged else ""
            self._log.warning("%s: dropped %s%s%s", self._where, reason, f": {detail}" if detail else "", extra)
            self._unlogged = 0
        else:
            self._unlogged += 1


def setup_logging(level: str = "INFO") -> None:
    """Log lines to stderr with a timestamp, the process name and the logger name."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(processName)s[%(process)d] %(name)s: %(message)s",
        stream=sys.stderr,
    )


def announce_ready(ready: Ready) -> None:
    """Print the one line a launcher waits for, ``READY {"role": ..., ...}`` (:mod:`roq.wire.ready`), on stdout."""
    sys.stdout.write(ready.line() + "\n")
    sys.stdout.flush()


def run_main(role: str, config_cls: type[C], make_node: Callable[[C], Any], argv: list[str] | None, *,
             description: str, module: str = "") -> int:
    """The whole ``__main__`` of a RoQ process: flags and ``--config`` from ``config_cls``, logging, the
    config built and checked, the node made and run (see :func:`run_node`). Returns the exit code.

    ``make_node(config)`` returns the node; its ``ready_info()`` gives its ready line (:mod:`roq.wire.ready`). ``module`` is
    what ``python -m`` runs, when it is not ``role``.
    """
    from roq.errors import ConfigError
    from roq.settings import from_args, parser_for

    args = parser_for(config_cls, prog=f"python -m {module or role}", description=description, section=role).parse_args(argv)
    setup_logging(args.log_level)
    try:
        config = from_args(config_cls, role, args)
        node = make_node(config)
    except ConfigError as exc:
        print(f"{role}: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    return run_node(role, node, node.ready_info)


def run_node(role: str, node: Any, ready: Callable[[], Ready]) -> int:
    """Run a process's node to the end: start it, print the ready line, serve until a signal, close it.

    ``node`` has ``start()`` (which may raise BrokerConnectionError or ConfigError: the address cannot be
    bound, a server cannot be reached), ``serve(wakeup)`` and ``close()``; ``ready()`` gives the ready
    line once it started. Returns the process's exit code.
    """
    from roq.errors import BrokerConnectionError, ConfigError, JournalError

    wakeup = SignalWakeup()
    try:
        try:
            node.start()
        except (BrokerConnectionError, ConfigError, JournalError) as exc:
            print(f"{role}: {exc}", file=sys.stderr)
            node.close()
            return (ExitCode.STORAGE if isinstance(exc, JournalError) else ExitCode.CONFIG if isinstance(exc, ConfigError)
                    else ExitCode.BIND)
        announce_ready(ready())
        try:
            node.serve(wakeup)
        finally:
            node.close()
    finally:
        wakeup.close()
    return ExitCode.OK
