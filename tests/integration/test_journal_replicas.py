"""A journal with two follower replicas (three real journal processes on loopback): a round is acknowledged once a
majority holds it, the followers hold the leader's entries at its offsets byte for byte, readers are served only
what is committed, and a follower killed with ``kill -9`` catches up when it comes back."""

from __future__ import annotations

import random
import time

import psutil
import pytest
import zmq

from exchange.journal import Store
from roq.process import Child, spawn
from roq.errors import Result
from roq.wire import batch, control
from roq.wire.ready import JournalReady
from tests.integration.test_journal_crash import QUEUE, SEGMENT_BYTES, Driver, _check
from tests.integration.zkhelp import wait_until


@pytest.fixture
def rig():
    """A ZeroMQ context and the journal processes a test starts (each killed at the end)."""
    ctx = zmq.Context()
    children: list[Child] = []
    yield ctx, children
    for child in children:
        child.kill()
    ctx.destroy(0)


def _journal(directory: str, *args: str) -> tuple[Child, JournalReady]:
    child = spawn("journal", "exchange.journal", [
        "--queue", QUEUE, "--directory", directory, "--address", "127.0.0.1", "--durability", "always",
        "--segment-bytes", str(SEGMENT_BYTES), "--log-level", "INFO", *args])
    ready = child.wait_ready(30)
    assert isinstance(ready, JournalReady), ready
    return child, ready


def _entries(directory: str) -> list[tuple[int, int, bytes, bytes, bytes]]:
    store, _ = Store.open(directory, QUEUE, segment_bytes=SEGMENT_BYTES)
    try:
        assert list(store.verify()) == []
        out, offset = [], 0
        while entries := store.read(offset, 1 << 20):
            for e in entries:
                out.append((e.offset, e.time_ns, e.key, e.header, e.body))
                offset = e.offset + e.count
        return out
    finally:
        store.close()


def _ask(ctx: zmq.Context, reads: str, msg: control.Message) -> control.Message:
    """``msg`` to a journal's reads port, and the first frame of its answer."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(reads)
    try:
        sock.send(control.encode(msg))
        assert sock.poll(5000), f"the journal did not answer {type(msg).__name__}"
        return control.decode(sock.recv_multipart()[0])
    finally:
        sock.close()


def _reader_end(ctx: zmq.Context, reads: str) -> int:
    """What a reader (not a replica) is told the journal's end is."""
    answer = _ask(ctx, reads, control.Fetch(offset=-2))
    assert isinstance(answer, control.Fetched)
    return answer.end_offset


def _three(tmp_path, children: list) -> tuple[dict, JournalReady, dict]:
    """A leader and followers f1 and f2 (each started is added to ``children``): their directories, the leader's
    ready line, each follower's (child, ready line)."""
    dirs = {name: str(tmp_path / name) for name in ("lead", "f1", "f2")}
    leader, info = _journal(dirs["lead"], "--id", "lead", "--followers", "f1", "--followers", "f2")
    children.append(leader)
    followers = {}
    for name in ("f1", "f2"):
        followers[name] = _journal(dirs[name], "--id", name, "--follow", info.reads)
        children.append(followers[name][0])
    return dirs, info, followers


def test_a_round_is_acknowledged_once_on_a_majority_and_a_killed_follower_catches_up(tmp_path, rig):
    ctx, children = rig
    dirs, info, started = _three(tmp_path, children)
    leader = children[0]
    followers = {name: child for name, (child, _) in started.items()}
    driver = Driver(ctx, info.intake, random.Random(33))
    driver.run(1.5)
    driver.settle()

    followers["f1"].kill()  # one of three down: the leader and f2 are a majority
    before = dict(driver.acked)
    driver.run(1.0)
    driver.settle()
    assert all(driver.acked[p] > before[p] for p in driver.publishers), "nothing acknowledged with f1 down"

    followers["f2"].kill()  # two of three down: nothing more may be acknowledged, nor read
    driver.drain()
    stuck = dict(driver.acked)
    end_then = _reader_end(ctx, info.reads)
    for _ in range(20):
        driver._step()  # batches go in; the leader writes them, and acknowledges none
    driver._read_acks(1500)
    assert driver.acked == stuck, "acknowledged with one replica of three"
    assert _reader_end(ctx, info.reads) == end_then, "a reader was served what only the leader holds"

    followers["f2"] = _journal(dirs["f2"], "--id", "f2", "--follow", info.reads)[0]  # back: it catches up
    children.append(followers["f2"])
    driver.settle(30)
    driver.run(1.0)
    driver.settle()
    assert _reader_end(ctx, info.reads) > end_then

    followers["f2"].stop()
    leader.stop()
    lead = _entries(dirs["lead"])
    assert lead and _entries(dirs["f2"]) == lead  # f2 holds every entry at the leader's offset, byte for byte
    f1 = _entries(dirs["f1"])
    assert f1 and f1 == lead[:len(f1)]  # f1, killed early, holds a prefix of it


def test_replicas_with_nothing_to_do_sleep(tmp_path, rig):
    """A replica with nothing to take waits in its poll: over a second of quiet, its CPU is a small fraction of
    that (until 2026-11-28 each follower's loop woke at once on every turn, for the end of an intake pause long
    past: a quarter to a third of a core each, with nothing to do; a busy machine gives a spinning process less,
    never an idle one more)."""
    ctx, children = rig
    _, info, _ = _three(tmp_path, children)
    driver = Driver(ctx, info.intake, random.Random(5))
    driver.run(0.3)
    driver.settle()  # on a majority: the followers took it, and wait for more
    procs = {child.pid: psutil.Process(child.pid) for child in children}

    def cpu() -> dict[int, float]:
        return {pid: sum(p.cpu_times()[:2]) for pid, p in procs.items()}

    before, started = cpu(), time.monotonic()
    while time.monotonic() - started < 1.0:  # (the window measured)
        time.sleep(0.1)
    spent = {pid: used - before[pid] for pid, used in cpu().items()}
    window = time.monotonic() - started
    assert all(used < 0.1 * window for used in spent.values()), (spent, window)


def test_a_batch_sent_again_after_it_was_acknowledged_is_acknowledged_again_at_once(tmp_path, rig):
    """A round of batches the log holds already adds nothing, and ends where the commit end is: its
    acknowledgements are due then, not at the next move of the commit end (an exchange resending after a failover
    to a quiet queue waited for one that never came; until 2026-11-29)."""
    ctx, children = rig
    _, info, _ = _three(tmp_path, children)
    driver = Driver(ctx, info.intake, random.Random(37))
    driver.run(0.5)
    driver.settle()
    for publisher in driver.publishers:
        driver.acked[publisher] = 0  # forget: it is acknowledged again, up to its last
    driver.resend()
    driver.settle(10)


def test_a_follower_that_starts_empty_takes_the_leaders_journal_from_its_first_offset(tmp_path, rig):
    ctx, children = rig
    leader, info = _journal(str(tmp_path / "lead"), "--id", "lead", "--followers", "f1")
    children.append(leader)
    driver = Driver(ctx, info.intake, random.Random(34))
    follower = _journal(str(tmp_path / "f1"), "--id", "f1", "--follow", info.reads)[0]
    children.append(follower)
    driver.run(1.0)
    driver.settle()
    wait_until(lambda: _reader_end(ctx, info.reads) > 0, 10, "a committed end")
    follower.stop()
    leader.stop()
    assert _entries(str(tmp_path / "f1")) == _entries(str(tmp_path / "lead"))


def _promise(ctx: zmq.Context, reads: str, epoch: int, candidate: str = "candidate") -> control.Reply:
    reply = _ask(ctx, reads, control.Promise(epoch=epoch, candidate=candidate))
    assert isinstance(reply, control.Reply)
    return reply


def test_followers_that_promised_a_newer_epoch_fence_the_old_leader_for_good(tmp_path, rig):
    ctx, children = rig
    dirs, info, followers = _three(tmp_path, children)
    driver = Driver(ctx, info.intake, random.Random(35))
    driver.run(1.0)
    driver.settle()
    for name in ("f1", "f2"):  # a candidate for epoch 2 asks both followers
        reply = _promise(ctx, followers[name][1].reads, 2)
        assert reply.result == Result.OK and reply.data["epoch"] == 2 and reply.data["last_epoch"] == 1
        assert reply.data["end"] > 0
    assert _promise(ctx, followers["f1"][1].reads, 2, "another").result == Result.CONFLICT  # once per epoch
    assert _promise(ctx, followers["f1"][1].reads, 1).result == Result.CONFLICT
    # the leader promises too, naming where its log ends (its own entries of the epoch count: a candidate that took
    # the epoch's start for its end could take a shorter log for the most advanced)
    own = _promise(ctx, info.reads, 3)
    assert own.result == Result.OK and own.data["end"] == _ask(ctx, info.reads, control.Fetch(offset=-2,
                                                                                              replica="x")).end_offset

    driver.drain()
    stuck, end_then = dict(driver.acked), _reader_end(ctx, info.reads)
    for _ in range(20):
        driver._step()  # the old leader writes these, and may acknowledge none
    driver._read_acks(1500)
    assert driver.acked == stuck, "a fenced leader got a round acknowledged"
    assert _reader_end(ctx, info.reads) == end_then

    followers["f1"][0].kill()  # the promise is on the follower's disk: started again, it still refuses epoch 1
    followers["f1"] = _journal(dirs["f1"], "--id", "f1", "--follow", info.reads)
    children.append(followers["f1"][0])
    assert _promise(ctx, followers["f1"][1].reads, 2, "another").result == Result.CONFLICT
    driver._read_acks(1500)
    assert driver.acked == stuck, "a fenced leader got a round acknowledged after a follower restarted"


def test_a_follower_elected_after_the_leader_is_killed_holds_every_acknowledged_record(tmp_path, rig):
    ctx, children = rig
    dirs, info, followers = _three(tmp_path, children)
    driver = Driver(ctx, info.intake, random.Random(36))
    driver.run(1.5)  # no settling: batches are on their way when the leader goes
    children[0].kill()
    driver.drain()
    acked = dict(driver.acked)
    assert all(acked.values())
    followers["f1"][0].stop()  # f1 stands for epoch 2 in its own directory; the dead leader does not answer
    candidate, elected = _journal(dirs["f1"], "--id", "f1", "--epoch", "2", "--followers", "lead", "--followers",
                                  "f2", "--peer", f"lead={info.reads}", "--peer", f"f2={followers['f2'][1].reads}")
    children.append(candidate)
    assert elected.next_offset >= int(time.time() - 60) << 21  # its epoch begins past a jump: the clock's
    followers["f2"][0].stop()  # f2 promised epoch 2: it follows the new leader (the monitor will say where)
    f2, _ = _journal(dirs["f2"], "--id", "f2", "--follow", elected.reads)
    children.append(f2)
    probe = ctx.socket(zmq.DEALER)  # a batch the log has already: acknowledged once the epoch's first entry,
    probe.setsockopt(zmq.LINGER, 0)  # which commits the log taken over, is on a majority (nothing new needed)
    probe.connect(elected.intake)
    publisher = driver.publishers[0]
    last, frames = driver.sent[publisher][0]
    probe.send_multipart(frames)
    assert probe.poll(10_000), "a batch the new leader's log holds was not acknowledged"
    assert any(p == publisher and seq >= last for p, seq in batch.decode_journal_ack(probe.recv())[2])
    probe.close()
    driver.reconnect(ctx, elected.intake)
    driver.resend()  # what the lost leader had not acknowledged, as exchanges do
    driver.settle(30)
    driver.run(1.0)
    driver.settle()
    assert all(driver.acked[p] > acked[p] for p in driver.publishers)
    f2.stop()
    candidate.stop()
    for name in ("f1", "f2"):  # every record once, in each publisher's order, at both replicas of epoch 2
        _check(dirs[name], driver, acked)
