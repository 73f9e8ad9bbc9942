"""The GCM's HTTP API end to end: every route and every error status, each answer checked against the OpenAPI
document the server itself serves, on a real cluster (ZooKeeper, GCMs, host managers, monitors, exchanges)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time

import psutil

import client
from roqcli.embedded import EmbeddedCluster
from tests.integration.httpapi import Api
from tests.integration.zkhelp import wait_until

ROUTES_READ = ("/api/v1", "/api/v1/openapi.json", "/api/v1/cluster", "/api/v1/hosts", "/healthz", "/readyz")


def test_every_route_answers_as_its_openapi_document_says(make_embedded):
    cluster = make_embedded(hosts=2, gcms=2)
    api = Api(cluster.http_url("gcm1"), cluster.api_token)
    for path in ROUTES_READ:
        assert api.call("GET", path).status == 200
    cluster_doc = api.call("GET", "/api/v1/cluster").json
    assert cluster_doc["gcm"]["leading"] and cluster_doc["hosts"] == 2 and cluster_doc["leader"]["id"] == "gcm1"
    hosts = api.call("GET", "/api/v1/hosts").json["hosts"]
    assert {h["address"] for h in hosts} == set(cluster.addresses)
    assert api.call("GET", f"/api/v1/hosts/{cluster.addresses[0]}").json["max_exchanges"] == 4

    # create (201, then 200: idempotent), with the queue ready to take publishers when it answers
    created = api.call("POST", "/api/v1/queues", {"name": "orders", "exchanges": 2})
    assert created.status == 201 and created.headers["location"] == "/api/v1/queues/orders"
    assert created.json["state"] == "running" and len(created.json["exchanges"]) == 2
    assert api.call("POST", "/api/v1/queues", {"name": "orders"}).status == 200
    assert api.call("POST", "/api/v1/queues", {"name": "pinned", "host": cluster.addresses[1]}).json["host"] == \
        cluster.addresses[1]

    # traffic through the queue shows in its statistics, its parts and the queue list
    conn = client.connect(monitor=cluster.manager.lookup("orders"))
    sub = conn.subscriber(prefix=b"")
    pub = conn.publisher()
    n = 3000
    for i in range(n):
        pub.send(b"k", b"%d" % i)
    pub.flush(10)
    got = 0
    while got < n:
        batches = sub.recv_many(1000, timeout=5.0)
        assert batches, f"{got} of {n} records received"
        got += sum(len(b.payloads) for b in batches)
    assert got == n

    def counted() -> dict | None:
        stats = api.call("GET", "/api/v1/queues/orders").json
        return stats if stats.get("totals", {}).get("records_in") == n and stats["subscribers"] == 1 else None

    stats = wait_until(counted, 15, "the queue's statistics count the records")
    assert stats["status_from"] == "monitor" and stats["exchanges"] == 2 and stats["lost"] == 0
    assert stats["totals"]["records_out"] == n and stats["publishers"] == 1
    assert stats["rules"]["max_exchanges"]["source"] == "default"
    # the exchanges' own totals, before the trickle below sends more records through them
    exchanges = api.call("GET", "/api/v1/queues/orders/exchanges").json["exchanges"]
    assert len(exchanges) == 2 and sum(x["totals"]["records_in"] for x in exchanges) == n
    # latency is that of the subscribers' last KPI period, which needs records in it
    stop = threading.Event()

    def trickle() -> None:  # the latency is measured as the application takes its records
        while not stop.wait(0.005):
            pub.send(b"k", b"more")
            sub.recv_many(1000, timeout=0)

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        def measured() -> dict | None:
            latency = api.call("GET", "/api/v1/queues/orders").json["latency_ms"]
            return latency if latency["p50_median"] is not None else None

        latency = wait_until(measured, 15, "a latency measured")
        assert 0 < latency["p50_median"] <= latency["p99_max"] < 5000
    finally:
        stop.set()
        sender.join(5)
    listed = {q["name"]: q for q in api.call("GET", "/api/v1/queues").json["queues"]}
    assert set(listed) == {"orders", "pinned"}
    [publisher] = api.call("GET", "/api/v1/queues/orders/publishers").json["publishers"]
    assert publisher["exchange"] in {x["id"] for x in exchanges}
    [subscriber] = api.call("GET", "/api/v1/queues/orders/subscribers").json["subscribers"]
    assert subscriber["live"] and subscriber["lost"] == 0

    # rules: set, with their source; events: filtered and paged, newest first
    rules = api.call("PUT", "/api/v1/queues/orders/rules", {"max_exchanges": 3, "cooldown_s": 4}).json["rules"]
    assert (rules["max_exchanges"]["value"], rules["max_exchanges"]["source"]) == (3, "operator")
    assert api.call("GET", "/api/v1/queues/orders/rules").json["rules"]["cooldown_s"]["source"] == "operator"
    everything = api.call("GET", "/api/v1/queues/orders/events?limit=1000").json
    assert everything["total"] >= 3 and everything["counters"]["failovers"] == 0
    times = [e["time"] for e in everything["events"]]
    assert times == sorted(times, reverse=True)
    joined = api.call("GET", "/api/v1/queues/orders/events?kind=exchange_joined").json
    assert joined["total"] == 2 and {e["kind"] for e in joined["events"]} == {"exchange_joined"}
    pages = []

    def stable_page() -> bool:  # an event that arrives between the two reads shifts the page: read again
        listing = api.call("GET", "/api/v1/queues/orders/events?limit=1000").json["events"]
        pages[:] = [api.call("GET", "/api/v1/queues/orders/events?limit=1&offset=1").json, listing]
        return listing == api.call("GET", "/api/v1/queues/orders/events?limit=1000").json["events"]

    wait_until(stable_page, 10, "two listings of the events with nothing new between them")
    page, listing = pages
    assert page["events"] == listing[1:2]
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3600))
    assert api.call("GET", f"/api/v1/queues/orders/events?since={later}").json["total"] == 0

    # a standby redirects to the leader, reads and writes alike
    standby = cluster.http_url("gcm2")
    moved = api.call("GET", "/api/v1/queues", follow=False, base=standby)
    assert moved.status == 307 and moved.headers["location"] == cluster.http_url("gcm1") + "/api/v1/queues"
    moved = api.call("POST", "/api/v1/queues/orders/stop", follow=False, base=standby)
    assert moved.status == 307 and moved.json["leader"] == cluster.http_url("gcm1")
    assert api.call("GET", "/readyz", base=standby).json["leading"] is False

    # the live feed: the state at once, then a relocation as it happens
    with socket.create_connection(("127.0.0.1", int(api.base.rsplit(":", 1)[1])), timeout=10) as feed:
        feed.sendall(b"GET /api/v1/stream HTTP/1.1\r\nhost: x\r\n\r\n")
        got = b""
        while b"event: state" not in got:
            got += feed.recv(65536)
        assert got.startswith(b"HTTP/1.1 200 OK") and b"content-type: text/event-stream" in got
        api.checked.add(("GET", "/api/v1/stream", 200))
        relocation = conn.relocate()
        while b'"kind":"relocated"' not in got:
            got += feed.recv(65536)
        [line] = [ln for ln in got.split(b"\n") if b'"kind":"relocated"' in ln]
        # anyone may read the feed and the metrics: the publisher by its label there, by its id with a token
        moved, full = json.loads(line.removeprefix(b"data: ")), relocation["publisher"]
        assert moved["queue"] == "orders" and re.fullmatch("[0-9a-f]{8}", moved["publisher"])
        assert full[:8] not in got.decode()
    metrics = api.call("GET", "/metrics").body.decode()
    assert f'publisher="{moved["publisher"]}"' in metrics and full[:8] not in metrics
    assert api.call("GET", "/api/v1/queues/orders/publishers", token="").status == 401
    assert [p["id"] for p in api.call("GET", "/api/v1/queues/orders/publishers").json["publishers"]] == [full]
    page = api.call("GET", "/")
    assert page.status == 200 and b"<html" in page.body.lower()
    assert api.call("GET", "/static/index.html").status == 200
    assert api.call("GET", "/static/..%2Fgcm.py").status == 404
    assert api.call("GET", "/static/_http.py").status == 404

    # stop, start, remove: each answers once the cluster got there
    conn.close()
    assert api.call("POST", "/api/v1/queues/orders/stop").json["state"] == "stopped"
    assert api.call("GET", "/api/v1/queues/orders").json["state"] == "stopped"
    assert api.call("POST", "/api/v1/queues/orders/start").json["state"] == "running"
    assert api.call("DELETE", "/api/v1/queues/orders").status == 200
    assert api.call("GET", "/api/v1/queues/orders").status == 404
    metrics = api.call("GET", "/metrics")
    assert metrics.status == 200 and b'roq_gcm_leader{gcm="gcm1"} 1.0' in metrics.body
    trail = api.call("GET", "/api/v1/audit?limit=1000").json["entries"]  # what was done above, in order
    done = [(e["via"], e["action"], e["result"]) for e in trail if e["queue"] == "orders"]
    assert ("http", "StopQueue", "ACCEPTED") in done and done[-1] == ("http", "RemoveQueue", "ACCEPTED"), done

    place = api.call("GET", "/api/v1/federation").json  # a cluster in no tree: no name, no children
    assert (place["name"], place["children"], place["refusals"]) == ("", [], {})

    # every route of the document was called, and answered as the document says
    routes = {(m.upper(), p) for p, item in api.document["paths"].items() for m in item}
    assert routes <= {(m, p) for m, p, _ in api.checked}, routes - {(m, p) for m, p, _ in api.checked}


def test_every_error_names_its_cause_and_the_api_goes_on(make_embedded):
    cluster = make_embedded(hosts=2)
    api = Api(cluster.http_url(), cluster.api_token)
    api.call("POST", "/api/v1/queues", {"name": "q"})
    errors = {
        # 400: the key, parameter or value named
        ("POST", "/api/v1/queues", b"{not json"): (400, "not JSON"),
        ("POST", "/api/v1/queues", b'{"name": "x", "color": "red"}'): (400, "unknown key 'color'"),
        ("POST", "/api/v1/queues", b'{"name": 7}'): (400, "'name' must be a string"),
        ("POST", "/api/v1/queues", b'{"exchanges": 2}'): (400, "'name' is required"),
        ("POST", "/api/v1/queues", b'{"name": "' + b"n" * 100 + b'"}'): (400, "at most 64"),
        ("POST", "/api/v1/queues", b'{"name": "x", "exchanges": 0}'): (400, "Exchanges must be between"),
        ("PUT", "/api/v1/queues/q/rules", b'{"max_exchanges": 0}'): (400, "max_exchanges"),
        ("PUT", "/api/v1/queues/q/rules", b'{"sustain_s": "soon"}'): (400, "sustain_s"),
        ("PUT", "/api/v1/queues/q/rules", b"[]"): (400, "JSON object of rules"),
        ("GET", "/api/v1/queues/q/events?limit=0", None): (400, "'limit' must be between 1 and"),
        ("GET", "/api/v1/queues/q/events?since=yesterday", None): (400, "'since' must be seconds"),
        # 404 and 405
        ("GET", "/api/v1/queues/nothing", None): (404, "no queue named 'nothing'"),
        ("GET", "/api/v1/queues/nothing/rules", None): (404, "no queue named"),
        ("DELETE", "/api/v1/queues/nothing", None): (404, "no queue named"),
        ("GET", "/api/v1/hosts/127.0.0.99", None): (404, "no host manager registered at '127.0.0.99'"),
        ("GET", "/api/v2/queues", None): (404, "no such resource"),
        ("PATCH", "/api/v1/queues/q", b"{}"): (405, "PATCH is not allowed"),
        ("GET", "/api/v1/queues/q/stop", None): (405, "allowed: POST"),
        # 413: not read
        ("PUT", "/api/v1/queues/q/rules", b'{"a": "' + b"x" * (2 << 20) + b'"}'): (413, "over the"),
    }
    for (method, path, raw), (status, text) in errors.items():
        answer = api.call(method, path, raw=raw)
        assert answer.status == status and text in answer.json["error"], (method, path, answer)
    # 401: no token, or another one; the token file is the owner's alone
    assert oct(os.stat(cluster.api_token_file).st_mode & 0o777) == "0o600"
    for token in ("", "x" * 43):
        answer = api.call("DELETE", "/api/v1/queues/q", token=token)
        assert answer.status == 401 and "bearer" in answer.headers["www-authenticate"].lower(), answer
    assert api.call("GET", "/api/v1/queues/q").json["state"] == "running"  # nothing was done

    # 409: a queue being removed (its host manager paused, the removal cannot finish) refuses to start
    host = psutil.Process(cluster.hostmanagers[api.call("GET", "/api/v1/queues/q").json["host"]].pid)
    host.send_signal(signal.SIGSTOP)
    try:
        removing = threading.Thread(target=api.call, args=("DELETE", "/api/v1/queues/q"), daemon=True)
        removing.start()
        wait_until(lambda: api.call("GET", "/api/v1/queues/q").json.get("state") == "removing", 10, "removing")
        answer = api.call("POST", "/api/v1/queues/q/start")
        assert answer.status == 409 and "being removed" in answer.json["error"], answer
        assert answer.json["result"] == "CONFLICT"
    finally:
        host.send_signal(signal.SIGCONT)
    removing.join(30)
    wait_until(lambda: api.call("GET", "/api/v1/queues/q").status == 404, 30, "the queue removed")

    # 503: the queue's monitor does not answer (paused); its topology still does
    api.call("POST", "/api/v1/queues", {"name": "m"})
    monitor = psutil.Process(client.connect(monitor=cluster.manager.lookup("m")).status(timeout=10).pid)
    monitor.send_signal(signal.SIGSTOP)
    try:
        answer = api.call("GET", "/api/v1/queues/m/publishers")
        assert answer.status == 503 and answer.headers["retry-after"] == "1" and "did not answer" in answer.json["error"]
        assert api.call("GET", "/api/v1/queues/m").json["status_from"] == "topology"
    finally:
        monitor.send_signal(signal.SIGCONT)

    # garbage on the socket: 400, and the API goes on serving
    with socket.create_connection(("127.0.0.1", int(cluster.http_url().rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\x02\x00 a TLS hello, say\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400")
    assert api.call("GET", "/api/v1/queues/m").status == 200
    statuses = {status for _, _, status in api.checked}
    assert statuses >= {400, 401, 404, 405, 409, 413, 503}, statuses


def test_zookeeper_away_answers_503_and_writes_without_a_token_file_are_refused(tmp_path):
    # a cluster of its own: its ZooKeeper is stopped here; its GCM has no api_token_file (writes disabled) and
    # a directory of tokens, empty at first
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    with EmbeddedCluster(hosts=1, log_dir=str(tmp_path), session_timeout=4.0,
                         gcm_args=["--api-token-file", "", "--api-tokens", str(tokens)]) as cluster:
        api = Api(cluster.http_url(), "some-token-of-nobody")
        answer = api.call("POST", "/api/v1/queues", {"name": "q"})
        assert answer.status == 403 and "no api_token_file" in answer.json["error"]
        cluster.manager.create("q")  # through the BSON API
        answer = api.call("GET", "/api/v1/queues/q/events")  # events name clients by their ids: a token needed
        assert answer.status == 403 and "reads of clients' ids" in answer.json["error"], answer
        reader = tokens / "reader.token"
        reader.touch(mode=0o600)
        reader.write_text("r" * 32)
        api.token = "r" * 32
        wait_until(lambda: api.call("GET", "/api/v1/queues/q/events").status == 200, 10, "the reader's token known")
        host = Api.plain(cluster.host_http_url(cluster.addresses[0]))
        pids = [p["pid"] for p in host.get("/processes")[1]["processes"]] + [c.pid for c in cluster.gcms.values()]
        assert len(pids) == 3  # the queue's monitor and exchange, the GCM
        assert cluster.zookeeper is not None
        cluster.zookeeper.stop()
        cluster.zookeeper = None

        def unready() -> bool:
            return api.call("GET", "/readyz").status == 503

        wait_until(unready, 15, "the GCM not ready without ZooKeeper")
        assert api.call("GET", "/readyz").json["reason"] == "no ZooKeeper session"
        answer = api.call("GET", "/api/v1/queues/q/events")  # read from ZooKeeper: not now
        assert answer.status == 503 and answer.headers["retry-after"] == "1", answer
        assert api.call("GET", "/healthz").status == 200  # alive all the same
    # stopped with ZooKeeper away: nothing is left behind
    wait_until(lambda: not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                               for pid in pids), 30, "every process of the cluster gone")


def test_every_process_answers_its_health_checks_through_its_host_manager(make_embedded):
    cluster = make_embedded(hosts=2)
    cluster.manager.create("h", cluster.addresses[0], exchanges=1)
    host = Api.plain(cluster.host_http_url(cluster.addresses[0]))
    assert host.get("/healthz") == (200, {"status": "alive", "host": cluster.addresses[0]})
    assert host.get("/readyz")[0] == 200
    processes = {p["name"]: p for p in host.get("/processes")[1]["processes"]}
    assert set(processes) == {"h@monitor", "h@x1"} and all(p["alive"] and p["ready"] for p in processes.values())
    for name in processes:
        assert host.get(f"/processes/{name}/healthz")[1]["status"] == "alive"
        assert host.get(f"/processes/{name}/readyz") == (200, {"status": "ready", **processes[name]})
    assert host.get("/processes/nothing@x1/readyz")[0] == 404
    assert host.get("/nowhere")[0] == 404
    cluster.manager.stop("h")
    wait_until(lambda: host.get("/processes")[1]["processes"] == [], 20, "the queue's processes stopped")
    assert host.get("/processes/h@x1/healthz")[0] == 404
    # the GCM's own
    gcm = Api.plain(cluster.http_url())
    assert gcm.get("/healthz")[0] == gcm.get("/readyz")[0] == 200
