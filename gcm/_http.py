"""The GCM's HTTP API: the management API as a versioned model tree, the metrics and the health checks.

Every route that reads or changes a queue is the BSON API's request of the same meaning (:mod:`roq.wire.management`)
handed to the same :class:`~roq.server.Dispatcher` (so the same validation, decisions and RESULT codes), its
reply turned into JSON with the HTTP status that fits (:data:`STATUS`). A request that waits for the cluster
(create, start, stop, remove, a queue's monitor asked for its status) is answered when its reply comes, through
the connection's :class:`~roq.http.Later`. Field names are the BSON API's in snake case (``MaxExchanges`` is
``max_exchanges``). A standby answers every ``/api`` request with a redirect to the leader (307; 503 while no
leader is elected). Write methods need ``Authorization: Bearer <token>``, the token of the GCM's
``api_token_file``, and so do the reads whose answers name clients by their ids (a queue's publishers,
subscribers and events); what anyone may read names them by opaque labels (:mod:`gcm._labels`). The routes,
with their parameters and the shapes of their answers, are :data:`gcm._openapi.ROUTES`; docs/http.md describes
them for people.
"""

from __future__ import annotations

import datetime
import functools
import importlib.resources
import os
import re
import stat
import time
from typing import Any, Callable, Mapping, Protocol

from gcm._census import Census, Snapshot
from gcm._federation import Federation
from gcm._feed import LiveFeed
from gcm._labels import Labels
from gcm._events import MAX_LIMIT
from gcm._metrics import CONTENT_TYPE, Exposition
from gcm._openapi import API, ROUTES, document
from gcm._shapes import snake
from gcm._stats import StatsReply
from gcm._tokens import MIN_TOKEN, Tokens
from gcm._view import View
from roq.wire import management as m
from roq.wire.control import Message, Reply
from roq.wire.documents import GcmDoc
from roq.errors import ConfigError, Result
from roq.http import EventStream, HttpRequest, HttpResponse, Later
from roq.rules import DEFAULT_RULES
from roq.server import Dispatcher, Request
from roq.wire.shape import to_document
from roq.wire.status import QueueStatus, latency, live_subscribers, rate, traffic

__all__ = ["HttpApi", "HttpShell", "STATUS", "read_token", "MIN_TOKEN", "ANONYMOUS"]

#: RESULT code -> HTTP status (NOT_LEADER is a redirect to the leader)
STATUS: dict[int, int] = {Result.OK: 200, Result.BAD_REQUEST: 400, Result.UNKNOWN_COMMAND: 400, Result.NOT_FOUND: 404,
          Result.CONFLICT: 409, Result.FORBIDDEN: 403, Result.UNAVAILABLE: 503, Result.FAIL: 500, Result.NOT_LEADER: 503}
WRITES = ("POST", "PUT", "DELETE", "PATCH")
#: the principal of an HTTP request without a token in a secure cluster (nothing is allowed it unless granted)
ANONYMOUS = "anonymous"
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'"
STATIC_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}\Z")
STATIC_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
                "css": "text/css; charset=utf-8", "svg": "image/svg+xml"}


class HttpShell(Protocol):
    """What the HTTP API needs of the GCM."""

    id: str
    view: View
    census: Census
    federation: Federation

    @property
    def leading(self) -> bool: ...

    @property
    def leader(self) -> GcmDoc | None: ...

    @property
    def me(self) -> GcmDoc: ...

    @property
    def connected(self) -> bool: ...


class _Answer:
    """The :class:`~roq.server.Replier` of one HTTP request: the reply, when it comes, as its response."""

    def __init__(self, later: Later, respond: Callable[[Reply], HttpResponse]) -> None:
        self.later = later
        self.respond = respond

    def send(self, envelope: tuple[bytes, ...], reply: Reply) -> None:
        self.later.respond(self.respond(reply))


class HttpApi:
    """Routes HTTP requests (see the module).

    Args:
        shell: the GCM.
        dispatcher: the management API's dispatcher (the handlers of the "http" port: a standby's refusal
            names the leader's HTTP URL).
        token: the administrator's bearer token ("" = none).
        top: publishers and subscribers per queue with series of their own in the metrics.
        clock: wall clock.
        tokens: every principal's bearer token (default: ``token`` alone, the administrator's).
        secure: the cluster checks principals (CURVE): every API call is made as the principal of its bearer
            token, or as ``anonymous`` without one, and the permissions decide; else reads are open and writes
            need a token.
    """

    def __init__(self, shell: HttpShell, dispatcher: Dispatcher, *, token: str, top: int,
                 clock: Callable[[], float] = time.time, tokens: Tokens | None = None, secure: bool = False) -> None:
        self.shell = shell
        self.dispatcher = dispatcher
        self.tokens = tokens if tokens is not None else Tokens(token)
        self.secure = secure
        self._principal: str | None = None  # the caller of the request being handled (the loop has one thread)
        self.clock = clock
        labels = Labels()  # one key for the feed and the metrics: a client has the same label in both
        self.feed = LiveFeed(shell, clock, labels=labels, tree=lambda: feed_tree(shell.federation.status(time.monotonic())))
        self.exposition = Exposition(top, labels)
        self._routes = [(re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", r.path) + r"/?\Z"), r) for r in ROUTES]
        self._private = {(r.path, method) for r in ROUTES for method, op in r.methods.items() if op.names_clients}
        self._openapi = document()

    # ------------------------------------------------------------------ routing

    def handle(self, req: HttpRequest, later: Later) -> HttpResponse | EventStream | None:
        for pattern, route in self._routes:
            match = pattern.match(req.path)
            if match is None:
                continue
            method = "GET" if req.method == "HEAD" else req.method
            handler = route.handlers.get(method)
            if handler is None:
                allow = ", ".join(sorted(route.handlers))
                return HttpResponse.error(405, f"{req.method} is not allowed on {route.path} (allowed: {allow})",
                                          allow=allow).with_headers(("allow", allow))
            if req.path.startswith(API) and not self.shell.leading:
                return self._not_leader(req)
            # the dashboard's page, the metrics and the health checks are open; the API decides by principal
            needs_token = method in WRITES or (route.path, method) in self._private
            refused, self._principal = (self._authorize(req, needs_token) if req.path.startswith(API)
                                        else (None, None))
            if refused is not None:
                return refused
            try:
                return getattr(self, handler)(req, later, **match.groupdict())
            except ConfigError as exc:  # a bad parameter or body: the message names it
                return HttpResponse.error(400, str(exc))
        return HttpResponse.error(404, f"no such resource: {req.path[:200]}")

    def _authorize(self, req: HttpRequest, needs_token: bool) -> tuple[HttpResponse | None, str | None]:
        """The refusal of a request whose token is wrong or missing where one is needed (a write, or a read that
        names clients by their ids), else its principal (None: not checked)."""
        scheme, _, given = req.headers.get("authorization", "").partition(" ")
        if not needs_token and not self.secure:
            return None, None  # reads are open, whatever token they bear
        if not given and not needs_token:
            return None, ANONYMOUS
        if needs_token and not self.tokens:
            what = "writes" if req.method in WRITES else "reads of clients' ids"
            return HttpResponse.error(403, f"{what} over HTTP are disabled: the GCM has no api_token_file"), None
        if scheme.lower() != "bearer" or not given:
            return HttpResponse.error(401, "this method needs 'Authorization: Bearer <token>'").with_headers(
                ("www-authenticate", 'Bearer realm="roq"')), None
        principal = self.tokens.principal(given.strip())
        if principal is None:
            self.dispatcher.drops.drop("HTTP token refused", req.peer)
            return HttpResponse.error(401, "the bearer token is not this cluster's").with_headers(
                ("www-authenticate", 'Bearer realm="roq", error="invalid_token"')), None
        return None, principal if self.secure else None

    def _not_leader(self, req: HttpRequest) -> HttpResponse:
        leader = self.shell.leader
        if leader is None or not leader.http:
            return HttpResponse.error(503, "not the leader, and no leader with an HTTP API is elected; retry",
                                      leader="").with_headers(("retry-after", "1"))
        location = leader.http + req.target  # as it came, still percent-encoded
        return HttpResponse.error(307, f"not the leader; the leader is {leader.id} at {leader.http}",
                                  leader=leader.http).with_headers(("location", location))

    def _ask(self, msg: Message, later: Later, ok: Callable[[Reply], HttpResponse]) -> HttpResponse | None:
        """Hand ``msg`` to the management dispatcher; its reply (now, or when it comes) as a response."""

        def respond(reply: Reply) -> HttpResponse:
            return ok(reply) if reply.ok else self.refusal(reply)

        reply = self.dispatcher.handle(msg, Request(_Answer(later, respond), (), self._principal))
        return None if reply is None else respond(reply)

    def refusal(self, reply: Reply) -> HttpResponse:
        """A refused reply as the error response of its RESULT code."""
        status = STATUS.get(reply.result, 500)
        try:
            result = Result(reply.result).name
        except ValueError:
            result = str(reply.result)
        response = HttpResponse.error(status, reply.comment or result, result=result, code=int(reply.result),
                                      **{k: v for k, v in snake(dict(reply.data)).items() if k not in ("error", "status")})
        return response.with_headers(("retry-after", "1")) if status == 503 else response

    # ------------------------------------------------------------------ the model tree

    def index(self, req: HttpRequest, later: Later) -> HttpResponse:
        return HttpResponse.json(200, {"version": "v1", "links": {
            "cluster": f"{API}/cluster", "hosts": f"{API}/hosts", "queues": f"{API}/queues",
            "federation": f"{API}/federation", "openapi": f"{API}/openapi.json", "metrics": "/metrics",
            "stream": f"{API}/stream", "dashboard": "/"}})

    def openapi(self, req: HttpRequest, later: Later) -> HttpResponse:
        return HttpResponse.json(200, self._openapi)

    def cluster(self, req: HttpRequest, later: Later) -> HttpResponse:
        view = self.shell.view
        states: dict[str, int] = {}
        for q in view.queues.values():
            states[q.state] = states.get(q.state, 0) + 1
        snaps = self.shell.census.snapshots.values()
        return HttpResponse.json(200, {
            "gcm": {"id": self.shell.id, "leading": self.shell.leading, **_endpoints(self.shell.me)},
            "leader": {"id": self.shell.leader.id, **_endpoints(self.shell.leader)} if self.shell.leader else None,
            "hosts": len(view.hosts),
            "queues": len(view.queues),
            "queue_states": states,
            "records_in_per_s": round(sum(rate(s.status, "records_per_s") for s in snaps), 1),
            "records_out_per_s": round(sum(rate(s.status, "records_out_per_s") for s in snaps), 1),
        })

    def hosts(self, req: HttpRequest, later: Later) -> HttpResponse | None:
        return self._ask(m.ListHosts(), later, lambda r: HttpResponse.json(200, {"hosts": snake(r.data["Hosts"])}))

    def host(self, req: HttpRequest, later: Later, host: str) -> HttpResponse | None:
        def ok(reply: Reply) -> HttpResponse:
            found = [h for h in reply.data["Hosts"] if h.get("Address") == host]
            if not found:
                return HttpResponse.error(404, f"no host manager registered at {host[:64]!r}", result="NOT_FOUND")
            return HttpResponse.json(200, snake(found[0]))

        return self._ask(m.ListHosts(), later, ok)

    def queues(self, req: HttpRequest, later: Later) -> HttpResponse | None:
        def ok(reply: Reply) -> HttpResponse:
            snaps = self.shell.census.snapshots
            return HttpResponse.json(200, {"queues": [
                {**snake(q), **traffic(snaps[q["Name"]].status if q["Name"] in snaps else None)}
                for q in reply.data["Queues"]]})

        return self._ask(m.ListQueues(), later, ok)

    def create_queue(self, req: HttpRequest, later: Later) -> HttpResponse | None:
        body = _body(req, {"name": str, "exchanges": int, "host": str}, required=("name",))
        name = body["name"]
        existed = self.shell.view.queues.get(name) is not None
        msg: Message = (m.CreateQueue(QName=name, Host=body["host"], Exchanges=body.get("exchanges", 1))
                        if body.get("host") else m.CreateQueueAnywhere(QName=name, Exchanges=body.get("exchanges", 1)))

        def ok(reply: Reply) -> HttpResponse:
            return HttpResponse.json(200 if existed else 201, {"comment": reply.comment, **snake(dict(reply.data))},
                                     headers=[("location", f"{API}/queues/{name}")])

        return self._ask(msg, later, ok)

    def queue(self, req: HttpRequest, later: Later, queue: str) -> HttpResponse | None:
        def ok(reply: Reply) -> HttpResponse:
            return HttpResponse.json(200, _statistics(reply, self.shell.view))

        return self._ask(m.QueueStats(QName=queue), later, ok)

    def remove_queue(self, req: HttpRequest, later: Later, queue: str) -> HttpResponse | None:
        return self._ask(m.RemoveQueue(QName=queue), later, _done)

    def stop_queue(self, req: HttpRequest, later: Later, queue: str) -> HttpResponse | None:
        return self._ask(m.StopQueue(QName=queue), later, _done)

    def start_queue(self, req: HttpRequest, later: Later, queue: str) -> HttpResponse | None:
        return self._ask(m.StartQueue(QName=queue), later, _done)

    def rules(self, req: HttpRequest, later: Later, queue: str) -> HttpResponse | None:
        return self._ask(m.GetRules(QName=queue), later, lambda r: HttpResponse.json(200, _rules(self.shell.view, queue)))

    def set_rules(self, req: HttpRequest, later: Later, queue: str) -> HttpResponse | None:
        body = req.json()
        if not isinstance(body, dict) or not body:
            raise ConfigError("the body must be a JSON object of rules, e.g. {\"max_exchanges\": 4}")
        return self._ask(m.SetRules(QName=queue, Rules=body), later,
                         lambda r: HttpResponse.json(200, {"comment": r.comment, **_rules(self.shell.view, queue)}))

    def exchanges(self, req: HttpRequest, later: Later, queue: str) -> HttpResponse | None:
        return self._part(queue, "exchanges", later)

    def publishers(self, req: HttpRequest, later: Later, queue: str) -> HttpResponse | None:
        return self._part(queue, "publishers", later)

    def subscribers(self, req: HttpRequest, later: Later, queue: str) -> HttpResponse | None:
        return self._part(queue, "subscribers", later)

    def _part(self, queue: str, part: str, later: Later) -> HttpResponse | None:
        def ok(reply: Reply) -> HttpResponse:
            status = _status(reply)
            if status is None:
                return HttpResponse.error(503, f"queue {queue!r}: its monitor did not answer; retry",
                                          result="UNAVAILABLE").with_headers(("retry-after", "1"))
            return HttpResponse.json(200, {part: to_document(getattr(status, part)),
                                           "truncated": to_document(status.shown(part))})

        return self._ask(m.QueueStats(QName=queue), later, ok)

    def events(self, req: HttpRequest, later: Later, queue: str) -> HttpResponse | None:
        kinds = {k for k in req.query.get("kind", "").split(",") if k}
        since = _time(req.query, "since")
        until = _time(req.query, "until")
        limit = _int(req.query, "limit", 100, 1, MAX_LIMIT)
        offset = _int(req.query, "offset", 0, 0, MAX_LIMIT)

        def ok(reply: Reply) -> HttpResponse:
            chosen = [e for e in reply.data["Events"]
                      if (not kinds or e.get("kind") in kinds)
                      and (since is None or _number(e.get("time")) >= since)
                      and (until is None or _number(e.get("time")) < until)]
            chosen.reverse()  # the newest first: page 0 is what just happened
            return HttpResponse.json(200, {"events": chosen[offset:offset + limit], "total": len(chosen),
                                           "offset": offset, "limit": limit, "counters": reply.data["Counters"]})

        return self._ask(m.GetEvents(QName=queue, Limit=MAX_LIMIT), later, ok)

    def audit(self, req: HttpRequest, later: Later) -> HttpResponse | None:
        limit = _int(req.query, "limit", 100, 1, 1000)
        return self._ask(m.GetAudit(Limit=limit), later, lambda r: HttpResponse.json(200, {"entries": r.data["Entries"]}))

    def federation(self, req: HttpRequest, later: Later) -> HttpResponse | None:
        return self._ask(m.FederationStatus(), later, lambda r: HttpResponse.json(200, snake(r.data)))

    # ------------------------------------------------------------------ the live feed

    def stream(self, req: HttpRequest, later: Later) -> HttpResponse | EventStream:
        if req.method == "HEAD":  # the stream's headers only: a stream of nobody's, never a live feed
            return EventStream()
        return self.feed.open()

    # ------------------------------------------------------------------ the dashboard's files

    def page(self, req: HttpRequest, later: Later) -> HttpResponse:
        return self.static(req, later, "index.html")

    def static(self, req: HttpRequest, later: Later, name: str) -> HttpResponse:
        """A file of the dashboard (``gcm/static``), by a plain name only: nothing else is served."""
        kind = STATIC_TYPES.get(name.rsplit(".", 1)[-1]) if STATIC_NAME.match(name) else None
        data = _static(name) if kind is not None else None
        if kind is None or data is None:
            return HttpResponse.error(404, f"no such file: {name[:64]}")
        return HttpResponse(200, data, kind, headers=(("content-security-policy", CSP),))

    # ------------------------------------------------------------------ metrics and health

    def metrics(self, req: HttpRequest, later: Later) -> HttpResponse:
        shell = self.shell
        text = self.exposition.text(shell.view, shell.census.snapshots, gcm=shell.id, leading=shell.leading,
                                    now=self.clock(), links=shell.federation.links(time.monotonic()))
        return HttpResponse(200, text, CONTENT_TYPE)

    def census_taken(self, snapshot: Snapshot) -> None:
        """A queue's new status from the census: its metrics' lines made now, its events to the live feeds."""
        self.exposition.update(snapshot)
        self.feed.census_taken(snapshot)

    def healthz(self, req: HttpRequest, later: Later) -> HttpResponse:
        return HttpResponse.json(200, {"status": "alive", "gcm": self.shell.id})

    def readyz(self, req: HttpRequest, later: Later) -> HttpResponse:
        shell = self.shell
        if not shell.connected:
            return HttpResponse.json(503, {"status": "not ready", "reason": "no ZooKeeper session", "gcm": shell.id})
        if not shell.leading and shell.leader is None:
            return HttpResponse.json(503, {"status": "not ready", "reason": "no leader elected", "gcm": shell.id})
        return HttpResponse.json(200, {"status": "ready", "gcm": shell.id, "leading": shell.leading})


# ---------------------------------------------------------------------- shapes of answers


@functools.lru_cache(maxsize=64)
def _static(name: str) -> bytes | None:
    try:
        return (importlib.resources.files("gcm") / "static" / name).read_bytes()
    except (OSError, ValueError):
        return None


def read_token(path: str) -> str:
    """The bearer token in the file ``path`` ("" when no file is given: writes over HTTP are refused).

    Raises:
        ConfigError: the file cannot be read, others than its owner may read it, or the token is shorter than
            :data:`MIN_TOKEN` characters.
    """
    if not path:
        return ""
    try:
        mode = os.stat(path).st_mode
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"api_token_file {path!r} cannot be read: {exc}") from exc
    if mode & 0o077:
        raise ConfigError(f"api_token_file {path!r} may be read by others (mode {stat.S_IMODE(mode):o}); "
                          f"make it readable by its owner only: chmod 600 {path}")
    if len(token) < MIN_TOKEN or any(c.isspace() for c in token):
        raise ConfigError(f"api_token_file {path!r}: the token must be at least {MIN_TOKEN} characters with no "
                          "spaces")
    return token


def _endpoints(doc: GcmDoc) -> dict[str, str]:
    return {"http": doc.http, "management": doc.management, "lookup": doc.lookup, "broadcast": doc.broadcast}


def _done(reply: Reply) -> HttpResponse:
    return HttpResponse.json(200, {"comment": reply.comment, **snake(dict(reply.data))})


def _rules(view: View, queue: str) -> dict[str, Any]:
    """The rules in force, each with where its value came from (an operator, the tuner, the default)."""
    q = view.queue(queue)
    return {"rules": {k: {"value": v, "default": DEFAULT_RULES.get(k),
                          "source": "operator" if k in q.explicit_rules else "tuner" if k in q.thresholds else "default"}
                      for k, v in sorted(q.rules.items())}}


def _status(reply: Reply) -> QueueStatus | None:
    """The monitor's status in a stats reply, as the GCM decoded it (None: the topology alone)."""
    return reply.status if isinstance(reply, StatsReply) else None


def _statistics(reply: Reply, view: View) -> dict[str, Any]:
    """A queue's statistics: its topology, and its monitor's figures when it answered."""
    summary = snake(reply.data["Queue"])
    status = _status(reply)
    out: dict[str, Any] = {**summary, "exchanges": len(summary.get("exchanges", [])),
                           "status_from": "monitor" if status is not None else "topology", **traffic(status)}
    q = view.find(summary["name"])
    if q is not None:
        out.update(_rules(view, q.name), placement=dict(q.placement))
    if status is None:
        return out
    live = live_subscribers(status)
    out.update(
        exchanges=len(status.exchanges),
        totals=to_document(status.totals),
        relocations=status.count("relocations"),
        failovers=status.count("failovers"),
        scale_outs=status.count("scale_outs"),
        scale_ins=status.count("scale_ins"),
        exchanges_lost=status.count("exchanges_lost"),
        latency_ms=latency(status),
        gaps=sum(s.gaps or 0 for s in live),
        lost=sum(s.lost or 0 for s in live),
        duplicates=sum(s.duplicates or 0 for s in live),
    )
    return out


def _number(value: Any) -> float:
    """``value`` if it is a number (not a bool), else 0 (an event's time: events are documents)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _body(req: HttpRequest, fields: Mapping[str, type], *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON object of a request's body, its keys and types checked.

    Raises:
        ConfigError: not a JSON object, an unknown key, a value of the wrong type, a required key missing.
    """
    body = req.json()
    if not isinstance(body, dict):
        raise ConfigError(f"the body must be a JSON object with {', '.join(repr(f) for f in fields)}")
    for key, value in body.items():
        if key not in fields:
            raise ConfigError(f"unknown key {key[:64]!r} (known: {', '.join(fields)})")
        kind = fields[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{key!r} must be {'an integer' if kind is int else 'a string'}, got {value!r:.64}")
    for key in required:
        if key not in body:
            raise ConfigError(f"{key!r} is required")
    return body


def _int(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"query parameter {name!r} must be an integer, got {text[:32]!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"query parameter {name!r} must be between {low} and {high}, got {value}")
    return value


def _time(query: Mapping[str, str], name: str) -> float | None:
    """A time parameter: seconds since the epoch, or an ISO 8601 date and time (UTC unless it says)."""
    text = query.get(name)
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"query parameter {name!r} must be seconds since the epoch or an ISO 8601 time, "
                          f"got {text[:40]!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def feed_tree(status: dict[str, Any]) -> dict[str, Any] | None:
    """What the page draws of the cluster's place in its tree (:meth:`gcm._federation.Federation.status`; anyone may
    read the feed: no keys, no monitors' endpoints, no prefixes); None outside a tree."""
    if not status["Name"]:
        return None
    place = snake(status)
    shown = ("records", "bytes", "backlog", "rate_limit")
    return {"name": place["name"], "role": place["role"], "path": place["path"],
            "children": [{"name": c["name"], "below": len(c["below"]), "heard_s": c["heard_s"],
                          "links": [{**{k: x[k] for k in shown}, "refused": bool(x["refused"])} for x in c["links"]]}
                         for c in place["children"]]}
