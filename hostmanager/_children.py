"""The processes a host manager supervises: one per assignment, restarted when it crashes.

A :class:`Supervised` is the state machine of one assignment's process: started -> ready (its ready line
read) -> exited (restarted after a back-off that grows while it keeps crashing) or stopping (SIGTERM, a
second SIGTERM that ends a draining exchange at once, then SIGKILL). Nothing here blocks: the host
manager's loop drives it.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from typing import IO, Any

from roq.process import Child, spawn

__all__ = ["Assignment", "Supervised"]

log = logging.getLogger("hostmanager")

RESTART_MIN = 0.0  # the first restart is immediate
RESTART_MAX = 5.0
HEALTHY_AFTER = 30.0  # a child up this long resets its back-off
SECOND_SIGNAL_AFTER = 0.3
KILL_AFTER = 5.0


@dataclasses.dataclass(frozen=True)
class Assignment:
    """What an assignment znode asks this host to run."""

    name: str  # the znode's name: "<queue>@<role>"
    queue: str
    role: str  # "monitor" or "exchange"
    id: str  # the exchange id, or "monitor"

    @classmethod
    def parse(cls, name: str) -> Assignment | None:
        queue, sep, role = name.rpartition("@")
        if not sep or not queue or not role:
            return None
        return cls(name, queue, "monitor" if role == "monitor" else "exchange", role)


class Supervised:
    """One assignment's process over its restarts."""

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment
        self.child: Child | None = None
        self.ports: list[int] = []
        self.args: list[str] = []
        self.ready = False
        self.restarts = 0
        self.started_at = 0.0
        self.not_before = 0.0  # no restart before this time
        self.backoff = RESTART_MIN
        self.stopping_since: float | None = None
        self._second_signal_sent = False
        self.last_port = 0  # the monitor's port, kept across restarts
        self.restart_pending = False
        self.incarnation = ""  # the exchange id of the current process

    @property
    def running(self) -> bool:
        return self.child is not None and self.child.alive()

    def start(self, args: list[str], ports: list[int], stderr: IO[Any] | None) -> None:
        a = self.assignment
        self.args, self.ports = args, ports
        # exchanges take commands on standard input (where their monitor moved)
        self.child = spawn(f"{a.role} {a.queue}/{a.id}", a.role, args, stderr=stderr, commands=a.role == "exchange")
        self.ready = False
        self.restart_pending = False
        self.started_at = time.monotonic()
        log.info("started %s of queue %s (pid %d)", a.id, a.queue, self.child.pid)

    def read(self) -> dict[str, Any] | None:
        """Read the child's output; its ready fields the first time they are complete."""
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
        if self.stopping_since is None:
            if now - self.started_at >= HEALTHY_AFTER:
                self.backoff = RESTART_MIN
            self.not_before = now + self.backoff
            self.restart_pending = True
            self.backoff = min(RESTART_MAX, max(0.5, self.backoff * 2))
        return code

    def begin_stop(self, now: float) -> None:
        if self.stopping_since is None:
            self.stopping_since = now
            if self.child is not None:
                self.child.signal(signal.SIGTERM)

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
