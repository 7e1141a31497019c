"""Tests of pipeline.projection: published figures, analytic vs Monte Carlo, optimum, properties."""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.projection import (
    DEFAULT_RECOVERY,
    FailureModel,
    JobSpec,
    RecoveryProfile,
    SpecError,
    days_histogram,
    expected_wall_hours,
    explain,
    first_order_ettr,
    load_job_spec,
    monte_carlo,
    project,
    sensitivity_table,
    superposed_failure_times,
    sweep_cluster_size,
    sweep_failure_rate,
    young_daly_interval_hours,
)

LLAMA3_TOML = Path(__file__).resolve().parents[1] / "data" / "jobs" / "llama3-70b.toml"


def _spec(**kw) -> JobSpec:
    base = dict(
        instances=256, price_per_gpu_hour_usd=4.5, failure=FailureModel.exponential(5e-4), gpu_hours=1e7
    )
    return JobSpec(**(base | kw))


def _within(actual: float, expected: float, rel: float = 0.05) -> bool:
    return abs(actual - expected) <= rel * abs(expected)


# ---------------------------------------------------------------- published figures (+-5%)


def test_llama3_70b_failure_free_days_and_implied_mfu():
    # inputs: 6.5e6 H100 GPU-hours, 70e9 params, 15e12 tokens, 256 instances x 8 GPUs
    spec = load_job_spec(LLAMA3_TOML)
    p = project(spec, monte_carlo_runs=0)
    assert _within(p.failure_free_days, 6.5e6 / (256 * 8) / 24)
    assert _within(p.failure_free_days, 132)
    assert _within(spec.implied_mfu, 0.27)  # 6.3e24 FLOPs at 989 TFLOP/s
    text = explain(p)
    assert "27% MFU" in text and "38-43%" in text


def test_work_from_params_tokens_and_mfu():
    # 6 * 70e9 * 15e12 FLOPs at 27.2% of 989 TFLOP/s ~ 6.5e6 GPU-hours
    spec = _spec(gpu_hours=None, params=70e9, tokens=15e12, mfu=0.272, gpu="H100")
    assert _within(spec.work_gpu_hours, 6.5e6)


@pytest.mark.parametrize(
    ("preset", "published_pct_per_instance_hour"),
    [
        ("opt-175b", 0.0588),  # (35 + 70) / (124 x 1440 h)
        ("llama-3.1", 0.0161),  # 417 / (2000 x 1296 h)
        ("mpt-7b", 0.0319),  # 4 / (55 x 228 h)
        ("meta-rsc", 100 * 6.5 / 1000 / 24),  # 6.5 per 1000 node-days
    ],
)
def test_failure_rate_presets(preset, published_pct_per_instance_hour):
    fm = FailureModel.preset(preset)
    assert _within(100 * fm.rate_per_instance_hour, published_pct_per_instance_hour)
    if fm.rate_ci_low_per_instance_hour is not None:
        assert fm.rate_ci_low_per_instance_hour < fm.rate_per_instance_hour
        assert fm.rate_per_instance_hour < fm.rate_ci_high_per_instance_hour


def test_cluster_mtbf_512_instances_at_004_pct():
    assert _within(FailureModel.exponential(4e-4).cluster_mtbf_hours(512), 4.9)


@pytest.mark.parametrize(("gpus", "job_mttf_hours"), [(16_384, 1.8), (131_072, 0.23)])
def test_meta_rsc_job_mttf(gpus, job_mttf_hours):
    # Kokolis et al. 2024: 6.5 failures / 1000 node-days, 8 GPUs per node
    fm = FailureModel.preset("meta-rsc")
    assert _within(fm.cluster_mtbf_hours(gpus // 8), job_mttf_hours)


def test_aws_hyperpod_claim_with_default_profiles():
    # 256 instances x 8 GPUs, 0.05%/instance-hour (MTBF 7.8 h), 10M GPU-hours of work,
    # default manual/automatic profiles, $4.50 per GPU-hour -> ~32% shorter, ~$25M saved
    p = project(_spec(), monte_carlo_runs=0)
    assert _within(p.cluster_mtbf_hours, 7.8)
    (s,) = p.savings
    assert (s.baseline, s.mode) == ("manual", "automatic")
    assert _within(s.percent, 32)
    assert _within(s.usd, 25e6)


def test_first_order_ettr_matches_daly_when_failures_are_rare():
    prof = DEFAULT_RECOVERY["automatic"]
    lam = 1 / 200.0
    goodput = 1000 / expected_wall_hours(1000, lam, prof)
    assert abs(first_order_ettr(lam, prof) - goodput) < 2e-3
    # and it is clearly lower when failures are frequent (first order ignores higher terms)
    assert first_order_ettr(1 / 2, prof) < first_order_ettr(1 / 20, prof)


# ---------------------------------------------------------------- the analytic model itself


def test_daly_closed_form_when_interval_divides_work():
    prof = RecoveryProfile(0.2, 0.3, 0.5, 2.0, 0.1)
    m = 10.0
    closed = m * math.exp(1.0 / m) * (math.exp(2.1 / m) - 1) * 100 / 2.0
    assert expected_wall_hours(100, 1 / m, prof) == pytest.approx(closed, rel=1e-12)


def _event_by_event(segs, lam, r_h, runs, rng):
    """An independent, slow, one-failure-at-a-time simulation of the same process."""
    totals = []
    for _ in range(runs):
        t = 0.0
        for s in segs:
            while (x := rng.exponential(1 / lam)) < s:
                t += x
                while (y := rng.exponential(1 / lam)) < r_h:
                    t += y
                t += r_h
            t += s
        totals.append(t)
    return np.array(totals)


@pytest.mark.parametrize(
    ("n_full", "lam"),
    [(9, 0.2), (60, 0.5)],  # ~5 failures per run (exact draws) and ~50 (Gamma sums)
)
def test_daly_and_monte_carlo_match_event_by_event_simulation(n_full, lam):
    tau, delta, r_h = 2.0, 0.1, 1.0
    work = n_full * tau + 1.0
    prof = RecoveryProfile(0.25, 0.5, 0.25, tau, delta)
    ref = _event_by_event([tau + delta] * n_full + [1.0 + delta], lam, r_h, 3000, np.random.default_rng(7))
    assert ref.mean() == pytest.approx(expected_wall_hours(work, lam, prof), rel=0.02)
    spec = _spec(
        instances=1,
        failure=FailureModel.exponential(lam),
        gpus_per_instance=1,
        gpu_hours=work,
        recovery={"manual": prof},
    )
    mc = monte_carlo(spec, "manual", 20_000, seed=2)
    for q, value in ((10, mc.p10_days), (50, mc.p50_days), (90, mc.p90_days)):
        assert value * 24 == pytest.approx(np.percentile(ref, q), rel=0.02)


@pytest.mark.parametrize(
    ("instances", "rate", "work_gpu_hours"),
    [(256, 5e-4, 1e7), (16, 1e-4, 2e5), (2048, 2.7e-4, 2e6), (4, 1e-3, 500)],
)
def test_monte_carlo_agrees_with_analytic_for_exponential(instances, rate, work_gpu_hours):
    spec = _spec(instances=instances, failure=FailureModel.exponential(rate), gpu_hours=work_gpu_hours)
    p = project(spec, monte_carlo_runs=20_000, seed=3)
    for m in p.modes.values():
        assert m.monte_carlo is not None
        assert m.monte_carlo.mean_days == pytest.approx(m.expected_days, rel=0.01)
        assert m.monte_carlo.mean_interruptions == pytest.approx(m.expected_interruptions, rel=0.03, abs=0.05)
        mc = m.monte_carlo
        assert mc.p10_days <= mc.p50_days <= mc.p90_days


def test_young_daly_optimum_is_the_minimum_of_the_analytic_curve():
    prof = RecoveryProfile(0.5, 1.0, 0.5, 1.0, 0.1)
    lam, work = 1 / 8.0, 5000.0
    taus = np.linspace(0.1, 6.0, 2000)
    curve = np.array([expected_wall_hours(work, lam, prof.with_interval(t)) for t in taus])
    tau_yd = young_daly_interval_hours(0.1, 8.0)
    assert abs(taus[curve.argmin()] - tau_yd) / tau_yd < 0.10
    at_yd = expected_wall_hours(work, lam, prof.with_interval(tau_yd))
    assert at_yd <= curve.min() * 1.002
    assert curve[0] > at_yd and curve[-1] > at_yd  # it is an interior minimum
    m = project(
        _spec(failure=FailureModel.exponential(lam / 256), gpu_hours=work * 2048, recovery={"manual": prof}),
        monte_carlo_runs=0,
    ).modes["manual"]
    assert m.optimal_expected_days * 24 <= curve.min() * (1 + 1e-5)  # floor of W/tau aside
    assert m.optimal_saves_days >= 0


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(1e-5, 2e-3),
    factor=st.floats(1.0, 3.0),
    downtime=st.floats(0.0, 6.0),
    extra=st.floats(0.0, 3.0),
    tau=st.floats(0.1, 5.0),
    delta=st.floats(0.0, 0.5),
)
def test_more_failures_or_slower_recovery_never_shortens_training(rate, factor, downtime, extra, tau, delta):
    prof = RecoveryProfile(0.0, 0.0, downtime, tau, delta)
    slower = RecoveryProfile(0.0, 0.0, downtime + extra, tau, delta)
    lam = 64 * rate
    base = expected_wall_hours(3000, lam, prof)
    ulps = 1 + 1e-12  # monotone up to rounding: a factor of 1 + 1 ulp may round the result down
    assert expected_wall_hours(3000, lam * factor, prof) * ulps >= base
    assert expected_wall_hours(3000, lam, slower) * ulps >= base
    assert base >= 3000  # never faster than failure-free
    assert first_order_ettr(lam * factor, slower) <= first_order_ettr(lam, prof) * ulps


def test_superposed_weibull_instances_look_poisson():
    # Drenick: 256 instances with k = 0.7 gaps -> cluster gaps ~ exponential with rate N/mean
    fm = FailureModel.weibull(0.7, 2000.0)
    times = superposed_failure_times(fm, 256, 20_000.0, np.random.default_rng(11))
    expected_count = 256 * 20_000.0 / fm.mean_tbf_hours
    assert _within(len(times), expected_count, 0.05)
    gaps = np.diff(times)
    assert _within(gaps.std() / gaps.mean(), 1.0, 0.05)
    assert _within(fm.cluster_rate_per_hour(256), 256 / (2000 * math.gamma(1 + 1 / 0.7)), 1e-9)
    # a single Weibull instance is NOT Poisson: k < 1 gives over-dispersed gaps
    one = np.diff(superposed_failure_times(fm, 1, 2e6, np.random.default_rng(1)))
    assert one.std() / one.mean() > 1.2


# ---------------------------------------------------------------- outputs


def test_rate_uncertainty_widens_the_spread_and_seed_reproduces():
    spec = _spec(failure=FailureModel.preset("mpt-7b"), gpu_hours=2e6)
    a = monte_carlo(spec, "manual", 4000, seed=5)
    b = monte_carlo(spec, "manual", 4000, seed=5, rate_uncertainty=True)
    assert a == monte_carlo(spec, "manual", 4000, seed=5)
    assert (b.p90_days - b.p10_days) > 1.5 * (a.p90_days - a.p10_days)


def test_histogram_counts_every_run_once():
    hist = days_histogram(_spec(gpu_hours=1e6), runs=3000, seed=1, bins=25)
    assert hist.group_by("mode").agg(n=hist["runs"].sum()).height == 2
    for mode in ("manual", "automatic"):
        assert hist.filter(mode=mode)["runs"].sum() == 3000
    assert (hist["bin_high_days"] > hist["bin_low_days"]).all()


def test_to_dict_is_json_and_explain_states_the_formula():
    p = project(_spec(gpu_hours=1e6), monte_carlo_runs=500)
    d = json.loads(json.dumps(p.to_dict(), allow_nan=False))
    assert d["modes"]["automatic"]["monte_carlo"]["p50_days"] > d["failure_free_days"]
    assert d["savings"][0]["usd"] == pytest.approx(p.savings[0].usd)
    assert d["savings"][0]["days"] == pytest.approx(p.savings[0].days)
    assert "days" not in d["modes"]["manual"]["monte_carlo"]
    text = explain(p)
    for phrase in ("M exp(R/M)", "sqrt(2 delta M)", "Drenick", "Kokolis", "Monte Carlo"):
        assert phrase in text


def test_sweeps_and_sensitivity():
    spec = _spec()
    by_size = sweep_cluster_size(spec, [16, 256, 2048])  # manual cannot finish at 4096: no savings
    assert by_size["instances"].to_list() == [16, 256, 2048]
    assert by_size["savings_pct"].is_sorted()  # automation matters more on bigger clusters
    assert (by_size["manual_goodput"] <= 1).all()
    assert (
        by_size["automatic_optimal_expected_days"] <= by_size["automatic_expected_days"] * (1 + 1e-9)
    ).all()
    assert by_size["automatic_optimal_interval_hours"].is_sorted(descending=True)
    by_rate = sweep_failure_rate(spec, [1e-4, 5e-4, 1e-3])
    assert by_rate["manual_expected_days"].is_sorted()
    sens = sensitivity_table(spec, [2.0, 3.5, 5.0], [3.0, 6.0])
    assert sens["savings_pct"].is_sorted()
    assert sens["savings_musd_at_6_usd_per_gpu_hour"].to_numpy() == pytest.approx(
        2 * sens["savings_musd_at_3_usd_per_gpu_hour"].to_numpy()
    )


def test_hopeless_job_is_reported_not_simulated():
    p = project(
        _spec(instances=16_384, failure=FailureModel.exponential(1e-3), gpu_hours=1e8), monte_carlo_runs=100
    )
    manual = p.modes["manual"]
    assert manual.monte_carlo is None and "never finishes" in manual.note
    assert json.dumps(p.to_dict(), allow_nan=False)


# ---------------------------------------------------------------- invalid specs


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: _spec(instances=0), "instances"),
        (lambda: _spec(gpu_hours=None, params=7e10, tokens=1e12, mfu=1.3), "mfu must be in (0, 1]"),
        (lambda: _spec(gpu="H900"), "unknown gpu"),
        (lambda: RecoveryProfile(-1.0, 1, 1, 1, 0.1), "detect_hours"),
        (lambda: RecoveryProfile(1, 1, 1, 0, 0.1), "checkpoint_interval_hours"),
        (lambda: FailureModel.exponential(-0.1), "failure rate"),
        (lambda: FailureModel.preset("gpt-5"), "unknown failure-rate preset"),
        (lambda: _spec(gpu_hours=None), "work is undefined"),
        (lambda: _spec(price_per_gpu_hour_usd=0), "price_per_gpu_hour_usd"),
    ],
)
def test_invalid_specs_fail_with_one_clear_line(build, words):
    with pytest.raises(SpecError) as err:
        build()
    msg = str(err.value)
    assert words in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        (("[cluster]", "[cluster]\ncolour = 'red'"), "unknown key 'colour'"),
        (("instances = 256", "instances = '256'"), "key 'instances' must be int"),
        (("[recovery.automatic]", "[recovery.automatic]\ndetect_minutes = 5"), "detect_minutes"),
        (('preset = "llama-3.1"', "rate_per_instance_hour = -1.0"), "failure rate"),
    ],
)
def test_bad_toml_names_file_and_key(tmp_path, patch, words):
    text = LLAMA3_TOML.read_text().replace(*patch)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_job_spec(path)
    msg = str(err.value)
    assert str(path) in msg and words in msg and "\n" not in msg


def test_toml_weibull_instance_price_and_new_mode(tmp_path):
    path = tmp_path / "w.toml"
    path.write_text(
        'name = "w"\n[work]\ngpu = "A100"\nparams = 7e9\ntokens = 1e12\nmfu = 0.4\n'
        "[cluster]\ninstances = 64\nprice_per_instance_hour_usd = 16.0\n"
        "[failures]\nweibull_shape = 0.8\nweibull_scale_hours = 3000.0\n"
        "[recovery.elastic]\ndetect_hours = 0.05\nreplace_hours = 0\nrestart_hours = 0.1\n"
        "checkpoint_interval_hours = 0.5\ncheckpoint_write_hours = 0.01\n"
    )
    spec = load_job_spec(path)
    assert spec.price_per_gpu_hour_usd == pytest.approx(2.0)
    assert spec.work_gpu_hours == pytest.approx(6 * 7e9 * 1e12 / (312e12 * 0.4) / 3600)
    assert spec.failure.kind == "weibull"
    assert spec.failure.cluster_mtbf_hours(64) == pytest.approx(3000 * math.gamma(1 + 1 / 0.8) / 64)
    p = project(spec, monte_carlo_runs=1000)
    assert set(p.modes) == {"manual", "automatic", "elastic"}
    assert p.modes["elastic"].expected_days < p.modes["automatic"].expected_days
    assert "Weibull" in explain(p)


def test_toml_overrides_merge_with_default_profiles():
    spec = load_job_spec(LLAMA3_TOML)
    auto = spec.recovery["automatic"]
    assert auto.detect_hours == pytest.approx(0.0833)
    assert auto.replace_hours == DEFAULT_RECOVERY["automatic"].replace_hours
    assert dataclasses.replace(spec, instances=512).gpus == 4096


# ---------------------------------------------------------------- CLI


def test_cli_project_json_text_explain_and_errors():
    from click.testing import CliRunner

    from pipeline.cli import main

    runner = CliRunner()
    args = [
        "project",
        "--instances",
        "256",
        "--gpu-hours",
        "1e7",
        "--price-per-gpu-hour",
        "4.5",
        "--failure-rate",
        "0.05",
        "--monte-carlo-runs",
        "2000",
    ]
    res = runner.invoke(main, [*args, "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert _within(d["savings"][0]["percent"], 32)
    assert d["modes"]["manual"]["monte_carlo"]["p90_days"] > d["modes"]["manual"]["expected_days"]
    assert {r["instances"] for r in d["sweep_cluster_size"]} >= {16, 16384}
    assert d["sensitivity"] and "Daly" in d["explain"]

    res = runner.invoke(main, ["project", "--spec", str(LLAMA3_TOML), "--explain"])
    assert res.exit_code == 0 and "27% MFU" in res.stdout

    res = runner.invoke(main, ["project", "--spec", str(LLAMA3_TOML), "--mode", "automatic"])
    assert res.exit_code == 0 and "automatic" in res.stdout and "manual" not in res.stdout

    for bad, words in (
        (["--instances", "0"], "instances must be a positive integer"),
        (["--failure-rate", "gpt-9"], "unknown failure-rate preset"),
        (["--gpu", "H900"], "unknown gpu"),
    ):
        res = runner.invoke(main, [*args, *bad])
        assert res.exit_code == 2
        assert words in res.stderr and res.stderr.count("\n") == 1


def test_job_for_fleet_uses_the_fleet_model_for_its_size_and_config_recovery(tmp_path) -> None:
    from pipeline.projection import FailureModel, job_spec_for_fleet

    job = tmp_path / "job.toml"
    job.write_text(
        'name = "j"\n[work]\ngpu_hours = 1e5\n[cluster]\ninstances = 64\nprice_per_gpu_hour_usd = 2.0\n'
        "[recovery.automatic]\ndetect_hours = 0.2\n"
    )
    asked: list[int] = []

    def fleet_failure(instances: int) -> FailureModel:
        asked.append(instances)
        return FailureModel.from_counts(40, 100_000.0, source="test fleet")

    spec = job_spec_for_fleet(
        job, fleet_failure=fleet_failure, recovery={"automatic": {"detect_hours": 0.9, "replace_hours": 0.7}}
    )
    assert asked == [64]  # the model for a job of the job's own size
    assert spec.failure.cluster_rate_per_hour(1) == pytest.approx(40 / 100_000)
    automatic = spec.recovery["automatic"]
    assert (automatic.detect_hours, automatic.replace_hours) == (0.2, 0.7)  # the job's key wins
    with_preset = job_spec_for_fleet(
        {**tomllib.loads(job.read_text()), "failures": {"preset": "opt-175b"}}, fleet_failure=fleet_failure
    )
    assert with_preset.failure.cluster_rate_per_hour(1) == pytest.approx(0.000588, rel=0.01)
    flags = job_spec_for_fleet(job, fleet_failure=fleet_failure, instances=512)
    assert asked[-1] == 512 and flags.instances == 512  # a flag's size is the size that is projected
    with pytest.raises(SpecError, match="job.toml"):
        job_spec_for_fleet(job, fleet_failure=fleet_failure, instances=0)
