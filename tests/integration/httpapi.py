"""A client of the GCM's HTTP API for tests: every answer checked against the OpenAPI document it serves."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

import jsonschema

__all__ = ["Api", "Answer"]

# loopback only, never through a proxy from the environment; redirects are the test's to follow
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_PLAIN = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"Answer({self.status}, {self.body[:300]!r})"


class Plain:
    """GET on any HTTP server of the cluster (a host manager's health checks): (status, JSON body)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with _OPENER.open(self.base + path, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())


class Api:
    """Calls ``base`` (a GCM's HTTP URL) and checks each answer against the document at /api/v1/openapi.json.

    ``checked`` keeps (method, path template, status) of every answer checked, so that a test can say which
    routes and statuses it covered.
    """

    plain = Plain

    def __init__(self, base: str, token: str = "") -> None:
        self.base = base
        self.token = token
        self.checked: set[tuple[str, str, int]] = set()
        self.document = self.call("GET", "/api/v1/openapi.json", check=False).json
        self._templates = [(re.compile(re.sub(r"\{\w+\}", "[^/]+", p) + r"\Z"), p) for p in self.document["paths"]]

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None, token: str | None = None,
             follow: bool = True, check: bool = True, base: str | None = None) -> Answer:
        data = raw if raw is not None else json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json"} if data is not None else {}
        token = self.token if token is None else token
        if token:
            headers["authorization"] = f"Bearer {token}"
        req = urllib.request.Request((base or self.base) + path, data=data, method=method, headers=headers)
        opener = _OPENER if follow else _PLAIN
        try:
            with opener.open(req, timeout=30) as r:
                answer = Answer(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
        except urllib.error.HTTPError as e:
            answer = Answer(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())
        if check:
            self.check(method, path, answer)
        return answer

    def check(self, method: str, path: str, answer: Answer) -> None:
        """The answer's status is one the document lists for the route, and its body fits that status's schema."""
        bare = path.split("?")[0].rstrip("/") or "/"
        template = next((t for pattern, t in self._templates if pattern.match(bare)), None)
        if template is None:
            assert answer.status in (404, 405), f"{method} {path}: not in the document, answered {answer}"
            assert answer.json["status"] == answer.status
            self.checked.add((method, "(none)", answer.status))
            return
        operation = self.document["paths"][template].get(method.lower())
        if operation is None:
            assert answer.status == 405 and answer.headers.get("allow"), f"{method} {path}: {answer}"
            self.checked.add((method, template, 405))
            return
        response = operation["responses"].get(str(answer.status))
        assert response is not None, f"{method} {path}: status {answer.status} is not in the document: {answer}"
        self.checked.add((method, template, answer.status))
        content = response.get("content")
        if not content:
            return
        media, spec = next(iter(content.items()))
        assert answer.headers.get("content-type", "").startswith(media), (path, answer.headers)
        if media != "application/json":
            return
        schema = {**spec["schema"], "components": self.document["components"]}
        jsonschema.validate(answer.json, schema, cls=jsonschema.Draft202012Validator)
