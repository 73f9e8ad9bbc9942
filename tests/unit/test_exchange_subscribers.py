"""exchange subscribers: the table of who gets what, bounded against a flood of identities."""

from __future__ import annotations

from exchange._subscribers import MAX_SUBSCRIBERS, Subscribers
from roq.wire import batch
def test_a_subscription_is_kept_once_per_id_and_the_latest_prefix_counts():
    subs = Subscribers()
    first, new = subs.subscribe(b"a" * 16, b"orders.")
    assert new and first.prefixes == (b"orders.", batch.CONTROL_TOPIC)
    again, new = subs.subscribe(b"a" * 16, b"stock.")
    assert again is first and not new and first.prefixes == (b"stock.", batch.CONTROL_TOPIC)
    assert len(subs) == 1 and subs.get(b"a" * 16) is first


def test_the_table_is_bounded_and_a_removed_subscriber_makes_room():
    subs = Subscribers(limit=3)
    made = [subs.subscribe(bytes([i]) * 16, b"")[0] for i in range(3)]
    assert subs.subscribe(b"z" * 16, b"") == (None, False) and len(subs) == 3
    listed = subs.all
    assert subs.remove(made[1]) and not subs.remove(made[1])
    assert listed == made  # a loop over the old list is not disturbed
    assert subs.all == [made[0], made[2]]
    assert subs.subscribe(b"z" * 16, b"")[1]
    assert Subscribers().limit == MAX_SUBSCRIBERS


def test_a_subscriber_is_behind_until_its_time_runs_out():
    sub = Subscribers().subscribe(b"a" * 16, b"")[0]
    assert not sub.behind(0.0)
    sub.behind_until = 10.0
    assert sub.behind(9.9) and not sub.behind(10.0)


def test_a_subscriber_that_reports_progress_is_behind_until_it_reports_again_and_one_that_never_did_until_its_time():
    table = Subscribers()
    old, new = table.subscribe(b"o" * 16, b"")[0], table.subscribe(b"n" * 16, b"")[0]
    new.progress(1.0)
    for sub in (old, new):
        sub.behind_until, sub.missed_at = 10.0, 8.0  # a batch went past it at 8.0
    assert old.behind(9.9) and not old.behind(10.0)  # an older client: the time runs out
    assert new.behind(10.0) and new.behind(100.0)  # silent since before it missed: still behind
    new.progress(101.0)
    assert not new.behind(101.0) and new.behind_until == 0.0  # it reads again
