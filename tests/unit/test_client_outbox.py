"""The outbox between a publisher's application thread and its sender thread, driven from both sides by hand."""

from __future__ import annotations

import select
import threading
import time

import pytest

from client._outbox import MAX_RECORD_BYTES, Outbox
from roq.wire import batch
from roq.config import PublisherConfig
from roq.errors import BrokerConnectionError, BrokerTimeoutError, BufferFullError, ClosedError, ProtocolError


@pytest.fixture
def make():
    made = []

    def make(**options):
        outbox = Outbox(PublisherConfig(**{"linger": 10.0, **options}))
        made.append(outbox)
        return outbox

    yield make
    for outbox in made:
        outbox.close()
        outbox.wakeup.close()


def put(outbox, key, payload):
    outbox.put(key, payload)


def summary(sealed):
    return [(s.key, s.payloads, s.first, s.key_prev, s.size, s.flags) for s in sealed]


def later():
    """A time after any linger of these tests."""
    return time.monotonic() + 60.0


def in_thread(target):
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_new_key_seals_the_open_batch_with_its_seqs_and_each_key_its_previous_seq(make):
    o = make()
    put(o, b"a", b"1")
    put(o, b"a", b"22")
    put(o, b"b", b"3")
    assert summary(o.take(time.monotonic())) == [(b"a", [b"1", b"22"], 1, 0, 3, 0)]  # b still lingers
    put(o, b"a", b"4")
    assert summary(o.take(later())) == [(b"b", [b"3"], 3, 0, 1, 0), (b"a", [b"4"], 4, 2, 1, 0)]
    assert o.counts() == (4, 0, 5)


def test_a_full_batch_is_sealed_by_records_or_by_bytes(make):
    o = make(batch_records=3, batch_bytes=8, buffer_bytes=100)
    for payload in (b"1", b"2", b"3", b"45678"):  # the fourth record finds the batch full
        put(o, b"k", payload)
    put(o, b"k", b"9")
    put(o, b"k", b"abc")  # 5 + 1 bytes fit, 5 + 1 + 3 would not
    assert [(s.first, s.payloads) for s in o.take(later())] == [
        (1, [b"1", b"2", b"3"]), (4, [b"45678", b"9"]), (6, [b"abc"])]


def test_a_record_beyond_the_protocol_limit_is_refused_whatever_the_batch_bound(make):
    o = make(batch_bytes=16 << 20, buffer_bytes=64 << 20)
    put(o, b"k", b"x")
    with pytest.raises(ProtocolError, match=f"limit of {MAX_RECORD_BYTES} bytes"):
        put(o, b"k", b"y" * (MAX_RECORD_BYTES + 1))
    put(o, b"k", b"z" * MAX_RECORD_BYTES)  # the largest record fits (in the open batch, under batch_bytes)
    assert [len(s.payloads) for s in o.take(later())] == [2]
    assert o.counts() == (2, 0, 1 + MAX_RECORD_BYTES)


def test_the_sender_seals_a_batch_once_it_lingered(make):
    o = make(linger=0.5)
    put(o, b"k", b"x")
    opened = time.monotonic()
    assert o.take(opened) == []
    deadline, lingering = o.idle_until(opened, opened + 5.0)
    assert lingering and opened < deadline <= opened + 0.5
    assert summary(o.take(opened + 0.5)) == [(b"k", [b"x"], 1, 0, 1, 0)]


def test_an_idle_sender_seals_the_open_batch_without_waiting_for_its_linger(make):
    o = make(linger=0.5)
    put(o, b"k", b"x")
    opened = time.monotonic()
    assert o.take(opened) == []  # an earlier batch is on its way: the record waits for company
    assert o.idle_until(opened, opened + 5.0, idle=True) == (opened, False)  # nothing is: no sleep
    assert summary(o.take(opened, idle=True)) == [(b"k", [b"x"], 1, 0, 1, 0)]
    assert o.idle_until(opened, opened + 5.0, idle=True) == (opened + 5.0, False)  # nothing open: sleep


def test_a_sleeping_sender_is_woken_through_the_pipe_and_only_then(make):
    o = make()
    now = time.monotonic()
    assert o.idle_until(now, now + 5.0) == (now + 5.0, False)
    put(o, b"k", b"x")  # opens a batch: the sender must learn its linger
    assert select.select([o.wakeup.fd], [], [], 5.0)[0]
    o.wakeup.drain()
    o.awake()
    put(o, b"j", b"y")  # seals the first batch, opens another: the sender is awake, no wake-up
    assert not select.select([o.wakeup.fd], [], [], 0.05)[0]
    assert o.idle_until(now, now + 5.0) == (now, False)  # a sealed batch waits: no sleep at all


def test_buffered_bytes_are_bounded_and_freed_by_the_sender(make):
    o = make(batch_bytes=10, buffer_bytes=10, full_policy="raise")
    put(o, b"k", b"0123456789")
    with pytest.raises(BufferFullError, match="10 of 10 bytes"):
        put(o, b"k", b"x")
    with pytest.raises(BufferFullError, match="can never fit"):
        put(o, b"k", b"x" * 11)
    o.forget(10)
    put(o, b"k", b"x")  # seals the full batch first
    assert o.counts() == (1, 0, 1)


def test_a_blocked_send_waits_for_room_and_gives_up_after_its_timeout(make):
    o = make(batch_bytes=10, buffer_bytes=10, send_timeout=0.2)
    put(o, b"k", b"0123456789")
    started = time.monotonic()
    with pytest.raises(BufferFullError, match="still full after 0.2s"):
        put(o, b"k", b"x")
    assert time.monotonic() - started >= 0.2
    freeing = in_thread(lambda: (time.sleep(0.05), o.take(later()), o.forget(10)))
    put(o, b"k", b"x")  # returns once the sender freed the room
    freeing.join(5)
    assert o.counts()[2] == 1


def test_send_waits_for_a_free_slot_among_the_sealed_batches(make):
    o = make(max_pending_batches=1)
    put(o, b"a", b"1")
    put(o, b"b", b"2")  # seals a: the one slot is taken
    taken = []
    taking = in_thread(lambda: (time.sleep(0.1), taken.extend(o.take(time.monotonic()))))
    started = time.monotonic()
    put(o, b"c", b"3")  # sealing b must wait for the sender
    assert time.monotonic() - started >= 0.05
    taking.join(5)
    assert [s.key for s in taken] == [b"a"]
    assert [s.key for s in o.take(later())] == [b"b", b"c"]


def test_flush_seals_with_ack_now_and_waits_for_the_acknowledgement(make):
    o = make()
    put(o, b"k", b"x")
    put(o, b"k", b"y")

    def sender():
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            sealed = o.take(time.monotonic())
            if sealed:
                assert summary(sealed) == [(b"k", [b"x", b"y"], 1, 0, 2, batch.FLAG_ACK_NOW)]
                o.acknowledged(2)
                return
            time.sleep(0.01)

    acking = in_thread(sender)
    o.flush(5.0)
    acking.join(5)
    assert o.counts() == (2, 2, 2)  # acknowledged, still in its grace: not forgotten yet
    put(o, b"k", b"z")
    with pytest.raises(BrokerTimeoutError, match="1 records not acknowledged"):
        o.flush(0.05)


def test_a_failed_sender_fails_every_call_of_the_application(make):
    o = make()
    put(o, b"k", b"x")
    boom = RuntimeError("socket gone")
    o.fail(boom)
    assert o.assignment.wait(0) and o.error is boom
    with pytest.raises(BrokerConnectionError, match="socket gone") as raised:
        put(o, b"k", b"y")
    assert raised.value.__cause__ is boom
    with pytest.raises(BrokerConnectionError, match="socket gone"):
        o.flush(1.0)  # x can never be acknowledged now


def test_closing_refuses_records_and_stops_the_sender(make):
    o = make()
    assert o.begin_close() and not o.begin_close()
    with pytest.raises(ClosedError):
        put(o, b"k", b"x")
    o.flush(0.1)  # nothing to wait for: closing still flushes
    o.close()
    assert o.take(time.monotonic()) is None
    with pytest.raises(ClosedError):
        o.flush(0.1)


def test_assignment_and_the_monitors_refusal(make):
    o = make()
    assert not o.assignment.wait(0.01)
    assert o.assignment.refused("no live exchange") and not o.assignment.refused("still none")
    assert o.assignment.no_exchange == "still none"
    o.assignment.assigned()
    assert o.assignment.wait(0) and o.assignment.no_exchange == ""


@pytest.mark.parametrize("seed", range(20))
def test_put_many_seals_the_same_batches_as_put_one_by_one(make, seed):
    import random

    rng = random.Random(seed)
    bounds = {"batch_records": rng.randint(1, 20), "batch_bytes": rng.randint(1, 60), "buffer_bytes": 10_000,
              "max_pending_batches": 10_000}  # nobody takes the sealed batches until the end
    one, many = make(**bounds), make(**bounds)
    for _ in range(rng.randint(1, 12)):
        key = rng.choice([b"a", b"b"])
        payloads = [bytes(rng.randint(0, 9)) for _ in range(rng.randint(0, 40))]
        for p in payloads:
            one.put(key, p)
        many.put_many(key, iter(payloads) if rng.random() < 0.3 else payloads)
    assert summary(many.take(later())) == summary(one.take(later()))
    assert many.counts() == one.counts()


def test_put_many_checks_every_record_before_it_takes_any(make):
    o = make()
    with pytest.raises(TypeError, match="payload must be bytes"):
        o.put_many(b"k", [b"a", "b"])
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        o.put_many(b"k", [b"a", bytes(MAX_RECORD_BYTES + 1)])
    assert o.counts() == (0, 0, 0)
    o.put_many(b"k", [b"a", bytearray(b"b"), memoryview(b"c")])  # bytes-like records are copied, as by put
    assert summary(o.take(later())) == [(b"k", [b"a", b"b", b"c"], 1, 0, 3, 0)]


def test_put_many_stops_where_the_buffer_is_full(make):
    o = make(batch_bytes=4, buffer_bytes=10, full_policy="raise")
    with pytest.raises(BufferFullError, match="10 of 10 bytes"):
        o.put_many(b"k", [b"12", b"34", b"56", b"78", b"90", b"x"])
    assert o.counts()[2] == 10  # the five records before the full buffer were taken
    assert [s.payloads for s in o.take(later())] == [[b"12", b"34"], [b"56", b"78"], [b"90"]]
