from client.window import Sent, Window


def sent(first, count, at=0.0, size=10):
    return Sent(first, count, b"k", b"", 0, 0, size, 0, at)


def test_acknowledged_batches_are_kept_for_the_grace():
    w = Window(grace=1.0)
    for i in range(3):
        w.add(sent(1 + 10 * i, 10))
    assert w.ack(20, now=5.0)
    assert not w.ack(15, now=5.1)  # old news
    assert w.trim(5.5) == 0
    assert w.trim(6.0) == 20  # two batches of 10 bytes
    assert [e.first for e in w.entries] == [21]
    assert w.oldest_unacked().first == 21


def test_take_all_resets_acknowledgements():
    w = Window(grace=1.0)
    w.add(sent(1, 5))
    w.add(sent(6, 5))
    w.ack(10, now=1.0)
    entries = w.take_all()
    assert [e.first for e in entries] == [1, 6]
    assert w.acked == 0 and not w.entries
    assert w.trim(10.0) == 0  # the dead exchange's acks no longer free anything
