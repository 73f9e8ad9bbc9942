"""The management client's refusals that need no cluster: they come before anything is sent."""

from __future__ import annotations

import pytest

import client


def test_a_malformed_zookeeper_address_is_refused_at_once():
    with pytest.raises(client.ConfigError, match="nohost"):
        client.QueueManager("nohost")


def test_evidence_bson_cannot_carry_is_a_bad_request_before_zookeeper_is_asked():
    with client.QueueManager("127.0.0.1:1") as qm:  # nothing listens there: any attempt would time out
        with pytest.raises(client.BadRequestError, match="set"):
            qm.set_thresholds("q", {"exchange_records_per_s": 1.0}, {"samples": {1, 2}})


def test_a_closed_manager_refuses_calls():
    qm = client.QueueManager("127.0.0.1:1")
    qm.close()
    with pytest.raises(client.ClosedError):
        qm.list()


def test_a_lookup_that_ran_out_of_time_after_unavailable_answers_says_unavailable(monkeypatch):
    """The GCM said the queue is unavailable; the last ask, with only milliseconds left, had no answer in time:
    the caller hears what the GCM said, not a timeout."""
    answers = iter([client.UnavailableError("queue q is stopped"), client.BrokerTimeoutError("no answer in 0s")])

    def call(request, timeout, port=None):
        raise next(answers)

    with client.QueueManager("127.0.0.1:1") as qm:
        monkeypatch.setattr(qm, "_call", call)
        with pytest.raises(client.UnavailableError, match="stopped"):
            qm.lookup("q", timeout=5)


def test_a_lookup_never_answered_times_out(monkeypatch):
    def call(request, timeout, port=None):
        raise client.BrokerTimeoutError("no answer")

    with client.QueueManager("127.0.0.1:1") as qm:
        monkeypatch.setattr(qm, "_call", call)
        with pytest.raises(client.BrokerTimeoutError):
            qm.lookup("q", timeout=5)
