"""Models: the fitter contract, aggregated = raw fits, and recovery of known parameters from
simulated fleets (``pipeline.sample``) and published figures."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from pipeline import models, sample, transform
from tests._fleets import fleet_exposure

RNG_DURATIONS = np.random.default_rng(11).weibull(0.8, 300) * 100
RNG_OBSERVED = np.random.default_rng(12).uniform(size=300) < 0.8
TREND_TIMES = np.sort(np.random.default_rng(13).uniform(0, 1000, 40))

# (factory, fit arguments) for every model class
MODEL_CASES = [
    pytest.param(lambda: models.PoissonRate(), (12, 5000.0), id="PoissonRate"),
    *[
        pytest.param(lambda f=f: models.ParametricTBF(f), (RNG_DURATIONS, RNG_OBSERVED), id=f"TBF-{f}")
        for f in ("exponential", "weibull", "lognormal", "loglogistic")
    ],
    pytest.param(lambda: models.KaplanMeier(), (RNG_DURATIONS, RNG_OBSERVED), id="KaplanMeier"),
    pytest.param(lambda: models.NelsonAalen(), (RNG_DURATIONS, RNG_OBSERVED), id="NelsonAalen"),
    pytest.param(
        lambda: models.MTBFScaling(), ([32, 64, 128], [10, 21, 39], [500.0, 500.0, 500.0]), id="MTBFScaling"
    ),
    pytest.param(
        lambda: models.WeibullSizeRegression(),
        (np.repeat([32, 128], 150), RNG_DURATIONS, RNG_OBSERVED),
        id="WeibullSizeRegression",
    ),
    pytest.param(lambda: models.TrendTest(), (TREND_TIMES, 1000.0), id="TrendTest"),
    pytest.param(
        lambda: models.LemonTest(),
        (
            pl.DataFrame(
                {
                    "cluster_id": ["a"] * 4 + ["b"] * 2,
                    "node_id": [f"n{i}" for i in range(6)],
                    "failures": [30, 2, 1, 0, 3, 0],
                    "exposure_node_hours": [1000.0, 1000.0, 900.0, 500.0, 800.0, 0.5],
                }
            ),
        ),
        id="LemonTest",
    ),
    pytest.param(
        lambda: models.ClusterHeterogeneity(),
        (
            [32, 64, 128],
            [10, 21, 39],
            [500.0, 500.0, 500.0],
            models.MTBFScaling().fit([32, 64, 128], [10, 21, 39], [500.0, 500.0, 500.0]),
        ),
        id="ClusterHeterogeneity",
    ),
    pytest.param(
        lambda: models.JobBacktest(),
        (RNG_DURATIONS / 1000, RNG_OBSERVED, RNG_DURATIONS / 5000),
        id="JobBacktest",
    ),
    pytest.param(lambda: models.RepairTimes(), (RNG_DURATIONS, RNG_OBSERVED), id="RepairTimes"),
]


def _fitted(model) -> dict:
    """Fitted values; frames (e.g. a calibration table) as plain columns so they compare."""
    return {
        k: v.to_dict(as_series=False) if isinstance(v, pl.DataFrame) else v
        for k, v in vars(model).items()
        if k.endswith("_")
    }


@pytest.mark.parametrize(("factory", "args"), MODEL_CASES)
def test_fitter_contract(factory, args, capsys):
    model = factory()
    before = set(vars(model))
    assert model.fit(*args) is model
    added = set(vars(model)) - before
    assert added and all(name.endswith("_") for name in added), sorted(added)
    first = _fitted(model)
    again = _fitted(factory().fit(*args))
    np.testing.assert_equal(again, first)
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("family", ["exponential", "weibull", "lognormal", "loglogistic"])
def test_aggregated_fit_equals_raw_fit(family):
    durations = np.round(RNG_DURATIONS, -1) + 1  # ties, as coarse timestamps give
    raw = pl.DataFrame({"duration_hours": durations, "observed": RNG_OBSERVED})
    agg = transform.aggregate_durations(raw)
    assert agg.height < raw.height / 2
    a = models.ParametricTBF(family).fit(agg["duration_hours"], agg["observed"], agg["count"])
    r = models.ParametricTBF(family).fit(raw["duration_hours"], raw["observed"])
    for name, value in r.params_.items():
        assert a.params_[name] == pytest.approx(value, rel=1e-6)
        assert a.confidence_interval_[name] == pytest.approx(r.confidence_interval_[name], rel=1e-5)
    assert a.mtbf_hours_ == pytest.approx(r.mtbf_hours_, rel=1e-6)
    assert a.log_likelihood_ == pytest.approx(r.log_likelihood_, rel=1e-6)


def _node_gaps(shape: float, seed: int, first_gap: str = "drop") -> pl.DataFrame:
    spec = sample.FleetSpec(cluster_sizes=(256, 512), weibull_shape=shape, seed=seed)
    incidents, exposure = fleet_exposure(spec)
    return transform.aggregate_durations(
        transform.times_between_failures(incidents, exposure, first_gap=first_gap)
    )


def _weibull(gaps: pl.DataFrame) -> models.ParametricTBF:
    return models.ParametricTBF("weibull").fit(gaps["duration_hours"], gaps["observed"], gaps["count"])


@pytest.mark.parametrize(("shape", "seed"), [(0.7, 1), (0.85, 2), (1.0, 3), (1.3, 4)])
def test_weibull_shape_and_mtbf_recovered_within_intervals(shape, seed):
    fit = _weibull(_node_gaps(shape, seed))
    true_mtbf = 1 / sample.FleetSpec.rate_per_node_hour
    low, high = fit.confidence_interval_["rho_"]
    assert low <= shape <= high
    assert fit.mtbf_confidence_interval_[0] <= true_mtbf <= fit.mtbf_confidence_interval_[1]
    assert fit.infant_mortality_ == (high < 1)
    assert ("infant mortality" in fit.hazard_message_) == (high < 1)


@pytest.mark.parametrize(("beta", "unbounded"), [(1.0, True), (3.0, False)])
def test_loglogistic_mtbf_is_unbounded_when_its_shape_interval_reaches_one(beta, unbounded):
    """Log-logistic gaps with median 100 h: at beta 1 the mean does not exist, so a finite upper
    MTBF bound would be an artefact of the delta method; at beta 3 the mean (120.9 h) exists and
    its interval covers it."""
    rng = np.random.default_rng(7)
    u = rng.uniform(size=3000)
    gaps = 100.0 * (u / (1 - u)) ** (1 / beta)  # inverse of F(t) = 1 / (1 + (t / 100)^-beta)
    fit = models.ParametricTBF("loglogistic").fit(gaps, np.ones(gaps.size, bool))
    low, high = fit.mtbf_confidence_interval_
    assert (fit.mtbf_note_ is not None) == unbounded
    if unbounded:
        assert math.isinf(high) and "median (" in fit.mtbf_note_
        assert fit.confidence_interval_["beta_"][0] <= 1
    else:
        true_mean = 100 * (math.pi / beta) / math.sin(math.pi / beta)
        assert low <= true_mean <= high < math.inf


def test_keeping_first_gaps_biases_stationary_fleets():
    """The forward-recurrence first gap is not a full gap: keeping it pulls shape towards 1 and
    inflates MTBF beyond its interval (the reason ``first_gap='drop'`` is the default)."""
    fit = _weibull(_node_gaps(0.7, 1, first_gap="keep"))
    assert fit.confidence_interval_["rho_"][0] > 0.7
    assert fit.mtbf_confidence_interval_[0] > 1 / sample.FleetSpec.rate_per_node_hour


def test_ignoring_censoring_biases_mtbf_low():
    gaps = _node_gaps(1.0, 5)
    true_mtbf = 1 / sample.FleetSpec.rate_per_node_hour
    censored = models.ParametricTBF("exponential").fit(
        gaps["duration_hours"], gaps["observed"], gaps["count"]
    )
    failures_only = gaps.filter("observed")
    naive = models.ParametricTBF("exponential").fit(
        failures_only["duration_hours"], failures_only["observed"], failures_only["count"]
    )
    assert censored.mtbf_confidence_interval_[0] <= true_mtbf <= censored.mtbf_confidence_interval_[1]
    assert naive.mtbf_confidence_interval_[1] < 0.8 * true_mtbf


@pytest.mark.parametrize(("truth", "shape"), [("exponential", 1.0), ("weibull", 0.7), ("weibull", 1.3)])
def test_aic_picks_true_family_in_most_runs(truth, shape):
    picks = []
    for seed in range(5):
        spec = sample.FleetSpec(cluster_sizes=(512,), days=240, weibull_shape=shape, seed=100 + seed)
        incidents, exposure = fleet_exposure(spec)
        gaps = transform.aggregate_durations(transform.times_between_failures(incidents, exposure))
        fits = models.fit_families(gaps["duration_hours"], gaps["observed"], gaps["count"])
        picks.append(models.best_by_aic(fits))
    assert picks.count(truth) >= 4, picks


def test_scaling_alpha_recovered_by_both_views():
    spec = sample.FleetSpec(cluster_sizes=(16, 64, 256, 1024), weibull_shape=0.85, seed=9)
    incidents, exposure = fleet_exposure(spec)
    rates = transform.failure_rates(incidents, exposure)
    sizes = exposure.group_by("cluster_id").agg(pl.col("instances").first())
    per = rates.join(sizes, on="cluster_id")
    scaling = models.MTBFScaling().fit(
        per["instances"], per["failures"], per["exposure_node_hours"] / per["instances"]
    )
    gaps = transform.aggregate_durations(
        transform.times_between_failures(incidents, exposure, level="cluster"), by=["instances"]
    )
    regression = models.WeibullSizeRegression().fit(
        gaps["instances"], gaps["duration_hours"], gaps["observed"], gaps["count"]
    )
    true_mtbf_one = 1 / spec.rate_per_node_hour
    for model in (scaling, regression):
        low, high = model.alpha_confidence_interval_
        assert low <= 1.0 <= high
        mtbf, mtbf_low, mtbf_high = model.predict_mtbf_hours([512, 16384])
        assert (
            (mtbf_low <= true_mtbf_one / np.array([512, 16384]))
            & (true_mtbf_one / np.array([512, 16384]) <= mtbf_high)
        ).all()
        assert (mtbf_low < mtbf).all() and (mtbf < mtbf_high).all()
    # superposed independent nodes: cluster-level gaps are close to exponential
    assert regression.shape_confidence_interval_[0] < 1.1 and regression.shape_confidence_interval_[1] > 0.9


ALPHA_SEEDS = 100


@pytest.mark.parametrize("shape", [0.7, 1.0, 1.3])
def test_scaling_alpha_interval_coverage_over_seeds(shape):
    """alpha = 1 lies in the interval at about 95% over 100 small fleets; the quasi-Poisson
    dispersion keeps it there when shape < 1 clusters failures (0.83 without it at 0.7)."""
    hits = 0
    for seed in range(ALPHA_SEEDS):
        spec = sample.FleetSpec(
            cluster_sizes=(8, 16, 32),
            days=60,
            rate_per_node_hour=0.002,
            weibull_shape=shape,
            seed=seed,
            maintenance_fraction=0.0,
        )
        incidents, exposure = fleet_exposure(spec)
        per = transform.failure_rates(incidents, exposure).join(
            exposure.group_by("cluster_id").agg(pl.col("instances").first()), on="cluster_id"
        )
        low, high = (
            models.MTBFScaling()
            .fit(
                per["instances"],
                per["failures"],
                per["exposure_node_hours"] / per["instances"],
                dispersion=transform.count_dispersion(incidents, exposure),
            )
            .alpha_confidence_interval_
        )
        hits += low <= 1 <= high
    assert 0.89 <= hits / ALPHA_SEEDS <= 0.99


@pytest.mark.slow
@pytest.mark.parametrize("shape", [0.7, 1.0, 1.3])
def test_size_regression_alpha_interval_coverage_over_seeds(shape):
    """The Weibull AFT view's alpha interval, scaled by the count dispersion, covers 1 at about
    95% over 100 small fleets (measured 0.93 / 0.95 / 0.97 for shapes 0.7 / 1.0 / 1.3)."""
    hits = 0
    for seed in range(ALPHA_SEEDS):
        spec = sample.FleetSpec(
            cluster_sizes=(8, 16, 32),
            days=60,
            rate_per_node_hour=0.002,
            weibull_shape=shape,
            seed=seed,
            maintenance_fraction=0.0,
        )
        incidents, exposure = fleet_exposure(spec)
        gaps = transform.aggregate_durations(
            transform.times_between_failures(incidents, exposure, level="cluster"), by=["instances"]
        )
        low, high = (
            models.WeibullSizeRegression()
            .fit(
                gaps["instances"],
                gaps["duration_hours"],
                gaps["observed"],
                gaps["count"],
                dispersion=transform.count_dispersion(incidents, exposure),
            )
            .alpha_confidence_interval_
        )
        hits += low <= 1 <= high
    assert 0.89 <= hits / ALPHA_SEEDS <= 0.99


def _power_law_times(beta: float, n: int, end: float, rng) -> np.ndarray:
    """Failure times of a power-law NHPP on (0, end] given n: end * U^(1/beta) (Crow 1974)."""
    return np.sort(end * rng.uniform(size=n) ** (1 / beta))


@pytest.mark.parametrize("test", ["laplace", "crow"])
def test_trend_tests_hold_their_size_under_no_trend(test):
    rng = np.random.default_rng(2026)
    verdicts = [
        getattr(models.TrendTest().fit(_power_law_times(1.0, 30, 1000.0, rng), 1000.0), f"{test}_verdict_")
        for _ in range(400)
    ]
    assert 0.02 <= 1 - verdicts.count("flat") / 400 <= 0.09


@pytest.mark.parametrize(("beta", "verdict"), [(0.5, "falling"), (1.8, "rising")])
def test_trend_tests_detect_power_law_trends(beta, verdict):
    rng = np.random.default_rng(int(beta * 10))
    for _ in range(20):
        t = models.TrendTest().fit(_power_law_times(beta, 60, 500.0, rng), 500.0)
        assert t.crow_verdict_ == verdict and t.laplace_verdict_ == verdict
        low, high = t.crow_beta_confidence_interval_
        assert low < t.crow_beta_ < high


def test_crow_beta_interval_coverage():
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(400):
        low, high = (
            models.TrendTest()
            .fit(_power_law_times(0.6, 25, 100.0, rng), 100.0)
            .crow_beta_confidence_interval_
        )
        hits += low <= 0.6 <= high
    assert 0.92 <= hits / 400 <= 0.98


def test_trend_test_needs_failures_in_window():
    with pytest.raises(ValueError, match="two failures"):
        models.TrendTest().fit([5.0], 10.0)
    with pytest.raises(ValueError, match="observed_hours"):
        models.TrendTest().fit([5.0, 12.0], 10.0)


def test_published_arithmetic():
    # 512 instances at 0.04% per instance-hour: a failure every ~4.9 h
    assert models.cluster_mtbf_hours(0.0004, 512) == pytest.approx(4.88, abs=0.01)
    # Llama 3.1 (Meta 2024): 0.0161%/h on 16,384 GPUs = 2,048 instances of 8 -> ~7.9 a day;
    # the brief's 2,000 instances give 7.7
    assert models.interruptions_per_day(0.000161, 2000) == pytest.approx(7.7, abs=0.05)
    # the paper's count, 419 unexpected interruptions in 54 days on 16,384 GPUs: the published rate
    # lies inside our exact interval for that count and exposure
    rate = models.PoissonRate().fit(419, 54 * 24 * 16384 / 8)
    assert rate.confidence_interval_[0] <= 0.000161 <= rate.confidence_interval_[1]
    assert models.interruptions_per_day(rate.rate_, 2048) == pytest.approx(419 / 54)


def test_poisson_rate_zero_failures_has_unbounded_mtbf():
    rate = models.PoissonRate().fit(0, 1000.0)
    assert rate.rate_ == 0 and rate.confidence_interval_[0] == 0
    assert math.isinf(rate.mtbf_hours_) and math.isinf(rate.mtbf_confidence_interval_[1])
    assert rate.confidence_interval_[1] == pytest.approx(-math.log(0.025) / 1000.0)


@pytest.mark.parametrize(("cls", "args"), [(models.MTBFScaling, ([8, 8], [1, 2], [1.0, 1.0]))])
def test_scaling_needs_two_sizes(cls, args):
    with pytest.raises(ValueError, match="two different sizes"):
        cls().fit(*args)
