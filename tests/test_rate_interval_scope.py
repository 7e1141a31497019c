"""What a rate interval is for, measured: this fleet as it is, its lemon nodes included.

The sentence the report, ``failcast rates --help`` and the docs carry
(:data:`pipeline.report.format.RATE_INTERVAL_SCOPE`) says: on simulated fleets with 5% lemon nodes
the default interval covers this fleet's true rate about 95% of the time, but the true rate of a
freshly drawn fleet of the same kind only 64-76% of the time. This measures both coverages on the
simulated fleets of tests/test_lemons.py (three clusters of 64, 128 and 256 nodes, each node a
lemon with probability 5% failing 5-10x as often, Weibull renewal failures):

* this fleet's true rate: its expected failures over its exposure, sum(rate_i t_i) / sum(t_i);
* a fresh fleet's true rate: the same quantity for a second fleet drawn from the same population,
  whose lemons are other nodes in other numbers. The interval does not carry that variation (how
  many lemons a fleet happens to have), so it is not a prediction interval for another fleet.

Measured over 1,000 fleets (seed 6): this fleet 95.0% (shape 1), 94.4% (0.85), 95.3% (0.7); a
fresh fleet 63.8%, 67.1%, 75.9%.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import analysis, models, transform
from pipeline.report.format import RATE_INTERVAL_SCOPE
from tests.test_lemons import simulated_nodes


def _coverages(runs: int, seed: int, *, shape: float, lemon_fraction: float = 0.05) -> dict[str, float]:
    """Share of runs whose default fleet-rate interval (the analysis' "auto") covers this fleet's
    true rate, and the true rate of a fleet drawn afresh."""
    rng = np.random.default_rng(seed)
    hits = {"this_fleet": 0, "fresh_fleet": 0}
    for _ in range(runs):
        nodes = simulated_nodes(rng, lemon_fraction=lemon_fraction, shape=shape)
        fresh = simulated_nodes(rng, lemon_fraction=lemon_fraction, shape=shape)
        check = analysis.interval_check(nodes, models.LemonTest().fit(nodes))
        (low,), (high,) = transform.poisson_interval(
            [nodes["failures"].sum()],
            [nodes["exposure_node_hours"].sum()],
            dispersion=check.dispersion("auto"),
        )
        for name, fleet in (("this_fleet", nodes), ("fresh_fleet", fresh)):
            truth = fleet["expected"].sum() / fleet["exposure_node_hours"].sum()
            hits[name] += bool(low <= truth <= high)
    return {name: n / runs for name, n in hits.items()}


def test_rate_interval_covers_this_fleet_not_a_fresh_one():
    """Fast version (150 fleets, binomial s.e. ~2% at 95%, ~4% at 70%; about 2 CPU-s)."""
    coverage = _coverages(150, seed=11, shape=0.85)
    assert 0.89 <= coverage["this_fleet"] <= 0.995, coverage
    assert 0.5 <= coverage["fresh_fleet"] <= 0.85, coverage
    assert coverage["fresh_fleet"] < coverage["this_fleet"] - 0.1


@pytest.mark.slow
@pytest.mark.parametrize("shape", [1.0, 0.85, 0.7])
def test_rate_interval_scope_long(shape):
    """1,000 fleets per shape: the numbers of the sentence (95% this fleet; 64-76% a fresh one)."""
    coverage = _coverages(1000, seed=6, shape=shape)
    assert 0.93 <= coverage["this_fleet"] <= 0.97, coverage
    assert 0.60 <= coverage["fresh_fleet"] <= 0.80, coverage


def test_the_sentence_states_both_coverages():
    assert "this fleet's true rate about 95%" in RATE_INTERVAL_SCOPE
    assert "freshly drawn fleet" in RATE_INTERVAL_SCOPE and "64–76%" in RATE_INTERVAL_SCOPE
