"""What :class:`pipeline.analysis.FleetAnalysis` keeps instead of row frames (issue 27): the repair
summaries, fit and curves (:class:`pipeline.analysis.RepairAnalysis`) and the rate tables per
instance type (:func:`pipeline.analysis.rates_by_instance_type`), each checked against the
computation on the rows it replaced, and read by the report and the metrics without
recomputing them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline import analysis, ingest, models, report, transform, warehouse
from pipeline.report.metrics import MetricInputs, render_metrics
from tests._fleets import AnalysisRows, analysis_rows
from tests.conftest import SAMPLE_SPEC

EXACT = {"check_exact": False, "rel_tol": 1e-12, "abs_tol": 0.0}  # sums of floats in another order


def _analyze(db: Path, options: analysis.AnalysisOptions = analysis.DEFAULT_OPTIONS):
    con = warehouse.connect(db, read_only=True)
    try:
        return analysis.analyze(con, options), analysis_rows(con, options)
    finally:
        con.close()


@pytest.fixture(scope="module")
def sample_pair(sample_warehouse) -> tuple[analysis.FleetAnalysis, AnalysisRows]:
    return _analyze(sample_warehouse)


# --- repairs ---------------------------------------------------------------------------------------
def test_repair_summaries_are_the_summaries_of_the_outage_rows(sample_pair):
    fleet, rows = sample_pair
    repairs = fleet.repairs
    summary = lambda by: analysis.repair_summary(rows.outages, rows.exposure, rows.rate_exposure, by)  # noqa: E731
    assert rows.outages.height > 100 and repairs.outages == rows.outages.height
    assert repairs.total == summary(()).row(0, named=True)
    assert_frame_equal(repairs.by_cluster, summary(["cluster_id"]), **EXACT)
    assert_frame_equal(repairs.by_category, summary(["category"]), **EXACT)
    assert repairs.by_cluster["availability"].is_between(0.5, 1, closed="none").all()
    known = rows.outages.drop_nulls("repair_hours")
    truth = models.RepairTimes().fit(known["repair_hours"], known["resolved"])
    assert repairs.times.mean_hours_ == truth.mean_hours_ and repairs.times.quantiles_ == truth.quantiles_
    np.testing.assert_array_equal(repairs.times.timeline_hours_, truth.timeline_hours_)


def test_repair_curves_are_each_groups_kaplan_meier_thinned_to_one_budget(sample_pair):
    fleet, rows = sample_pair
    curves = fleet.repairs.curves
    known = rows.outages.drop_nulls("repair_hours")
    categories = sorted(known.filter("resolved")["category"].unique())
    groups = curves["group"].unique(maintain_order=True).to_list()
    assert groups == [analysis.ALL_OUTAGES, *categories]
    per_curve = transform.MAX_CURVE_POINTS // len(groups)
    for group in groups:
        part = known if group == analysis.ALL_OUTAGES else known.filter(pl.col("category") == group)
        fit = models.RepairTimes().fit(part["repair_hours"], part["resolved"])
        curve = curves.filter(pl.col("group") == group)
        assert curve.height == min(per_curve, fit.timeline_hours_.size)
        if group == analysis.ALL_OUTAGES:
            assert curve.height < fit.timeline_hours_.size  # thinned
        # step points of the fit itself, its first and last among them, in order
        at = np.searchsorted(fit.timeline_hours_, curve["hours"].to_numpy())
        np.testing.assert_array_equal(fit.timeline_hours_[at], curve["hours"].to_numpy())
        np.testing.assert_array_equal(fit.survival_[at], curve["unrepaired"].to_numpy())
        assert at[0] == 0 and at[-1] == fit.timeline_hours_.size - 1 and (np.diff(at) > 0).all()
    assert curves.height <= transform.MAX_CURVE_POINTS


def test_no_completed_repair_has_no_fit_and_no_curve():
    outages = pl.DataFrame(
        {
            "cluster_id": ["a", "a"],
            "node_id": ["a1", "a2"],
            "category": ["host", "gpu"],
            "start_utc": [None, None],
            "interruptions": [1, 2],
            "repair_hours": [None, 5.0],
            "resolved": [None, False],  # one unknown end, one still open
            "downtime_hours": [0.0, 5.0],
        },
        schema_overrides={"start_utc": pl.Datetime("us"), "resolved": pl.Boolean},
    )
    exposure = pl.DataFrame(
        {"cluster_id": ["a"], "node_id": ["a1"], "node_hours": [100.0]},
    )
    repairs = analysis.repair_analysis(outages, exposure, exposure, "calendar")
    assert repairs.times is None and repairs.curves.is_empty()
    assert repairs.outages == 2 and repairs.total["unresolved"] == 1 and repairs.total["unknown_end"] == 1
    assert repairs.total["interruptions_while_down"] == 1 and repairs.total["mttr_hours"] is None
    assert repairs.by_category["category"].to_list() == ["gpu", "host"]


def test_report_and_metrics_read_the_repairs_without_refitting(sample_pair, monkeypatch):
    """The summaries are made once, in analyze: drawing the page and writing the metrics fits
    no repair time again (before issue 27 a run fitted every cluster's twice)."""
    fleet, _ = sample_pair

    def refit(*args, **kwargs):
        raise AssertionError("a repair-time fit outside analyze")

    monkeypatch.setattr(models.RepairTimes, "fit", refit)
    page = report.render_html(fleet)
    assert f"{fleet.repairs.outages:,} outages; " in page
    text = render_metrics(MetricInputs(fleet))
    for cluster, mttr in fleet.repairs.by_cluster.select("cluster_id", "mttr_hours").iter_rows():
        assert f'failcast_cluster_mttr_hours{{cluster="{cluster}"}} {mttr!r}' in text


# --- rates by instance type ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed_db(tmp_path_factory, sample_fleet) -> Path:
    """The sample fleet with two instance types: the 8-instance cluster all "a100", the 16 all
    "p5", the 32 half and half (by node number)."""
    root = tmp_path_factory.mktemp("mixed")
    incidents, inventory = sample_fleet.write(root / "input")
    number = pl.col("node_id").str.extract(r"(\d+)$").cast(pl.Int64)
    size = pl.col("cluster_id").str.extract(r"(\d+)$").cast(pl.Int64)
    a100 = (size == 8) | ((size == 32) & (number % 2 == 0))
    kind = pl.when(a100).then(pl.lit("a100")).otherwise(pl.lit("p5"))
    frame = pl.read_csv(inventory, infer_schema_length=0)
    assert frame["cluster_id"].str.extract(r"(\d+)$").cast(pl.Int64).unique().sort().to_list() == [8, 16, 32]
    frame.with_columns(instance_type=kind).write_csv(inventory)
    con = warehouse.connect(root / "w.duckdb")
    try:
        ingest.ingest_files(con, [inventory, incidents])
    finally:
        con.close()
    return root / "w.duckdb"


@pytest.fixture(scope="module")
def mixed(mixed_db) -> tuple[analysis.FleetAnalysis, AnalysisRows]:
    return _analyze(mixed_db)


def _type_tables_from_rows(fleet, rows: AnalysisRows, kind: str):
    """How ``size_rates`` made a type's tables before issue 27: every rate again on the failure
    rows and the type's intervals (the oracle)."""
    of_type = pl.col("instance_type") == kind
    at_risk = rows.rate_exposure.filter(of_type)
    phi = fleet.nodes.dispersion_test.dispersion(fleet.rates.interval_method)
    by_bucket, by_cluster, total = (
        transform.failure_rates(rows.interruptions, at_risk, by=by, dispersion=phi)
        for by in (["size_bucket"], ["cluster_id"], [])
    )
    return total, by_bucket, analysis.cluster_mtbf(by_cluster, rows.exposure.filter(of_type))


def test_rates_by_instance_type_are_the_rates_of_its_nodes(mixed):
    fleet, rows = mixed
    assert sorted(fleet.instance_type_rates) == ["a100", "p5"]
    for kind, tables in fleet.instance_type_rates.items():
        total, by_bucket, per_cluster = _type_tables_from_rows(fleet, rows, kind)
        assert_frame_equal(tables.overall, total, **EXACT)
        assert_frame_equal(tables.by_size_bucket.sort("size_bucket"), by_bucket.sort("size_bucket"), **EXACT)
        assert_frame_equal(tables.cluster_mtbf, per_cluster, **EXACT)
        assert total["failures"].item() > 20
    # the types split the fleet: their failures and hours add up to the fleet's
    overall = pl.concat(t.overall for t in fleet.instance_type_rates.values())
    assert overall["failures"].sum() == fleet.rates.overall["failures"].item()
    hours = fleet.rates.overall["exposure_node_hours"].item()
    assert overall["exposure_node_hours"].sum() == pytest.approx(hours, rel=1e-12)
    # a cluster's size is the whole cluster's, whatever share of it is of the type
    sizes = dict(fleet.rates.cluster_mtbf.select("cluster_id", "instances").iter_rows())
    for tables in fleet.instance_type_rates.values():
        of_type = tables.cluster_mtbf.select("cluster_id", "instances").iter_rows()
        assert all(sizes[cluster] == n for cluster, n in of_type)


@pytest.mark.parametrize("instances", [8, 16, 32, 1024])
def test_a_jobs_rate_by_instance_type_is_the_types_own(mixed, instances):
    fleet, rows = mixed
    for kind in ("a100", "p5"):
        model = analysis.failure_model_for(fleet, instances, instance_type=kind)
        assert model.source.startswith(f"{kind} nodes: ")
        total, by_bucket, per_cluster = _type_tables_from_rows(fleet, rows, kind)
        measured = by_bucket.filter(pl.col("size_bucket") == instances, pl.col("failures") > 0)
        if measured.height:
            assert model.rate_per_instance_hour == measured["rate_per_node_hour"].item()
        elif analysis.failures.sizes_that_failed(per_cluster) >= 2:
            law = models.MTBFScaling().fit(
                per_cluster["instances"],
                per_cluster["failures"],
                per_cluster["exposure_cluster_hours"],
                dispersion=fleet.fits.count_dispersion,
            )
            (mtbf,), _, _ = law.predict_mtbf_hours([instances])
            assert model.rate_per_instance_hour == pytest.approx(1 / (instances * mtbf), rel=1e-9)
        else:
            assert model.rate_per_instance_hour == total["rate_per_node_hour"].item()


def test_an_unknown_instance_type_names_the_fleets(mixed):
    fleet, _ = mixed
    with pytest.raises(ValueError, match="no nodes of instance type 'h100' in the fleet; it has a100, p5"):
        analysis.failure_model_for(fleet, 64, instance_type="h100")


def test_one_type_fleet_has_the_fleets_tables_for_its_type(sample_pair):
    fleet, _ = sample_pair
    (tables,) = fleet.instance_type_rates.values()
    assert list(fleet.instance_type_rates) == [SAMPLE_SPEC.instance_type]
    assert_frame_equal(tables.overall, fleet.rates.overall, **EXACT)
    assert_frame_equal(tables.cluster_mtbf, fleet.rates.cluster_mtbf, **EXACT)
