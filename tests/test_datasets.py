"""Public data readers: tiny hand-written inputs for the mapping rules, then the real LANL, Titan
and Loghub files (from ../shared/datasets, skipped when absent) through the real pipeline, checked
against the counts in each SOURCE.md and the numbers the original studies published."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy.stats import spearmanr

from pipeline import analysis, ingest, models, transform, warehouse
from pipeline.datasets import PUBLISHED_GPU_FLEETS, public_baselines
from pipeline.readers.bgl import read_bgl
from pipeline.readers.lanl import read_lanl
from pipeline.readers.public_data import CanonicalFrames, merge_intervals
from pipeline.readers.titan import cumulative_incidence, read_titan
from tests._fleets import analysis_rows

DATASETS = Path(
    os.environ.get("FAILCAST_SHARED_DATASETS")
    or Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
)
LANL_CSV = "lanl-failure-1996-2005/LA-UR-05-7318-failure-data-1996-2005.csv.gz"
TITAN = "titan-gpu-lifetimes"
BGL = "loghub-hpc-2k/BGL_2k.log.gz"


def shared(relative: str) -> Path:
    path = DATASETS / relative
    if not path.exists():
        pytest.skip(
            f"public data set {path} not found: place shared/datasets beside the repo or set "
            "FAILCAST_SHARED_DATASETS (see docs/public-data.md)"
        )
    return path


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- tiny inputs: the mapping rules ---------------------------------------------------------------

LANL_HEADER = (
    "System,machine type,nodes,procstot,procsinnode,nodenum,nodenumz,node install,node prod,node decom,"
    "fru type,mem,cputype,memtype,num intercon,purpose,Prob Started,Prob Fixed,Down Time,Facilities,"
    "Hardware,Human Error,Network,Undetermined,Software,Same Event"
)
LANL_ROWS = [
    # summer (MDT, UTC-6), Hardware, yy-Mon production, current
    "3,cluster,2,8,4,1,0,3-Aug,3-Sep,current,part,4,1,1,1,compute,"
    "7/1/2004 10:00,7/1/2004 11:30,90,,CPU,,,,,No",
    # fall-back ambiguous 1:36 read as the earlier (MDT) instant; no root cause at all
    "3,cluster,2,8,4,1,0,3-Aug,3-Sep,current,part,4,1,1,1,compute,"
    "10/27/2002 1:36,10/27/2002 2:00,84,,,,,,,No",
    # Mon-yy dates from the 1990s, winter (MST, UTC-7), Facilities
    "7,smp,1,8,8,0,0,Oct-96,Jan-97,Dec-99,part,4,1,1,0,compute,1/5/1998 8:00,1/5/1998 9:00,60,UPS,,,,,,No",
    # system 17: no metadata, no node number
    "17,,,,,,,,,,,,,,,,3/1/1999 12:00,3/1/1999 12:10,10,,,,Network,,,No",
]


@pytest.fixture
def tiny_lanl(tmp_path) -> CanonicalFrames:
    path = tmp_path / "lanl.csv"
    path.write_text("\n".join([LANL_HEADER, *LANL_ROWS]) + "\n")
    return read_lanl(path)


@pytest.mark.parametrize(
    ("row", "timestamp", "category", "root_cause", "repair_minutes"),
    [
        (0, utc(2004, 7, 1, 16, 0), "hardware", "Hardware", 90.0),
        (1, utc(2002, 10, 27, 7, 36), "undetermined", None, 84.0),
        (2, utc(1998, 1, 5, 15, 0), "facilities", "Facilities", 60.0),
        (3, utc(1999, 3, 1, 19, 0), "network", "Network", 10.0),
    ],
)
def test_lanl_record_mapping(tiny_lanl, row, timestamp, category, root_cause, repair_minutes):
    record = tiny_lanl.incidents.row(row, named=True)
    assert (record["timestamp"], record["category"]) == (timestamp, category)
    assert (record["root_cause"], record["repair_minutes"]) == (root_cause, repair_minutes)


@pytest.mark.parametrize(
    ("cluster", "nodes", "start", "end"),
    [
        # 2 slots; node 0 has records, node 1 borrows the system's node set; `current` ends at the last record
        ("lanl-03", {"0", "1"}, utc(2003, 9, 1), utc(2004, 7, 1, 16, 0)),
        # decommissioned Dec-99: in service to the first day after that month
        ("lanl-07", {"0"}, utc(1997, 1, 1), utc(2000, 1, 1)),
    ],
)
def test_lanl_inventory_from_month_precision_dates(tiny_lanl, cluster, nodes, start, end):
    inv = tiny_lanl.inventory.filter(pl.col("cluster_id") == cluster)
    assert set(inv["node_id"]) == nodes
    assert inv["in_service_from"].unique().to_list() == [start]
    assert inv["in_service_to"].unique().to_list() == [end]
    assert "lanl-17" not in tiny_lanl.inventory["cluster_id"].to_list()


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ([(0, 5), (3, 8)], [(0, 8)]),  # overlap
        ([(0, 5), (5, 8)], [(0, 8)]),  # touching
        ([(0, 5), (6, 8)], [(0, 5), (6, 8)]),  # gap
        ([(0, 10), (2, 3), (4, 12)], [(0, 12)]),  # nested then overlapping the reach
    ],
)
def test_merge_intervals(intervals, expected):
    frame = pl.DataFrame(
        {"k": ["a"] * len(intervals), "s": [i[0] for i in intervals], "e": [i[1] for i in intervals]}
    )
    merged = merge_intervals(frame, ["k"], "s", "e")
    assert list(zip(merged["s"], merged["e"], strict=True)) == expected


BGL_OK = (
    "KERNDTLB 1118536327 2005.06.11 R30-M0-N9-C:J16-U01 2005-06-11-17.32.07.581048 R30-M0-N9-C:J16-U01"
    " RAS KERNEL FATAL data TLB error interrupt"
)


@pytest.mark.parametrize(
    ("line", "category", "reason"),
    [
        (BGL_OK, "hardware", None),
        (BGL_OK.replace("KERNDTLB", "KERNMNTF", 1), "storage", None),
        (BGL_OK.replace("KERNDTLB", "-", 1), None, None),  # non-alert: counted, not kept
        (BGL_OK.replace("KERNDTLB", "KERNFOO", 1), None, "unknown BGL alert tag KERNFOO"),
        (BGL_OK.replace("R30-M0-N9-C:J16-U01", "NULL", 1), None, "names no node"),
        (BGL_OK.replace("1118536327", "soon", 1), None, "is not an integer"),
        ("APPSEV 1118536327 2005.06.11", None, "has 3 fields"),
    ],
)
def test_bgl_line_rules(tmp_path, line, category, reason):
    path = tmp_path / "bgl.log"
    path.write_text(line + "\n")
    frames = read_bgl(path)
    assert frames.incidents["category"].to_list() == ([category] if category else [])
    reasons = frames.extras["rejects"]["reason"].to_list()
    assert (reasons[0] if reasons else None) is None if reason is None else reason in reasons[0]


def test_titan_service_nodes_are_dropped(tmp_path):
    full = tmp_path / "gc_full.csv"
    full.write_text(
        "SN,location,insert,remove,duration,out,event\n"
        "A,c0-0c0s0n0,2014-01-01 00:00:00,2015-01-01 00:00:00,1,TRUE,DBE\n"
        "B,c0-0c0s1n0,2014-01-01 00:00:00,2015-01-01 00:00:00,1,TRUE,OTB\n"
    )
    service = tmp_path / "titan.service.txt"
    service.write_text("     0      0x0  c0-0c0s0n0  service        up       other\n")
    frames = read_titan(full, service=service)
    assert frames.incidents["node_id"].to_list() == ["c0-0c0s1n0"]
    assert frames.incidents["category"].to_list() == ["gpu_fell_off_bus"]
    assert frames.inventory["node_id"].to_list() == ["c0-0c0s1n0"]


# --- failcast ingest --format lanl|titan|bgl on tiny files ------------------------------------------


def test_ingest_format_lanl(tmp_path, tiny_lanl):
    path = tmp_path / "lanl.csv"  # the file behind tiny_lanl
    con = warehouse.connect(tmp_path / "w.duckdb")
    (summary,) = ingest.ingest_files(con, [path], ingest.ReaderOptions(fmt="lanl"))
    assert (summary.rows_read, summary.rows_ingested, summary.rows_rejected) == (4, 3, 1)
    assert warehouse.table(con, "events").height == tiny_lanl.incidents.height - 1
    assert warehouse.table(con, "inventory").height == tiny_lanl.inventory.height
    reject = warehouse.table(con, "rejects").row(0, named=True)
    assert (reject["path"], reject["line"], reject["reason"]) == (str(path), 5, "node_id is empty")
    files = warehouse.table(con, "ingested_files")
    assert set(files["path"]) == {str(path)} and set(files["format"]) == {"lanl"}
    assert ingest.ingest_files(con, [path], ingest.ReaderOptions(fmt="lanl"))[
        0
    ].skipped  # same sha256: skipped
    assert warehouse.table(con, "events").height == 3
    con.close()


def test_ingest_format_bgl_keeps_reader_rejects(tmp_path):
    path = tmp_path / "bgl.log"
    lines = [
        BGL_OK,
        BGL_OK.replace("KERNDTLB", "-", 1),
        BGL_OK.replace("KERNDTLB", "KERNFOO", 1),
        BGL_OK.replace("R30-M0-N9-C:J16-U01", "NULL", 1),
    ]
    path.write_text("\n".join(lines) + "\n")
    con = warehouse.connect(tmp_path / "w.duckdb")
    (summary,) = ingest.ingest_files(con, [path], ingest.ReaderOptions(fmt="bgl"))
    counts = (summary.rows_read, summary.rows_ingested, summary.rows_rejected, summary.rows_ignored)
    assert counts == (4, 1, 2, 1)
    rejects = warehouse.table(con, "rejects").sort("line")
    assert rejects["line"].to_list() == [3, 4]
    assert "unknown BGL alert tag KERNFOO" in rejects["reason"][0] and "names no node" in rejects["reason"][1]
    assert rejects["raw"].to_list() == lines[2:]
    assert warehouse.table(con, "incidents")["category"].to_list() == ["hardware"]
    con.close()


def test_ingest_format_titan_reads_companions_beside_the_file(tmp_path):
    full = tmp_path / "gc_full.csv"
    full.write_text(
        "SN,location,insert,remove,duration,out,event\n"
        "A,c0-0c0s0n0,2014-01-01 00:00:00,2015-01-01 00:00:00,1,TRUE,DBE\n"
        "B,c0-0c0s1n0,2014-01-01 00:00:00,2015-01-01 00:00:00,1,TRUE,OTB\n"
        "C,c0-0c0s2n0,2014-01-01 00:00:00,2015-01-01 00:00:00,1,FALSE,\n"
    )
    (tmp_path / "titan.service.txt").write_text(
        "     0      0x0  c0-0c0s0n0  service        up       other\n"
    )
    (tmp_path / "gc_summary_loc.csv").write_text(
        "SN,time,batch,dead,col,cage,node\nA,1,old,TRUE,0,0,0\nB,1,old,TRUE,0,0,1\nC,1,new,FALSE,0,0,2\n"
    )
    con = warehouse.connect(tmp_path / "w.duckdb")
    (summary,) = ingest.ingest_files(con, [full], ingest.ReaderOptions(fmt="titan"))
    # the service node's period is dropped: 2 periods read, 1 failure, 1 period of exposure only
    counts = (summary.rows_read, summary.rows_ingested, summary.rows_rejected, summary.rows_ignored)
    assert counts == (2, 1, 0, 1)
    events = warehouse.table(con, "events")
    assert events["node_id"].to_list() == ["c0-0c0s1n0"] and "old batch" in events["message"][0]
    assert sorted(warehouse.table(con, "inventory")["node_id"]) == ["c0-0c0s1n0", "c0-0c0s2n0"]
    con.close()


@pytest.mark.parametrize("fmt", ["lanl", "titan"])
def test_ingest_format_names_the_file_when_it_is_not_that_data_set(tmp_path, fmt):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    con = warehouse.connect(tmp_path / "w.duckdb")
    with pytest.raises(ingest.InputError, match=f"other.csv: cannot read as {fmt}: .*missing columns"):
        ingest.ingest_files(con, [path], ingest.ReaderOptions(fmt=fmt))
    assert warehouse.table(con, "ingested_files").is_empty()
    con.close()


# --- public baselines -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fleet", "percent"), [("opt-175b", 0.0588), ("mpt-7b", 0.0319), ("llama-3.1", 0.0161)]
)
def test_published_rates_match_the_papers(fleet, percent):
    row = public_baselines().filter(pl.col("fleet") == fleet).row(0, named=True)
    assert round(100 * row["rate_per_node_hour"], 4) == percent
    assert row["rate_ci_low"] < row["rate_per_node_hour"] < row["rate_ci_high"]


def test_published_interval_is_garwood():
    # Garwood 95% limits for k = 4 events (standard tables): 1.0899 and 10.2416 events
    row = public_baselines().filter(pl.col("fleet") == "mpt-7b").row(0, named=True)
    assert row["rate_ci_low"] * row["exposure_node_hours"] == pytest.approx(1.0899, abs=1e-4)
    assert row["rate_ci_high"] * row["exposure_node_hours"] == pytest.approx(10.2416, abs=1e-4)
    assert {f.fleet for f in PUBLISHED_GPU_FLEETS} == {"opt-175b", "mpt-7b", "llama-3.1"}


# --- LANL, real data -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lanl() -> CanonicalFrames:
    return read_lanl(shared(LANL_CSV))


@pytest.fixture(scope="module")
def lanl_warehouse(lanl, tmp_path_factory):
    root = tmp_path_factory.mktemp("lanl")
    con = warehouse.connect(root / "lanl.duckdb")
    summaries = ingest.ingest_files(con, [shared(LANL_CSV)], ingest.ReaderOptions(fmt="lanl"))
    yield con, summaries, analysis.analyze(con)
    con.close()


def test_lanl_counts_match_the_source(lanl):
    inc = lanl.incidents
    assert inc.height == 23_739
    causes = dict(inc.group_by("root_cause").len().iter_rows())
    assert causes == {
        "Hardware": 14_341,
        "Software": 5_361,
        "Undetermined": 2_652,
        "Network": 421,
        "Facilities": 362,
        "Human Error": 149,
        None: 453,  # SOURCE.md says one cause per record; 453 records have none
    }
    categories = dict(inc.group_by("category").len().iter_rows())
    assert categories == {
        "hardware": 14_341,
        "software": 5_361,
        "undetermined": 2_652 + 453,
        "network": 421,
        "facilities": 362,
        "human_error": 149,
    }
    assert inc.filter(pl.col("cluster_id") == "lanl-17").height == 126
    systems = lanl.extras["systems"]
    assert systems.height == 22 and 17 not in systems["system"].to_list()
    assert (
        lanl.inventory.group_by("cluster_id")
        .agg(pl.col("node_id").n_unique())
        .sort("cluster_id")
        .join(systems, on="cluster_id")
        .filter(pl.col("node_id") != pl.col("nodes"))
        .is_empty()
    )


def test_lanl_ingests_with_system_17_rejected(lanl_warehouse, lanl):
    con, (summary,), _ = lanl_warehouse
    assert (summary.format, summary.rows_read, summary.rows_rejected) == ("lanl", 23_739, 126)
    assert summary.rows_ingested + summary.rows_duplicate == 23_739 - 126
    assert summary.rows_ignored == 0
    rejects = warehouse.table(con, "rejects")
    assert rejects["reason"].unique().to_list() == ["node_id is empty"]
    assert rejects["raw"].str.contains("lanl-17").all()
    system_17_lines = lanl.incidents.filter(pl.col("cluster_id") == "lanl-17")["line"]
    assert rejects["line"].sort().to_list() == system_17_lines.sort().to_list()  # lines of the source
    assert warehouse.table(con, "inventory").height == lanl.inventory.height
    files = warehouse.table(con, "ingested_files")
    assert set(files["path"]) == {str(shared(LANL_CSV))} and set(files["kind"]) == {"incidents", "inventory"}


@pytest.mark.parametrize("system", ["lanl-18", "lanl-19"])
def test_lanl_large_systems_have_decreasing_hazard(lanl_warehouse, system):
    con, _, fleet = lanl_warehouse
    rows = analysis_rows(con, fleet.options)
    tbf = transform.times_between_failures(rows.interruptions, rows.exposure, level="cluster")
    data = transform.aggregate_durations(tbf.filter(pl.col("cluster_id") == system))
    args = (data["duration_hours"], data["observed"], data["count"])
    weibull = models.ParametricTBF("weibull").fit(*args)
    low, high = weibull.confidence_interval_["rho_"]
    assert low > 0.6 and high < 0.85  # Schroeder & Gibson: shape 0.7-0.8
    assert weibull.aic_ < models.ParametricTBF("exponential").fit(*args).aic_


def test_lanl_failures_per_year_grow_with_system_size(lanl_warehouse, lanl):
    _, _, fleet = lanl_warehouse
    per_system = fleet.rates.cluster_mtbf.join(lanl.extras["systems"], on="cluster_id").with_columns(
        failures_per_year=pl.col("failures") / pl.col("exposure_cluster_hours") * 8766
    )
    rho, p = spearmanr(per_system["procs_total"], per_system["failures_per_year"])
    assert rho > 0.5 and p < 0.01
    assert fleet.fits.scaling.alpha_confidence_interval_[0] > 0


def test_lanl_repair_times_are_lognormal(lanl):
    # minute resolution: a 0-minute repair is under a minute, counted as half a minute
    minutes = lanl.incidents["repair_minutes"].clip(lower_bound=0.5).to_numpy()
    observed = np.ones(minutes.size, bool)
    lognormal = models.ParametricTBF("lognormal").fit(minutes, observed)
    assert lognormal.aic_ < models.ParametricTBF("exponential").fit(minutes, observed).aic_


def test_lanl_hardware_is_the_largest_cause(lanl_warehouse):
    _, _, fleet = lanl_warehouse
    shares = fleet.rates.by_category.with_columns(share=pl.col("failures") / pl.col("failures").sum())
    assert shares.sort("share", descending=True)["failure_class"][0] == "hardware"
    assert shares.filter(pl.col("failure_class") == "hardware")["share"][0] > 0.55


def test_lanl_in_public_baselines(lanl_warehouse):
    _, _, fleet = lanl_warehouse
    table = public_baselines({"LANL": fleet.rates})
    lanl_rows = table.filter(pl.col("source") == "LANL")
    assert lanl_rows.height == 22  # every system with metadata
    assert (lanl_rows["rate_ci_low"] <= lanl_rows["rate_per_node_hour"]).all()
    assert (lanl_rows["rate_per_node_hour"] <= lanl_rows["rate_ci_high"]).all()


def test_lanl_through_every_stage_to_a_projected_job(lanl_warehouse):
    from pipeline import projection, report

    _, _, fleet = lanl_warehouse
    verdicts = set(fleet.rates.trend_tests["crow_verdict"].drop_nulls())
    assert fleet.rates.trend_tests.height >= 20 and verdicts <= {"rising", "falling", "flat"}
    assert (
        fleet.fits.scaling is not None and fleet.fits.scaling.alpha_confidence_interval_[0] > 0
    )  # bigger fails more
    job = {"name": "job-on-lanl", "work": {"gpu_hours": 1e5}, "cluster": {"instances": 512}}
    job["cluster"]["price_per_gpu_hour_usd"] = 2.0
    spec = projection.job_spec_for_fleet(job, fleet_failure=lambda n: analysis.failure_model_for(fleet, n))
    assert "~512 instances" in spec.failure.source  # LANL systems 12 and 20 have 512 nodes
    outlook = report.job_outlook(spec, monte_carlo_runs=200)
    assert (outlook.modes["expected_days"] > spec.failure_free_hours / 24).all()
    assert "job-on-lanl" in report.render_html(fleet, projection=outlook)


# --- Titan, real data ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def titan() -> CanonicalFrames:
    root = shared(TITAN)
    return read_titan(root / "gc_full.csv.gz", root / "gc_summary_loc.csv.gz", root / "titan.service.txt.gz")


def test_titan_counts_match_the_source(titan):
    assert dict(titan.incidents.group_by("event").len().iter_rows()) == {"DBE": 4_826, "OTB": 1_541}
    assert titan.extras["periods"].height == 37_343
    gpus = titan.extras["gpus"]
    by_batch = {
        b: (n, dead) for b, n, dead in gpus.group_by("batch").agg(pl.len(), pl.col("dead").sum()).iter_rows()
    }
    assert by_batch == {"old": (18_837, 5_027), "new": (11_370, 62)}
    assert gpus.filter(pl.col("dead") & pl.col("cause").is_null()).is_empty()


def test_titan_old_batch_fails_far_more(titan):
    gpus = titan.extras["gpus"]
    dead = dict(gpus.group_by("batch").agg(pl.col("dead").mean()).iter_rows())
    assert dead["old"] == pytest.approx(0.27, abs=0.005) and dead["new"] == pytest.approx(0.005, abs=0.001)
    at = {}
    for batch in ("old", "new"):
        part = gpus.filter(pl.col("batch") == batch)
        km = models.KaplanMeier().fit(part["service_years"], part["dead"])
        i = np.searchsorted(km.timeline_hours_, 3.0, side="right") - 1
        at[batch] = (km.survival_[i], km.confidence_interval_[0][i], km.confidence_interval_[1][i])
    assert at["old"][2] < at["new"][1]  # 3-year survival intervals do not overlap
    old = gpus.filter(pl.col("batch") == "old")
    weibull = models.ParametricTBF("weibull").fit(old["service_years"], old["dead"])
    assert weibull.confidence_interval_["rho_"][0] > 1  # wear-out, unlike LANL


def test_titan_competing_causes_add_up_to_all_cause_failure(titan):
    gpus = titan.extras["gpus"].filter(pl.col("batch") == "old")
    cif = cumulative_incidence(gpus, years=(5.0,))
    km = models.KaplanMeier().fit(gpus["service_years"], gpus["dead"])
    all_cause = 1 - km.survival_[np.searchsorted(km.timeline_hours_, 5.0, side="right") - 1]
    by_cause = dict(cif.select("cause", "cumulative_incidence").iter_rows())
    assert by_cause["DBE"] + by_cause["OTB"] == pytest.approx(all_cause, abs=0.005)
    assert by_cause["DBE"] > by_cause["OTB"]


def test_titan_through_the_warehouse(titan, tmp_path):
    con = warehouse.connect(tmp_path / "titan.duckdb")
    (summary,) = ingest.ingest_files(
        con, [shared(TITAN) / "gc_full.csv.gz"], ingest.ReaderOptions(fmt="titan")
    )
    # exact duplicate rows in gc_full are stored once
    unique = titan.incidents.unique(subset=["timestamp", "node_id", "category", "message"]).height
    assert (summary.rows_ingested, summary.rows_rejected) == (unique, 0)
    assert summary.rows_duplicate == titan.incidents.height - unique
    assert summary.rows_read == titan.extras["periods"].height
    assert warehouse.table(con, "inventory").height == titan.inventory.height
    assert any("gc_summary_loc.csv.gz" in note for note in summary.notes)  # companion found
    fleet = analysis.analyze(con)
    assert set(fleet.rates.by_category["failure_class"]) == {"gpu_memory", "gpu_fell_off_bus"}
    assert fleet.rates.overall["failures"][0] <= unique  # bursts collapse into one incident
    # failures end their GPU's period: they must still count as failures in service
    incidents = fleet.incidents.collect()
    exposure = analysis.service_window(con, fleet.options).exposure
    assert transform.failures_in_service(incidents, exposure).height > 0.99 * incidents.height
    # at `remove` itself (no 1-second shift): only failures of slots out of service are left out
    after, no_interval, _ = transform.LEFT_OUT_REASONS
    left_out = dict(fleet.failures_left_out.iter_rows())
    assert left_out[after] == left_out[no_interval] == 0
    assert (
        titan.incidents["timestamp"]
        == titan.extras["periods"].filter(pl.col("event").is_in(["DBE", "OTB"]))["remove_utc"].sort()
    ).all()
    con.close()


# --- Loghub BGL, real data ------------------------------------------------------------------------


def test_bgl_alert_lines_all_recognised(tmp_path):
    frames = read_bgl(shared(BGL))
    assert frames.extras["lines"].row(0, named=True) == {
        "lines": 2000,
        "non_alert": 1857,
        "incidents": 143,
        "rejects": 0,
    }
    tags = dict(frames.incidents.group_by("alert_tag").len().iter_rows())
    assert tags == {
        "KERNDTLB": 60,
        "KERNSTOR": 30,
        "APPSEV": 17,
        "KERNMNTF": 11,
        "KERNTERM": 7,
        "KERNREC": 5,
        "APPRES": 4,
        "APPREAD": 3,
        "KERNRTSP": 2,
        "APPTO": 2,
        "APPOUT": 1,
        "APPCHILD": 1,
    }
    categories = dict(frames.incidents.group_by("category").len().iter_rows())
    assert categories == {"hardware": 90, "network": 31, "storage": 12, "software": 9, "application": 1}
    con = warehouse.connect(tmp_path / "bgl.duckdb")
    (summary,) = ingest.ingest_files(con, [shared(BGL)], ingest.ReaderOptions(fmt="bgl"))
    counts = (summary.rows_read, summary.rows_ingested, summary.rows_rejected, summary.rows_ignored)
    assert counts == (2000, 143 - summary.rows_duplicate, 0, 1857)
    assert warehouse.table(con, "events").height == summary.rows_ingested
    con.close()


@pytest.mark.parametrize(
    ("relative", "fmt"),
    [(LANL_CSV, "lanl"), (f"{TITAN}/gc_full.csv.gz", "titan"), (BGL, "bgl")],
)
def test_the_public_files_are_told_by_their_heads(relative, fmt):
    """`failcast ingest FILE` needs no --format for the public data sets as published."""
    from pipeline.readers import detect_format

    assert detect_format(shared(relative)) == fmt
