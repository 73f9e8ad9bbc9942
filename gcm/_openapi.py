"""The HTTP API's routes and its OpenAPI 3.1 document (``GET /api/v1/openapi.json``).

One table, :data:`ROUTES`, says for every path which method calls which handler of :class:`gcm._http.HttpApi`,
with the parameters, the body and the answers' shapes; the router and the document are both made from it, so
the document cannot name a route the server does not serve. The schemas are JSON Schema 2020-12, as OpenAPI
3.1 takes them, and the tests check every real answer against them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from roq.rules import DEFAULT_RULES

__all__ = ["API", "ROUTES", "Route", "Operation", "document", "SCHEMAS"]

API = "/api/v1"


@dataclasses.dataclass(frozen=True)
class Operation:
    handler: str  # the method of HttpApi
    summary: str
    ok: str  # the schema of its success answer (a name in SCHEMAS)
    status: int = 200
    body: str = ""  # the schema of its JSON body ("": none)
    query: tuple[tuple[str, str, str], ...] = ()  # (name, JSON type, description)
    errors: tuple[int, ...] = ()  # the error statuses it may answer beside 400/500/503/307
    content_type: str = "application/json"
    also: tuple[int, ...] = ()  # other statuses answered with the same shape as success (a health check's 503)
    names_clients: bool = False  # its answer names publishers or subscribers by id: a bearer token even to read


@dataclasses.dataclass(frozen=True)
class Route:
    path: str
    methods: dict[str, Operation]

    @property
    def handlers(self) -> dict[str, str]:
        return {m: op.handler for m, op in self.methods.items()}


_Q = f"{API}/queues/{{queue}}"
ROUTES: tuple[Route, ...] = (
    Route(API, {"GET": Operation("index", "links to the model tree", "Index")}),
    Route(f"{API}/openapi.json", {"GET": Operation("openapi", "this document", "Object")}),
    Route(f"{API}/cluster", {"GET": Operation("cluster", "the GCMs, and counts of hosts and queues", "Cluster")}),
    Route(f"{API}/hosts", {"GET": Operation("hosts", "every live host with its budget and KPIs", "HostList")}),
    Route(f"{API}/hosts/{{host}}", {"GET": Operation("host", "one host", "Host", errors=(404,))}),
    Route(f"{API}/queues", {
        "GET": Operation("queues", "every queue with its traffic", "QueueList"),
        "POST": Operation("create_queue", "create a queue (idempotent: 200 if it exists); answers once it is ready",
                          "QueueCreated", status=201, body="NewQueue", errors=(401, 403, 404, 409, 413)),
    }),
    Route(_Q, {
        "GET": Operation("queue", "the queue's statistics, rules and where each came from", "QueueStatistics",
                         errors=(404,)),
        "DELETE": Operation("remove_queue", "remove the queue; answers once its processes are gone", "Done",
                            errors=(401, 403, 404, 409)),
    }),
    Route(f"{_Q}/stop", {"POST": Operation("stop_queue", "stop the queue's processes, keeping its configuration",
                                           "Done", errors=(401, 403, 404, 409))}),
    Route(f"{_Q}/start", {"POST": Operation("start_queue", "start a stopped queue", "Done",
                                            errors=(401, 403, 404, 409))}),
    Route(f"{_Q}/rules", {
        "GET": Operation("rules", "the rules in force and their sources", "Rules", errors=(404,)),
        "PUT": Operation("set_rules", "set some rules (the others keep their values)", "Rules", body="RuleValues",
                         errors=(401, 403, 404, 409, 413)),
    }),
    Route(f"{_Q}/exchanges", {"GET": Operation("exchanges", "the queue's live exchanges with their loads",
                                               "ExchangeList", errors=(404,))}),
    Route(f"{_Q}/publishers", {"GET": Operation("publishers", "the queue's publishers", "PublisherList",
                                                errors=(404,), names_clients=True)}),
    Route(f"{_Q}/subscribers", {"GET": Operation("subscribers", "the queue's subscribers with their KPIs",
                                                 "SubscriberList", errors=(404,), names_clients=True)}),
    Route(f"{_Q}/events", {"GET": Operation(
        "events", "the queue's topology events, newest first", "EventPage", errors=(404,), names_clients=True,
        query=(
            ("kind", "string", "comma-separated kinds (relocated, scale_out, ...); all when absent"),
            ("since", "string", "only events at or after this time: seconds since the epoch, or ISO 8601"),
            ("until", "string", "only events before this time"),
            ("limit", "integer", "events in the page, 1 to 1000 (100)"),
            ("offset", "integer", "events skipped, newest first (0)")))}),
    Route(f"{API}/audit", {"GET": Operation(
        "audit", "the audit trail: the latest management actions, oldest first (admin)", "AuditPage", query=(
            ("limit", "integer", "entries, 1 to 1000 (100)"),))}),
    Route(f"{API}/federation", {"GET": Operation(
        "federation", "this cluster's place in its tree of clusters: its name, role and path to the root, its "
        "children with what their links carried and when they last said hello, refusals by reason (admin)",
        "Federation")}),
    Route(f"{API}/stream", {"GET": Operation(
        "stream", "a live feed (server-sent events): 'state' every census round, 'event' for each topology event",
        "Text", content_type="text/event-stream")}),
    Route("/", {"GET": Operation("page", "the live dashboard", "Text", content_type="text/html")}),
    Route("/static/{name}", {"GET": Operation("static", "the dashboard's scripts and styles", "Text",
                                              content_type="text/", errors=(404,))}),
    Route("/metrics", {"GET": Operation("metrics", "the cluster's metrics in Prometheus's text format", "Text",
                                        content_type="text/plain")}),
    Route("/healthz", {"GET": Operation("healthz", "the process is alive", "Health")}),
    Route("/readyz", {"GET": Operation("readyz", "the process serves (a ZooKeeper session, a known leader); 503 "
                                       "and the reason when it does not", "Health", also=(503,))}),
)

_STR, _INT, _NUM, _BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
_NULLNUM = {"type": ["number", "null"]}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None, *, extra: bool = True) -> dict[str, Any]:
    return {"type": "object", "properties": {**required, **(optional or {})}, "required": sorted(required),
            **({} if extra else {"additionalProperties": False})}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _list(key: str, item: dict[str, Any]) -> dict[str, Any]:
    return _obj({key: {"type": "array", "items": item}})


_ENDPOINTS = {"http": _STR, "management": _STR, "lookup": _STR, "broadcast": _STR}
_TRAFFIC = {"records_in_per_s": _NUM, "records_out_per_s": _NUM, "bytes_in_per_s": _NUM, "bytes_out_per_s": _NUM,
            "publishers": _INT, "subscribers": _INT}
_SUMMARY = {"name": _STR, "host": _STR, "state": _STR, "running": _BOOL, "monitor": _STR}
_EXCHANGE_SUMMARY = _obj({"id": _STR, "name": _STR, "host": _STR, "frontend": _STR, "backend": _STR})
_TOTALS = _obj({"records_in": _INT, "bytes_in": _INT, "records_out": _INT, "bytes_out": _INT})

SCHEMAS: dict[str, Any] = {
    "Object": {"type": "object"},
    "Text": _STR,
    "Error": _obj({"error": _STR, "status": _INT}, {"result": _STR, "code": _INT}),
    "Index": _obj({"version": _STR, "links": {"type": "object", "additionalProperties": _STR}}),
    "Cluster": _obj({"gcm": _obj({"id": _STR, "leading": _BOOL, **_ENDPOINTS}),
                     "leader": {"oneOf": [{"type": "null"}, _obj({"id": _STR, **_ENDPOINTS})]},
                     "hosts": _INT, "queues": _INT,
                     "queue_states": {"type": "object", "additionalProperties": _INT},
                     "records_in_per_s": _NUM, "records_out_per_s": _NUM}),
    "Host": _obj({"address": _STR, "endpoint": _STR, "max_exchanges": _INT, "assigned_exchanges": _INT,
                  "exchanges": _INT, "monitors": _INT, "cpus": _NUM, "cpu_percent": _NUM, "memory_percent": _NUM,
                  "net_bytes_per_s": _NUM, "link_bytes_per_s": _NUM, "net_percent": _NUM}),
    "HostList": _list("hosts", _ref("Host")),
    "QueueSummary": _obj({**_SUMMARY, "exchanges": {"type": "array", "items": _EXCHANGE_SUMMARY}}),
    "QueueList": _list("queues", {"allOf": [_ref("QueueSummary"), _obj(_TRAFFIC)]}),
    "NewQueue": _obj({"name": _STR}, {"exchanges": {"type": "integer", "minimum": 1}, "host": _STR}, extra=False),
    "QueueCreated": {"allOf": [_ref("QueueSummary"), _obj({"comment": _STR})]},
    "Rule": _obj({"value": {}, "default": {}, "source": {"enum": ["operator", "tuner", "default"]}}),
    "Rules": _obj({"rules": _obj({k: _ref("Rule") for k in DEFAULT_RULES})}),
    "RuleValues": {"type": "object", "minProperties": 1,
                   "properties": {k: {"type": ["number", "integer", "boolean", "string"]} for k in DEFAULT_RULES},
                   "additionalProperties": False},
    "QueueStatistics": _obj({**_SUMMARY, **_TRAFFIC, "exchanges": _INT,
                             "status_from": {"enum": ["monitor", "topology"]},
                             "rules": _obj({k: _ref("Rule") for k in DEFAULT_RULES}),
                             "placement": {"type": "object", "additionalProperties": _STR}},
                            {"totals": _TOTALS, "relocations": _INT, "failovers": _INT, "scale_outs": _INT,
                             "scale_ins": _INT, "exchanges_lost": _INT, "gaps": _INT, "lost": _INT,
                             "duplicates": _INT,
                             "latency_ms": _obj({"p50_median": _NULLNUM, "p99_max": _NULLNUM})}),
    "Exchange": _obj({"id": _STR, "frontend": _STR, "backend": _STR, "pid": _INT, "draining": _BOOL,
                      "records_per_s": _NUM, "bytes_per_s": _NUM, "records_out_per_s": _NUM,
                      "bytes_out_per_s": _NUM, "totals": _TOTALS, "cpu_percent": _NUM, "rss_bytes": _INT,
                      "busy": _NUM, "mark_records_per_s": _NUM, "publisher_pressure": _NUM, "dropped": _INT,
                      "publishers": _INT, "silent_s": _NUM}),
    "ExchangeList": _obj({"exchanges": {"type": "array", "items": _ref("Exchange")},
                          "truncated": {"type": ["object", "null"]}}),
    "Publisher": _obj({"id": _STR, "exchange": _STR, "relocating": _BOOL, "records_per_s": _NUM}),
    "PublisherList": _obj({"publishers": {"type": "array", "items": _ref("Publisher")},
                           "truncated": {"type": ["object", "null"]}}),
    "Subscriber": _obj({"id": _STR, "prefix": {}, "confirmed": {"type": "array", "items": _STR}, "live": _BOOL},
                       {"records_per_s": _NUM, "latency_p50_ms": _NUM, "latency_p99_ms": _NUM, "gaps": _INT,
                        "lost": _INT, "duplicates": _INT}),
    "SubscriberList": _obj({"subscribers": {"type": "array", "items": _ref("Subscriber")},
                            "truncated": {"type": ["object", "null"]}}),
    "Event": _obj({"seq": _INT, "time": _NUM, "kind": _STR, "text": _STR}),
    "AuditEntry": _obj({"time": _NUM, "principal": _STR, "via": _STR, "action": _STR, "queue": _STR,
                        "detail": _STR, "result": _STR, "comment": _STR}),
    "AuditPage": _obj({"entries": {"type": "array", "items": _ref("AuditEntry")}}),
    "EventPage": _obj({"events": {"type": "array", "items": _ref("Event")}, "total": _INT, "offset": _INT,
                       "limit": _INT, "counters": {"type": "object", "additionalProperties": _INT}}),
    "Crossing": _obj({"target": _STR, "records": _INT, "bytes": _INT, "backlog": _INT, "moves": _INT,
                      "rate_limit": _INT, "carrying": {"type": "array", "items": _STR}, "refused": _STR,
                      "bytes_read": _INT, "compressed": _BOOL}),
    "Federation": _obj({"name": _STR, "role": _STR, "path": {"type": "array", "items": _STR},
                        "children": {"type": "array", "items": _obj({
                            "name": _STR, "key": _STR, "incarnation": _INT,
                            "below": {"type": "array", "items": _STR}, "heard_s": _NUM,
                            "links": {"type": "array", "items": _ref("Crossing")}})},
                        "refusals": {"type": "object", "additionalProperties": _INT}}),
    "Done": _obj({"comment": _STR}),
    "Health": _obj({"status": {"enum": ["alive", "ready", "not ready"]}}),
}

_ERRORS = {400: "bad request: the message names the parameter or key", 401: "no bearer token, or not this "
           "cluster's", 403: "the caller may not do this (a secure cluster: the comment names the rule; without a "
           "token the caller is 'anonymous'), or writes over HTTP are disabled (no api_token_file)", 404: "no such queue or host",
           405: "method not allowed on this path", 409: "the queue's state forbids it (being removed...)",
           413: "the body is over 1 MiB", 500: "an internal error; nothing was done",
           503: "ZooKeeper or the queue's monitor is unavailable, or no leader is elected; retry"}


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of :data:`ROUTES`."""
    paths: dict[str, Any] = {}
    for route in ROUTES:
        item: dict[str, Any] = {}
        params = [{"name": name, "in": "path", "required": True, "schema": _STR}
                  for name in _path_params(route.path)]
        for method, op in route.methods.items():
            responses: dict[str, Any] = {
                str(op.status): {"description": op.summary,
                                 "content": {op.content_type: {"schema": _ref(op.ok)}}},
            }
            if op.status == 201:
                responses["200"] = responses["201"]
            errors = {400, 401, 403, 500, 503, *op.errors} if route.path.startswith(API) else {500, 503, *op.errors}
            for status in sorted(errors):
                responses[str(status)] = {"description": _ERRORS[status],
                                          "content": {"application/json": {"schema": _ref("Error")}}}
            for status in op.also:
                responses[str(status)] = {"description": op.summary,
                                          "content": {op.content_type: {"schema": _ref(op.ok)}}}
            if route.path.startswith(API):
                responses["307"] = {"description": "this GCM is a standby: the leader's URL is in Location"}
            operation: dict[str, Any] = {
                "operationId": op.handler, "summary": op.summary, "responses": responses,
                "parameters": params + [{"name": n, "in": "query", "required": False, "schema": {"type": t},
                                         "description": d} for n, t, d in op.query],
            }
            if op.body:
                operation["requestBody"] = {"required": True,
                                            "content": {"application/json": {"schema": _ref(op.body)}}}
            if method in ("POST", "PUT", "DELETE") or op.names_clients:
                operation["security"] = [{"bearer": []}]
            item[method.lower()] = operation
        paths[route.path] = item
    return {
        "openapi": "3.1.0",
        "info": {"title": "RoQ-Py management API", "version": "1",
                 "description": "The GCM leader's model tree of an elastic RoQ-Py cluster (docs/http.md)."},
        "paths": paths,
        "components": {"schemas": SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")]
