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


def test_the_printed_summary_has_one_line_per_subscriber_group(capsys):
    from simulation.__main__ import print_summary

    def sub(group, keeps_up, expected, received, dropped, gaps):
        undelivered = expected - received - dropped
        return {"group": group, "queue": "q", "prefix": "", "keeps_up": keeps_up, "gaps": gaps,
                "audit": {"expected": expected, "received": received, "lost": dropped + undelivered,
                          "dropped": dropped, "undelivered": undelivered, "duplicated": 0, "reordered": 0}}

    summary = {"published": 100, "delivered": 250, "delivered_records_per_s": 25.0, "exchanges_peak": 2,
               "relocations": 1, "failovers": 0, "scale_outs": 1, "scale_ins": 0,
               "keep_up_audit": {"clean": True},
               "latency_by_exchanges": [{"queue": "q", "exchanges": 1, "seconds": 4, "p50_ms": 1.25, "p99_ms": 3.5}],
               "subscribers": [sub(0, True, 100, 100, 0, 0), sub(0, True, 100, 100, 0, 0),
                               sub(1, False, 100, 50, 30, 2), {"group": 1, "queue": "q", "prefix": "",
                                                             "keeps_up": False, "error": "no report from sub-3"}]}
    print_summary(summary, "out/index.html")
    lines = capsys.readouterr().out.splitlines()
    assert "  2 subscribers q/'': expected 200 received 200 lost 0 (0 dropped in 0 gaps, 0 still queued at the stop)" \
           " duplicated 0 reordered 0" in lines
    assert "  2 subscribers q/'' (slow): expected 100 received 50 lost 50 (30 dropped in 2 gaps, 20 still queued at" \
           " the stop) duplicated 0 reordered 0; no report from sub-3" in lines
    assert any("q with 1: 1.2 / 3.5 ms" in line for line in lines) and lines[-1] == "report: out/index.html"
