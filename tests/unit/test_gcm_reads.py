"""gcm's reads: answers from the view, and from the documents it reads on demand (pure, on views built here)."""

from __future__ import annotations

import pytest

from gcm._reads import exists, get_events, get_rules, get_thresholds, list_hosts, list_queues, lookup
from gcm._view import QueueView, View
from gcm._view import HostView
from roq.wire import management as m
from roq.wire.documents import EventsDoc, HostDoc, MonitorDoc, QueueDoc, TuningDoc
from roq.errors import BadRequestError, NotFoundError, UnavailableError
from roq.rules import DEFAULT_RULES
from roq.zk import Paths


def _view(*queues: QueueView) -> View:
    return View({q.name: q for q in queues}, {"h": HostView("h", HostDoc(address="h", max_exchanges=3))}, {}, Paths("/roq"))


RUNNING = QueueView("q", QueueDoc(host="h", placement={"x1": "h"}), monitor=MonitorDoc(endpoint="tcp://h:9", host="h"),
                    explicit_rules={"cooldown_s": 3.0}, thresholds={"smoothing": 0.2})


def test_lookup_gives_the_monitor_of_a_running_queue():
    assert lookup(_view(RUNNING), m.Lookup(QName="q")).data == {"Monitor": "tcp://h:9", "Host": "h", "State": "running"}


def test_lookup_of_a_queue_without_monitor_or_not_running_is_unavailable_with_its_state():
    with pytest.raises(UnavailableError, match="no monitor running right now") as err:
        lookup(_view(QueueView("q", QueueDoc())), m.Lookup(QName="q"))
    assert err.value.data == {"State": "running"}
    with pytest.raises(UnavailableError, match="is stopped"):
        lookup(_view(QueueView("q", QueueDoc(state="stopped"))), m.Lookup(QName="q"))
    with pytest.raises(NotFoundError):
        lookup(_view(), m.Lookup(QName="q"))


def test_exists_does_not_count_a_queue_being_removed():
    assert exists(_view(RUNNING), m.QueueExists(QName="q")).data == {"Exists": True, "State": "running"}
    assert exists(_view(), m.QueueExists(QName="q")).data == {"Exists": False, "State": ""}
    removing = QueueView("q", QueueDoc(state="removing"))
    assert exists(_view(removing), m.QueueExists(QName="q")).data == {"Exists": False, "State": "removing"}
    with pytest.raises(BadRequestError):
        exists(_view(), m.QueueExists(QName="no/slash"))


def test_lists_are_the_summaries():
    queues = list_queues(_view(RUNNING), m.ListQueues()).data["Queues"]
    assert [(q["Name"], q["Monitor"]) for q in queues] == [("q", "tcp://h:9")]
    (host,) = list_hosts(_view(RUNNING), m.ListHosts()).data["Hosts"]
    assert (host["Address"], host["MaxExchanges"], host["AssignedExchanges"]) == ("h", 3, 1)


def test_rules_are_the_whole_in_force_and_what_the_operator_set():
    data = get_rules(_view(RUNNING), m.GetRules(QName="q")).data
    assert data["Explicit"] == {"cooldown_s": 3.0}
    assert data["Rules"] == {**DEFAULT_RULES, "cooldown_s": 3.0, "smoothing": 0.2}


def test_thresholds_come_with_the_evidence_read_beside_them():
    tuning = TuningDoc(thresholds={"smoothing": 0.2}, evidence={"samples": 9}, time=5.0)
    asked = []

    def read(path, decode):
        asked.append(path)
        return decode(tuning.encode())

    data = get_thresholds(_view(RUNNING), m.GetThresholds(QName="q"), read).data
    assert asked == ["/roq/queues/q/tuning"]
    assert data == {"Thresholds": {"smoothing": 0.2}, "Tuning": {"thresholds": {"smoothing": 0.2}, "evidence": {"samples": 9},
                                                                 "time": 5.0}}
    assert get_thresholds(_view(RUNNING), m.GetThresholds(QName="q"), lambda p, d: None).data["Tuning"] == {}


def test_events_merge_both_sources_and_give_the_monitors_counters():
    docs = {"/roq/queues/q/events/monitor": EventsDoc(events=[{"seq": 1, "time": 2.0, "kind": "moved"}], counters={"moves": 4}),
            "/roq/queues/q/events/gcm": EventsDoc(events=[{"seq": 1, "time": 1.0, "kind": "queue_created"}])}
    data = get_events(_view(RUNNING), m.GetEvents(QName="q", Limit=10), lambda path, _: docs.get(path)).data
    assert [(e["origin"], e["kind"]) for e in data["Events"]] == [("gcm", "queue_created"), ("monitor", "moved")]
    assert data["Counters"] == {"moves": 4}
    assert get_events(_view(RUNNING), m.GetEvents(QName="q"), lambda p, d: None).data == {"Events": [], "Counters": {}}


@pytest.mark.parametrize("limit", [0, -1, 1001, -(2**63)])
def test_a_limit_out_of_range_is_a_bad_request(limit):
    with pytest.raises(BadRequestError, match="Limit must be between 1 and 1000"):
        get_events(_view(RUNNING), m.GetEvents(QName="q", Limit=limit), lambda p, d: None)
