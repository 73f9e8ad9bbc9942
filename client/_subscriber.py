"""The subscriber: its feeds (one DEALER per exchange of the queue), a DEALER to the monitor, no thread.

All the work happens inside ``recv`` (and iteration): reading the exchanges (:mod:`client._feeds`),
ordering per publisher (:mod:`client._ordering`), answering the monitor (this module), and telling the
exchanges, as the application takes each batch or waits in ``recv`` with nothing to take, that it reads
(:meth:`~client._feeds.Feeds.progress`, a few tens of times a second at most): an exchange waits for a full pipe
whose subscriber reads. A subscriber that is
not read stops answering the monitor after a while and is then no longer waited for: it does not keep up.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
import uuid
from typing import Any, Callable, Iterator

import zmq

from client._channel import MonitorChannel
from client._feeds import Feed, Feeds
from client._latency import Latency
from client._message import Batch, Message, SubscriberStats
from client._replay import NOT_DURABLE, Replay
from client._locator import MonitorLocator
from client._ordering import Reassembler
from roq.wire import control
from roq.config import SubscriberConfig
from roq.security.zap import identity_for
from roq.errors import BrokerConnectionError, ClosedError, ForbiddenError, Result
from roq.sockets import poll_ms

log = logging.getLogger(__name__)

__all__ = ["Subscriber"]



#: Longest wait in one turn of ``_pump`` while joining, seconds.
_JOIN_TURN = 0.05
#: Longest wait in one turn of ``_pump`` while ``recv`` waits for records, seconds: each turn tells the exchanges
#: that we wait with nothing to take (we keep up, however full their pipes to us look), well within their grace.
_WAIT_TURN = 0.1
#: Planned moves remembered until their target exchange is heard (the oldest is forgotten beyond).
MAX_PREPARES = 1024
#: Records ``recv_many`` returns at most by default.
MAX_RECORDS = 65536
#: An exchange the monitor declared dead whose connection stays up is waited for this long, seconds, after the
#: declaration or after the last frame it sent us, whichever is later, to be listed again (a starved exchange runs
#: again within a fraction of a second, and sends a beacon four times a second); then it is taken for dead.
SUSPECT_S = 1.0
#: ... and for this long at most after the declaration, however much it still sends, seconds.
SUSPECT_MAX_S = 5.0


class Subscriber:
    """Receives the records of a logical queue whose key starts with ``prefix``.

    Made by :meth:`client.Connection.subscriber`. Use from one thread. Late subscribers receive what is
    published after they joined. Records of each publisher arrive once and in the publisher's order,
    across relocations and failovers, as long as the subscriber keeps up.
    """

    def __init__(self, *, context: zmq.Context, monitor: str | MonitorLocator, prefix: bytes,
                 config: SubscriberConfig, start: Any = "latest", durable: str = "") -> None:
        if not isinstance(prefix, bytes):
            raise TypeError(f"prefix must be bytes, got {type(prefix).__name__}")
        self.config = config
        self.prefix = prefix
        self.id = identity_for(config.curve.public_key.encode()) if config.curve else uuid.uuid4().bytes
        self.name = self.id.hex()
        self._who = f"subscriber {self.name[:8]}"
        self._closed = False
        # what the reassembler released, batch by batch; ``recv`` and iteration turn the head batch into
        # messages (``_records``) only when they reach it, so that ``recv_many`` never builds one per record
        self._batches: collections.deque[Batch] = collections.deque()
        self._records: collections.deque[Message] = collections.deque()
        self._order = Reassembler(filtered=bool(prefix), hold_timeout=config.hold_timeout, max_held=config.max_held_batches)
        self._prepares: dict[int, str] = {}  # relocation -> target exchange, until we hear it
        self._names: dict[bytes, str] = {}
        self._latency = Latency(config.latency_samples)
        self._listed = False
        self._suspect: dict[str, float] = {}  # exchanges declared dead whose connection is kept -> when declared
        self._forbidden: ForbiddenError | None = None  # the monitor refused this subscriber's principal
        self._next_hello = 0.0
        self._poller = zmq.Poller()
        # start anywhere but "latest": the journal first; durable: the journal for good (ValueError: a bad start)
        self._durable = durable
        self._replay = Replay.of(context, self._poller, self.id, prefix, start, config.curve, durable)
        self._consumed = -1  # a durable subscriber: the offset of the next record not handed out yet
        self._journal = ""  # where the queue's journal is read, as the monitor said
        self._deliver = functools.partial(_to_batches, self._batches, self._names, self._latency.batch)
        self._feeds = Feeds(context, self._poller, self.id, prefix, config.rcvhwm, self._order, self._deliver,
                            self._heard, self._who, curve=config.curve, replay=self._replay is not None,
                            on_cut=functools.partial(self._cut, context))
        if self._replay is not None:
            self._feeds.hold_in(self._replay.hold)
        locator = monitor if isinstance(monitor, MonitorLocator) else MonitorLocator(monitor)
        self._monitor = MonitorChannel(context, locator, self._who, config.curve)
        self._poller.register(self._monitor.socket, zmq.POLLIN)
        try:
            self._join(self._monitor.endpoint)
        except BaseException:
            self.close()
            raise

    def _join(self, monitor: str) -> None:
        """Wait for the exchange list and for a beacon from each exchange."""
        deadline = time.monotonic() + self.config.connect_timeout
        while time.monotonic() < deadline:
            self._pump(min(_JOIN_TURN, max(0.0, deadline - time.monotonic())))
            if self._forbidden is not None:
                raise self._forbidden
            if self._replay is not None and self._listed and not self._journal:
                raise BrokerConnectionError(NOT_DURABLE)
            if self._listed and (not self._feeds.deaf() if not self._durable else self._journal):
                return
            refused = self._feeds.refused()
            if refused:
                raise BrokerConnectionError(next(iter(refused.values())))
        if not self._listed:
            raise BrokerConnectionError(f"monitor {monitor} did not answer within {self.config.connect_timeout:.1f}s")
        log.warning("%s: no beacon yet from %s; continuing", self._who, ", ".join(self._feeds.deaf()))

    # ------------------------------------------------------------------ application API

    def recv(self, timeout: float | None = None) -> Message | None:
        """The next record, or None if none arrived within ``timeout`` seconds (None = wait forever).

        Raises:
            ClosedError: the subscriber is closed.
            ForbiddenError: the cluster no longer lets this subscriber's key subscribe (once what arrived before
                is read).
        """
        records = self._records
        if records:
            self._consumed += self._consumed >= 0
            return records.popleft()
        if self._closed:
            raise ClosedError("subscriber is closed")
        if not self._batches and not self._wait(timeout):
            return None
        head = self._batches.popleft()
        self._feeds.progress()
        records.extend(head)
        self._consumed = head.offset + 1 if head.offset >= 0 else -1
        return records.popleft()

    def recv_many(self, max_records: int = MAX_RECORDS, timeout: float | None = None) -> list[Batch]:
        """The records ready now, at most ``max_records``, as batches (each one publisher's records in order);
        if none is ready, the first to arrive within ``timeout`` seconds (None = wait forever); ``[]`` if
        none arrived.

        No object is made per record: each :class:`Batch` holds its payloads in one list. Records come in
        the same order, once each, as from :meth:`recv`, and the two may be mixed.

        Raises:
            ClosedError: the subscriber is closed.
            ForbiddenError: as :meth:`recv`.
            ValueError: ``max_records`` is below 1.
        """
        if max_records < 1:
            raise ValueError(f"max_records must be at least 1, got {max_records}")
        out: list[Batch] = []
        records = self._records
        if records:  # the rest of a batch that recv() began
            first = records[0]
            out.append(Batch(first[0], [m[1] for m in records], first[2], first[3], first[4], self._consumed))
            records.clear()
            if len(out[0]) > max_records:
                out[0], rest = out[0].split(max_records)
                self._batches.appendleft(rest)
            return self._handed(out)
        if self._closed:
            raise ClosedError("subscriber is closed")
        batches = self._batches
        if not batches and not self._wait(timeout):
            return out
        left = max_records
        while batches and left:
            head = batches.popleft()
            if len(head) > left:
                head, rest = head.split(left)
                batches.appendleft(rest)
            out.append(head)
            left -= len(head)
        return self._handed(out)

    def _handed(self, out: list[Batch]) -> list[Batch]:
        """``out`` goes to the application: a durable subscriber's position is after it."""
        if out:
            self._feeds.progress()  # the exchanges learn that we read
            if out[-1].offset >= 0:
                self._consumed = out[-1].offset + len(out[-1])
        return out

    def commit(self, timeout: float = 10.0) -> int:
        """A durable subscriber: keep, on the journal's disk, its position after every record handed out so far;
        started again with the same ``durable`` name it goes on from there (at least once). The position.

        Raises: ValueError: not a durable subscriber. BrokerTimeoutError, BrokerConnectionError: not confirmed.
        """
        if not self._durable or self._replay is None:
            raise ValueError("commit() is for durable subscribers (subscriber(..., durable=NAME))")
        return self._replay.commit(self._consumed, timeout, self._pump)

    def __iter__(self) -> Iterator[Message]:
        """Yield records as they arrive, forever (until ``close()`` or ``break``): :meth:`recv` in a loop."""
        while not self._closed:
            msg = self.recv(1.0)
            if msg is not None:
                yield msg

    def stats(self) -> SubscriberStats:
        """Counters and a latency summary (see :class:`SubscriberStats`)."""
        o = self._order
        return SubscriberStats(received=self._latency.received, duplicates=o.duplicates, gaps=o.gaps, lost=o.lost,
                               hold_timeouts=o.hold_timeouts, held=o.held, dropped=self._feeds.dropped,
                               exchanges=len(self._feeds.heard()), cut_off=self._feeds.cuts,
                               replaying=self._replay is not None, latency=self._latency.summary())

    def close(self) -> None:
        """Leave the queue and close the sockets. Records not yet read are discarded."""
        if self._closed:
            return
        self._closed = True
        self._monitor.send(control.SubscriberBye(subscriber=self.name))
        if self._replay is not None:
            self._replay.close_socket()
        self._feeds.close()
        self._monitor.close()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the loop, run from recv

    def _wait(self, timeout: float | None) -> bool:
        """Run the loop until a batch is ready (True) or ``timeout`` seconds passed (False; None = forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            self._feeds.progress()
            self._pump(_WAIT_TURN if left is None else max(0.0, min(left, _WAIT_TURN)))
            if self._batches:
                return True
            if self._forbidden is not None:  # what arrived before is read first
                raise self._forbidden
            if left is not None and left <= 0:
                return False

    def _pump(self, timeout: float) -> None:
        now = time.monotonic()
        if self._monitor.follow():  # the monitor moved to another host
            self._next_hello = now
        if now >= self._next_hello:
            self._hello(now)
        limit = min(now + timeout, self._next_hello)
        held_until = self._order.next_deadline()
        if held_until is not None:
            limit = min(limit, held_until)
        if self._suspect:
            limit = min(limit, now + SUSPECT_S / 4)
        monitor = self._monitor.socket
        replay = self._replay
        for sock, _ in self._poller.poll(poll_ms(limit - now)):
            if sock is monitor:
                self._on_monitor()
            elif replay is not None and sock is replay.socket:
                self._replayed(replay)
            else:
                self._feeds.readable(sock)
        if self._suspect:
            self._judge_suspects(time.monotonic())
        if held_until is not None and time.monotonic() >= held_until:
            self._deliver(self._order.expire(time.monotonic()))

    def _replayed(self, replay: Replay) -> None:
        """Deliver what the journal gave; hand over to the live stream once past the seams; come back to the
        exchanges that cut us off once at the journal's end."""
        if replay.take(self._order, self._deliver, self._feeds.listed()):
            self._feeds.hold_in(None)
            self._replay = None
            self._feeds.release(replay.finish(self._who))
        elif replay.at_end:
            self._feeds.come_back()

    def _cut(self, context: zmq.Context, feed: Feed, offset: int, tag: int) -> None:
        """``feed``'s exchange cut us off (we did not keep up): read the journal from ``offset`` (or before, for
        the other exchanges), holding the live stream, and come back to it once caught up."""
        feed.rejoin, feed.away = tag, True
        start = self._feeds.floor(offset)
        replay = self._replay
        if replay is None:
            replay = self._replay = Replay.catching_up(context, self._poller, self.id, self.prefix, start,
                                                       self.config.curve)
            self._feeds.hold_in(replay.hold)
            replay.connect(self._journal)
        log.warning("%s: %s cut us off (we did not keep up): reading the journal from offset %d", self._who,
                    feed.exchange, start)
        replay.cut(feed.exchange, tag, start)

    # ------------------------------------------------------------------ the monitor

    def _on_monitor(self) -> None:
        for msg in self._monitor.receive():
            if isinstance(msg, control.Exchanges):
                self._on_exchanges(msg)
            elif isinstance(msg, control.Prepare):
                self._on_prepare(msg)
            elif isinstance(msg, control.Reply) and msg.result == Result.FORBIDDEN:
                self._forbidden = ForbiddenError(f"monitor refused this subscriber: {msg.comment}")

    def _on_exchanges(self, msg: control.Exchanges) -> None:
        self._listed = True
        if self._durable:  # the journal alone
            self._journal = self._replay.connect(msg.journal) if self._replay is not None else msg.journal
            return
        listed = {x.exchange: x.backend for x in msg.exchanges}
        dead = set(msg.lost)
        feeds = self._feeds
        suspect = self._suspect
        now = time.monotonic()
        for feed in feeds.feeds():
            exchange = feed.exchange
            if listed.get(exchange) == feed.backend:
                suspect.pop(exchange, None)  # listed again: it was starved, not dead, and is as it was
            elif exchange not in listed and (exchange in dead or exchange in suspect) and not feeds.down(feed):
                # declared dead, and our connection to it is still up: the monitor may have taken a starved
                # exchange for a dead one. Its connection stays and its epochs go on until it is listed again or
                # we take it for dead ourselves (_judge_suspects): what it has on the way still arrives, in order
                # before what its publishers resent elsewhere from what it had said was delivered (a subscriber
                # behind is not waited for: ended at once, the resent records came first and what was on the way
                # then passed for copies, lost). Only the list sent at the death names it lost: the next ones,
                # answering our hellos, name it neither
                suspect.setdefault(exchange, now)
            else:
                suspect.pop(exchange, None)
                feeds.remove(feed)  # (its epochs end: none of them will send a marker)
        for gone in dead - suspect.keys():
            feeds.lost(gone)
        self._journal = self._replay.connect(msg.journal) if self._replay is not None else msg.journal
        for exchange, backend in listed.items():
            if feeds.get(exchange) is None:
                feeds.add(exchange, backend)

    def _judge_suspects(self, now: float) -> None:
        """Take for dead each exchange declared dead whose connection dropped, or that was not listed again in
        time (:data:`SUSPECT_S`, :data:`SUSPECT_MAX_S`): what it sent is read, and its epochs end."""
        feeds = self._feeds
        for exchange, declared in list(self._suspect.items()):
            feed = feeds.get(exchange)
            if feed is None:
                del self._suspect[exchange]
                continue
            down = feeds.down(feed)
            if down or now >= min(max(declared, feed.last_read) + SUSPECT_S, declared + SUSPECT_MAX_S):
                del self._suspect[exchange]
                log.info("%s: exchange %s declared dead %s: taken for dead", self._who, exchange,
                         "and its connection dropped" if down else f"and not listed again in {now - declared:.1f}s")
                feeds.remove(feed)

    def _on_prepare(self, msg: control.Prepare) -> None:
        if msg.source:
            self._order.note(bytes.fromhex(msg.publisher), msg.source, time.monotonic())
        feed = self._feeds.get(msg.target)
        if feed is None:
            feed = self._feeds.add(msg.target, msg.target_backend)
        if feed.heard:
            self._monitor.send(control.Ready(subscriber=self.name, relocation=msg.relocation))
        else:
            if len(self._prepares) >= MAX_PREPARES:
                del self._prepares[next(iter(self._prepares))]
            self._prepares[msg.relocation] = msg.target

    def _heard(self, exchange: str) -> None:
        for relocation, target in list(self._prepares.items()):
            if target == exchange:
                del self._prepares[relocation]
                self._monitor.send(control.Ready(subscriber=self.name, relocation=relocation))
        self._hello(time.monotonic())  # the monitor places publishers only where every subscriber listens

    def _hello(self, now: float) -> None:
        self._next_hello = now + self.config.heartbeat_interval
        self._feeds.refresh()
        o = self._order
        self._monitor.send(control.SubscriberHello(
            subscriber=self.name, prefix=self.prefix, confirmed=self._feeds.heard(), gaps=o.gaps, lost=o.lost,
            duplicates=o.duplicates, journal=self._journal, **self._latency.period(now)))


def _to_batches(ready: collections.deque[Batch], names: dict[bytes, str], measure: Callable[[float, int], None],
                out: list) -> None:
    """What the reassembler released (``(item, skip)``), as batches ready for the application."""
    now = time.time()
    for item, skip in out:
        key, payloads, pub, first, ts = item[:5]
        offset = item[5] if len(item) > 5 else -1  # read from the journal
        name = names.get(pub)
        if name is None:
            name = names[pub] = pub.hex()
        if skip:
            payloads = payloads[skip:]
            first += skip
            offset += skip if offset >= 0 else 0
        stamp = ts / 1e9
        ready.append(Batch(key, payloads, name, first, stamp, offset))
        measure(now - stamp, len(payloads))
