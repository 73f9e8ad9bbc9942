"""Figures the report derives from a run's timeline (pure)."""

from simulation.report import latency_by_exchanges


def point(t: float, p50: float | None, p99: float | None) -> dict:
    return {"time": 1000.0 + t, "received": 0, "gaps": 0, "dropped": 0, "p50_ms": p50, "p99_ms": p99}


def test_latency_is_filed_under_the_exchange_count_of_its_time():
    timeline = {
        "started": 1000.0,
        "samples": [{"t": t, "queues": {"q": {"exchanges": dict.fromkeys("ab"[: 1 if t < 3 else 2], 1.0)}}}
                    for t in range(6)] + [{"t": 6, "queues": {}}],  # at 6 s the monitor was not heard
        "subscribers": [
            {"queue": "q", "keeps_up": True,
             "points": [point(0.5, 1, 5), point(1.5, 2, 6), point(2.5, 3, 7), point(3.5, 4, 8), point(4.5, 6, 9),
                        point(5.5, None, None), point(6.5, 50, 50)]},
            {"queue": "q", "keeps_up": False, "points": [point(0.5, 900, 900), point(4.5, 900, 900)]},
        ],
    }
    assert latency_by_exchanges(timeline) == [
        {"queue": "q", "exchanges": 1, "seconds": 3, "p50_ms": 2, "p99_ms": 6},
        {"queue": "q", "exchanges": 2, "seconds": 2, "p50_ms": 5.0, "p99_ms": 8.5},
    ]
    # without the sample at 6 s, the point at 6.5 s belongs to the one at 5 s
    timeline["samples"].pop()
    assert latency_by_exchanges(timeline)[1]["seconds"] == 3


def test_an_empty_timeline_has_no_rows():
    assert latency_by_exchanges({}) == []
