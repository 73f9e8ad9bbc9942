"""The link process: one durable queue of this cluster carried into a queue of another (and, on a tree's edge,
back), for the keys wanted there.

``python -m client.link --name eu-hq --source tcp://127.0.0.11:5500 --target tcp://127.0.0.21:5500 --prefix eu.``
reads the source queue's journal as the durable reader ``link.<name>`` (from the position it kept there; a new
link from the journal's end), relays the records whose keys start with a ``--prefix`` (every key without one)
and publishes them into the target queue under relayed ids (:class:`~client.link.Crossing`). Killed and started
again, it goes on from its last commit, and the far side drops what it had already: each record lands once, in
its publisher's order.

**Both ways, on a tree's edge.** A link of a child cluster (``--cluster``) carries records *up*, from its queue
into the parent's; with ``--down`` it also carries the parent queue's records *down* into its own (read as the
durable reader ``link.<name>.down`` in the parent's journal): two crossings in one process, one loop, one hello.
The tree's rules hold on each (:class:`~roq.federation.Relay`'s ``way``): what came down never goes back up,
what came up from a child never goes down again, and each queue's monitor hears which way a link reads it, so
interest reaches a parent only from below and a child only from above.

**Epochs.** The far side's subscribers order each relayed publisher by epoch across the link's moves, and a
link started again goes on with the same relayed ids: its first epoch must be above every epoch of the ones
before it. It is the tenths of a second since 2026 at its start (:func:`first_epoch`), and a move adds one: a
link that moves fewer than ten times a second on average begins above its predecessors.

One loop (:class:`roq.loop.Loop`) serves the journal, the far monitor and the far exchange; a signal stops it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from typing import Any

import zmq

from client._connection import connect
from client._locator import MonitorLocator
from client.link._crossing import Crossing
from client.link._parent import Parent
from client.link._place import Place
from client.link._wants import Wants
from roq.config import CurveClient, LinkConfig, PublisherConfig, SubscriberConfig
from roq.errors import BrokerConnectionError, ConfigError, RoQError
from roq.federation import Pace, Prefixes, Relay, address
from roq.wire import batch
from roq.wire.control.links import ClusterName, LinkHello, LinkStats
from roq.loop import Loop
from roq.runtime import DropCounter, SignalWakeup, run_main
from roq.security.zap import TAG_BYTES, identity_for
from roq.wire.ready import LinkReady

log = logging.getLogger(__name__)

__all__ = ["Link", "LinkConfig", "main", "first_epoch"]

DESCRIPTION = ("A link: one durable queue of this cluster carried into a queue of another cluster (with --down, "
               "and back), for the keys wanted there, each record once and in its publisher's order, across "
               "restarts.")
#: 2026-01-01T00:00:00Z, where a link's first epoch counts from
EPOCH_ORIGIN = 1767225600
#: a journal that is not heard of yet is asked about this often, seconds
LOOKUP_INTERVAL = 0.2


def first_epoch(now: float) -> int:
    """A link's first epoch at wall time ``now``: tenths of a second since 2026, within 32 bits."""
    return int((now - EPOCH_ORIGIN) * 10) & 0xFFFFFFFF


class Link:
    """The link process's node (:func:`roq.runtime.run_node`)."""

    def __init__(self, config: LinkConfig) -> None:
        self.config = config
        self.here = _own_keys(config)
        self.there = CurveClient.load(config.target_credentials) if config.target_credentials else None
        # the parent's queue: where it was said to be, or followed in the parent's ZooKeeper by its name
        self.target = MonitorLocator(config.target)
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.loop = Loop("link", DropCounter(log, "link"))
        self.journal = ""
        self.crossings: list[Crossing] = []  # up (or the one way outside a tree), then down
        self.wants: list[Wants] = []
        self.epoch = first_epoch(time.time())
        self.parent: Parent | None = None
        # the cluster's subtree, as its GCM writes it: said to the parent, and the addresses carried
        self.place = Place(config.cluster) if config.zk else None
        self._announced = [ClusterName(config.cluster, "")]  # the names the hellos say
        self._routed_at = 0.0  # when what the crossings carry by address last changed (monotonic)
        if config.parent_zk:
            self.parent = Parent(self.context, config.parent_zk, config.parent_root, self._hello,
                                 on_change=self._follow_parent, curve=self.there, who=f"link {config.name}")

    def start(self) -> None:
        """Find the source queue's journal (and with ``down`` the target's) and start crossing.

        Raises:
            BrokerConnectionError: a queue's monitor did not answer, or named no live journal, within
                ``connect_timeout``.
            ConfigError: a queue is not durable, or credentials that cannot be used.
        """
        config = self.config
        if self.place is not None:
            self.place.follow(config.zk, config.root, config.connect_timeout)
        if self.parent is not None:
            self._welcome()
        target = self._find_target()
        self.journal = self._find_journal(config.source, self.here)
        way = "up" if config.cluster else ""
        self._cross(way, config.source, self.journal, self.target, f"link.{config.name}", self.here, self.there)
        if config.down:
            journal = self._find_journal(target, self.there)
            self._cross("down", self.target, journal, config.source, f"link.{config.name}.down", self.there,
                        self.here)
        self._route()
        deadline = time.monotonic() + config.connect_timeout
        while any(c.relay.position() < 0 for c in self.crossings):  # ready once each knows where it reads from
            if time.monotonic() >= deadline:
                raise BrokerConnectionError(f"the journal at {self.journal} did not say where link.{config.name} "
                                            f"reads from within {config.connect_timeout:g}s")
            self.loop.turn()
        for c in self.crossings:
            down = c.relay.way == "down"
            log.info("link %s: %s%s (from offset %d) into %s, keys %s%s, first epoch %d", config.name,
                     f"{c.relay.way}: " if c.relay.way else "", self.target.endpoint if down else config.source,
                     c.relay.position(), c.target,
                     ", ".join(config.prefix) or "all",
                     " (on demand: those the far side wants)" if config.on_demand else "", self.epoch)

    def _find_target(self) -> str:
        """The parent's queue's monitor: as configured, or found in the parent's ZooKeeper (and followed).

        Raises:
            BrokerConnectionError: the parent's ZooKeeper did not answer, or has no monitor of the queue within
                ``connect_timeout``.
        """
        config, target = self.config, self.target
        if config.target:
            return target.endpoint
        target.follow(config.parent_zk, config.parent_root, config.queue, timeout=config.connect_timeout)
        deadline = time.monotonic() + config.connect_timeout
        while not target.endpoint:
            if time.monotonic() >= deadline:
                raise BrokerConnectionError(f"the parent cluster at {config.parent_zk} has no running queue "
                                            f"{config.queue} (no monitor) within {config.connect_timeout:g}s")
            time.sleep(LOOKUP_INTERVAL)
        return target.endpoint

    def _cross(self, way: str, source: str | MonitorLocator, journal: str, target: str | MonitorLocator, reader: str,
               curve_read: CurveClient | None, curve_write: CurveClient | None) -> None:
        """Start carrying the queue of monitor ``source`` (its journal's reads port ``journal``, read as ``reader``)
        into the queue of monitor ``target``, ``way`` on a tree's edge."""
        config = self.config
        if curve_write is not None:
            identity = identity_for(curve_write.public_key.encode())
        else:
            label = config.name if way != "down" else f"{config.name}.down"
            identity = hashlib.blake2b(label.encode(), digest_size=TAG_BYTES).digest() + os.urandom(8)
        relay = Relay(identity[:TAG_BYTES], epoch=self.epoch, max_bytes=config.max_bytes, way=way)
        prefixes = Prefixes.of(p.encode() for p in config.prefix) if config.prefix else Prefixes.of([b""])
        # its side, to the monitors: the child end of the edge it is on (both ways of one edge say the same)
        who = f"link {config.name}" + (f" ({way})" if config.down else "")
        wants = Wants(self.context, source, relay, prefixes, side=config.cluster or config.name,
                      on_demand=config.on_demand, curve=curve_read, who=who)
        wants.attach(self.loop)
        crossing = Crossing(self.context, journal, reader, target, relay, identity, curve_here=curve_read,
                            curve_there=curve_write, who=who, interest=wants.hello, on_interest=wants.told,
                            pace=Pace(config.rate_limit, time.monotonic()) if config.rate_limit else None,
                            wait_for_interest=config.on_demand,
                            # the far side's host: the target's exchanges, or down, the target's journal
                            compress_out=config.compress and way != "down",
                            compress_in=config.compress and way == "down")
        crossing.attach(self.loop)
        self.wants.append(wants)
        self.crossings.append(crossing)

    def _hello(self) -> LinkHello:
        config = self.config
        return LinkHello(cluster=config.cluster, role=config.role, incarnation=self.epoch,
                         names=self._names(), interest=[], stats=self.stats(), link=config.name)

    def _names(self) -> list[ClusterName]:
        """The clusters of the subtree to say to the parent: those whose records the crossings down carry already.
        A name is said once every fetch of the parent's journal on its way asks for its address, and once the way
        down reads: from then on, what the parent's queue takes for it comes down."""
        if self.place is None:
            return self._announced
        self._route()
        down = [c for c in self.crossings if c.relay.way == "down"]
        if all(c.relay.position() >= 0 and c.source.asked_since(self._routed_at) for c in down):
            self._announced = self.place.subtree
        return self._announced

    def _route(self) -> None:
        """Carry the records addressed by name (:func:`roq.federation.address`): down, those for a cluster of this
        subtree (every one ever in it: one away waits for it in the journal here); up, those for any other, and
        each loses its address in the cluster it was for."""
        place, parent = self.place, self.parent
        if place is None:
            return
        here = Prefixes.of(address(n) for n in place.known)
        for c in self.crossings:
            if c.relay.way == "down":
                changed = c.relay.route(here, arrival=address(self.config.cluster))
            else:
                there = address(parent.path[0]) if parent is not None and parent.path else b""
                changed = c.relay.route(Prefixes.of([batch.ADDRESSED]), here, there)
            if changed:
                self._routed_at = time.monotonic()

    def stats(self) -> list[LinkStats]:
        """What each crossing carried so far (none before it started)."""
        return [LinkStats(target=c.target, records_sent=c.outlet.sent_records, bytes_sent=c.outlet.sent_bytes,
                          backlog=c.relay.in_flight_bytes, moves=c.outlet.moves, rate_limit=self.config.rate_limit,
                          carrying=list(c.relay.wanted.items), refused=c.outlet.refused[:500],
                          bytes_read=c.source.read_bytes, compressed=self.config.compress)
                for c in self.crossings]

    def _welcome(self) -> None:
        """Say hello to the parent until it welcomes the link.

        Raises:
            ConfigError: the parent refused it (why, naming both ends).
            BrokerConnectionError: no answer within ``connect_timeout``.
        """
        parent, config = self.parent, self.config
        assert parent is not None
        parent.attach(self.loop)
        deadline = time.monotonic() + config.connect_timeout
        while parent.path is None:
            if parent.refused is not None:
                raise ConfigError(f"the parent cluster refused link {config.name} of {config.cluster} "
                                  f"({parent.refused[0]}): {parent.refused[1]}")
            if time.monotonic() >= deadline:
                raise BrokerConnectionError(f"the parent cluster at {config.parent_zk} did not welcome link "
                                            f"{config.name} within {config.connect_timeout:g}s")
            self.loop.turn()

    def _follow_parent(self) -> None:
        """Carry records only while the parent welcomes the link (told when its answer changes)."""
        parent = self.parent
        if parent is None or not self.crossings:
            return
        held = parent.refused is not None
        if held != self.crossings[0].held:
            log.warning("link %s: %s", self.config.name, "the parent refused it: it carries nothing until welcomed "
                        "again" if held else "welcomed again: it carries on")
        for crossing in self.crossings:
            crossing.hold(held)

    def serve(self, wakeup: SignalWakeup | None = None) -> None:
        if wakeup is not None:
            self.loop.on_signal(wakeup, self._on_signal)
        self.loop.run()

    def close(self) -> None:
        crossings, self.crossings = self.crossings, []
        for crossing in crossings:  # (what it sent since its last commit goes again next time; the far side drops it)
            crossing.close()
        for wants in self.wants:
            wants.close()
        self.target.close()  # (a fixed endpoint has nothing to close)
        if self.parent is not None:
            self.parent.close()
        if self.place is not None:
            self.place.close()
        self.context.destroy(linger=0)

    def ready_info(self) -> LinkReady:
        position = self.crossings[0].relay.position() if self.crossings else -1
        return LinkReady(pid=os.getpid(), name=self.config.name, journal=self.journal, position=position,
                         epoch=self.epoch)

    def _find_journal(self, monitor: str, curve: CurveClient | None) -> str:
        """The reads port of the journal of the queue of ``monitor`` (asked with the keys ``curve``)."""
        config = self.config
        deadline = time.monotonic() + config.connect_timeout
        why = "no answer"
        keys: dict[str, Any] = ({"publisher_config": PublisherConfig(curve=curve),
                                 "subscriber_config": SubscriberConfig(curve=curve)} if curve is not None else {})
        with connect(monitor, timeout=config.connect_timeout, **keys) as conn:
            while True:
                try:
                    journal = conn.status(timeout=max(0.1, min(5.0, deadline - time.monotonic()))).journal
                except RoQError as exc:
                    why = str(exc)
                else:
                    if journal.durability == "none":
                        raise ConfigError(f"the queue of {monitor} is not durable: a link reads its journal")
                    if journal.reads and journal.alive:
                        return journal.reads
                    why = f"its journal is {'not running' if journal.reads else 'not heard of yet'}"
                if time.monotonic() >= deadline:
                    raise BrokerConnectionError(f"the queue of {monitor}: no journal to read within "
                                                f"{config.connect_timeout:g}s ({why})")
                time.sleep(LOOKUP_INTERVAL)

    def _on_signal(self) -> None:
        log.info("link %s: stopping (signal)", self.config.name)
        self.loop.stop()


def _own_keys(config: LinkConfig) -> CurveClient | None:
    """The link's keys in its own cluster: the cluster's own (``cluster_key``), its credentials, or none.

    Raises:
        ConfigError: keys that cannot be used.
    """
    if config.cluster_key:
        return CurveClient.of_cluster(config.cluster_key)
    return CurveClient.load(config.source_credentials) if config.source_credentials else None


def main(argv: list[str] | None = None) -> int:
    return run_main("link", LinkConfig, Link, argv, description=DESCRIPTION, module="client.link")
