"""Stand-ins shared by the host manager's unit tests."""

from __future__ import annotations

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
