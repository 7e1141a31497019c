"""Node and fleet transforms on tiny hand-made frames, and rate coverage against simulated ground truth."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from pipeline import models, sample, transform
from pipeline.categories import INTERRUPTING_CATEGORIES
from tests._fleets import fleet_exposure
from tests._interruptions import node_interruptions

T0 = datetime(2026, 3, 1)


def _inventory(rows) -> pl.DataFrame:
    """rows: (cluster, node, gpus, from_hour, to_hour or None)."""
    return pl.DataFrame(
        [
            (c, n, "p5", g, T0 + timedelta(hours=a), None if b is None else T0 + timedelta(hours=b))
            for c, n, g, a, b in rows
        ],
        schema={
            "cluster_id": pl.String,
            "node_id": pl.String,
            "instance_type": pl.String,
            "gpus_per_node": pl.Int32,
            "in_service_from_utc": pl.Datetime("us"),
            "in_service_to_utc": pl.Datetime("us"),
        },
        orient="row",
    )


def _incidents(rows) -> pl.DataFrame:
    """rows: (cluster, node, hour, category)."""
    return pl.DataFrame(
        [(c, n, T0 + timedelta(hours=h), cat, cat, cat in INTERRUPTING_CATEGORIES) for c, n, h, cat in rows],
        schema={
            "cluster_id": pl.String,
            "node_id": pl.String,
            "timestamp_utc": pl.Datetime("us"),
            "category": pl.String,
            "failure_class": pl.String,
            "interrupting": pl.Boolean,
        },
        orient="row",
    )


INVENTORY = _inventory(
    [
        ("a", "a1", 8, 0, None),
        ("a", "a2", 8, 0, 50),  # out for repair at 50 h, back at 80 h
        ("a", "a2", 8, 80, None),
        ("b", "b1", 4, 0, None),
    ]
)
INCIDENTS = _incidents(
    [
        ("a", "a1", 10, "gpu_memory"),
        ("a", "a1", 30, "network"),
        ("a", "a2", 60, "host"),  # while out of service: no exposure behind it
        ("a", "a2", 90, "gpu_memory"),
        ("a", "a2", 95, "application"),  # not interrupting
        ("b", "b1", 40, "software"),
        ("b", "b1", 150, "software"),  # after the observed window
    ]
)
END = T0 + timedelta(hours=100)


@pytest.fixture
def exposure() -> pl.DataFrame:
    return transform.exposure_intervals(INVENTORY, END)


@pytest.mark.parametrize(
    ("interrupting_only", "expected"),
    [
        (True, {"a": (3, 170.0, 1360.0), "b": (1, 100.0, 400.0)}),
        (False, {"a": (4, 170.0, 1360.0), "b": (1, 100.0, 400.0)}),
    ],
)
def test_rates_by_cluster_count_only_failures_in_service(exposure, interrupting_only, expected):
    rates = transform.failure_rates(INCIDENTS, exposure, interrupting_only=interrupting_only)
    got = {r["cluster_id"]: r for r in rates.iter_rows(named=True)}
    for cluster, (k, node_hours, gpu_hours) in expected.items():
        row = got[cluster]
        assert (row["failures"], row["exposure_node_hours"], row["exposure_gpu_hours"]) == (
            k,
            pytest.approx(node_hours),
            pytest.approx(gpu_hours),
        )
        assert row["rate_per_node_hour"] == pytest.approx(k / node_hours)
        assert row["rate_per_gpu_hour"] == pytest.approx(k / gpu_hours)
        assert row["rate_ci_low"] <= row["rate_per_node_hour"] <= row["rate_ci_high"]


def test_category_rows_include_zero_failure_categories(exposure):
    rates = transform.failure_rates(INCIDENTS, exposure, by=["cluster_id", "category"])
    seen = {"gpu_memory", "network", "host", "software"}  # host only while a2 was out of service
    assert set(rates["category"]) == seen and rates.height == 2 * len(seen)
    b_memory = rates.filter(cluster_id="b", category="gpu_memory").row(0, named=True)
    assert b_memory["failures"] == 0 and b_memory["rate_ci_low"] == 0 and b_memory["rate_ci_high"] > 0
    totals = rates.group_by("cluster_id").agg(pl.col("failures").sum()).sort("cluster_id")
    assert totals["failures"].to_list() == [3, 1]


@pytest.mark.parametrize(
    ("start_hour", "end_hour", "period", "expected"),
    [
        # Mar 15 -> Apr 10: the partial last month keeps its exposure
        (14 * 24, 40 * 24, "month", {datetime(2026, 3, 1): 17 * 24.0, datetime(2026, 4, 1): 9 * 24.0}),
        # Mar 31 12:00 -> Apr 1 12:00 splits at midnight
        (30 * 24 + 12, 31 * 24 + 12, "day", {datetime(2026, 3, 31): 12.0, datetime(2026, 4, 1): 12.0}),
        # Sunday Mar 1 -> Tuesday Mar 3: weeks start on Monday
        (0, 48, "week", {datetime(2026, 2, 23): 24.0, datetime(2026, 3, 2): 24.0}),
    ],
)
def test_period_exposure_split_at_calendar_boundaries(start_hour, end_hour, period, expected):
    inventory = _inventory([("a", "a1", 8, start_hour, end_hour)])
    incidents = _incidents([("a", "a1", end_hour - 1, "host")])
    exposure = transform.exposure_intervals(inventory, T0 + timedelta(hours=end_hour))
    rates = transform.failure_rates(incidents, exposure, by=[], period=period)
    assert dict(zip(rates["period"], rates["exposure_node_hours"], strict=True)) == pytest.approx(expected)
    assert rates["failures"].to_list()[-1] == 1 and rates["failures"].sum() == 1


@pytest.mark.parametrize(("by", "period"), [(["rack"], None), (["cluster_id"], "year")])
def test_rates_reject_unknown_grouping(exposure, by, period):
    with pytest.raises(ValueError, match="rack|year"):
        transform.failure_rates(INCIDENTS, exposure, by=by, period=period)


@pytest.mark.parametrize(
    ("first_gap", "expected"),
    [
        ("keep", [(10.0, True, True), (20.0, True, False), (70.0, False, False)]),
        ("drop", [(20.0, True, False), (70.0, False, False)]),
    ],
)
def test_times_between_failures_first_gap(exposure, first_gap, expected):
    d = transform.times_between_failures(INCIDENTS, exposure, first_gap=first_gap).filter(node_id="a1")
    assert list(d.select("duration_hours", "observed", "first_gap").iter_rows()) == expected


def test_cluster_level_gaps_merge_nodes(exposure):
    d = transform.times_between_failures(INCIDENTS, exposure, level="cluster", first_gap="keep")
    a = d.filter(cluster_id="a")
    assert a["duration_hours"].to_list() == [10.0, 20.0, 60.0, 10.0]
    assert a["observed"].to_list() == [True, True, True, False]


@pytest.mark.parametrize(
    ("estimated", "expected"),
    [(None, False), ([False, False, False, False], False), ([False, True, None, False], True)],
)
def test_exposure_estimated_flag(estimated, expected):
    inventory = INVENTORY if estimated is None else INVENTORY.with_columns(estimated=pl.Series(estimated))
    assert transform.exposure_estimated(inventory) is expected


def test_category_shares_with_exact_intervals(exposure):
    shares = transform.category_shares(INCIDENTS, exposure)
    sums = shares.group_by("cluster_id").agg(pl.col("share").sum())
    assert sums["share"].to_list() == pytest.approx([1.0, 1.0])
    a_memory = shares.filter(cluster_id="a", failure_class="gpu_memory").row(0, named=True)
    assert a_memory["share"] == pytest.approx(2 / 3)
    assert a_memory["share_ci_low"] < 2 / 3 < a_memory["share_ci_high"] < 1
    assert (shares["share_ci_low"] <= shares["share"]).all()
    assert (shares["share"] <= shares["share_ci_high"]).all()


def test_operating_times_follow_nodes_in_service():
    inventory = _inventory([("a", "a1", 8, 0, None), ("a", "a2", 8, 50, None)])
    incidents = _incidents([("a", "a1", 25, "host"), ("a", "a2", 75, "host")])
    exposure = transform.exposure_intervals(inventory, T0 + timedelta(hours=100))
    times = transform.failure_operating_times(incidents, exposure)
    # one node for 50 h, then two: 25 node-hours, then 50 + 2 * 25
    assert times["operating_node_hours"].to_list() == pytest.approx([25.0, 100.0])
    assert times["observed_node_hours"].to_list() == pytest.approx([150.0, 150.0])


@pytest.mark.parametrize("k", [0, 1, 7, 250])
def test_quasi_poisson_interval_widens_the_exact_one(k):
    exact = transform.poisson_interval(np.array([k]), np.array([1000.0]))
    same = transform.poisson_interval(np.array([k]), np.array([1000.0]), dispersion=1.0)
    wide = transform.poisson_interval(np.array([k]), np.array([1000.0]), dispersion=2.0)
    np.testing.assert_array_equal(exact, same)
    assert wide[0][0] <= exact[0][0] and wide[1][0] > exact[1][0]


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("k", [0, 1, 5])
def test_no_hours_at_risk_bound_nothing_and_print_no_warning(k):
    """A node down all window has 0 h at risk: its interval is (0, inf), quietly (numpy's divide
    warnings went to the user's terminal)."""
    (low,), (high,) = transform.poisson_interval(np.array([k]), np.array([0.0]))
    (bound,) = transform.poisson_upper_bound(np.array([k]), np.array([0.0]))
    assert (low, high, bound) == (0.0, np.inf, np.inf)


COVERAGE_SEEDS = 200


@pytest.mark.parametrize(
    ("shape", "overdispersed", "low", "high"),
    [
        (1.0, False, 0.91, 0.985),
        (0.7, False, 0.85, 0.93),
        (0.7, True, 0.91, 0.985),
        (1.3, False, 0.93, 1.0),
    ],
)
def test_rate_interval_coverage_over_seeds(shape, overdispersed, low, high):
    """The true rate lies in the 95% interval at about the nominal rate over 200 seeds.

    Exact for exponential gaps. Stationary Weibull renewal counts are over- (shape < 1) or
    under-dispersed (shape > 1) relative to Poisson when windows are long against the MTBF; the
    exact interval does not know it (measured 0.89 at shape 0.7, 0.985 at 1.3), the quasi-Poisson
    interval with the fleet's count dispersion does (0.945 at 0.7).
    """
    rate = 0.002
    hits = 0
    for seed in range(COVERAGE_SEEDS):
        spec = sample.FleetSpec(
            cluster_sizes=(16,),
            days=30,
            rate_per_node_hour=rate,
            weibull_shape=shape,
            seed=seed,
            # short windows: sample.py can send a node back from repair after the window ends
            maintenance_fraction=0.0,
        )
        incidents, exposure = fleet_exposure(spec)
        dispersion = max(transform.count_dispersion(incidents, exposure), 1.0) if overdispersed else 1.0
        row = transform.failure_rates(incidents, exposure, by=[], dispersion=dispersion).row(0, named=True)
        hits += row["rate_ci_low"] <= rate <= row["rate_ci_high"]
    assert low <= hits / COVERAGE_SEEDS <= high


@settings(max_examples=40, deadline=None)
@given(
    intervals=st.lists(
        st.tuples(st.floats(0, 2000), st.floats(0.5, 2000), st.sampled_from(["a", "b"])),
        min_size=1,
        max_size=6,
    ),
    failure_hours=st.lists(st.floats(0, 4000), max_size=10),
    period=st.sampled_from(list(transform.PERIODS)),
)
def test_periods_and_categories_conserve_exposure_and_failures(intervals, failure_hours, period):
    """Splitting by period or category never creates or loses exposure or failures."""
    inventory = _inventory([(c, f"{c}{i}", 8, a, a + d) for i, (a, d, c) in enumerate(intervals)])
    nodes = inventory["node_id"].to_list()
    incidents = _incidents(
        [
            (n[0], n, h, cat)
            for h, n, cat in zip(failure_hours, nodes * 10, ["host", "network"] * 5, strict=False)
        ]
    )
    exposure = transform.exposure_intervals(inventory, T0 + timedelta(hours=4000))
    total = transform.failure_rates(incidents, exposure, by=[]).row(0, named=True)
    for split in (
        transform.failure_rates(incidents, exposure, by=[], period=period),
        transform.failure_rates(incidents, exposure, by=["cluster_id"], period=period),
    ):
        assert split["failures"].sum() == total["failures"]
        assert split["exposure_node_hours"].sum() == pytest.approx(total["exposure_node_hours"])
    by_category = transform.failure_rates(incidents, exposure, by=["category"])
    assert by_category["failures"].sum() == total["failures"]
    assert by_category["rate_per_node_hour"].sum() == pytest.approx(total["rate_per_node_hour"])


def test_category_shares_recover_the_simulated_mix():
    spec = sample.FleetSpec(cluster_sizes=(256, 512), seed=17)
    incidents, exposure = fleet_exposure(spec)
    shares = transform.category_shares(incidents, exposure, by=[])
    truth = {c.value: w for c, w in spec.category_mix.items()}
    assert set(shares["failure_class"]) == set(truth)  # noise categories are not interruptions
    covered = [
        r["share_ci_low"] <= truth[r["failure_class"]] <= r["share_ci_high"]
        for r in shares.iter_rows(named=True)
    ]
    assert sum(covered) >= len(truth) - 1


# --- node interruptions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "window", "expected"),
    [
        # XID 79 then the NCCL watchdog 20 min later: one interruption, root cause gpu_fell_off_bus
        (
            [("a1", 0, "gpu_fell_off_bus"), ("a1", 20, "nccl_timeout")],
            30,
            [["gpu_fell_off_bus", "nccl_timeout"]],
        ),
        (
            [("a1", 0, "gpu_fell_off_bus"), ("a1", 40, "nccl_timeout")],
            30,
            [["gpu_fell_off_bus"], ["nccl_timeout"]],
        ),
        # anchored at the first fault, not chained: 0, 25 | 50, 70 | 90 min
        (
            [("a1", 0, "host"), ("a1", 25, "network"), ("a1", 50, "software"), ("a1", 70, "nccl_timeout")]
            + [("a1", 90, "storage")],
            30,
            [["host", "network"], ["software", "nccl_timeout"], ["storage"]],
        ),
        # other nodes and non-interrupting faults never join
        ([("a1", 0, "host"), ("a2", 5, "network"), ("a1", 10, "application")], 30, [["host"], ["network"]]),
        # window 0 keeps only simultaneous faults together
        (
            [("a1", 0, "host"), ("a1", 0, "network"), ("a1", 1, "storage")],
            0,
            [["host", "network"], ["storage"]],
        ),
    ],
)
def test_node_interruptions_collapse_a_nodes_faults(rows, window, expected):
    incidents = _incidents([("a", n, m / 60, cat) for n, m, cat in rows])
    result = node_interruptions(incidents, window_minutes=window)
    assert result["categories"].to_list() == expected
    assert result["category"].to_list() == [e[0] for e in expected]
    assert result["faults"].to_list() == [len(e) for e in expected]
    assert result["interrupting"].all()


@pytest.mark.parametrize(
    ("ends", "expected"),
    [
        ((None, 5.0), 5.0),  # a kernel line (no end) first, the Slurm drain with its end second
        ((7.0, None), 7.0),
        ((7.0, 5.0), 7.0),  # the node is back when the last record of the failure says so
        ((None, None), None),
    ],
)
def test_node_interruptions_keep_the_end_any_source_recorded(ends, expected):
    base = datetime(2024, 5, 1)
    faults = _incidents([("a", "a1", 0, "gpu_memory"), ("a", "a1", 0.025, "gpu_fell_off_bus")])
    incidents = faults.with_columns(
        resolved_at_utc=pl.Series([None if e is None else base + timedelta(hours=e) for e in ends]).cast(
            pl.Datetime("us")
        )
    )
    [row] = node_interruptions(incidents).to_dicts()
    assert row["resolved_at_utc"] == (None if expected is None else base + timedelta(hours=expected))
    assert row["category"] == "gpu_memory" and row["faults"] == 2


def test_node_interruptions_reject_negative_window():
    with pytest.raises(ValueError, match="must not be negative"):
        node_interruptions(_incidents([("a", "a1", 0, "host")]), window_minutes=-1)


def _reference_interruptions(incidents: pl.DataFrame, window_minutes: float) -> pl.DataFrame:
    """node_interruptions spelled out row by row: per node in time order (ties by category, then
    input order), an incident joins the open interruption if it is at most the window after
    that interruption's first incident, else it opens a new one."""
    window = timedelta(minutes=window_minutes)
    rows = (
        incidents.filter("interrupting")
        .sort("cluster_id", "node_id", "timestamp_utc", "category", maintain_order=True)
        .to_dicts()
    )
    out: list[dict] = []
    for row in rows:
        open_ = out[-1] if out else None
        same_node = open_ is not None and (open_["cluster_id"], open_["node_id"]) == (
            row["cluster_id"],
            row["node_id"],
        )
        if same_node and row["timestamp_utc"] - open_["timestamp_utc"] <= window:
            open_["categories"].append(row["category"])
            open_["faults"] += 1
            open_["last_fault_utc"] = max(open_["last_fault_utc"], row["timestamp_utc"])
        else:
            out.append(
                row | {"categories": [row["category"]], "faults": 1, "last_fault_utc": row["timestamp_utc"]}
            )
    schema = incidents.schema | {
        "categories": pl.List(pl.String),
        "faults": pl.UInt32,
        "last_fault_utc": incidents.schema["timestamp_utc"],
    }
    return pl.DataFrame(out, schema=schema, orient="row")


def _stepped_incidents(steps, unit: str = "us") -> pl.DataFrame:
    """steps: (node, seconds after the node's previous incident, category, interrupting); equal
    times are ties, a gap of exactly the window sits on its edge."""
    clock: dict[str, int] = {}
    rows = []
    for i, (node, step_s, category, interrupting) in enumerate(steps):
        clock[node] = clock.get(node, 0) + step_s
        rows.append((i, "a", node, T0 + timedelta(seconds=clock[node]), category, interrupting))
    return pl.DataFrame(
        rows,
        schema={
            "incident_id": pl.Int64,
            "cluster_id": pl.String,
            "node_id": pl.String,
            "timestamp_utc": pl.Datetime(unit),
            "category": pl.String,
            "interrupting": pl.Boolean,
        },
        orient="row",
    )


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["a1", "a2", "b1"]),
            st.sampled_from([0, 0, 1, 20, 29, 30, 31, 600, 1799, 1800, 1801, 3600, 86_400]),
            st.sampled_from(["host", "network", "xid"]),
            st.booleans() | st.just(True),
        ),
        max_size=80,
    ),
    window=st.sampled_from([0.0, 0.5, 1 / 3, 30.0, 45.25]),
    unit=st.sampled_from(["us", "ns", "ms"]),
)
def test_node_interruptions_match_the_row_by_row_reference(steps, window, unit):
    incidents = _stepped_incidents(steps, unit).sample(fraction=1.0, shuffle=True, seed=len(steps))
    assert_frame_equal(
        node_interruptions(incidents, window_minutes=window),
        _reference_interruptions(incidents, window),
    )


@pytest.mark.parametrize("every_s", [60, 600, 1799])
def test_node_interruptions_split_long_chains_like_the_reference(every_s):
    """A flapping node: an incident every ``every_s`` seconds for days is one run of closer
    incidents that must be cut into windows anchored one after the other."""
    rng = np.random.default_rng(every_s)
    steps = [("a1", every_s * int(rng.integers(0, 2)), "host", True) for _ in range(3000)]
    steps += [("a2", int(s), "xid", True) for s in rng.integers(0, 2400, size=3000)]
    incidents = _stepped_incidents(steps)
    result = node_interruptions(incidents)
    assert_frame_equal(result, _reference_interruptions(incidents, 30.0))
    assert result.height > 100


def test_node_interruptions_undo_secondary_faults_on_a_simulated_fleet():
    """Every other failure of a simulated fleet also logs an NCCL timeout 3-25 minutes later: raw
    incidents overstate the rate and drag the Weibull shape down; interruptions recover both."""
    spec = sample.FleetSpec(cluster_sizes=(512,), days=120, weibull_shape=0.85, seed=11)
    incidents, exposure = fleet_exposure(spec)
    failures = incidents.filter("interrupting")
    rng = np.random.default_rng(3)
    echoed = failures.filter(pl.Series(rng.uniform(size=failures.height) < 0.5))
    delay_s = pl.Series(rng.uniform(180, 1500, size=echoed.height).round().astype(np.int64))
    echoes = echoed.with_columns(
        timestamp_utc=pl.col("timestamp_utc") + pl.duration(seconds=delay_s), category=pl.lit("nccl_timeout")
    )
    noisy = pl.concat([incidents, echoes])
    truth = node_interruptions(incidents)
    collapsed = node_interruptions(noisy)
    assert collapsed.height == truth.height
    assert (
        collapsed["category"]
        .value_counts()
        .sort("category")
        .equals(truth["category"].value_counts().sort("category"))
    )  # root causes are counted, not the echoes

    def rate_and_shape(frame):
        rate = transform.failure_rates(frame, exposure, by=[]).row(0, named=True)
        gaps = transform.aggregate_durations(transform.times_between_failures(frame, exposure))
        weibull = models.ParametricTBF("weibull").fit(gaps["duration_hours"], gaps["observed"], gaps["count"])
        return rate, weibull.confidence_interval_["rho_"]

    rate, shape = rate_and_shape(collapsed)
    assert rate["rate_ci_low"] <= spec.rate_per_node_hour <= rate["rate_ci_high"]
    assert shape[0] <= spec.weibull_shape <= shape[1]
    raw_rate, raw_shape = rate_and_shape(noisy)
    assert raw_rate["rate_ci_low"] > spec.rate_per_node_hour  # inflated by the echoes
    assert raw_shape[1] < spec.weibull_shape  # near-zero gaps pull the shape down


@pytest.mark.parametrize(
    ("by", "period", "interrupting_only"),
    [
        (["cluster_id"], None, True),
        ([], None, True),
        (["cluster_id", "node_id"], None, True),
        (["cluster_id", "failure_class"], None, False),
        (["cluster_id"], "month", True),
        (["size_bucket", "category"], "day", True),
    ],
)
def test_rates_from_failures_matched_once_equal_the_rates_that_match_them(
    exposure, by, period, interrupting_only
):
    """analyze and `failcast rates` match failures to service intervals once and hand the match
    to every rate (``in_service``): the tables are the ones each call computes by itself, and so
    are the failures left out."""
    incidents = _incidents(
        [
            ("a", "a1", 10, "nvlink"),
            ("a", "a2", 50, "host"),  # at an interval's end: counts, once
            ("a", "a2", 60, "network"),  # out for repair: left out
            ("a", "a2", 80, "application"),  # not interrupting
            ("b", "b1", 100, "gpu_memory"),  # at the window end: counts
            ("b", "b1", 120, "host"),  # after it
            ("z", "z9", 5, "host"),  # no inventory
        ]
    )
    end = END
    matched = transform.failures_in_service(incidents, exposure, with_interval=True)
    options = {"by": by, "period": period, "interrupting_only": interrupting_only}
    assert_frame_equal(
        transform.failure_rates(incidents, exposure, **options, in_service=matched),
        transform.failure_rates(incidents, exposure, **options),
    )
    assert transform.failures_left_out(incidents, exposure, end)["failures"].to_list() == [1, 1, 1]


def test_nodes_without_an_expected_count_leave_the_dispersion_test_alone():
    """A failure-free cluster (a new one, say) and nodes with 0 h fit any phi: adding them must not
    change phi, its degrees of freedom or the test's verdict (they once counted in the degrees of
    freedom and pulled phi towards 0)."""
    rng = np.random.default_rng(5)
    hours = rng.uniform(500, 2000, 200)
    # clustered counts: a gamma-mixed Poisson, phi well above 1
    counts = rng.poisson(hours * 2e-3 * rng.gamma(0.5, 2.0, 200))
    busy = pl.DataFrame(
        {
            "cluster_id": "a",
            "node_id": [f"a{i}" for i in range(200)],
            "failures": counts,
            "exposure_node_hours": hours,
        }
    )
    quiet = pl.DataFrame(
        {
            "cluster_id": "b",
            "node_id": [f"b{i}" for i in range(300)],
            "failures": 0,
            "exposure_node_hours": rng.uniform(500, 2000, 300),
        }
    )
    idle = pl.DataFrame(
        {
            "cluster_id": "a",
            "node_id": [f"z{i}" for i in range(50)],
            "failures": 0,
            "exposure_node_hours": 0.0,
        }
    )
    alone = transform.dispersion_test(busy)
    assert alone.phi > 1.5 and alone.rejects_poisson
    mixed = transform.dispersion_test(pl.concat([busy, quiet, idle], how="vertical_relaxed"))
    assert (mixed.phi, mixed.dof, mixed.p_value) == pytest.approx((alone.phi, alone.dof, alone.p_value))
    assert mixed.dof == 199
