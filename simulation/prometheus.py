"""A real Prometheus server for tests and benchmarks: scrapes loopback targets, answers PromQL over its HTTP API.

The server comes from Debian's ``prometheus`` package (``make setup`` installs it). :class:`PrometheusServer`
writes its config, storage and log (``prometheus.log``) into a work directory, listens on a free loopback
port, and is stopped by its pid on exit. It gets ``PR_SET_PDEATHSIG`` so a crashed test run never leaves one
running on; as that signal follows the thread that started it, start it from the test's own thread.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Callable

from roq.process import die_with_parent
from roqcli.zkserver import free_port

__all__ = ["PrometheusServer"]

_LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
_POLL_S = 0.1
_LOG_TAIL_LINES = 25
# Loopback only: never through an http_proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _loopback_target(target: str) -> str:
    host, sep, port = target.rpartition(":")
    try:
        ok = bool(sep) and ipaddress.ip_address(host) in _LOOPBACK and 0 < int(port) < 65536
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"a target must be '127.x.y.z:PORT' (loopback only), not {target!r}")
    return target


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class PrometheusServer:
    """A Prometheus scraping ``targets`` (job ``roq``) every ``scrape_interval`` seconds; a context manager.

    Args:
        targets: ``"127.0.0.1:PORT"`` strings; anything outside 127.0.0.0/8 raises ValueError.
        scrape_interval: seconds between scrapes of each target (also their scrape timeout).
        metrics_path: the path scraped on each target.
        workdir: where ``prometheus.yml``, the TSDB (``tsdb/``) and ``prometheus.log`` go.
    """

    def __init__(self, targets: list[str], *, scrape_interval: float = 1.0, metrics_path: str = "/metrics",
                 workdir: Path) -> None:
        if not targets:
            raise ValueError("no targets to scrape")
        if scrape_interval < 0.001:
            raise ValueError(f"scrape_interval must be at least 1 ms, not {scrape_interval}")
        if not metrics_path.startswith("/"):
            raise ValueError(f"metrics_path must start with '/', not {metrics_path!r}")
        self.targets = [_loopback_target(t) for t in targets]
        self.scrape_interval = scrape_interval
        self.metrics_path = metrics_path
        self.workdir = Path(workdir)
        self.log_path = self.workdir / "prometheus.log"
        self.port = 0
        self._popen: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The base URL of its HTTP API (``http://127.0.0.1:PORT``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        """Start the server; return once ``/-/ready`` answers 200.

        Raises:
            RuntimeError: no ``prometheus`` on PATH, or it exited or was not ready within ``timeout``
                (the process is stopped; the message has the tail of its log).
        """
        if self._popen is not None:
            raise RuntimeError(f"prometheus already runs (pid {self._popen.pid})")
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("no `prometheus` on PATH: install Debian's package (`make setup`)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        interval = f"{max(1, round(self.scrape_interval * 1000))}ms"
        config = self.workdir / "prometheus.yml"
        # JSON is YAML: no YAML library needed.
        config.write_text(json.dumps({
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": [{"job_name": "roq", "metrics_path": self.metrics_path,
                                "static_configs": [{"targets": self.targets}]}],
        }, indent=2) + "\n")
        self.port = free_port("127.0.0.1")
        with open(self.log_path, "ab") as log:
            self._popen = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                preexec_fn=functools.partial(die_with_parent, os.getpid()),
            )
        try:
            self._await_ready(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the server by its pid, wait up to ``timeout``, SIGKILL it if needed. Idempotent."""
        popen, self._popen = self._popen, None
        if popen is None:
            return
        if popen.poll() is None:
            popen.terminate()
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                popen.kill()
        popen.wait()

    def _await_ready(self, deadline: float) -> None:
        assert self._popen is not None
        while True:
            if self._popen.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._popen.returncode} before it was ready; "
                                   f"{self.log_path}:\n{_tail(self.log_path)}")
            try:
                with _OPENER.open(f"{self.url}/-/ready", timeout=1.0) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):  # not listening yet, or 503 while it starts
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus (pid {self._popen.pid}) not ready on {self.url}; "
                                   f"{self.log_path}:\n{_tail(self.log_path)}")
            time.sleep(_POLL_S)

    # ------------------------------------------------------------------ HTTP API

    def _get(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            with _OPENER.open(url, timeout=10.0) as reply:
                body = json.load(reply)
        except urllib.error.HTTPError as exc:  # a bad query: 400 with a JSON error
            try:
                body = json.loads(exc.read())
            except ValueError:
                body = {"errorType": f"HTTP {exc.code}", "error": exc.reason}
        if body.get("status") != "success":
            raise AssertionError(f"GET {url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> list[dict]:
        """An instant query now: the samples of ``data.result`` (``{"metric": {...}, "value": [t, "v"]}``).

        Raises:
            AssertionError: Prometheus rejected it (the message has its error).
            ValueError: the result is not an instant vector (wrap a scalar in ``vector()``).
        """
        data = self._get("/api/v1/query", query=promql)
        if data["resultType"] != "vector":
            raise ValueError(f"{promql!r} gives a {data['resultType']}, not a vector")
        return data["result"]

    def targets_up(self) -> dict[str, str]:
        """Each active target's scrape URL -> its health (``"up"``, ``"down"`` or ``"unknown"``)."""
        return {t["scrapeUrl"]: t["health"] for t in self._get("/api/v1/targets")["activeTargets"]}

    def wait_for(self, promql: str, predicate: Callable[[list[dict]], bool], timeout: float,
                 what: str) -> list[dict]:
        """Poll ``query(promql)`` until ``predicate`` holds on its result; return that result.

        Raises:
            AssertionError: not within ``timeout``; the message has ``what`` and the last result.
        """
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if predicate(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:.1f}s; last {promql!r} = {result}")
            time.sleep(_POLL_S)
