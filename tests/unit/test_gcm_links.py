"""gcm links: a linked durable queue of a cluster with a parent gets one link on the host with most headroom, kept
there while it lives, reconciled by the leader (pure, on views)."""

from __future__ import annotations

import dataclasses

from gcm._links import linked, place_links
from gcm._view import HostView, QueueView, View
from roq.wire.documents import STOPPED, FederationDoc, HostDoc, HostKpis, QueueDoc
from roq.zk import Create, Delete, Paths

TREE = FederationDoc(name="store-1", role="leaf", parent_zk="127.0.0.1:2181", parent_root="/hq")
LINKED = {"durability": "always", "link": "parent"}


def _view(doc: QueueDoc, explicit: dict, assignments: dict | None = None,
          federation: FederationDoc | None = TREE) -> View:
    q = QueueView("q", doc, version=3, explicit_rules=explicit, rules_version=4)
    return View({"q": q}, hosts={h: HostView(h) for h in ("a", "b")}, assignments=assignments or {},
                paths=Paths("/roq"), federation=federation)


def _hosts(**cpu: float) -> dict[str, HostView]:
    return {h: HostView(h, HostDoc(address=h, kpis=HostKpis(cpu_percent=p))) for h, p in cpu.items()}


def test_a_linked_durable_queue_gets_its_link_on_the_host_with_most_headroom_with_an_event():
    view = _view(QueueDoc(host="a"), LINKED)
    view = dataclasses.replace(view, hosts=_hosts(a=70.0, b=20.0))
    (out,) = place_links(view)
    assert out.ops == (Create("/roq/assignments/b/q@link"),) and out.ensure == ("/roq/assignments/b",)
    assert [(e.queue, e.kind, e.fields) for e in out.events] == [("q", "link_placed", {"host": "b"})]
    # in place: nothing, however the load moves later (a link kept where it runs reads on where it is)
    assert place_links(dataclasses.replace(view, assignments={"b": frozenset({"q@link"})},
                                           hosts=_hosts(a=5.0, b=80.0))) == []


def test_the_link_of_a_lost_host_moves_to_a_live_one_and_links_spread():
    (out,) = place_links(_view(QueueDoc(host="a"), LINKED, {"gone": frozenset({"q@link"})}))
    assert set(out.ops) == {Delete("/roq/assignments/gone/q@link"), Create("/roq/assignments/a/q@link")}
    assert "its host gone is lost" in out.events[0].text
    two = {n: QueueView(n, QueueDoc(host="a"), version=3, explicit_rules=LINKED, rules_version=4) for n in "qr"}
    view = View(two, hosts=_hosts(a=10.0, b=10.0), assignments={}, paths=Paths("/roq"), federation=TREE)
    placed = {op.path.rsplit("/", 2)[-2] for out in place_links(view) for op in out.ops}
    assert placed == {"a", "b"}  # one link a host


def test_no_link_without_a_parent_durability_the_rule_or_a_running_queue():
    placed = {"a": frozenset({"q@link"})}
    for view in (_view(QueueDoc(host="a"), LINKED, placed, federation=None),
                 _view(QueueDoc(host="a"), LINKED, placed, federation=FederationDoc(name="hq", role="root")),
                 _view(QueueDoc(host="a"), {"durability": "always"}, placed),
                 _view(QueueDoc(host="a", state=STOPPED), LINKED, placed)):
        assert not linked(view, view.queues["q"])
        (out,) = place_links(view)
        assert out.ops == (Delete("/roq/assignments/a/q@link"),) and out.events[0].kind == "link_removed"
    empty = dataclasses.replace(_view(QueueDoc(host="a"), LINKED), hosts={})
    assert place_links(empty) == []  # no host registered: it waits


def test_the_link_of_a_queue_that_is_gone_is_taken_away_and_nothing_is_asked_of_a_cluster_without_links():
    view = _view(QueueDoc(host="a"), {"durability": "always"}, {"a": frozenset({"gone@link", "q@monitor"})},
                 federation=None)
    (out,) = place_links(view)
    assert out.ops == (Delete("/roq/assignments/a/gone@link"),) and not out.events
    assert place_links(_view(QueueDoc(host="a"), LINKED, {"a": frozenset({"q@monitor"})}, federation=None)) == []
