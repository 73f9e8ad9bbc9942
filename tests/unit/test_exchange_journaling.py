"""An exchange's feed of its journal (real sockets on loopback): what the journal has not acknowledged is sent
again, also after the exchange was told of another journal."""

from __future__ import annotations

import zmq

from exchange._journaling import RESEND_S, JournalFeed
from roq.wire import batch

PUB = b"P" * 16


def _intake(ctx: zmq.Context) -> tuple[zmq.Socket, str]:
    """A journal's intake that never answers: the batches that reach it, read by the test."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    return sock, f"tcp://127.0.0.1:{port}"


def _seqs(sock: zmq.Socket) -> list[int]:
    """The first seq of each batch that reached ``sock`` within 0.5 s of the last."""
    out = []
    while sock.poll(500):
        out.append(batch.parse_header(sock.recv_multipart()[2]).first_seq)
    return out


def test_what_a_journal_taken_over_did_not_acknowledge_is_sent_again_after_the_resend_time_too():
    ctx = zmq.Context()
    old_intake, old_endpoint = _intake(ctx)
    new_intake, new_endpoint = _intake(ctx)
    old = JournalFeed(ctx, old_endpoint, "always")
    new = JournalFeed(ctx, new_endpoint, "always")
    try:
        for first in (1, 3):
            header = batch.pack_header(batch.DATA, PUB, first, 2)
            assert old.send([b"k", header, batch.encode_body([b"a", b"b"])], batch.parse_header(header))
        assert _seqs(old_intake) == [1, 3]
        new.take_over(old)  # the monitor names another journal: it gets what the last one did not acknowledge
        assert _seqs(new_intake) == [1, 3]
        new.tick(new.progress_at + RESEND_S / 2)
        assert _seqs(new_intake) == []  # not yet
        new.tick(new.progress_at + RESEND_S + 0.1)  # no acknowledgement since: that one may have died too
        assert _seqs(new_intake) == [1, 3]
    finally:
        for sock in (old.socket, new.socket, old_intake, new_intake):
            sock.close()
        ctx.term()
