"""The HTTP API's pure parts: routing, the token, redirects from a standby, the OpenAPI document made from
the route table, and the metrics' shapes and bounds (no sockets: requests are made as the server would)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import urllib.parse

import pytest

from gcm._census import Snapshot
from gcm._feed import LiveFeed
from gcm._http import HttpApi, read_token
from gcm._labels import Labels
from gcm._metrics import Exposition
from roq.wire.control.links import LinkStats
from gcm._openapi import ROUTES, document
from gcm._shapes import snake
from gcm._view import QueueView, View
from prometheus_client.parser import text_string_to_metric_families
from roq.wire import management as m
from roq.wire.control import LATENCY_BOUNDS_MS, Reply
from roq.wire.documents import RUNNING, GcmDoc, QueueDoc
from roq.errors import ConfigError, NotFoundError
from roq.http import EventStream, HttpRequest
from roq.runtime import DropCounter
from roq.server import Dispatcher
from gcm._federation import Federation
from tests.unit.standins import queue_status

TOKEN = "t" * 32


class Shell:
    def __init__(self, *, leading: bool = True, leader: GcmDoc | None = None) -> None:
        self.id = "gcm1"
        self.view = View(queues={"q": QueueView("q", QueueDoc(state=RUNNING, host="127.0.0.11"))})
        self.census = type("Census", (), {"snapshots": {}})()
        self.leading = leading
        self.leader = leader if leader is not None else GcmDoc(id="gcm1", http="http://127.0.0.1:5080")
        self.me = GcmDoc(id="gcm1", http="http://127.0.0.1:5080")
        self.connected = True
        self.federation = Federation("", "root")


def api(shell: Shell, token: str = TOKEN) -> HttpApi:
    def list_queues(msg, request):
        return Reply(data={"Queues": [{"Name": "q", "State": "running", "Exchanges": []}]})

    def remove(msg, request):
        raise NotFoundError(f"no queue named {msg.QName!r}")

    drops = DropCounter(logging.getLogger("test"), "test")
    return HttpApi(shell, Dispatcher("test", {m.ListQueues: list_queues, m.RemoveQueue: remove}, drops), token=token,
                   top=2)


def call(a: HttpApi, method: str, path: str, body: bytes = b"", **headers: str):
    query = dict(p.split("=", 1) for p in path.partition("?")[2].split("&") if p)
    req = HttpRequest(method, urllib.parse.unquote(path.partition("?")[0]), query, headers, body, "127.0.0.1:1", path)
    return a.handle(req, later=None)  # type: ignore[arg-type]


def test_routes_methods_and_the_token():
    a = api(Shell())
    assert call(a, "GET", "/api/v1/queues").status == 200
    assert call(a, "GET", "/api/v1/nothing").status == 404
    assert call(a, "GET", "/api/v1/queues\n").status == 404  # a path is matched whole, up to its last character
    assert call(a, "GET", "/static/app.js").status == 200 and call(a, "GET", "/static/app.js\n").status == 404
    refused = call(a, "PUT", "/api/v1/queues")
    assert refused.status == 405 and ("allow", "GET, POST") in refused.headers
    assert call(a, "DELETE", "/api/v1/queues/q").status == 401  # no token
    for names_clients in ("publishers", "subscribers", "events"):  # reads, but of clients' ids: a token too
        assert call(a, "GET", f"/api/v1/queues/q/{names_clients}").status == 401
        assert call(a, "GET", f"/api/v1/queues/q/{names_clients}", authorization="Bearer " + TOKEN).status != 401
    assert call(a, "DELETE", "/api/v1/queues/q", authorization="Bearer " + "x" * 32).status == 401
    assert call(a, "DELETE", "/api/v1/queues/q", authorization="Basic " + TOKEN).status == 401
    found = call(a, "DELETE", "/api/v1/queues/zz", authorization="Bearer " + TOKEN)
    assert found.status == 404 and b'"result": "NOT_FOUND"' in found.body  # the dispatcher's refusal, as HTTP
    assert call(api(Shell(), token=""), "DELETE", "/api/v1/queues/q", authorization="Bearer x").status == 403
    bad = call(a, "POST", "/api/v1/queues", b'{"name": "x", "colour": 1}', authorization="Bearer " + TOKEN)
    assert bad.status == 400 and b"unknown key 'colour'" in bad.body


def test_a_head_of_the_live_stream_opens_no_feed_and_a_get_does():
    a = api(Shell())
    head = call(a, "HEAD", "/api/v1/stream")
    assert isinstance(head, EventStream) and a.feed.streams == []
    live = call(a, "GET", "/api/v1/stream")
    assert a.feed.streams == [live]


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b'{"max_exchanges": ' + b"[" * 900 + b"]" * 900 + b"}",
                                  b"\xff\xfe", b"{,}"])
def test_a_rules_body_that_does_not_decode_answers_400(body):
    answer = call(api(Shell()), "PUT", "/api/v1/queues/q/rules", body, authorization="Bearer " + TOKEN)
    assert answer.status == 400 and b"the body" in answer.body


def test_a_standby_redirects_to_the_leader_and_answers_503_without_one():
    moved = call(api(Shell(leading=False, leader=GcmDoc(id="gcm2", http="http://127.0.0.1:6000"))),
                 "GET", "/api/v1/queues/q/events?limit=5")
    assert moved.status == 307 and ("location", "http://127.0.0.1:6000/api/v1/queues/q/events?limit=5") in moved.headers
    garbage = "/api/v1/queues/%ff%fe%00%0d%0a/events?kind=%00"  # names the leader as it came: no NUL in a header
    moved = call(api(Shell(leading=False, leader=GcmDoc(id="gcm2", http="http://127.0.0.1:6000"))), "GET", garbage)
    assert moved.status == 307 and ("location", "http://127.0.0.1:6000" + garbage) in moved.headers
    alone = Shell(leading=False)
    alone.leader = None
    assert call(api(alone), "GET", "/api/v1/queues").status == 503
    assert call(api(alone), "GET", "/healthz").status == 200  # not an /api route: answered here


def test_the_openapi_document_names_every_route_and_its_handler():
    doc = document()
    assert doc["openapi"].startswith("3.1")
    for route in ROUTES:
        for method, op in route.methods.items():
            assert hasattr(HttpApi, op.handler), op.handler
            spec = doc["paths"][route.path][method.lower()]
            assert str(op.status) in spec["responses"]
            assert [p["name"] for p in spec["parameters"] if p["in"] == "path"] == \
                [part[1:-1] for part in route.path.split("/") if part.startswith("{")]
    assert all(ref.split("/")[-1] in doc["components"]["schemas"] for ref in _refs(doc))


def _refs(value):
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _refs(v)


def test_the_token_file_must_be_the_owners_alone(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_token(str(path))
    os.chmod(path, 0o600)
    assert read_token(str(path)) == TOKEN and read_token("") == ""
    path.write_text("short")
    with pytest.raises(ConfigError, match="at least 16"):
        read_token(str(path))
    with pytest.raises(ConfigError, match="cannot be read"):
        read_token(str(tmp_path / "missing"))


def test_metrics_cap_the_series_per_queue_and_sum_the_rest():
    status = queue_status(
        publishers=[{"id": f"p{i}", "records_per_s": float(i)} for i in range(5)],
        subscribers=[{"id": "s1", "live": True, "records_per_s": 3.0, "latency_p50_ms": 2.0, "lost": 1}],
        exchanges=[{"id": "x1-a", "totals": {"records_in": 10, "bytes_in": 0, "records_out": 0, "bytes_out": 0},
                    "records_per_s": 5.0}],
        counters={"relocations_by_rule": 3, "failovers": 1},
        totals={"records_in": 10, "bytes_in": 0, "records_out": 20, "bytes_out": 0},
        latency_histogram={"bounds_ms": list(LATENCY_BOUNDS_MS), "sum_ms": 1500.0,
                           "counts": [1] + [0] * (len(LATENCY_BOUNDS_MS) - 1) + [2]},
        journal={"durability": "always", "journal": "j-1", "alive": True, "first_offset": 100,
                 "next_offset": 1100, "size_bytes": 123456, "unsynced_bytes": 4096, "sync_ms": 0.5,
                 "sync_max_ms": 2.0, "write_failures": 1, "lag_bytes": 65536},
    )
    view = View(queues={"q": QueueView("q", QueueDoc(state=RUNNING))})
    labels = Labels(b"k" * 16)
    text = Exposition(top=2, labels=labels).text(view, {"q": Snapshot("q", status, time.time())}, gcm="gcm1",
                                                 leading=True, now=time.time()).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}  # prometheus_client reads it back
    assert parsed["roq_queue_latency_seconds"].type == "histogram" and parsed["roq_relocations"].type == "counter"
    assert len({(s.name, tuple(sorted(s.labels.items()))) for f in parsed.values() for s in f.samples}) == \
        sum(len(f.samples) for f in parsed.values())  # no series twice
    samples = {(x.name, tuple(sorted(x.labels.items()))): x.value for f in parsed.values() for x in f.samples}
    assert samples[("roq_publisher_records_per_second", (("publisher", labels("p4")), ("queue", "q")))] == 4.0
    assert samples[("roq_publisher_records_per_second", (("publisher", "other"), ("queue", "q")))] == 3.0  # 0+1+2
    assert len(parsed["roq_publisher_records_per_second"].samples) == 3
    assert samples[("roq_relocations_total", (("queue", "q"), ("reason", "rule")))] == 3.0
    assert samples[("roq_queue_records_in_total", (("queue", "q"),))] == 10.0
    assert samples[("roq_queue_latency_seconds_bucket", (("le", "0.0005"), ("queue", "q")))] == 1.0
    assert samples[("roq_queue_latency_seconds_bucket", (("le", "+Inf"), ("queue", "q")))] == 3.0
    assert samples[("roq_queue_latency_seconds_sum", (("queue", "q"),))] == 1.5
    assert samples[("roq_subscriber_latency_p50_seconds", (("queue", "q"), ("subscriber", labels("s1"))))] == 0.002
    assert samples[("roq_journal_up", (("queue", "q"),))] == 1.0
    assert samples[("roq_journal_records", (("queue", "q"),))] == 1000.0
    assert samples[("roq_journal_bytes", (("queue", "q"),))] == 123456.0
    assert samples[("roq_journal_unsynced_bytes", (("queue", "q"),))] == 4096.0
    assert samples[("roq_journal_sync_max_seconds", (("queue", "q"),))] == 0.002
    assert samples[("roq_journal_write_failures_total", (("queue", "q"),))] == 1.0
    assert samples[("roq_journal_lag_bytes", (("queue", "q"),))] == 65536.0
    carried = LinkStats("tcp://127.0.0.11:5500", records_sent=1200, bytes_sent=150_000, backlog=4096, moves=1,
                        rate_limit=250_000, carrying=[b"eu."])
    text = Exposition(top=2, labels=labels).text(view, {}, gcm="gcm1", leading=True, now=time.time(),
                                                 links=[("store-1", 0.5, [carried])]).decode()
    samples = {(x.name, tuple(sorted(x.labels.items()))): x.value
               for f in text_string_to_metric_families(text) for x in f.samples}
    crossing = (("child", "store-1"), ("target", "tcp://127.0.0.11:5500"))
    assert samples[("roq_link_heard_seconds", (("child", "store-1"),))] == 0.5
    assert samples[("roq_link_records_sent_total", crossing)] == 1200.0
    assert samples[("roq_link_bytes_sent_total", crossing)] == 150_000.0
    assert samples[("roq_link_backlog_bytes", crossing)] == 4096.0
    assert samples[("roq_link_rate_limit_bytes_per_second", crossing)] == 250_000.0
    assert samples[("roq_link_prefixes_carried", crossing)] == 1.0
    standby = Exposition(top=2, labels=labels).text(view, {}, gcm="gcm2", leading=False, now=0.0).decode()
    assert 'roq_gcm_leader{gcm="gcm2"} 0.0' in standby and "roq_queue" not in standby


def test_field_names_become_snake_case_and_lower_case_keys_stay():
    assert snake({"NetBytesPerS": 1, "Exchanges": [{"Id": "x1"}], "max_exchanges": 2, "127.0.0.1": 3}) == \
        {"net_bytes_per_s": 1, "exchanges": [{"id": "x1"}], "max_exchanges": 2, "127.0.0.1": 3}


PUBLISHER, SUBSCRIBER = hashlib.md5(b"a publisher").hexdigest(), hashlib.md5(b"a subscriber").hexdigest()


def test_what_anyone_may_read_names_no_client_by_its_id_but_shows_its_counts_and_rates():
    moved = f"publisher {PUBLISHER[:8]} moved from x1-a to x2-b (rule) in 3.1 ms"  # as monitors write them
    status = queue_status(
        publishers=[{"id": PUBLISHER, "exchange": "x1-a", "records_per_s": 1234.5}],
        subscribers=[{"id": SUBSCRIBER, "live": True, "records_per_s": 678.25, "latency_p50_ms": 2.5,
                      "latency_p99_ms": 9.5, "lost": 0, "prefix": b"eu."}],
        exchanges=[{"id": "x1-a", "records_per_s": 1234.5, "publishers": 1, "frontend": "tcp://127.0.0.11:4000"}],
        totals={"records_in": 4321, "bytes_in": 0, "records_out": 4320, "bytes_out": 0},
        events=[{"seq": 7, "time": 1.0, "kind": "relocated", "text": moved, "publisher": PUBLISHER,
                 "source": "x1-a", "target": "x2-b", "detail": f"publisher {PUBLISHER[:8]} (1,234 rec/s)"}],
    )
    shell = Shell()
    shell.census.snapshots = {"q": Snapshot("q", status, time.time())}
    labels = Labels()
    feed = LiveFeed(shell, labels=labels)
    feed.census_taken(shell.census.snapshots["q"])  # its events, kept for the feeds that open
    sent = b"".join(feed.open().take()).decode()  # the first state and the recent events
    metrics = Exposition(top=10, labels=labels).text(shell.view, shell.census.snapshots, gcm="gcm1", leading=True,
                                                      now=time.time()).decode()
    for shown in (sent, metrics):
        for client in (PUBLISHER, SUBSCRIBER):
            assert client[:8] not in shown  # not the id, nor the start of it that the monitor's texts quote
            assert labels(client) in shown
    state = json.loads(next(ln for ln in sent.splitlines() if ln.startswith('data: {"time"')).removeprefix("data: "))
    [q] = state["queues"]
    assert (q["publishers"], q["subscribers"], q["records_in_per_s"]) == (1, 1, 1234.5)
    assert q["publisher_list"] == [{"id": labels(PUBLISHER), "exchange": "x1-a", "records_per_s": 1234.5}]
    assert q["latency"] == [{"id": labels(SUBSCRIBER), "p50": 2.5, "p99": 9.5, "prefix": "eu."}]
    assert f"publisher {labels(PUBLISHER)} moved from x1-a to x2-b" in sent and '"kind":"relocated"' in sent
    assert f'roq_publisher_records_per_second{{queue="q",publisher="{labels(PUBLISHER)}"}} 1234.5' in metrics
    assert f'roq_subscriber_records_per_second{{queue="q",subscriber="{labels(SUBSCRIBER)}"}} 678.25' in metrics
    assert 'roq_queue_publishers{queue="q"} 1.0' in metrics and 'roq_queue_records_in_total{queue="q"} 4321' in metrics


def test_the_clusters_place_in_its_tree_is_read_as_the_bson_api_says_and_the_feed_shows_no_keys():
    from gcm._http import feed_tree

    status = {"Name": "hq", "Role": "root", "Path": [], "Refusals": {"cycle": 1}, "Children": [
        {"Name": "eu", "Key": "eu-key", "Incarnation": 4, "Below": ["store-1"], "HeardS": 0.5, "Links": [
            {"Target": "tcp://127.0.0.11:5500", "Records": 10, "Bytes": 1000, "Backlog": 0, "Moves": 1,
             "RateLimit": 0, "Carrying": ["eu."], "Refused": "", "BytesRead": 2000, "Compressed": True}]}]}
    drops = DropCounter(logging.getLogger("test"), "test")
    a = HttpApi(Shell(), Dispatcher("test", {m.FederationStatus: lambda msg, request: Reply(data=status)}, drops),
                token=TOKEN, top=2)
    answer = call(a, "GET", "/api/v1/federation", authorization=f"Bearer {TOKEN}")
    assert answer.status == 200
    assert json.loads(answer.body) == {"name": "hq", "role": "root", "path": [], "refusals": {"cycle": 1}, "children": [
        {"name": "eu", "key": "eu-key", "incarnation": 4, "below": ["store-1"], "heard_s": 0.5, "links": [
            {"target": "tcp://127.0.0.11:5500", "records": 10, "bytes": 1000, "backlog": 0, "moves": 1,
             "rate_limit": 0, "carrying": ["eu."], "refused": "", "bytes_read": 2000, "compressed": True}]}]}
    assert feed_tree(status) == {"name": "hq", "role": "root", "path": [], "children": [
        {"name": "eu", "below": 1, "heard_s": 0.5,
         "links": [{"records": 10, "bytes": 1000, "backlog": 0, "rate_limit": 0, "refused": False}]}]}
    assert feed_tree({**status, "Name": ""}) is None
