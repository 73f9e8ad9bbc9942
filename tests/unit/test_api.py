import inspect

import client
import roq.errors


def test_client_exports_a_small_stable_surface():
    assert set(client.__all__) == {
        "connect", "Connection", "Publisher", "PublisherConfig", "Subscriber", "SubscriberConfig",
        "Message", "SubscriberStats", "RoQError", "BrokerConnectionError", "NoExchangeError",
        "BrokerTimeoutError", "BufferFullError", "ClosedError", "ConfigError", "ProtocolError",
    }
    for name in client.__all__:
        assert hasattr(client, name)


def test_every_error_is_a_roq_error_and_no_builtin_is_shadowed():
    import builtins

    for name, obj in inspect.getmembers(roq.errors, inspect.isclass):
        if obj.__module__ == "roq.errors":
            assert issubclass(obj, roq.errors.RoQError), name
            assert not hasattr(builtins, name), name


def test_message_fields():
    m = client.Message((b"k", b"v", "ab", 7, 1.5))
    assert (m.key, m.payload, m.publisher, m.seq, m.timestamp) == (b"k", b"v", "ab", 7, 1.5)
