"""gcm's events: every source's documents merged by time, the GCM's own appended (pure)."""

from __future__ import annotations

from gcm._events import appended, merge_events
from gcm._outcome import Event
from roq.wire.documents import EventsDoc
from roq.zk import MAX_EVENTS


def test_events_of_all_sources_are_merged_by_time_then_source_then_seq():
    documents = {
        "monitor": EventsDoc(events=[{"seq": 1, "time": 10.0, "kind": "a"}, {"seq": 2, "time": 12.0, "kind": "c"}],
                             counters={"moves": 1}),
        "gcm": EventsDoc(events=[{"seq": 7, "time": 10.0, "kind": "b"}, {"seq": 8, "time": 11.0, "kind": "x"},
                                 {"seq": 6, "time": 11.0, "kind": "w"}]),
    }
    merged = merge_events(documents, 10)
    assert [(e["origin"], e["kind"]) for e in merged] == [
        ("gcm", "b"), ("monitor", "a"), ("gcm", "w"), ("gcm", "x"), ("monitor", "c")]
    assert [e["kind"] for e in merge_events(documents, 2)] == ["x", "c"]  # the newest, still oldest first


def test_merging_tolerates_odd_events_and_missing_documents():
    documents = {"monitor": None, "gcm": EventsDoc(events=[{"time": "late", "kind": "k", "origin": "gcm"}, {"origin": 5}])}
    assert merge_events(documents, 5) == [{"time": "late", "kind": "k", "origin": "gcm"}, {"origin": "gcm"}]
    assert merge_events({}, 5) == [] and merge_events(documents, 0) == []


def test_an_event_is_appended_with_the_next_seq_and_the_oldest_dropped():
    doc, stored = appended(None, Event("q", "queue_created", "created on a", {"host": "a"}), 5.0)
    assert stored == {"host": "a", "seq": 1, "time": 5.0, "kind": "queue_created", "text": "created on a", "queue": "q",
                      "origin": "gcm"}
    assert doc == EventsDoc(events=[stored])
    full = EventsDoc(events=[{"seq": i} for i in range(1, MAX_EVENTS + 1)], counters={"x": 1})
    doc, stored = appended(full, Event("q", "k", "t"), 6.0)
    assert stored["seq"] == MAX_EVENTS + 1 and len(doc.events) == MAX_EVENTS and doc.events[0] == {"seq": 2}
    assert doc.counters == {"x": 1}
    assert EventsDoc.decode(doc.encode()) == doc
