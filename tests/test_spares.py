"""The spare pool (pipeline/projection/spares.py) against its formulas' sources and a node-by-node
simulation; `failcast spares`, `project`, `report` and `run` on a fleet with measured repairs and
no prices (400 GPU servers, built here)."""

from __future__ import annotations

import gc
import json
import math
from math import comb

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import integrate

from pipeline import analysis, ingest, models, report, sample, warehouse
from pipeline.cli import main
from pipeline.projection import (
    FailureModel,
    JobSpec,
    RepairCurve,
    SparePool,
    project,
    spare_advice,
    with_measured_recovery,
)
from pipeline.projection.spares_sim import simulate_pool

LOGNORMAL = RepairCurve.from_repairs(np.random.default_rng(3).lognormal(np.log(15), 1.3, 4000))


def _engset(n_sources: int, servers: int, beta: float) -> float:
    terms = [comb(n_sources, k) * beta**k for k in range(servers + 1)]
    return terms[-1] / sum(terms)


@pytest.mark.parametrize(
    ("instances", "spares", "rate", "mttr"),
    [(256, 0, 5e-4, 38), (256, 4, 5e-4, 38), (16, 2, 1e-3, 10), (1, 1, 1e-2, 50)],
)
def test_no_spare_probability_is_engsets_formula_over_n_plus_s_nodes(instances, spares, rate, mttr):
    pool = SparePool(instances, rate, mttr)
    assert pool.no_spare_probability(spares) == pytest.approx(
        _engset(instances + spares, spares, rate * mttr)
    )
    assert pool.mean_wait_hours(spares) == pytest.approx(mttr / (spares + 1))


def test_engset_tends_to_erlangs_loss_formula_with_many_nodes():
    """N -> inf with N r m = A fixed: Erlang B, E(S, A) = (A^S / S!) / sum_k A^k / k!."""
    a, s = 4.5, 6
    erlang_b = (a**s / math.factorial(s)) / sum(a**k / math.factorial(k) for k in range(s + 1))
    pool = SparePool(2_000_000, a / 2_000_000 / 38.0, 38.0)
    assert pool.no_spare_probability(s) == pytest.approx(erlang_b, rel=1e-4)
    # the M/G/inf tail used before counts failures of a stalled job too: it is the larger
    assert pool.no_spare_probability(s) < 1 - sum(math.exp(-a) * a**k / math.factorial(k) for k in range(s))


def test_the_wait_for_the_earliest_repair_has_mean_m_over_s_plus_1_for_any_curve():
    """E[min(G, R_1..R_S)] = m / (S + 1) whatever G: integrate the curve's wait survival."""
    curve = LOGNORMAL
    for s in (0, 1, 3, 8):
        grid = np.unique(
            np.concatenate([curve.timeline_hours, np.linspace(0, curve.timeline_hours[-1], 20001)])
        )
        mean = integrate.trapezoid(curve.wait_survival(grid, s), grid)
        assert mean == pytest.approx(curve.mean_hours / (s + 1), rel=2e-3)
    assert curve.wait_survival(np.array([0.0]), 3)[0] == pytest.approx(1.0)


def test_repair_curve_mean_is_the_kaplan_meier_restricted_mean_with_censoring():
    rng = np.random.default_rng(5)
    hours = rng.lognormal(np.log(15), 1.2, 500)
    left = rng.uniform(0, 200, 500)
    done = hours <= left
    fit = models.RepairTimes().fit(np.minimum(hours, left), done)
    curve = RepairCurve(fit.timeline_hours_, fit.survival_, fit.mean_confidence_interval_)
    assert curve.mean_hours == pytest.approx(fit.mean_hours_, rel=1e-9)
    draws = curve.sample(200_000, rng)
    assert draws.mean() == pytest.approx(curve.mean_hours, rel=0.02)


CASES = [  # (instances, spares, rate, repair curve, horizon)
    (64, 3, 2e-3, "exponential", 300_000),
    (256, 5, 5e-4, "lognormal", 400_000),
    (16, 1, 1e-3, "lognormal", 1_000_000),
    (256, 8, 5e-4, "lognormal", 1_500_000),
]


@pytest.mark.parametrize(("instances", "spares", "rate", "kind", "horizon"), CASES)
def test_analytic_pool_matches_a_node_by_node_simulation(instances, spares, rate, kind, horizon):
    """p(S) and the mean wait for the earliest repair within 5 batch-means standard errors of the
    simulation (20 batches: the error estimate is itself uncertain by ~16%); the stall (failures
    during the wait included) within 5% for exponential repairs, where the birth-death first
    passage is exact, and within 8% for lognormal ones."""
    if kind == "exponential":
        curve = RepairCurve.from_repairs(np.random.default_rng(1).exponential(20.0, 20_000))
    else:
        curve = LOGNORMAL
    pool = SparePool(instances, rate, curve.mean_hours)
    sim = simulate_pool(instances, spares, rate, curve, horizon, np.random.default_rng(spares))
    assert sim.interruptions > 2000 and sim.stalls > 200
    assert (
        abs(sim.free_spare_probability - pool.free_spare_probability(spares))
        < 5 * sim.free_spare_probability_se
    )
    assert abs(sim.mean_wait_hours - pool.mean_wait_hours(spares)) < 5 * sim.mean_wait_hours_se
    assert sim.mean_in_repair == pytest.approx(pool.mean_in_repair(spares), rel=0.05)
    stall = pool.mean_stall_hours(spares)
    assert sim.mean_stall_hours == pytest.approx(stall, rel=0.08 if kind == "lognormal" else 0.05)


def _spec(**kw) -> JobSpec:
    base = dict(
        instances=256,
        price_per_gpu_hour_usd=4.5,
        gpu_hours=3e6,
        failure=FailureModel.exponential(4.6e-4, 4.2e-4, 5.0e-4),
    )
    return JobSpec(**(base | kw))


def test_advice_holds_the_spares_that_pay_and_the_99_row():
    curve = RepairCurve(LOGNORMAL.timeline_hours, LOGNORMAL.survival, (30.0, 42.0))
    advice = spare_advice(_spec(), curve)
    t = advice.table
    cost = dict(zip(t["spares"], t["cost_usd"], strict=True))
    s = advice.recommended
    assert cost[s] <= cost[s - 1] and cost[s] <= cost[s + 1]  # the minimum of the job's cost
    assert advice.low <= s <= advice.high and advice.low < advice.high
    p = dict(zip(t["spares"], t["free_spare_probability"], strict=True))
    row = advice.probability_row
    assert p[row] >= 0.99 > p[row - 1]
    assert t["expected_days"].is_null()[0] or (t["expected_days"].diff().drop_nulls() < 0).all()
    # no price: the rule is the share of the days, and no cost anywhere
    free = spare_advice(_spec(price_per_gpu_hour_usd=None), curve, min_saving_pct=1.0)
    days = dict(zip(free.table["spares"], free.table["expected_days"], strict=True))
    k = free.recommended
    assert days[k] - days[k + 1] < 0.01 * days[k] <= days[k - 1] - days[k]
    assert free.table["cost_usd"].is_null().all() and "no price" in free.rule


def test_measured_automatic_mode_is_the_spare_tables_99_row():
    spec = _spec(price_per_gpu_hour_usd=None)
    measured, sources = with_measured_recovery(spec, {"repair_hours": LOGNORMAL.mean_hours})
    advice = spare_advice(spec, LOGNORMAL)
    row = advice.table.row(advice.probability_row, named=True)
    auto = project(measured, monte_carlo_runs=0).modes["automatic"]
    assert auto.expected_days == pytest.approx(row["expected_days"], rel=1e-9)
    assert auto.expected_interruptions == pytest.approx(row["expected_interruptions"], rel=1e-9)
    assert [r["spares"] for r in sources if r.get("spares") is not None] == [advice.probability_row]


def test_no_price_and_a_mode_that_cannot_finish_compare_nothing():
    spec = _spec(price_per_gpu_hour_usd=None)
    measured, _ = with_measured_recovery(spec, {"repair_hours": 261.0})
    p = project(measured, monte_carlo_runs=200)
    manual, auto = p.modes["manual"], p.modes["automatic"]
    assert not manual.finishes and math.isinf(manual.expected_days) and manual.monte_carlo is None
    assert auto.finishes and auto.cost_usd is None and p.failure_free_cost_usd is None
    assert p.savings == [] and p.not_compared == ["manual"]
    d = p.to_dict()
    assert d["modes"]["manual"]["expected_days"] is None and d["modes"]["manual"]["cost_usd"] is None
    assert json.dumps(d, allow_nan=False)


# ---------------------------------------------------------------- a fleet with repairs, no prices

JOBS = """
[[jobs]]
name = "small-run"
[jobs.work]
gpu_hours = 2.0e5
[jobs.cluster]
instances = 64

[[jobs]]
name = "big-run"
[jobs.work]
gpu_hours = 3.0e6
[jobs.cluster]
instances = 256
"""


@pytest.fixture(scope="module")
def fleet_400(tmp_path_factory):
    """400 GPU servers of one cluster, 90 days, lognormal repairs (resolved_at), and a config with
    two jobs and no prices."""
    root = tmp_path_factory.mktemp("fleet400")
    fleet = sample.simulate_fleet(sample.FleetSpec(cluster_sizes=(400,), days=90.0, seed=29))
    incidents, inventory = fleet.write(root / "input")
    db = root / "w.duckdb"
    con = warehouse.connect(db)
    ingest.ingest_files(con, [inventory, incidents])
    con.close()
    config = root / "failcast.toml"
    config.write_text(
        f'warehouse = "{db}"\nreport_dir = "{root / "reports"}"\nrecovery_source = "measured"\n'
        f'[inputs]\ninventory = ["{inventory}"]\ncsv = ["{incidents}"]\n{JOBS}'
    )
    return root, db, config


def _invoke(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_project_without_a_price_prints_days_goodput_and_interruptions(fleet_400):
    _, db, _ = fleet_400
    args = ["project", "--db", str(db), "--instances", "256", "--gpu-hours", "3000000"]
    out = _invoke(*args, "--recovery", "measured", "--monte-carlo-runs", "200").stdout
    assert "$" not in out and out.count("no price given") == 1
    assert "days  goodput" in out and "interruptions" in out
    assert "saves" not in out or "cannot finish" not in out  # never a saving against a hopeless mode
    payload = json.loads(_invoke(*args, "--recovery", "measured", "--monte-carlo-runs", "0", "--json").stdout)
    assert payload["modes"]["automatic"]["cost_usd"] is None
    for m in payload["modes"].values():  # no astronomical numbers: a hopeless mode is null
        assert m["expected_days"] is None or m["expected_days"] < 1e5


def test_spares_command_on_measured_repairs_without_a_price(fleet_400):
    _, db, _ = fleet_400
    args = ["spares", "--db", str(db), "--instances", "256", "--gpu-hours", "3000000"]
    out = _invoke(*args).stdout
    assert out.splitlines()[1].startswith("recommended: ") and "no price" in out and "$" not in out
    d = json.loads(_invoke(*args, "--json").stdout)
    with warehouse.connect(db, read_only=True) as con:  # closed before the run test writes the file
        fleet = analysis.analyze(con)
    rate = analysis.failure_model_for(fleet, 256).rate_per_instance_hour
    assert d["probability_row"] == analysis.spares_for_job(fleet.repairs.times, 256, rate)["spares"]
    assert d["recommended_low"] <= d["recommended"] <= d["recommended_high"]
    assert [r["spares"] for r in d["table"]] == list(range(len(d["table"])))
    priced = json.loads(_invoke(*args, "--price-per-gpu-hour", "4.5", "--json").stdout)
    assert priced["priced"] and priced["table"][priced["recommended"]]["cost_usd"] > 0


def test_report_shows_every_job_and_their_spares(fleet_400, tmp_path):
    root, db, _ = fleet_400
    jobs = []
    for name, instances in (("small-run", 64), ("big-run", 256)):
        jobs += ["--job", str(tmp_path / f"{name}.toml")]
        (tmp_path / f"{name}.toml").write_text(
            f'name = "{name}"\n[work]\ngpu_hours = 2e5\n[cluster]\ninstances = {instances}\n'
        )
    out = tmp_path / "r.html"
    _invoke("report", "--db", str(db), *jobs, "--out", str(out), "--no-images", "--monte-carlo-runs", "200",
            "--recovery", "measured")  # fmt: skip
    html = out.read_text()
    for needle in ("id='configured-jobs'", "id='hot-spares'", "small-run", "big-run", "None given: costs"):
        assert needle.lower() in html.lower()
    assert "$nan" not in html.lower() and "inf days" not in html


def test_run_reports_every_configured_job_and_their_spares(fleet_400):
    root, _, config = fleet_400
    gc.collect()  # the read-only connections of the commands run in this process before (a fleet's
    # lazy incidents keep theirs open until collected): DuckDB refuses a writer beside them
    _invoke("run", "--config", str(config))
    html = (root / "reports" / "latest.html").read_text()
    for needle in ("id='configured-jobs'", "id='hot-spares'", "small-run", "big-run", "None given: costs"):
        assert needle.lower() in html.lower()
    assert "$nan" not in html.lower() and "inf days" not in html


def test_a_measured_reports_spare_table_is_failcast_spares_with_the_assumed_swap(fleet_400):
    """The report measures recovery for its projection, but its spare table keeps the assumed swap
    (the pool builds its own replace time), as failcast spares --recovery measured does."""
    _, db, _ = fleet_400
    args = ["spares", "--db", str(db), "--instances", "256", "--gpu-hours", "3000000", "--recovery"]
    cli = json.loads(_invoke(*args, "measured", "--json").stdout)
    with warehouse.connect(db, read_only=True) as con:  # closed before the run test writes the file
        fleet = analysis.analyze(con)
    spec = JobSpec(256, None, gpu_hours=3e6, failure=analysis.failure_model_for(fleet, 256))
    outlook = report.job_outlook(
        spec, monte_carlo_runs=0, measured=analysis.measured_recovery_hours(fleet.repairs, fleet.jobs),
        repair=analysis.repair_curve(fleet.repairs),
    )  # fmt: skip
    assert cli["swap_hours"] == pytest.approx(10 / 60)
    table = outlook.spares.filter(outlook.spares["spares"] < len(cli["table"]))
    assert table["expected_days"].to_list() == pytest.approx([r["expected_days"] for r in cli["table"]])
