import math
import random

from simulation.histogram import Histogram
from simulation.load import percentiles


def test_percentiles_within_one_percent_of_the_exact_ones():
    rng = random.Random(7)
    values = [rng.lognormvariate(0, 1.5) for _ in range(50_000)] + [0.0, -0.2]  # clock steps give <= 0
    h = Histogram()
    h.add_all(values[:20_000])
    h.add_all(values[20_000:])
    exact, got = percentiles(values), h.summary()
    assert got["count"] == exact["count"] and got["max"] == exact["max"]
    assert math.isclose(got["mean"], exact["mean"], rel_tol=1e-9)
    for q in ("p50", "p99"):
        assert exact[q] <= got[q] <= exact[q] * 1.0101, q
    assert len(h.buckets) < 3000  # memory follows the range of values, not their number


def test_empty_and_single():
    h = Histogram()
    assert h.summary() == {"count": 0} and math.isnan(h.percentile(0.5))
    h.add_all([3.0])
    assert h.summary() == {"count": 1, "mean": 3.0, "p50": 3.0, "p99": 3.0, "max": 3.0}
