"""The processes a host manager supervises: one per assignment, restarted when it crashes.

A :class:`Supervised` is the state machine of one assignment's process: started -> ready (its ready line
read) -> exited (restarted after a back-off that grows while it keeps crashing) or stopping (SIGTERM, a
second SIGTERM that ends a draining exchange at once, then SIGKILL), for good or to be started again at
once (an exchange that cannot be told where its monitor moved). Nothing here blocks: the host manager's
loop drives it.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from typing import IO, Any

from hostmanager._config import MODULES
from hostmanager._converge import ChildState
from roq.wire import control
from roq.config import ExchangeConfig, JournalConfig, LinkConfig, MonitorConfig
from roq.wire.documents import Assignment
from roq.errors import ProtocolError
from roq.process import Child, spawn
from roq.wire.ready import Ready
from roq.settings import to_args

__all__ = ["Supervised"]

log = logging.getLogger("hostmanager")

RESTART_MIN = 0.0  # the first restart is immediate
RESTART_MAX = 5.0
HEALTHY_AFTER = 30.0  # a child up this long resets its back-off
SECOND_SIGNAL_AFTER = 0.3
KILL_AFTER = 5.0


class Supervised:
    """One assignment's process over its restarts."""

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment
        self.child: Child | None = None
        self.config: MonitorConfig | ExchangeConfig | JournalConfig | LinkConfig | None = None  # the current process's settings
        self.ports: list[int] = []
        self.ready = False
        self.restarts = 0
        self.started_at = 0.0
        self.not_before = 0.0  # no restart before this time
        self.backoff = RESTART_MIN
        self.stopping_since: float | None = None
        self.restarting = False  # the stop in progress is followed by a start
        self.tellable = True
        self._second_signal_sent = False
        self.last_port = 0  # the monitor's port, kept across restarts
        self.replicas = 1  # a journal's: how many replicas the queue's journal has
        self.restart_pending = False

    @property
    def name(self) -> str:
        return self.assignment.name

    @property
    def running(self) -> bool:
        return self.child is not None and self.child.alive()

    @property
    def incarnation(self) -> str:
        """The name of the current exchange process ("" for a monitor)."""
        return self.config.exchange_id if isinstance(self.config, ExchangeConfig) else ""

    def state(self) -> ChildState:
        """What :func:`~hostmanager._converge.converge` needs of this child."""
        return ChildState(self.assignment, running=self.child is not None,
                          stopping=self.stopping_since is not None, not_before=self.not_before,
                          monitor=_monitor_of(self.config),
                          tellable=self.tellable and not isinstance(self.config, LinkConfig))  # (a link is started again)

    def start(self, config: MonitorConfig | ExchangeConfig | JournalConfig | LinkConfig, ports: list[int],
              stderr: IO[Any] | None) -> None:
        """Start the process with the flags of ``config`` (the module is the assignment's role's)."""
        a = self.assignment
        self.config, self.ports = config, ports
        told = isinstance(config, (ExchangeConfig, JournalConfig))
        # exchanges and journals take commands on standard input (where their monitor moved)
        self.child = spawn(f"{a.role} {a.name}", MODULES[a.role], to_args(config), stderr=stderr, commands=told)
        self.ready = False
        self.tellable = True
        self.restart_pending = False
        self.started_at = time.monotonic()
        log.info("started %s of queue %s (pid %d)", self.incarnation or a.slot, a.queue, self.child.pid)

    def tell(self, monitor: str) -> bool:
        """Tell the exchange or journal its monitor moved; False if it could not be told (then it is not
        tellable)."""
        if self.child is None or not isinstance(self.config, (ExchangeConfig, JournalConfig)):
            return False
        try:
            told = self.child.send(control.Retarget(monitor=monitor))
        except ProtocolError:  # an endpoint too long for a pipe
            told = False
        if told:
            self.config = dataclasses.replace(self.config, monitor=monitor)
        else:
            self.tellable = False
        return told

    def read(self) -> Ready | None:
        """Read the child's output; its ready line the first time it is complete."""
        if self.child is None or self.ready:
            if self.child is not None:
                self.child.read_ready()  # drain and ignore anything printed later
            return None
        info = self.child.read_ready()
        if info is not None:
            self.ready = True
        return info

    def exited(self, now: float) -> int | None:
        """The exit code if the child has just been found dead (once), else None."""
        if self.child is None or self.child.alive():
            return None
        code = self.child.returncode
        self.child.wait(0)
        self.child = None
        self.ready = False
        if self.restarting:  # stopped on purpose, to be started again at once
            self.restarting = False
            self.stopping_since = None
            self._second_signal_sent = False
            self.not_before = now
            self.restart_pending = True
        elif self.stopping_since is None:
            if now - self.started_at >= HEALTHY_AFTER:
                self.backoff = RESTART_MIN
            self.not_before = now + self.backoff
            self.restart_pending = True
            self.backoff = min(RESTART_MAX, max(0.5, self.backoff * 2))
        return code

    def begin_stop(self, now: float, *, restart: bool = False) -> None:
        """SIGTERM the process; with ``restart`` it is started again once it exited."""
        if self.stopping_since is None:
            self.stopping_since = now
            self.restarting = restart and self.child is not None
            if self.child is not None:
                self.child.signal(signal.SIGTERM)
        elif not restart:
            self.restarting = False  # a stop for good overrides a restart

    def push_stop(self, now: float) -> None:
        """Escalate a stop in progress: a second SIGTERM (no drain), then SIGKILL."""
        if self.stopping_since is None or self.child is None:
            return
        waited = now - self.stopping_since
        if waited >= KILL_AFTER:
            self.child.signal(signal.SIGKILL)
        elif waited >= SECOND_SIGNAL_AFTER and not self._second_signal_sent:
            self._second_signal_sent = True
            self.child.signal(signal.SIGTERM)


def _monitor_of(config: MonitorConfig | ExchangeConfig | JournalConfig | LinkConfig | None) -> str:
    """The monitor a child reports to, or reads the queue of (a link's source); "" for a monitor."""
    if isinstance(config, (ExchangeConfig, JournalConfig)):
        return config.monitor
    return config.source if isinstance(config, LinkConfig) else ""
