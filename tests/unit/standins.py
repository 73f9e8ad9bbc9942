"""Stand-ins shared by unit tests: a supervised child for the host manager's, monitors for the exchange's."""

from __future__ import annotations

import zmq

from roq import control


class StandIn:
    """What Supervised uses of a roq.process.Child."""

    def __init__(self, *, takes_commands: bool = True) -> None:
        self.pid = 4242
        self.returncode: int | None = None
        self.signals: list[int] = []
        self.sent: list[control.Message] = []
        self.takes_commands = takes_commands
        self.info: dict = {}

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
