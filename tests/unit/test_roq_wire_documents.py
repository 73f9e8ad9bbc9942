"""roq.wire.documents: what each znode holds, checked on the way in."""

from __future__ import annotations

import pytest

from roq.wire.documents import STOPPED, Assignment, EventsDoc, HostDoc, HostKpis, QueueDoc, RulesDoc
from roq.errors import ProtocolError


@pytest.mark.parametrize(
    "name, queue, role, slot",
    [
        ("q@monitor", "q", "monitor", "monitor"),
        ("q@x3", "q", "exchange", "x3"),
        ("q.a-b@x1", "q.a-b", "exchange", "x1"),
    ],
)
def test_assignment_names_are_parsed(name, queue, role, slot):
    a = Assignment.parse(name)
    assert (a.queue, a.role, a.slot, a.name) == (queue, role, slot, name)


@pytest.mark.parametrize("name", ["nope", "@x", "q@", "@", "", "q@x", "q@monitor2", "q@x1@x2", "a/b@x1", "q@__init__",
                                  "q@monitor\n", "q@x1\n"])
def test_malformed_assignment_names_are_refused(name):
    with pytest.raises(ProtocolError):
        Assignment.parse(name)


def test_documents_are_compact_sorted_json_and_round_trip():
    doc = QueueDoc(state=STOPPED, host="h", placement={"x2": "b", "x1": "a"}, next_exchange=3)
    assert doc.encode().startswith(b'{"created":0.0,"host":"h","journal_generation":0,"journal_host":"","journal_learners":[],"journal_replicas":[],"next_exchange":3,"placement":{"x1":"a","x2":"b"}')
    assert QueueDoc.decode(doc.encode()) == doc
    host = HostDoc(address="a", max_exchanges=4, kpis=HostKpis(cpu_percent=12.5))
    assert HostDoc.decode(host.encode()) == host


def test_a_queue_names_its_journals_learners_and_one_written_before_they_existed_names_none():
    doc = QueueDoc(journal_host="a", journal_replicas=["a", "d", "c"], journal_learners=["d"])
    assert QueueDoc.decode(doc.encode()) == doc
    old = QueueDoc.decode(b'{"host":"h","journal_host":"a","journal_replicas":["a","b","c"],"state":"running"}')
    assert old.journal_learners == [] and old.journal_replicas == ["a", "b", "c"]
    with pytest.raises(ProtocolError, match="journal_learners"):
        QueueDoc.decode(b'{"journal_learners":"d"}')


def test_a_queue_written_before_its_journals_generation_had_that_name_keeps_its_generation():
    old = b'{"host":"h","journal_host":"a","journal_lost":2,"state":"running"}'
    doc = QueueDoc.decode(old)
    assert doc.journal_generation == 2 and doc.journal_host == "a"
    assert b"journal_lost" not in doc.encode() and QueueDoc.decode(doc.encode()) == doc  # written under its name
    assert QueueDoc.decode(b'{"journal_generation":3,"journal_lost":2}').journal_generation == 3  # the name wins
    with pytest.raises(ProtocolError, match="journal_generation"):
        QueueDoc.decode(b'{"journal_lost":"two"}')


def test_an_empty_node_reads_as_the_default_document():
    assert QueueDoc.decode(b"") == QueueDoc() and EventsDoc.decode(None) == EventsDoc()


@pytest.mark.parametrize("data", [b"not json", b"{", b"\x80\x81", b"[1, 2]", b'{"state": "exploded"}',
                                  b'{"placement": {"x1": 3}}', b'{"next_exchange": 1e400}', b'{"next_exchange": 9223372036854775808}',
                                  b'{"host": ["a"]}', b'{"created": true}'])
def test_a_node_holding_anything_else_is_refused(data):
    with pytest.raises(ProtocolError):
        QueueDoc.decode(data)


def test_rules_keep_numbers_and_short_words_only():
    long = "x" * 65
    assert RulesDoc.decode(b'{"cooldown_s": 3, "durability": "always", "max_exchanges": true, "smoothing": [1], '
                           b'"k": "' + long.encode() + b'"}') == RulesDoc({"cooldown_s": 3, "durability": "always"})
    assert RulesDoc({"a": 1.5}).encode() == b'{"a":1.5}'
    with pytest.raises(ProtocolError):
        RulesDoc.decode(b"[1]")
