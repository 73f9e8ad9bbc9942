"""gcm links: a linked durable queue of a cluster with a parent gets one link beside its monitor, reconciled by the
leader (pure, on views)."""

from __future__ import annotations

from gcm._links import linked, place_links
from gcm._view import HostView, QueueView, View
from roq.wire.documents import STOPPED, FederationDoc, QueueDoc
from roq.zk import Create, Delete, Paths

TREE = FederationDoc(name="store-1", role="leaf", parent_zk="127.0.0.1:2181", parent_root="/hq")
LINKED = {"durability": "always", "link": "parent"}


def _view(doc: QueueDoc, explicit: dict, assignments: dict | None = None,
          federation: FederationDoc | None = TREE) -> View:
    q = QueueView("q", doc, version=3, explicit_rules=explicit, rules_version=4)
    return View({"q": q}, hosts={h: HostView(h) for h in ("a", "b")}, assignments=assignments or {},
                paths=Paths("/roq"), federation=federation)


def test_a_linked_durable_queue_gets_its_link_beside_its_monitor_with_an_event():
    (out,) = place_links(_view(QueueDoc(host="a"), LINKED))
    assert out.ops == (Create("/roq/assignments/a/q@link"),) and out.ensure == ("/roq/assignments/a",)
    assert [(e.queue, e.kind, e.fields) for e in out.events] == [("q", "link_placed", {"host": "a"})]
    assert place_links(_view(QueueDoc(host="a"), LINKED, {"a": frozenset({"q@link"})})) == []  # in place: nothing


def test_the_link_follows_its_monitor_to_another_host():
    (out,) = place_links(_view(QueueDoc(host="b"), LINKED, {"a": frozenset({"q@link"}), "b": frozenset()}))
    assert set(out.ops) == {Delete("/roq/assignments/a/q@link"), Create("/roq/assignments/b/q@link")}


def test_no_link_without_a_parent_durability_the_rule_or_a_running_queue():
    placed = {"a": frozenset({"q@link"})}
    for view in (_view(QueueDoc(host="a"), LINKED, placed, federation=None),
                 _view(QueueDoc(host="a"), LINKED, placed, federation=FederationDoc(name="hq", role="root")),
                 _view(QueueDoc(host="a"), {"durability": "always"}, placed),
                 _view(QueueDoc(host="a", state=STOPPED), LINKED, placed)):
        assert linked(view, view.queues["q"]) == ""
        (out,) = place_links(view)
        assert out.ops == (Delete("/roq/assignments/a/q@link"),) and out.events[0].kind == "link_removed"
    assert place_links(_view(QueueDoc(host="gone"), LINKED)) == []  # its monitor's host is not registered: wait


def test_the_link_of_a_queue_that_is_gone_is_taken_away_and_nothing_is_asked_of_a_cluster_without_links():
    view = _view(QueueDoc(host="a"), {"durability": "always"}, {"a": frozenset({"gone@link", "q@monitor"})},
                 federation=None)
    (out,) = place_links(view)
    assert out.ops == (Delete("/roq/assignments/a/gone@link"),) and not out.events
    assert place_links(_view(QueueDoc(host="a"), LINKED, {"a": frozenset({"q@monitor"})}, federation=None)) == []
