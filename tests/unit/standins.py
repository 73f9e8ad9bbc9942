"""Stand-ins shared by unit tests: a supervised child for the host manager's, monitors for the exchange's, a
monitor's status for the GCM's."""

from __future__ import annotations

from typing import Any

import zmq

from roq.wire import control
from roq.wire.ready import Ready
from roq.wire.status import QueueStatus, decode


class StandIn:
    """What Supervised uses of a roq.process.Child."""

    def __init__(self, *, takes_commands: bool = True) -> None:
        self.pid = 4242
        self.returncode: int | None = None
        self.signals: list[int] = []
        self.sent: list[control.Message] = []
        self.takes_commands = takes_commands
        self.info: Ready | None = None

    def alive(self) -> bool:
        return self.returncode is None

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode or 0

    def signal(self, signum: int) -> None:
        self.signals.append(signum)

    def send(self, msg: control.Message) -> bool:
        if self.takes_commands:
            self.sent.append(msg)
        return self.takes_commands


def monitor_routers(ctx: zmq.Context) -> list[tuple[zmq.Socket, str]]:
    """Two ROUTER sockets bound on loopback, standing in for a queue's monitor before and after it moved: each
    with its endpoint."""
    pair = []
    for _ in range(2):
        s = ctx.socket(zmq.ROUTER)
        s.setsockopt(zmq.LINGER, 0)
        pair.append((s, f"tcp://127.0.0.1:{s.bind_to_random_port('tcp://127.0.0.1')}"))
    return pair


_TOTALS = {"records_in": 0, "bytes_in": 0, "records_out": 0, "bytes_out": 0}
_EXCHANGE = {"id": "x1", "frontend": "tcp://127.0.0.1:7000", "backend": "tcp://127.0.0.1:8000", "pid": 1,
             "draining": False, "records_per_s": 0.0, "bytes_per_s": 0.0, "records_out_per_s": 0.0,
             "bytes_out_per_s": 0.0, "totals": _TOTALS, "cpu_percent": 0.0, "rss_bytes": 0, "busy": 0.0,
             "mark_records_per_s": 0.0, "publisher_pressure": 0.0, "dropped": 0, "publishers": 0, "silent_s": 0.0}
_ITEMS = {"exchanges": _EXCHANGE,
          "publishers": {"id": "p1", "exchange": "x1", "relocating": False, "records_per_s": 0.0},
          "subscribers": {"id": "s1", "prefix": b"", "confirmed": [], "live": True}}


def queue_status(**parts: Any) -> QueueStatus:
    """A monitor's status (through :func:`roq.wire.status.decode`) with ``parts`` given as documents: the exchanges,
    publishers and subscribers as far as a test cares, the rest of each filled in with zeros."""
    doc: dict[str, Any] = {
        "queue": "q", "pid": 1, "exchanges": [], "publishers": [], "subscribers": [], "relocations_in_flight": 0,
        "rules": {}, "scaling": {"placement": {}, "starting": [], "retiring": "", "asking_gcm": False},
        "journal": {"durability": "none", "journal": ""}, "relocations": [], "counters": {}, "totals": _TOTALS,
        "latency_histogram": {"bounds_ms": list(control.LATENCY_BOUNDS_MS),
                              "counts": [0] * (len(control.LATENCY_BOUNDS_MS) + 1), "sum_ms": 0.0},
        "dropped": {}, "refused": {}, "events": []}
    for key, value in parts.items():
        doc[key] = [{**_ITEMS[key], **item} for item in value] if key in _ITEMS else value
    return decode(doc)


if __name__ == "__main__":  # a child process for roq.process's tests: it prints each argument as a line
    import sys

    for line in sys.argv[1:]:
        print(line, flush=True)
