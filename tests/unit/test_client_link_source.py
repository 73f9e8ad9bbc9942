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
