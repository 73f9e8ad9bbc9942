"""Health over HTTP: the host manager's own, and that of every process it runs (monitors and exchanges).

``GET /healthz`` answers 200 while the host manager's loop runs; ``GET /readyz`` 200 once it is registered in
ZooKeeper with a connected session (503 and the reason otherwise). ``GET /processes`` lists its children;
``GET /processes/{name}/healthz`` (``name`` is the assignment's, ``orders@x1`` or ``orders@monitor``) answers
200 while that process runs and ``/readyz`` while it serves, i.e. printed its ready line and its endpoints are
published (a process starting again after a crash is alive and not ready). A monitor or an exchange has no HTTP
port of its own: its host manager starts, watches and restarts it, and knows its state first.
"""

from __future__ import annotations

from typing import Any, Callable

from roq.http import HttpRequest, HttpResponse, Later

__all__ = ["Health"]


class Health:
    """The HTTP handler of a host manager.

    Args:
        address: the host's address (in every answer).
        registered: whether the host is registered in ZooKeeper with a connected session now.
        processes: the children's states (``Children.status()``: queue, role, id, pid, alive, ready, restarts).
    """

    def __init__(self, address: str, registered: Callable[[], bool],
                 processes: Callable[[], list[dict[str, Any]]]) -> None:
        self.address = address
        self.registered = registered
        self.processes = processes

    def handle(self, req: HttpRequest, later: Later) -> HttpResponse:
        if req.method not in ("GET", "HEAD"):
            return HttpResponse.error(405, f"{req.method} is not allowed (allowed: GET)").with_headers(("allow", "GET"))
        parts = [p for p in req.path.split("/") if p]
        if parts == ["healthz"]:
            return HttpResponse.json(200, {"status": "alive", "host": self.address})
        if parts == ["readyz"]:
            if not self.registered():
                return HttpResponse.json(503, {"status": "not ready", "host": self.address,
                                               "reason": "not registered in ZooKeeper"})
            return HttpResponse.json(200, {"status": "ready", "host": self.address})
        if parts == ["processes"]:
            return HttpResponse.json(200, {"host": self.address, "processes": self._named()})
        if len(parts) == 3 and parts[0] == "processes" and parts[2] in ("healthz", "readyz"):
            process = next((p for p in self._named() if p["name"] == parts[1]), None)
            if process is None:
                return HttpResponse.error(404, f"no process {parts[1][:100]!r} on host {self.address}")
            ok = process["alive"] if parts[2] == "healthz" else process["ready"]
            status = ("alive" if ok else "dead") if parts[2] == "healthz" else ("ready" if ok else "not ready")
            return HttpResponse.json(200 if ok else 503, {"status": status, **process})
        return HttpResponse.error(404, f"no such resource: {req.path[:200]}")

    def _named(self) -> list[dict[str, Any]]:
        return [{"name": f"{p['queue']}@{p['id']}", **p} for p in self.processes()]
