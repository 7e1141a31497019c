"""Integer codes of names (pipeline.transform.key_codes) and the transforms that sort and gather by
them instead of joining on names (issue 27): the MCF, operating times and gaps give what a join on
the names gives, on fleets whose node names repeat across clusters, whose rows interleave clusters
and whose failures name nodes the exposure does not hold."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest

from pipeline import transform

T0 = datetime(2026, 1, 1)


def _frame(rows, names=("cluster_id", "node_id")) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={n: pl.String for n in names}, orient="row")


@pytest.mark.parametrize(
    ("reference", "other", "codes", "found"),
    [
        pytest.param(
            [("b", "n1"), ("a", "n1"), ("b", "n1"), ("a", "n2")],
            [("a", "n2"), ("b", "n1"), ("c", "n1"), ("a", "n9"), ("b", "n2")],
            [0, 1, 0, 2],
            [2, 0, -1, -1, -1],
            id="a node name in two clusters, unknown cluster, node and pair",
        ),
        pytest.param([("a", "n1")], [(None, "n1"), ("a", None)], [0], [-1, -1], id="null keys are not found"),
        pytest.param([], [("a", "n1")], [], [-1], id="empty reference"),
        pytest.param([("a", "n1")], [], [0], [], id="empty other"),
    ],
)
def test_key_codes_number_pairs_by_first_appearance(reference, other, codes, found):
    reference, other = _frame(reference), _frame(other)
    got = transform.key_codes(reference, ["cluster_id", "node_id"], other)
    assert got.codes.tolist() == codes and got.others[0].tolist() == found
    assert got.count == len(set(reference.rows()))
    if reference.height:  # the numbering of group_by(maintain_order=True).with_row_index()
        numbered = reference.group_by("cluster_id", "node_id", maintain_order=True).len().with_row_index("u")
        assert (
            reference.join(numbered, on=["cluster_id", "node_id"], maintain_order="left")["u"].to_list()
            == codes
        )


def test_key_codes_of_one_key_are_its_first_appearance_ranks():
    reference = _frame([("b",), ("a",), ("b",), ("c",)], names=("cluster_id",))
    other = _frame([("c",), ("z",), ("a",)], names=("cluster_id",))
    got = transform.key_codes(reference, ["cluster_id"], other)
    assert (got.codes.tolist(), got.count, got.others[0].tolist()) == ([0, 1, 0, 2], 3, [2, -1, 1])


def _fleet(seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Clusters c0..c2 whose nodes share names (n0, n1, ... in each), rows shuffled across
    clusters, several spans per node (touching or with a gap), failures on span ends."""
    rng = np.random.default_rng(seed)
    rows, fails = [], []
    for cluster in ("c2", "c0", "c1")[: int(rng.integers(1, 4))]:
        for i in range(int(rng.integers(1, 5))):
            t = float(rng.integers(0, 5))
            for _ in range(int(rng.integers(1, 6))):
                a, t = t, t + float(rng.integers(1, 6))
                rows.append((cluster, f"n{i}", T0 + timedelta(hours=a), T0 + timedelta(hours=t)))
                for hour in rng.choice([a, t, a + 0.5, t - 0.25], int(rng.integers(0, 3))):
                    fails.append(
                        (cluster, f"n{i}", T0 + timedelta(hours=float(hour)), bool(rng.random() < 0.9))
                    )
                t += float(rng.choice([0, 1, 2.5]))
    exposure = pl.DataFrame(rows, schema=["cluster_id", "node_id", "start_utc", "end_utc"], orient="row")
    exposure = exposure.sample(fraction=1.0, shuffle=True, seed=seed).with_columns(
        instance_type=pl.lit("p5"),
        size_bucket=pl.lit(8),
        instances=pl.col("cluster_id").str.slice(1).cast(pl.Float64) + 1,
        node_hours=(pl.col("end_utc") - pl.col("start_utc")).dt.total_seconds() / 3600,
    )
    schema = {
        "cluster_id": pl.String,
        "node_id": pl.String,
        "timestamp_utc": pl.Datetime("us"),
        "interrupting": pl.Boolean,
    }
    return pl.DataFrame(fails, schema=schema, orient="row"), exposure


@pytest.mark.parametrize("seed", range(25))
def test_mcf_tells_nodes_of_one_name_in_two_clusters_apart(seed):
    """The MCF by node codes equals the definitions (tests/test_reliability.py's oracle, which
    joins on both names) when node names repeat across clusters."""
    from tests.test_reliability import _mcf_by_brute_force

    failures, exposure = _fleet(seed)
    failures = failures.select("cluster_id", "node_id", "timestamp_utc")
    counted = transform.failures_in_service(failures, exposure)
    mcf = transform.mean_cumulative_function(counted, exposure, max_points=10)
    if counted.is_empty():
        assert mcf.is_empty()
        return
    expected_mcf, variance = _mcf_by_brute_force(failures, exposure, 10)
    np.testing.assert_allclose(mcf["mcf"].to_numpy(), expected_mcf, rtol=1e-12)
    factor = np.exp(1.959963984540054 * np.sqrt(variance) / expected_mcf)
    np.testing.assert_allclose(mcf["ci_high"].to_numpy(), expected_mcf * factor, rtol=1e-9)


def _operating_by_name(in_service: pl.DataFrame, exposure: pl.DataFrame) -> pl.DataFrame:
    """Operating times as the per-cluster filter on names computed them (the route before)."""
    from pipeline.transform.interruptions import _cumulative_exposure

    hours = lambda c: pl.col(c).dt.epoch("us") / 3.6e9  # noqa: E731
    frames = []
    for cluster in sorted(exposure["cluster_id"].unique()):
        mine = exposure.filter(cluster_id=cluster)
        a, b = (
            mine.select(hours("start_utc")).to_series().to_numpy(),
            mine.select(hours("end_utc")).to_series().to_numpy(),
        )
        at = np.sort(
            in_service.filter(pl.col("cluster_id") == cluster, "interrupting")
            .select(hours("timestamp_utc"))
            .to_series()
            .to_numpy()
        )
        frames.append(
            pl.DataFrame(
                {
                    "cluster_id": [cluster] * at.size,
                    "operating_node_hours": _cumulative_exposure(a, b, at),
                    "observed_node_hours": [float((b - a).sum())] * at.size,
                },
                schema={
                    "cluster_id": pl.String,
                    "operating_node_hours": pl.Float64,
                    "observed_node_hours": pl.Float64,
                },
            )
        )
    return pl.concat(frames)


@pytest.mark.parametrize("seed", range(25))
def test_operating_times_and_gaps_by_number_equal_the_routes_by_name(seed):
    """Operating times (by cluster code) equal the per-cluster filter on names, sorted; gaps from
    the narrow match (interval_matches) equal those from the wide one (failures_in_service),
    at node and cluster level, first gaps dropped or kept."""
    failures, exposure = _fleet(seed)
    wide = transform.failures_in_service(failures, exposure, with_interval=True)
    narrow = transform.interval_matches(failures, exposure)
    assert narrow.columns == list(transform.INTERVAL_MATCH_COLUMNS)
    assert narrow.equals(wide.select(transform.INTERVAL_MATCH_COLUMNS))
    operating = transform.failure_operating_times(failures, exposure, in_service=wide)
    assert operating.equals(_operating_by_name(wide, exposure))
    for level in ("node", "cluster"):
        for first_gap in ("drop", "keep"):
            by_name = transform.times_between_failures(
                failures, exposure, level=level, first_gap=first_gap, in_service=wide
            )
            by_number = transform.times_between_failures(
                failures, exposure, level=level, first_gap=first_gap, in_service=narrow
            )
            assert by_number.equals(by_name)
            # every failure closes a gap, but a window's first when first gaps are dropped
            hits = narrow.filter("interrupting")["_interval"]
            windows = hits if level == "node" else exposure["cluster_id"].gather(hits)
            dropped = windows.n_unique() if first_gap == "drop" else 0
            assert by_number["observed"].sum() == hits.len() - dropped


def test_mcf_refuses_failures_only_of_nodes_without_exposure():
    """A failure of a node the exposure does not hold (found by no code) is refused, even when it
    is the only one: not an empty MCF (the join on names dropped it silently)."""
    exposure = pl.DataFrame(
        {"cluster_id": ["c"], "node_id": ["n0"], "start_utc": [T0], "end_utc": [T0 + timedelta(hours=10)]}
    )
    stray = pl.DataFrame(
        {"cluster_id": ["c"], "node_id": ["n9"], "timestamp_utc": [T0 + timedelta(hours=5)]},
        schema={"cluster_id": pl.String, "node_id": pl.String, "timestamp_utc": pl.Datetime("us")},
    )
    with pytest.raises(ValueError, match="1 failure.* not in service on the exposure"):
        transform.mean_cumulative_function(stray, exposure)
