"""The host's KPI shipper (:mod:`client.shipper`), supervised: started with the host manager when the cluster has a
KPI queue, started again after a back-off when it exits, stopped after the other children (the files they put in
place as they stopped are shipped at its next start).

Nothing here blocks but :meth:`Shipping.stop`: the host manager's loop calls :meth:`Shipping.check`.
"""

from __future__ import annotations

import logging
import os
from typing import IO, Any

from hostmanager._config import MODULES
from roq.config import ShipperConfig
from roq.process import Child, spawn
from roq.settings import to_args

__all__ = ["Shipping"]

log = logging.getLogger("hostmanager")

RESTART_MAX = 30.0
HEALTHY_AFTER = 60.0
STOP_WAIT_S = 5.0


class Shipping:
    """The shipper process of one host manager (none while ``config`` is None)."""

    def __init__(self, config: ShipperConfig | None, log_dir: str = "") -> None:
        self.config = config
        self.log_dir = log_dir
        self.child: Child | None = None
        self.started_at = 0.0
        self.not_before = 0.0
        self.backoff = 1.0
        self.restarts = 0
        self._log: IO[Any] | None = None

    def check(self, now: float) -> None:
        """Start the shipper if it should run and does not."""
        if self.config is None:
            return
        if self.child is not None:
            if self.child.alive():
                if now - self.started_at > HEALTHY_AFTER:
                    self.backoff = 1.0
                return
            log.warning("the KPI shipper exited (code %s); started again in %g s", self.child.returncode, self.backoff)
            self.child = None
            self.restarts += 1
            self.not_before = now + self.backoff
            self.backoff = min(RESTART_MAX, self.backoff * 2)
        if now < self.not_before:
            return
        if self.log_dir and self._log is None:
            os.makedirs(self.log_dir, exist_ok=True)
            self._log = open(os.path.join(self.log_dir, "kpi-shipper.log"), "ab")
        self.child = spawn("kpi shipper", MODULES["shipper"], to_args(self.config), stderr=self._log)
        self.started_at = now
        log.info("KPI shipper started (pid %d): %s to queue %r", self.child.pid, self.config.archive,
                 self.config.queue)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after :data:`STOP_WAIT_S`."""
        child, self.child = self.child, None
        if child is not None:
            child.stop(STOP_WAIT_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    def status(self) -> dict[str, Any] | None:
        if self.config is None:
            return None
        return {"queue": self.config.queue, "pid": self.child.pid if self.child is not None else None,
                "restarts": self.restarts}
