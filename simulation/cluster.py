"""A local cluster: one monitor and N exchanges as child processes on a loopback address.

Used by ``python -m simulation local``, the demo, the benchmark and the tests. Every process it starts
it stops, by pid; children also die with it (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import logging
import time
from typing import IO, Any, Callable, Sequence

import client
from roq.config import CurveClient
from roq.errors import BrokerTimeoutError
from roq.process import Child, stop_all
from roq.wire.ready import MonitorReady
from roq.wire.status import QueueStatus
from roqcli.embedded import spawn_logged

log = logging.getLogger(__name__)

__all__ = ["LocalCluster"]


class LocalCluster:
    """Start a monitor and exchanges on ``address``.

    Args:
        address: loopback address every process binds to (e.g. 127.0.0.11).
        exchanges: how many exchanges to start.
        monitor_port: the monitor's port (0 = any free port).
        monitor_args: extra flags for ``python -m monitor``.
        exchange_args: extra flags for every ``python -m exchange``.
        log_dir: directory for the processes' logs (default: inherit this process's stderr).
        curve: the keys its own requests to the monitor (status, moves) are made with, for a monitor that
            serves CURVE (None: plaintext).
    """

    def __init__(
        self,
        *,
        address: str = "127.0.0.11",
        exchanges: int = 2,
        monitor_port: int = 0,
        monitor_args: Sequence[str] = (),
        exchange_args: Sequence[str] = (),
        log_dir: str | None = None,
        curve: CurveClient | None = None,
    ) -> None:
        self.curve = curve
        self.address = address
        self.initial_exchanges = exchanges
        self.monitor_port = monitor_port
        self.monitor_args = list(monitor_args)
        self.exchange_args = list(exchange_args)
        self.log_dir = log_dir
        self.monitor: Child | None = None
        self.monitor_endpoint = ""
        self.exchanges: dict[str, Child] = {}
        self._logs: list[IO[Any]] = []
        self._counter = 0
        self._admin: client.Connection | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 20.0) -> LocalCluster:
        """Start the monitor and the exchanges; return once the monitor lists them all.

        Raises:
            BrokerConnectionError: a process exited early.
            BrokerTimeoutError: the cluster was not whole within ``timeout``.
        """
        try:
            self.monitor = self._spawn(
                "monitor", "monitor", ["--address", self.address, "--port", str(self.monitor_port), *self.monitor_args]
            )
            self.monitor.wait_ready(timeout)
            self.monitor_endpoint = self.monitor.ready_as(MonitorReady).endpoint
            self._admin = client.Connection(self.monitor_endpoint,
                                            publisher_config=client.PublisherConfig(curve=self.curve))
            started = [self.add_exchange(wait=False) for _ in range(self.initial_exchanges)]
            for name in started:
                self.exchanges[name].wait_ready(timeout)
            self.wait_for(lambda s: len(s.exchanges) >= self.initial_exchanges, timeout, "every exchange registered")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every exchange, then the monitor; close the log files."""
        stop_all(self.exchanges.values(), timeout)  # they drain at once
        self.exchanges.clear()
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self.monitor is not None:
            self.monitor.stop(timeout)
            self.monitor = None
        for f in self._logs:
            f.close()
        self._logs.clear()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ exchanges

    def add_exchange(self, name: str | None = None, *, wait: bool = True, extra: Sequence[str] = ()) -> str:
        """Start one more exchange; return its id."""
        self._counter += 1
        name = name or f"x{self._counter}"
        child = self._spawn(
            f"exchange {name}",
            "exchange",
            ["--monitor", self.monitor_endpoint, "--address", self.address, "--id", name, *self.exchange_args, *extra],
        )
        self.exchanges[name] = child
        if wait:
            child.wait_ready()
        return name

    def kill_exchange(self, name: str) -> int:
        """SIGKILL an exchange (a crash); return its pid."""
        child = self.exchanges.pop(name)
        pid = child.pid
        child.kill()
        return pid

    def stop_exchange(self, name: str, timeout: float = 10.0) -> int:
        """SIGTERM an exchange (graceful drain) and wait for it; return its exit code."""
        return self.exchanges.pop(name).stop(timeout)

    def pids(self) -> list[int]:
        children = list(self.exchanges.values()) + ([self.monitor] if self.monitor else [])
        return [c.pid for c in children if c.alive()]

    # ------------------------------------------------------------------ monitor

    def status(self, timeout: float = 5.0) -> QueueStatus:
        """The monitor's status (exchanges, publishers, subscribers, counters, events)."""
        assert self._admin is not None, "cluster not started"
        return self._admin.status(timeout)

    def relocate(self, publisher: str = "", target: str = "") -> dict[str, Any]:
        """Ask the monitor for a forced relocation."""
        assert self._admin is not None, "cluster not started"
        return self._admin.relocate(publisher, target)

    def wait_for(self, condition: Callable[[QueueStatus], Any], timeout: float, what: str,
                 interval: float = 0.05) -> QueueStatus:
        """Poll the monitor's status until ``condition(status)`` holds; return that status.

        Raises:
            BrokerTimeoutError: it did not hold within ``timeout`` (the message says ``what``).
        """
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if condition(status):
                return status
            if time.monotonic() >= deadline:
                raise BrokerTimeoutError(f"timed out after {timeout:.1f}s waiting for: {what}")
            time.sleep(interval)

    # ------------------------------------------------------------------ helpers

    def _spawn(self, name: str, module: str, args: list[str]) -> Child:
        return spawn_logged(name, module, args, self.log_dir, self._logs)
