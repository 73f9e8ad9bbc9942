from simulation.audit import Audit, compare, holes, make_payload


def feed(audit, pub, key, counters):
    for overall, per_key in counters:
        audit.record(pub, key, make_payload(overall, per_key, 0, 40))


def test_clean_stream():
    a = Audit()
    feed(a, "p", b"k", [(i, i) for i in range(5)])
    assert a.summary()["totals"] == {"received": 5, "lost": 0, "duplicated": 0, "reordered": 0}


def test_loss_duplicate_and_reorder_are_told_apart():
    a = Audit()
    feed(a, "p", b"k", [(0, 0), (1, 1), (3, 3), (3, 3), (2, 2)])
    t = a.summary()["totals"]
    assert (t["lost"], t["duplicated"], t["reordered"]) == (1, 1, 1)


def test_order_across_keys_of_one_publisher():
    a = Audit()
    feed(a, "p", b"a", [(0, 0), (2, 1)])
    feed(a, "p", b"b", [(1, 0)])  # key b's record came after key a's newer one
    assert a.summary()["totals"]["reordered"] == 1


def test_compare_counts_missing_heads_and_tails():
    a = Audit()
    feed(a, "p", b"orders.eu", [(i, i) for i in range(2, 8)])  # 0, 1 and 8, 9 never came
    result = compare(a.summary(), {"p": {"orders.eu": 10, "stock": 5}}, b"orders.")
    assert result == {"expected": 10, "received": 6, "lost": 4, "dropped": 2, "undelivered": 2,
                      "duplicated": 0, "reordered": 0}
    assert compare(Audit().summary(), {"p": {"x": 3}})["undelivered"] == 3


def test_compare_tells_holes_from_a_tail():
    a = Audit()
    feed(a, "p", b"k", [(i, i) for i in (0, 1, 5, 6)])  # 2-4 dropped on the way; 7-9 never came
    result = compare(a.summary(), {"p": {"k": 10}})
    assert (result["dropped"], result["undelivered"], result["lost"]) == (3, 3, 6)


def test_the_first_holes_are_placed_by_counter_and_send_time():
    a = Audit()
    for overall in (0, 1, 5, 6, 9):  # holes 2..4 and 7..8; the record after each sent at its counter's second
        a.record("p", b"k", make_payload(overall, overall, overall * 1_000_000_000, 40))
    assert a.summary()["publishers"]["p"]["keys"]["k"]["holes"] == [(2, 4, 5.0), (7, 8, 9.0)]
    assert holes(a.summary()) == ["publisher p key 'k': 5 lost of 10 from 0; holes 2..4 (the next sent at 5.000), "
                                  "7..8 (the next sent at 9.000)"]
    feed(a, "q", b"k", [(i, i) for i in range(3)])
    assert len(holes(a.summary())) == 1  # a publisher without holes has no line
