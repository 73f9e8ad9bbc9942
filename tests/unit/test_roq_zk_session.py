"""roq.zk.session: the watches that fired, as the loop takes them in (a session never started: no server)."""

from __future__ import annotations

import pytest
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent

from roq.zk.session import Fired, Session


@pytest.fixture
def session():
    s = Session("127.0.0.1:1")
    yield s
    s.close()


def _event(kind: str, path: str) -> WatchedEvent:
    return WatchedEvent(kind, KeeperState.CONNECTED, path)


def test_nothing_fired_until_a_watch_does(session):
    assert session.consume_changes() == ([], Fired())
    assert session.consume() == ([], False)


def test_data_changes_are_told_by_node_and_anything_else_as_other(session):
    session.watch(_event(EventType.CHANGED, "/roq/hosts/a"))
    session.watch(_event(EventType.CHANGED, "/roq/hosts/b"))
    session.watch(_event(EventType.CHANGED, "/roq/hosts/a"))
    assert session.consume_changes() == ([], Fired(True, frozenset({"/roq/hosts/a", "/roq/hosts/b"}), False))
    assert session.consume_changes() == ([], Fired())  # (taken once)
    for kind in (EventType.CHILD, EventType.CREATED, EventType.DELETED):
        session.watch(_event(kind, "/roq/hosts"))
        states, fired = session.consume_changes()
        assert fired == Fired(True, frozenset(), True), kind
    session.watch()  # (a call without an event: something changed, it is not known what)
    assert session.consume() == ([], True)
