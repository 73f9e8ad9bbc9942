"""What an HTTP handler takes and gives: the request, the response, an answer given later, an event stream.

No sockets here: :mod:`roq.http.connection` reads requests and writes what these become.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Iterable, Protocol

from roq.errors import ConfigError

__all__ = ["HttpRequest", "HttpResponse", "EventStream", "Later", "Handler", "Carrier", "STATUS_TEXT",
           "MAX_JSON_DEPTH"]

MAX_JSON_DEPTH = 64  # nesting of a JSON body, at most: deeper would only make work for whoever walks it

STATUS_TEXT = {200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 301: "Moved Permanently",
               307: "Temporary Redirect", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
               404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
               413: "Content Too Large", 415: "Unsupported Media Type", 500: "Internal Server Error",
               503: "Service Unavailable", 504: "Gateway Timeout"}


@dataclasses.dataclass(frozen=True)
class HttpRequest:
    """One request: ``path`` percent-decoded, without the query; ``query`` its parameters (the last of a
    repeated name wins); ``headers`` with lower-case names; ``target`` the path and query as they came, still
    percent-encoded (what a redirect names: the decoded path may hold bytes no header may carry)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    peer: str
    target: str

    def json(self) -> Any:
        """The body as JSON (None when there is none).

        Raises:
            ConfigError: the body is not UTF-8, not JSON, or nested deeper than :data:`MAX_JSON_DEPTH` (the
                caller answers 400).
        """
        if not self.body:
            return None
        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"the body is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        try:
            document = json.loads(text)
        except RecursionError:
            raise ConfigError(f"the body's JSON is nested deeper than {MAX_JSON_DEPTH} levels") from None
        except ValueError as exc:
            raise ConfigError(f"the body is not JSON: {str(exc)[:200]}") from None
        if _depth_over(document, MAX_JSON_DEPTH):
            raise ConfigError(f"the body's JSON is nested deeper than {MAX_JSON_DEPTH} levels")
        return document


def _depth_over(document: Any, limit: int) -> bool:
    """Whether ``document`` nests lists and objects deeper than ``limit`` (walked without recursion)."""
    todo = [(document, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return True
            todo.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


@dataclasses.dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, status: int, document: Any, headers: Iterable[tuple[str, str]] = ()) -> HttpResponse:
        return cls(status, json.dumps(document, indent=1, default=str).encode() + b"\n",
                   "application/json", tuple(headers))

    @classmethod
    def text(cls, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> HttpResponse:
        return cls(status, text.encode("utf-8"), content_type)

    def with_headers(self, *headers: tuple[str, str]) -> HttpResponse:
        return dataclasses.replace(self, headers=self.headers + headers)

    @classmethod
    def error(cls, status: int, message: str, **fields: Any) -> HttpResponse:
        """The JSON body of every error: ``{"error": message, "status": status, ...}``."""
        return cls.json(status, {"error": message, "status": status, **fields})


class Carrier(Protocol):
    """What answers and streams need of the connection they go out on (:class:`roq.http.connection.Connection`)."""

    closed: bool
    cycle: int  # requests answered on it so far

    def respond(self, answer: HttpResponse | EventStream | None) -> None: ...

    def flush_stream(self, stream: EventStream) -> None: ...

    def close(self) -> None: ...


class EventStream:
    """A response that stays open: server-sent events (``text/event-stream``) pushed by the process.

    The handler returns one; the process keeps it and calls :meth:`send` as events happen. :attr:`closed`
    turns True once the client went away (the process then forgets it).
    """

    def __init__(self, retry_ms: int = 2000) -> None:
        self._out: list[bytes] = [f"retry: {retry_ms}\n\n".encode()]
        self.closed = False
        self._conn: Carrier | None = None

    def attach(self, conn: Carrier) -> None:
        """From now on ``conn`` carries what is sent."""
        self._conn = conn

    def send(self, data: Any, event: str = "", id: str = "") -> None:
        """Send one event (``data`` as JSON) unless the client is gone."""
        if self.closed:
            return
        lines = [f"event: {event}"] if event else []
        if id:
            lines.append(f"id: {id}")
        lines.append("data: " + json.dumps(data, default=str, separators=(",", ":")))
        self._out.append(("\n".join(lines) + "\n\n").encode())
        if self._conn is not None:
            self._conn.flush_stream(self)

    def comment(self, text: str = "") -> None:
        """A comment line: keeps idle proxies from closing the stream."""
        if not self.closed:
            self._out.append(f": {text}\n\n".encode())
            if self._conn is not None:
                self._conn.flush_stream(self)

    def gone(self) -> None:
        """Its connection went (the client left, or it was refused): nothing more is sent."""
        self.closed = True

    def close(self) -> None:
        """End the stream: its connection is closed."""
        self.closed = True
        if self._conn is not None:
            self._conn.close()

    def take(self) -> list[bytes]:
        out, self._out = self._out, []
        return out


class Later:
    """The promise of an answer: :meth:`respond` sends it (nothing happens if the client went away)."""

    def __init__(self, conn: Carrier, cycle: int) -> None:
        self._conn = conn
        self._cycle = cycle

    @property
    def gone(self) -> bool:
        return self._conn.closed or self._conn.cycle != self._cycle

    def respond(self, response: HttpResponse) -> None:
        if not self.gone:
            self._conn.respond(response)


Handler = Callable[[HttpRequest, Later], "HttpResponse | EventStream | None"]
