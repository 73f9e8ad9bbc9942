"""client: the small, stable surface applications import."""

import client


def test_client_exports_a_small_stable_surface():
    assert set(client.__all__) == {
        "connect", "Connection", "Publisher", "PublisherConfig", "Subscriber", "SubscriberConfig",
        "Message", "Batch", "SubscriberStats", "RoQError", "BrokerConnectionError", "NoExchangeError",
        "BrokerTimeoutError", "BufferFullError", "ClosedError", "ConfigError", "ProtocolError",
        "QueueManager", "ManagementError", "NotFoundError", "NotLeaderError", "BadRequestError", "UnavailableError",
        "ConflictError", "ForbiddenError",
    }
    for name in client.__all__:
        assert hasattr(client, name)


def test_message_fields():
    m = client.Message((b"k", b"v", "ab", 7, 1.5))
    assert (m.key, m.payload, m.publisher, m.seq, m.timestamp) == (b"k", b"v", "ab", 7, 1.5)


def test_batch_fields_length_iteration_and_split():
    b = client.Batch(b"k", [b"a", b"b", b"c"], "ab", 7, 1.5)
    assert (len(b), b.first_seq, b.last_seq) == (3, 7, 9)
    assert list(b) == [(b"k", b"a", "ab", 7, 1.5), (b"k", b"b", "ab", 8, 1.5), (b"k", b"c", "ab", 9, 1.5)]
    head, rest = b.split(1)
    assert (head.payloads, head.first_seq, rest.payloads, rest.first_seq) == ([b"a"], 7, [b"b", b"c"], 8)


def test_connect_takes_a_monitor_or_a_queue_by_name():
    import pytest

    with pytest.raises(client.ConfigError):
        client.connect()
    with pytest.raises(client.ConfigError):
        client.connect("tcp://127.0.0.1:1", zk="127.0.0.1:2181", queue="q")
    with pytest.raises(client.ConfigError):
        client.connect(zk="127.0.0.1:2181")
