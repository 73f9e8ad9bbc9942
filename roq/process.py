"""Child processes: start a RoQ process, wait for its ready line (read here, once: :mod:`roq.wire.ready`), stop it
by its pid.

Children get ``PR_SET_PDEATHSIG`` so that they receive SIGTERM when their parent dies: a crashed
launcher never leaves exchanges or monitors running on.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import sys
import time
from typing import IO, Any, Callable, Iterable, Sequence, TypeVar

from roq import prefork
from roq.prefork import die_with_parent
from roq.wire import pipe
from roq.wire.control import Message
from roq.errors import BrokerConnectionError, BrokerTimeoutError, ProtocolError
from roq.wire.ready import PREFIX, Ready, decode

__all__ = ["Child", "spawn", "stop_all", "die_with_parent"]

log = logging.getLogger(__name__)
R = TypeVar("R", bound=Ready)

class Child:
    """A started RoQ process. Use :func:`spawn`.

    Attributes:
        name: a label for logs (e.g. ``exchange x1``).
        info: its ready line (endpoints, ids: the shape of its role) once it printed it, else None.
    """

    def __init__(self, name: str, popen: subprocess.Popen | prefork.Forked) -> None:
        self.name = name
        self._popen = popen
        self.info: Ready | None = None
        self._rest = b""  # output read past the ready line

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    def alive(self) -> bool:
        return self._popen.poll() is None

    def wait_ready(self, timeout: float = 15.0) -> Ready:
        """Wait for the ``READY {...}`` line and return it.

        Raises:
            BrokerConnectionError: the process exited before it was ready.
            BrokerTimeoutError: no ready line within ``timeout``.
            ProtocolError: its ready line is not one (the message says what is wrong with it).
        """
        stream: IO[bytes] = self._popen.stdout  # type: ignore[assignment]
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(stream, selectors.EVENT_READ)
            buf = b""
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrokerTimeoutError(f"{self.name} (pid {self.pid}) not ready after {timeout:.1f}s")
                if not sel.select(left):
                    continue
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    code = self._popen.wait()
                    raise BrokerConnectionError(f"{self.name} (pid {self.pid}) exited with code {code} before ready")
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    text = line.decode("utf-8", "replace")
                    if text.startswith(PREFIX):
                        self._rest = buf
                        self.info = decode(text)
                        return self.info

    def ready_as(self, kind: type[R]) -> R:
        """Its ready line, as the role ``kind`` it was started as.

        Raises:
            ProtocolError: it printed none yet, or another role's.
        """
        if not isinstance(self.info, kind):
            said = f"a {self.info.ROLE}'s" if self.info is not None else "none"
            raise ProtocolError(f"{self.name} (pid {self.pid}) printed {said} ready line, not a {kind.ROLE}'s")
        return self.info

    @property
    def stdout_fd(self) -> int:
        """The file descriptor of the child's standard output, for a poll loop (see :meth:`read_ready`)."""
        return self._popen.stdout.fileno()  # type: ignore[union-attr]

    def read_ready(self) -> Ready | None:
        """Read what the child printed without blocking; return its ready line once it is in.

        For a poll loop that watches :attr:`stdout_fd`. Returns None while the line is not complete, or
        when the child closed its output (check :meth:`alive`). A ready line that is not one is logged and
        passed over.
        """
        fd = self.stdout_fd
        os.set_blocking(fd, False)
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self._rest += chunk
        except BlockingIOError:
            pass
        while b"\n" in self._rest:
            line, self._rest = self._rest.split(b"\n", 1)
            text = line.decode("utf-8", "replace")
            if text.startswith(PREFIX) and self.info is None:
                try:
                    self.info = decode(text)
                except ProtocolError as exc:
                    log.warning("%s (pid %d) printed a ready line that is not one: %s", self.name, self.pid, exc)
                    continue
                return self.info
        return None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process if it still runs."""
        if self._popen.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        self.signal(signal.SIGKILL)
        self._popen.wait()
        self._close_pipes()

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns the exit code."""
        self.signal(signal.SIGTERM)
        try:
            code = self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            code = self._popen.wait()
        self._close_pipes()
        return code

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to exit on its own.

        Raises:
            BrokerTimeoutError: still running after ``timeout``.
        """
        try:
            code = self._popen.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise BrokerTimeoutError(f"{self.name} (pid {self.pid}) still running after {timeout}s") from exc
        self._close_pipes()
        return code

    def send(self, msg: Message) -> bool:
        """Write the control message ``msg`` on the child's standard input (see ``spawn(commands=True)`` and
        :mod:`roq.wire.pipe`).

        Never blocks. Returns False if it could not be written whole (no pipe, the child is gone, or it
        stopped reading): the caller falls back on something that needs no cooperation from the child.

        Raises:
            ProtocolError: ``msg`` cannot be encoded for a pipe.
        """
        stream = self._popen.stdin
        if stream is None or stream.closed:
            return False
        return pipe.send(stream.fileno(), msg)

    def communicate(self, timeout: float | None = None) -> str:
        """Wait for the process to exit and return the rest of its standard output.

        Raises:
            BrokerTimeoutError: still running after ``timeout`` (it is left running).
        """
        try:
            out, _ = self._popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise BrokerTimeoutError(f"{self.name} (pid {self.pid}) still running after {timeout}s") from exc
        rest, self._rest = self._rest, b""
        return (rest + (out or b"")).decode("utf-8", "replace")

    def _close_pipes(self) -> None:
        for stream in (self._popen.stdout, self._popen.stdin):
            if stream is not None and not stream.closed:
                stream.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Child {self.name} pid={self.pid} rc={self.returncode}>"


def spawn(
    name: str,
    module: str,
    args: Sequence[str],
    *,
    stderr: IO[Any] | int | None = None,
    env: dict[str, str] | None = None,
    commands: bool = False,
    enter: Callable[[], None] | None = None,
) -> Child:
    """Start ``python -m module args...`` as a child that dies with this process: forked from this process's
    :mod:`roq.prefork` server, which has its code imported already (where ``enter`` is None), else as a new
    interpreter.

    Args:
        name: a label for logs and errors.
        module: the runnable package, e.g. ``"exchange"``.
        args: its command-line arguments.
        stderr: where its log goes (default: this process's stderr).
        env: environment of the child (default: this process's).
        commands: give the child a pipe on its standard input for :meth:`Child.send` (default: none).
        enter: called in the child before it runs (e.g. to join a cgroup or a network namespace); what it
            raises makes the start fail.
    """
    if enter is None and prefork.enabled():
        forked = prefork.start(module, list(args), stderr=stderr, env=env, commands=commands)
        if forked is not None:
            return Child(name, forked)
    parent = os.getpid()

    def prepare() -> None:
        die_with_parent(parent)
        if enter is not None:
            enter()

    popen = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.PIPE if commands else subprocess.DEVNULL,
        env=env,
        preexec_fn=prepare,
    )
    return Child(name, popen)


def stop_all(children: Iterable[Child], timeout: float = 10.0) -> None:
    """Stop ``children`` together: SIGTERM to each at once, then wait for them all within one ``timeout``
    (each drains in parallel with the others), then SIGKILL whatever still runs."""
    children = list(children)
    for child in children:
        child.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except BrokerTimeoutError:
            child.kill()
