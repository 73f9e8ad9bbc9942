"""Reading a monitor's status: sums over exchanges and live subscribers, garbage read as nothing."""

from roq.status import latency, traffic


def test_traffic_and_latency_of_a_status_and_of_garbage():
    status = {"exchanges": [{"records_per_s": 10.0, "records_out_per_s": 20}, {"records_per_s": True}, "junk"],
              "publishers": [{}, {}],
              "subscribers": [{"live": True, "latency_p50_ms": 3.0, "latency_p99_ms": 9.0},
                              {"live": True, "latency_p50_ms": 1.0, "latency_p99_ms": 4.0},
                              {"live": True, "latency_p50_ms": -1.0, "latency_p99_ms": -1.0},
                              {"live": False, "latency_p50_ms": 50.0, "latency_p99_ms": 90.0}]}
    assert traffic(status) == {"records_in_per_s": 10.0, "records_out_per_s": 20.0, "bytes_in_per_s": 0.0,
                               "bytes_out_per_s": 0.0, "publishers": 2, "subscribers": 3}
    assert latency(status) == {"p50_median": 3.0, "p99_max": 9.0}  # the silent and the gone ones left out
    assert latency(None) == {"p50_median": None, "p99_max": None} and traffic({})["subscribers"] == 0
