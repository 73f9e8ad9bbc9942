"""The link's journal source: from the position kept, a malformed answer refused and asked again (a ROUTER on
loopback plays the journal)."""

from __future__ import annotations

import time

import zmq

from client.link._source import END, JournalSource
from roq.errors import Result
from roq.loop import Loop
from roq.runtime import DropCounter
from roq.wire import batch, control


def test_a_malformed_answer_is_refused_and_the_fetch_asked_again():
    ctx = zmq.Context()
    journal = ctx.socket(zmq.ROUTER)
    port = journal.bind_to_random_port("tcp://127.0.0.1")
    got: list[tuple[list, int, int]] = []
    source = JournalSource(ctx, f"tcp://127.0.0.1:{port}", "link.x", lambda e, n, s: got.append((e, n, s)))
    loop = Loop("test", DropCounter(None, "test"))
    try:
        source.attach(loop)

        def asked() -> tuple[bytes, control.Message]:
            deadline = time.monotonic() + 5
            while not journal.poll(10):
                assert time.monotonic() < deadline, "the source asked nothing"
                loop.turn()
            ident, body = journal.recv_multipart()
            return ident, control.decode(body)

        ident, msg = asked()
        assert isinstance(msg, control.Position) and msg.name == "link.x"
        journal.send_multipart([ident, control.encode(control.Reply(request=control.Position.CMD, result=Result.OK,
                                                                    comment="", data={"offset": -1}))])
        ident, msg = asked()
        assert isinstance(msg, control.Fetch) and msg.offset == END  # no position kept: from the journal's end
        entry = [b"k", batch.pack_header(batch.DATA, b"p" * 16, 1, 1), batch.encode_body([b"x"])]
        bad = control.Fetched(next_offset=8, end_offset=8, first_offset=0, count=1, start_offset=7, offsets=[])
        journal.send_multipart([ident, control.encode(bad), *entry])
        ident, msg = asked()  # refused, and asked again from where it was
        assert isinstance(msg, control.Fetch) and msg.offset == END and got == []
        good = control.Fetched(next_offset=8, end_offset=8, first_offset=0, count=1, start_offset=7, offsets=[7])
        journal.send_multipart([ident, control.encode(good), *entry])
        ident, msg = asked()
        assert isinstance(msg, control.Fetch) and msg.offset == 8
        assert len(got) == 1 and got[0][1:] == (8, 7) and got[0][0][0].offset == 7
    finally:
        source.close()
        journal.close(0)
        ctx.term()


class _Reader:
    """A link's source against a ROUTER that plays its journal: what the source asks, the keys it wants now, and
    its kept position already answered (``position``)."""

    def __init__(self, wanted: list[bytes] | None, position: int) -> None:
        self.wanted = wanted
        self.ctx = zmq.Context()
        self.journal = self.ctx.socket(zmq.ROUTER)
        port = self.journal.bind_to_random_port("tcp://127.0.0.1")
        self.source = JournalSource(self.ctx, f"tcp://127.0.0.1:{port}", "link.x", lambda e, n, s: None,
                                    keys=lambda: self.wanted)
        self.loop = Loop("test", DropCounter(None, "test"), idle=0.01)
        self.source.attach(self.loop)
        ident, _ = self.asked()
        self.answer(ident, control.Reply(request=control.Position.CMD, result=Result.OK, comment="",
                                         data={"offset": position}))

    def asked(self, within: float = 5.0) -> tuple[bytes, control.Message] | None:
        """The next request the source sends (its loop turned meanwhile), or None within ``within``."""
        deadline = time.monotonic() + within
        while not self.journal.poll(10):
            if time.monotonic() >= deadline:
                return None
            self.loop.turn()
            self.source.poke(time.monotonic())
        ident, body = self.journal.recv_multipart()
        return ident, control.decode(body)

    def answer(self, ident: bytes, msg: control.Message) -> None:
        self.journal.send_multipart([ident, control.encode(msg)])

    def fetched(self, ident: bytes, start: int, end: int) -> None:
        """An answer with nothing read from ``start``, the journal's end at ``end``."""
        self.answer(ident, control.Fetched(next_offset=end, end_offset=end, first_offset=0, count=0,
                                           start_offset=start, offsets=[]))

    def close(self) -> None:
        self.source.close()
        self.journal.close(0)
        self.ctx.term()


def test_a_reader_that_wants_no_key_asks_for_none_one_fetch_at_a_time_and_only_now_and_then():
    from client.link._source import IDLE_FETCH_S

    r = _Reader([], position=5)
    try:
        ident, msg = r.asked()
        first = time.monotonic()
        assert isinstance(msg, control.Fetch) and (msg.offset, msg.filtered, msg.prefixes) == (5, True, [])
        assert r.asked(0.05) is None  # one at a time: none more before the answer
        r.fetched(ident, 5, 90)
        ident, msg = r.asked()
        assert time.monotonic() - first >= IDLE_FETCH_S * 0.9  # and only every IDLE_FETCH_S
        assert isinstance(msg, control.Fetch) and msg.offset == 90 and msg.filtered
        r.wanted = [b"eu."]  # it wants keys now: they are asked for, from the journal's end (what came meanwhile
        r.fetched(ident, 90, 95)  # passed while nobody wanted it)
        ident, msg = r.asked()
        assert isinstance(msg, control.Fetch) and (msg.offset, msg.prefixes) == (END, [b"eu."])
        r.wanted = None
        r.fetched(ident, 97, 99)
        ident, msg = r.asked()
        assert isinstance(msg, control.Fetch) and not msg.filtered and msg.offset == 99  # every key, on from there
    finally:
        r.close()


def test_a_reader_waiting_at_the_end_that_comes_to_want_other_keys_asks_for_them_at_once_releasing_the_wait():
    r = _Reader([b"\x00@l1/"], position=5)
    try:
        ident, msg = r.asked()
        assert isinstance(msg, control.Fetch) and msg.offset == 5 and not msg.release
        r.fetched(ident, 5, 9)
        ident, msg = r.asked()
        assert isinstance(msg, control.Fetch) and msg.offset == 9  # at the end: it waits there, one alone
        assert r.asked(0.1) is None
        r.wanted = [b"\x00@l1/", b""]  # the far side wants every key now
        r.source.pause(False)  # (what the crossing does when told)
        ident, msg = r.asked()
        assert isinstance(msg, control.Fetch) and msg.release and msg.prefixes == r.wanted and msg.offset == -3
        assert r.asked(0.1) is None  # two asked for: no more
    finally:
        r.close()
