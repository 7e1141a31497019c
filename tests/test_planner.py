"""The report's planner (pipeline/report/planner.py) evaluated by Vega itself (vl-convert): its
text at the configured job's settings is `failcast spares` / `failcast project`'s numbers, at moved
settings the model's at those settings, and its in-page spare-pool sums are Engset's formula and
the stall of pipeline/projection/spares.py in every regime (spares below and above the binomial's
mode). The Chromium test that moves a slider is in tests/test_report_browser.py."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import vl_convert
from click.testing import CliRunner

from pipeline import analysis, report, warehouse
from pipeline import projection as proj
from pipeline.cli import main
from pipeline.projection.spares import SparePool
from pipeline.report.planner import planner_settings
from pipeline.report.planner_vega import planner_spec

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "data" / "jobs" / "fleet-llama3-70b.toml"
PROBED = ("r", "lam", "B", "wait", "stall", "replace", "R", "T", "goodput", "interruptions", "cost")


def _texts(node, out: list[str]) -> list[str]:
    if isinstance(node, dict):
        if node.get("marktype") == "text" and node.get("role") == "mark":
            out += [item["text"] for item in node.get("items", [])]
        for value in node.values():
            _texts(value, out)
    elif isinstance(node, list):
        for value in node:
            _texts(value, out)
    return out


def with_values(spec: dict, **values) -> dict:
    """The planner spec with its controls set to ``values`` (as if the sliders were moved)."""
    spec = copy.deepcopy(spec)
    for param in spec["params"]:
        if param["name"] in values:
            param["value"] = values.pop(param["name"])
    assert not values, f"no such control: {values}"
    return spec


def planner_lines(spec: dict, **values) -> list[str]:
    """What the planner shows: the verdict, then the detail lines (axis labels left out)."""
    return [
        t
        for t in _texts(vl_convert.vegalite_to_scenegraph(with_values(spec, **values)), [])
        if not t.replace(",", "").isdigit()
    ][:8]


def probe(vega: dict, **values) -> dict[str, float]:
    """The planner's own transforms evaluated by Vega, every number at full precision (JS's
    shortest round-trip form): its one row drawn as a text mark joining the fields."""
    vega = copy.deepcopy(vega)
    for signal in vega["signals"]:
        if signal["name"] in values:
            signal["value"] = values.pop(signal["name"])
    assert not values
    joined = " + ';' + ".join(f"datum.{f}" for f in PROBED)
    vega["marks"] = [
        {"type": "text", "from": {"data": "probe"}, "encode": {"update": {"text": {"signal": joined}}}}
    ]
    vega["data"].append(
        {"name": "probe", "source": vega["data"][0]["name"]}
    )  # after the planner's transforms
    vega.pop("layout", None)
    vega.pop("legends", None)
    vega.pop("scales", None)
    vega["signals"] = [s for s in vega["signals"] if "bind" in s or s["name"] in ("width", "height")]
    (text,) = _texts(vl_convert.vega_to_scenegraph(vega), [])
    return dict(zip(PROBED, (float(v) for v in text.split(";")), strict=True))


@pytest.fixture(scope="module")
def fleet(sample_warehouse) -> analysis.FleetAnalysis:
    con = warehouse.connect(sample_warehouse, read_only=True)
    try:
        return analysis.analyze(con)
    finally:
        con.close()


def _outlook(fleet, path: Path = JOB) -> report.JobOutlook:
    spec = proj.job_spec_for_fleet(path, fleet_failure=lambda n: analysis.failure_model_for(fleet, n))
    return report.job_outlook(spec, monte_carlo_runs=0, repair=analysis.repair_curve(fleet.repairs))


@pytest.fixture(scope="module")
def planner(fleet) -> tuple[dict, report.JobOutlook]:
    outlook = _outlook(fleet)
    return planner_spec(planner_settings(fleet, outlook)), outlook


def _cli_json(*args: str) -> dict:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _verdict(days: float, goodput: float, cost: float | None) -> str:
    return f"{days:,.1f} days, goodput {goodput:.1%}" + ("" if cost is None else f", cost ${cost:,.0f}")


def test_at_the_configured_settings_the_planner_shows_the_clis_numbers(planner, fleet, sample_warehouse):
    spec, outlook = planner
    db = str(sample_warehouse)
    spares = _cli_json("spares", "--db", db, "--spec", str(JOB))
    s = spares["recommended"]
    row = spares["table"][s]
    lines = planner_lines(spec)
    assert lines[0] == _verdict(row["expected_days"], row["goodput"], row["cost_usd"])
    assert (
        f"with {s} hot spares" in lines[1]
        and f"{row['expected_interruptions']:,.0f} expected interruptions" in lines[1]
    )
    assert f"finds a free spare {row['free_spare_probability']:.1%}" in lines[2]
    assert (
        f"waits {row['mean_wait_hours']:,.1f} h" in lines[2]
        and f"stalls {row['mean_stall_hours']:,.1f} h" in lines[3]
    )
    # failcast project puts the same pool's replace time in its automatic mode (days and goodput;
    # its cost is the job's GPUs alone, the planner's adds the spares')
    project = _cli_json(
        "project",
        "--db",
        db,
        "--spec",
        str(JOB),
        "--recovery",
        "measured",
        "--spares",
        str(s),
        "--monte-carlo-runs",
        "0",
    )
    auto = project["modes"]["automatic"]
    assert lines[0].startswith(_verdict(auto["expected_days"], auto["goodput"], None))
    rate = analysis.failure_model_for(fleet, 256)
    assert (
        f"{rate.rate_per_instance_hour * 100:.4f}% per instance-hour" in lines[5] and rate.source in lines[5]
    )


def test_moved_controls_give_the_model_at_the_new_settings(planner, sample_warehouse, tmp_path):
    """Every control moved at once: the planner against failcast spares on a job spec and flags
    with those settings (512 instances: another size bucket's rate)."""
    spec, outlook = planner
    m = outlook.mean_repair_hours * 0.5
    job = tmp_path / "moved.toml"
    job.write_text(
        JOB.read_text()
        + "\n[recovery.automatic]\ndetect_hours = 0.2\nrestart_hours = 0.5\ncheckpoint_interval_hours = 0.5\n"
    )
    cli = _cli_json(
        "spares",
        "--db",
        str(sample_warehouse),
        "--spec",
        str(job),
        "--instances",
        "512",
        "--swap-hours",
        "0.25",
        "--mttr-hours",
        repr(m),
        "--price-per-gpu-hour",
        "3.2",
    )
    for s in (cli["recommended"] - 1, cli["recommended"]):
        row = cli["table"][s]
        lines = planner_lines(
            spec,
            instances=512,
            checkpoint_h=0.5,
            detect_min=12,
            restart_min=30,
            spares=s,
            swap_min=15,
            repair_x=0.5,
            price=3.2,
        )
        assert lines[0] == _verdict(row["expected_days"], row["goodput"], row["cost_usd"])
        assert f"512 instances × 8 GPUs with {s} hot spares, checkpoint every 30 min" in lines[1]
        assert "$3.20 per GPU-hour" in lines[6]


def test_the_rate_at_any_size_is_the_one_failcast_project_uses(planner, fleet):
    """Measured buckets, the size law beyond them, and sizes between buckets."""
    spec, _ = planner
    vega = vl_convert.vegalite_to_vega(spec)
    for n in (8, 100, 256, 700, 1024, 3000, 16_384):
        model = analysis.failure_model_for(fleet, n)
        assert probe(vega, instances=n)["r"] == pytest.approx(model.rate_per_instance_hour, rel=1e-12), n
    assert "scaling law MTBF(N)" in planner_lines(spec, instances=16_384)[5]


@pytest.mark.parametrize(
    ("instances", "spares", "repair_x"),
    [
        (256, 0, 1.0),
        (256, 11, 1.0),
        (256, 33, 1.0),
        (8, 2, 0.05),
        (1024, 3, 4.0),
        (1024, 30, 4.0),
        (1, 0, 1.0),
        (256, 5, 0.5),
        (1024, 20, 0.5),
        (1024, 33, 1.0),
        (1024, 37, 1.0),
    ],
)  # on this fleet the mode of the number in repair is 11, 5, 19, 38 and 38 in the cases at 1.0 and 0.5
def test_in_page_pool_sums_are_engsets_formula_and_the_stall(planner, fleet, instances, spares, repair_x):
    """Spares far below the mode of the number in repair (total minus head), far above it (the
    tail rows) and at it; one instance; no spare. Days from Daly's model with the pool's replace."""
    spec, outlook = planner
    got = probe(vl_convert.vegalite_to_vega(spec), instances=instances, spares=spares, repair_x=repair_x)
    job = dataclasses.replace(outlook.pool_spec, instances=instances)
    rate = analysis.failure_model_for(fleet, instances).rate_per_instance_hour
    pool = SparePool(instances, rate, outlook.mean_repair_hours * repair_x, 10 / 60)
    assert got["B"] == pytest.approx(pool.no_spare_probability(spares), rel=1e-9, abs=1e-300)
    assert got["stall"] == pytest.approx(pool.mean_stall_hours(spares), rel=1e-7)
    assert got["replace"] == pytest.approx(pool.replace_hours(spares), rel=1e-9)
    profile = dataclasses.replace(job.recovery["automatic"], replace_hours=pool.replace_hours(spares))
    wall = proj.expected_wall_hours(job.failure_free_hours, instances * rate, profile)
    assert got["T"] == pytest.approx(wall, rel=1e-9) if wall < float("inf") else got["T"] > 1e300


def test_a_job_that_cannot_finish_says_so_and_compares_nothing(planner):
    spec, outlook = planner
    lines = planner_lines(spec, instances=1024, spares=0)
    assert lines[0].startswith("Cannot finish: goodput ") and "under 1%" in lines[0]
    assert "expected interruptions" not in lines[1] and "$" not in lines[0]
    job = dataclasses.replace(outlook.pool_spec, instances=1024)
    advice = proj.spare_advice(job, outlook.mean_repair_hours)
    assert advice.table["status"][0].startswith("cannot finish")


def test_without_a_price_the_cost_is_left_out_and_said(fleet, sample_warehouse, tmp_path):
    job = tmp_path / "no-price.toml"
    job.write_text(JOB.read_text().replace("price_per_gpu_hour_usd = 4.50", ""))
    spec = planner_spec(planner_settings(fleet, _outlook(fleet, job)))
    lines = planner_lines(spec)
    row_s = _cli_json("spares", "--db", str(sample_warehouse), "--spec", str(job))
    row = row_s["table"][row_s["recommended"]]
    assert lines[0] == _verdict(row["expected_days"], row["goodput"], None)
    assert "No price: the cost is left out" in lines[6]
    assert planner_lines(spec, price=2.0)[0].endswith(
        f"cost ${row['expected_days'] * 24 * (256 + row_s['recommended']) * 8 * 2:,.0f}"
    )


def test_without_repair_times_the_replace_time_is_a_control_and_project_agrees(tmp_path):
    """A fleet with an inventory and no failure: the rate is the upper bound, no spare pool."""
    inventory = tmp_path / "inventory.csv"
    inventory.write_text(
        "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n"
        + "".join(f"c1,n{i},p5,8,2026-01-01T00:00:00Z,\n" for i in range(16))
        + "login,l1,m7i.large,0,2026-01-01T00:00:00Z,2026-03-01T00:00:00Z\n"  # the window's end
    )
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(main, ["ingest", str(inventory), "--db", str(db)])
    assert result.exit_code == 0, result.output
    con = warehouse.connect(db, read_only=True)
    fleet = analysis.analyze(con)
    con.close()
    settings = planner_settings(fleet, _outlook(fleet))
    assert not settings.pool and "replace_min" in {c.name for c in settings.controls}
    lines = planner_lines(planner_spec(settings), replace_min=30)
    project = _cli_json("project", "--db", str(db), "--spec", str(JOB), "--monte-carlo-runs", "0")
    auto = project["modes"]["automatic"]
    moved = dataclasses.replace(
        _outlook(fleet).pool_spec,
        recovery={"automatic": dataclasses.replace(proj.DEFAULT_RECOVERY["automatic"], replace_hours=0.5)},
    )
    at_30 = proj.project(moved, monte_carlo_runs=0).modes["automatic"]
    assert lines[0] == _verdict(at_30.expected_days, at_30.goodput, at_30.cost_usd)
    assert planner_lines(planner_spec(settings))[0] == _verdict(
        auto["expected_days"], auto["goodput"], auto["cost_usd"]
    )
    assert "UPPER BOUND" in lines[3] and "hot spare" not in " ".join(lines)


def test_a_job_with_its_own_rate_keeps_it_and_any_source_text_is_a_string(fleet, tmp_path):
    """A spec's own rate (not the fleet's) is the same per instance at every size, and its source
    text, quotes, backslashes and line breaks included, stays a string in the expressions."""
    source = 'ops\' "sheet" \\ 2026\n</script><b>x</b>'
    failure = proj.FailureModel.exponential(0.0004, source=source)
    spec = proj.JobSpec(128, 2.0, failure, gpu_hours=1e6, name="own-rate")
    outlook = report.job_outlook(spec, monte_carlo_runs=0, repair=analysis.repair_curve(fleet.repairs))
    vl = planner_spec(planner_settings(fleet, outlook))
    assert probe(vl_convert.vegalite_to_vega(vl), instances=1024)["r"] == 0.0004
    (rate_line,) = [t for t in planner_lines(vl) if t.startswith("Failure rate at this size")]
    assert "0.0400% per instance-hour" in rate_line and source in rate_line
