"""Prefork: start RoQ processes by forking a server that has their code imported already.

``python -m exchange`` spends about 0.7 s of CPU importing its code (pyzmq, kazoo, bson, and our wire shapes,
dataclasses compiled at import) before it does anything. A host manager that starts exchanges when its queue runs
hot pays that each time, on the host that is hot; a test suite that starts a thousand processes pays it a thousand
times. A prefork server is one child of the starting process, single-threaded, that imports a module the first time
it is asked for it and then forks a process for each start. The forked process runs the module as ``python -m``
would: with the caller's arguments, environment, working directory and standard streams, and the command line
``python -m module args...`` (what ``ps`` and psutil show: see :func:`_set_command_line`).

The server is the parent of what it forks: it reaps them and tells the starter each one's exit code. It dies with
its starter (``PR_SET_PDEATHSIG``), and what it forked dies with it, as a spawned child dies with its spawner.
Nothing is forked from a process with more than one thread (a fork keeps one thread of many, with the others'
locks held): a module whose import starts a thread is run with ``subprocess``, and the server it was imported in
forks nothing more (it ends once what it forked has; the next start has a new server).

Used by :func:`roq.process.spawn`; ``ROQ_PREFORK=0`` in the environment turns it off.
"""

from __future__ import annotations

import ast
import atexit
import ctypes
import functools
import importlib
import importlib.util
import math
import os
import pickle
import random
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import IO, Any, Callable, Sequence

__all__ = ["die_with_parent", "enabled", "prepare", "start", "server_pid", "ended_cpu_seconds", "Forked"]

MAX_MESSAGE = 1 << 20  # a start request: the module, its arguments, the environment, the working directory
_PR_SET_PDEATHSIG = 1


def enabled() -> bool:
    """Whether starts go through a prefork server (``ROQ_PREFORK=0`` says no; so does a system without pidfds)."""
    return os.environ.get("ROQ_PREFORK", "1") != "0" and _pidfds()


@functools.lru_cache(maxsize=1)
def _pidfds() -> bool:
    """Whether this system gives pidfds (Linux 5.3; a container's seccomp profile may refuse them)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


# ---- the server: what runs in the forked-from process --------------------------------------------------------


def serve(fd: int, parent: int, preload: list[str]) -> None:
    """Serve start requests on the socket ``fd`` until the starter closes it (``python -m roq.prefork``), having
    imported ``preload`` first."""
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the starter and what it started
    for module in preload:
        _load(module)
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    server = os.getpid()
    tainted = ""  # what started a thread here: nothing is forked from then on
    children: set[int] = set()
    while not tainted or children:
        for key, _ in sel.select():
            if key.fileobj is sock:
                try:
                    data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
                except OSError:
                    return
                if not data:
                    return  # the starter is gone
                request, module, args, env, cwd = pickle.loads(data)
                try:
                    if not tainted and not _load(module):
                        tainted = module
                    if tainted:
                        _send(sock, ("unsafe", request, f"importing {tainted} started a thread"))
                        continue
                    try:
                        pid = os.fork()
                    except OSError as exc:  # (out of processes or memory: the starter tries the other way)
                        _send(sock, ("failed", request, str(exc)))
                        continue
                    if pid == 0:
                        sel.close()
                        sock.close()
                        for f in (wake_r, wake_w):
                            os.close(f)
                        _run(module, args, env, cwd, fds, server)  # never returns
                    children.add(pid)
                    pidfd = os.pidfd_open(pid)  # (not reaped yet: this loop reaps, after this)
                    try:
                        _send(sock, ("started", request, pid), [pidfd])
                    finally:
                        os.close(pidfd)
                finally:
                    for f in fds:
                        os.close(f)
            else:
                try:
                    while os.read(wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            children -= _reap(sock)


def _load(module: str) -> bool:
    """Import the code ``module`` runs on here, once; False if that started a thread (it must not be forked from
    then).

    A package is imported (``python -m`` runs its ``__main__``, which imports it). A module is not, since ``python -m``
    runs it as ``__main__`` only and its body may register what it defines: what it imports is, as its source names
    it at the top level."""
    if module not in _loaded:
        _loaded.add(module)
        for name in _imports_of(module):
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001 - the forked process imports it again and reports the error itself
                pass
        sys.stdout.flush()
        sys.stderr.flush()
    return threading.active_count() == 1


_loaded: set[str] = set()


def _imports_of(module: str) -> list[str]:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is not None or not spec.origin:
        return [module]  # a package (or what the forked process will fail to find and say so)
    try:
        with open(spec.origin, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return []
    names = [module.rpartition(".")[0]] if "." in module else []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _reap(sock: socket.socket) -> set[int]:
    """Reap what ended and tell the starter; their pids."""
    ended: set[int] = set()
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.add(pid)
        _send(sock, ("exited", 0, (pid, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime)))


def _send(sock: socket.socket, message: tuple[str, int, Any], fds: list[int] | None = None) -> None:
    try:
        socket.send_fds(sock, [pickle.dumps(message)], fds or [])
    except OSError:
        pass  # the starter is gone: its end of the socket says so next


def _run(module: str, args: list[str], env: dict[str, str], cwd: str, fds: list[int], server: int) -> None:
    """In the forked process: become ``python -m module args`` and run it; exit with its code."""
    code: Any = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, f in enumerate(fds):
            os.dup2(f, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as subprocess's close_fds: nothing of the server's
        die_with_parent(server)  # (not getppid(): the server may be gone already, and this process init's)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        random.seed()  # not the server's sequence, shared by everything it forked
        _set_command_line([sys.executable, "-m", module, *args])
        sys.argv = [module, *args]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code
        except KeyboardInterrupt:
            traceback.print_exc()
            code = 128 + signal.SIGINT
        except BaseException:  # noqa: BLE001 - what python -m prints and exits 1 on
            traceback.print_exc()
            code = 1
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    finally:
        os._exit(code if isinstance(code, int) else 1)


def die_with_parent(parent: int) -> None:
    """In a child after its fork: get SIGTERM when ``parent`` dies (exit at once if it is gone)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


#: room for the command lines of what the server forks: its own command line is padded to this many bytes, and each
#: forked process writes its own over it (a longer one is cut)
COMMAND_LINE_ROOM = 4096


def _set_command_line(argv: list[str]) -> None:
    """Make /proc/self/cmdline read ``argv``, written over the server's own, padded, command line as one line
    separated by spaces, as setproctitle(3) does: the kernel reads a command line whose last byte is not NUL up to its
    first NUL, and ps and psutil split it on the spaces (an argument with a space in it reads as two)."""
    area = _argument_area()
    if area is None:
        return
    start, end = area
    room = end - start
    text = b" ".join(a.encode("utf-8", "surrogateescape") for a in argv)[:room - 2] + b"\0"
    ctypes.memmove(start, text + b" " * (room - len(text)), room)


def main() -> None:
    """``python -m roq.prefork FD PARENT PRELOAD PADDING``: the server (started by :func:`start`, not by hand)."""
    serve(int(sys.argv[1]), int(sys.argv[2]), [m for m in sys.argv[3].split(",") if m])


# ---- the starter: what runs in the process that starts others ------------------------------------------------


class _Server:
    """This process's prefork server: a child that forks on request, and the exit codes it has told of."""

    def __init__(self, preload: list[str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        parent = os.getpid()
        self.popen: subprocess.Popen | None = None
        if _one_thread() and _command_line_room() >= COMMAND_LINE_ROOM:
            self.pid = os.fork()  # a copy of this process: what it imported, the server has
            if self.pid == 0:
                try:
                    ours.close()
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    _set_command_line([sys.executable, "-m", "roq.prefork", f"(forked from {parent})"])
                    serve(theirs.fileno(), parent, preload)
                finally:
                    os._exit(0)
        else:

            def prepare() -> None:
                die_with_parent(parent)

            self.popen = subprocess.Popen(
                [sys.executable, "-m", "roq.prefork", str(theirs.fileno()), str(parent), ",".join(preload),
                 "x" * COMMAND_LINE_ROOM],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=[theirs.fileno()], preexec_fn=prepare)
            self.pid = self.popen.pid
        theirs.close()
        self.owner = parent
        self._lock = threading.Condition()
        self._reading = False
        self._next = 1
        self._answers: dict[int, tuple[str, Any]] = {}  # request -> (what, pid or why)
        self.codes: dict[int, int] = {}  # pid -> exit code, of what it forked and reaped, until taken
        self.forked: set[int] = set()  # what it forked, until its code is taken
        self.cpu_s = 0.0  # CPU seconds spent by what it forked and reaped (and what they reaped)
        self.broken = False
        self.retired = False  # it forks nothing more (a module imported in it started a thread)

    def start(self, module: str, args: list[str], env: dict[str, str], fds: list[int]) -> tuple[int, int] | None:
        """Fork ``python -m module args`` with ``fds`` as its standard streams; its pid and a pidfd of it, or None
        where the server will not fork that module (start it another way)."""
        with self._lock:
            request, self._next = self._next, self._next + 1
            self._sock_send(pickle.dumps((request, module, list(args), env, os.getcwd())), fds)
        if not self.pump(lambda: request in self._answers, None):
            raise OSError("the prefork server is gone")
        with self._lock:
            what, value = self._answers.pop(request)
        if what == "unsafe":
            _never.add(module)
            self.retired = True
        if what != "started":
            return None
        with self._lock:
            self.forked.add(value[0])
        return value

    def _sock_send(self, data: bytes, fds: list[int]) -> None:
        if self.broken:
            raise OSError("the prefork server is gone")
        socket.send_fds(self._sock, [data], fds)

    def take_code(self, pid: int, timeout: float | None) -> int | None:
        """The exit code of ``pid`` once the server reaped it, waiting up to ``timeout`` (None: for ever); it is
        forgotten then (a host manager restarts its children for months)."""
        self.pump(lambda: pid in self.codes, timeout)
        with self._lock:
            self.forked.discard(pid)
            return self.codes.pop(pid, None)

    def pump(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Read what the server says until ``done()`` or ``timeout`` (0: what it has said already); one thread reads
        while the others wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not done() and not self.broken:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if self._reading:
                    if left == 0:
                        break
                    self._lock.wait(left)
                    continue
                self._reading = True
                self._lock.release()
                try:
                    messages = self._receive(left)
                finally:
                    self._lock.acquire()
                    self._reading = False
                    self._lock.notify_all()
                for message in messages:
                    self._take(message)
                if left == 0:
                    break
            return done()

    def _receive(self, timeout: float | None) -> list[tuple[str, int, Any]]:
        """What the server said within ``timeout`` (then all it said, without waiting again)."""
        out: list[tuple[str, int, Any]] = []
        with selectors.DefaultSelector() as sel:
            sel.register(self._sock, selectors.EVENT_READ)
            while sel.select(timeout if not out else 0):
                try:
                    data, fds, _, _ = socket.recv_fds(self._sock, MAX_MESSAGE, 1)
                except OSError:
                    data, fds = b"", []
                if not data:
                    self.lose()
                    break
                what, request, value = pickle.loads(data)
                out.append((what, request, (value, fds[0]) if what == "started" else value))
        return out

    def _take(self, message: tuple[str, int, Any]) -> None:
        what, request, value = message
        if what == "exited":
            pid, code, cpu = value
            self.codes[pid] = code
            self.cpu_s += cpu
        else:
            self._answers[request] = (what, value)

    def lose(self) -> None:
        """The server died (killed with what it forked, or at the starter's exit): what it forked got SIGTERM from
        its death; each one not yet reaped counts as ended so."""
        self.broken = True
        for pid in self.forked - set(self.codes):
            self.codes[pid] = -signal.SIGTERM

    def close(self) -> None:
        """Stop the server (it ends once its socket closes) and reap it."""
        self._sock.close()
        deadline = time.monotonic() + 5
        while True:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if done:
                return
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.01)


_server: _Server | None = None
_servers: list[_Server] = []  # every server this process started (a retired one may still have children)
_never: set[str] = set()  # modules not to fork: their import starts a thread
_server_lock = threading.Lock()


def _forget_servers() -> None:
    """In a forked process: the servers it knows of are its parent's (and the lock may have been held at the fork)."""
    global _server, _server_lock, _servers
    _server, _server_lock, _servers = None, threading.Lock(), []


os.register_at_fork(after_in_child=_forget_servers)


def prepare(preload: Sequence[str] = ()) -> None:
    """Start this process's prefork server now, with ``preload`` (modules) imported in it meanwhile.

    Called while this process has one thread (before it makes a ZooKeeper session or a ZeroMQ context), the server
    is a fork of it, with everything it imported; later, it is a new interpreter (:func:`start` makes it then)."""
    if enabled():
        _the_server(list(preload))


def _one_thread() -> bool:
    """Whether this process runs one thread (of its own or of a library: ZeroMQ's and kazoo's count too)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _argument_area() -> tuple[int, int] | None:
    """Where this process's command line is in its memory (start and end addresses), which a fork of it writes its
    own over; None where /proc does not say."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[45]), int(fields[46])  # arg_start and arg_end: fields 48 and 49 of stat
    except (OSError, IndexError, ValueError):
        return None


def _command_line_room() -> int:
    """Bytes of this process's command line."""
    area = _argument_area()
    return 0 if area is None else area[1] - area[0]


def _the_server(preload: list[str] | None = None) -> _Server:
    global _server
    with _server_lock:
        if _server is None or _server.owner != os.getpid() or _server.broken or _server.retired:
            _server = _Server(preload or [])
            _servers.append(_server)
            atexit.register(_server.close)
        return _server


def ended_cpu_seconds() -> float:
    """CPU seconds spent by the processes this process's prefork servers forked and saw end (as
    ``RUSAGE_CHILDREN`` counts them for the processes it started itself)."""
    total = 0.0
    for server in _servers:
        server.pump(lambda: False, 0)
        total += server.cpu_s
    return total


def server_pid() -> int | None:
    """The pid of this process's prefork server, if it started one."""
    s = _server
    return s.pid if s is not None and s.owner == os.getpid() else None


class Forked:
    """A process the prefork server forked, with what :class:`roq.process.Child` uses of ``subprocess.Popen``.

    Whether it still runs is read from a pidfd of it (readable once it ended); its exit code is what the server,
    which reaps it, says of it a moment later."""

    #: how long an ended process's exit code may take to be told
    TOLD_WITHIN_S = 10.0

    def __init__(self, server: _Server, pid: int, pidfd: int, stdin: IO[bytes] | None,
                 stdout: IO[bytes] | None) -> None:
        self._server = server
        self.pid = pid
        self._pidfd = pidfd
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._ended(0):
            self._take_code()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._ended(timeout):
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            self._take_code()
        assert self.returncode is not None
        return self.returncode

    def _ended(self, timeout: float | None) -> bool:
        """Whether the process ended (waiting up to ``timeout`` seconds; None: until it does). One poll(2) on the
        pidfd: a host manager asks this of every child ten times a second."""
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return bool(poller.poll(None if timeout is None else math.ceil(timeout * 1000)))

    def _take_code(self) -> None:
        code = self._server.take_code(self.pid, self.TOLD_WITHIN_S)
        self.returncode = -signal.SIGKILL if code is None else code  # (never told: the server was killed with it)
        os.close(self._pidfd)
        self._pidfd = -1

    def __del__(self) -> None:
        if getattr(self, "_pidfd", -1) >= 0:
            os.close(self._pidfd)

    def communicate(self, timeout: float | None = None) -> tuple[bytes, None]:
        deadline = None if timeout is None else time.monotonic() + timeout
        out = b""
        if self.stdout is not None and not self.stdout.closed:
            with selectors.DefaultSelector() as sel:
                sel.register(self.stdout, selectors.EVENT_READ)
                while True:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
                    if not sel.select(left):
                        continue
                    chunk = os.read(self.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    out += chunk
            self.stdout.close()
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.wait(left)
        return out, None


def start(module: str, args: list[str], *, stderr: IO[Any] | int | None, env: dict[str, str] | None,
          commands: bool) -> Forked | None:
    """Fork ``python -m module args`` from this process's prefork server (started at the first call); None where
    it will not fork that module (start it with ``subprocess``).

    Args: as :func:`roq.process.spawn` (``stderr`` None: this process's standard error).

    Raises:
        OSError: no server could be started.
    """
    if module in _never:
        return None
    server = _the_server()
    out_r, out_w = os.pipe()
    in_r, in_w = os.pipe() if commands else (os.open(os.devnull, os.O_RDONLY), -1)
    if stderr is None:
        err = os.dup(2)
    elif isinstance(stderr, int):
        err = os.dup(stderr)
    else:
        err = os.dup(stderr.fileno())
    started = None
    try:
        started = server.start(module, list(args), dict(os.environ if env is None else env), [in_r, out_w, err])
    except OSError:  # the server died (killed with what it forked): this start is a new interpreter, the next a new server
        server.lose()
    finally:
        for f in (in_r, out_w, err):  # the child's ends: the server has them (or nobody needs them)
            os.close(f)
        if started is None:  # (or an exception on its way out)
            for f in (out_r, in_w):
                if f >= 0:
                    os.close(f)
    if started is None:
        return None
    pid, pidfd = started
    return Forked(server, pid, pidfd, os.fdopen(in_w, "wb", buffering=0) if in_w >= 0 else None,
                  os.fdopen(out_r, "rb"))


if __name__ == "__main__":
    main()
