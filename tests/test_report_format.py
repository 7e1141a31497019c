"""Report tables read as words and numbers for people, whatever columns a section adds."""

import math

import polars as pl
import pytest

from pipeline.report.format import column_label, format_value, text_table


@pytest.mark.parametrize(
    ("column", "label"),
    [
        ("rate_per_node_hour", "Rate (% per instance-hour)"),
        ("mtbf_ci_low_hours", "MTBF 95% CI low (h)"),
        ("count_mtbf_ci_high_hours", "Count MTBF 95% CI high (h)"),
        ("optimal_interval_hours", "Optimal interval (h)"),
        ("expected_days", "Expected (days)"),
        ("downtime_hours", "Downtime (node-hours)"),
        ("mttr_hours", "MTTR (h)"),
        ("cost_usd", "Cost ($)"),
        ("last_event_utc", "Last event (UTC)"),
        ("cluster_id", "Cluster"),
        ("hours", "Hours"),
        ("level", "Level"),
    ],
)
def test_headers_are_words_with_units(column, label):
    assert column_label(column) == label


@pytest.mark.parametrize(
    ("column", "value", "text"),
    [
        ("rate_per_node_hour", 7.32477e-05, "0.00732%"),
        ("rate_ci_high", 0.000764578488389367, "0.0765%"),
        ("rate_per_gpu_hour", 0.0005, "0.0500%"),
        ("instances", 127.9, "128"),
        ("failures", 1423, "1,423"),
        ("exposure_node_hours", 92153.11111111111, "92,153"),
        ("mtbf_hours", 53.33, "53.3"),
        ("mtbf_hours", 2.0244, "2.02"),
        ("expected_days", 223.86, "224"),
        ("mttr_hours", 0.08333, "0.0833"),
        ("repair_hours_p50", 2.2166, "2.22"),  # a quantile of a duration reads like one
        ("statistic", 33.59, "33.59"),  # not a duration: 4 digits
        ("cost_usd", 49517559.4, "$49,517,559"),
        ("saving_usd", -35196.2, "-$35,196"),  # the sign before the symbol, not $-35,196
        ("usd", -0.4, "$0"),  # no sign on an amount that rounds to nothing
        ("goodput", 0.591, "59.1%"),
        ("availability", 0.99731, "99.73%"),
        ("laplace_p_value", 0.2601, "0.260"),
        ("crow_p_value", 1e-9, "< 0.001"),
        ("crow_beta", 0.000123456, "0.000123"),
        ("expected_days", math.inf, "∞"),
        ("mtbf_hours", math.nan, "–"),
        ("mtbf_hours", None, ""),
        ("estimated", True, "yes"),
        ("node_id", "gpu-01", "gpu-01"),
        ("mtbf_hours", 0.0, "0"),
        ("mtbf_ci_high", 1.9546011589814318e23, "1.95e+23"),  # an unbounded end, not 24 digits
        ("exposure_gpu_hours", 1.75e9, "1,750,000,000"),  # a big fleet's exposure keeps its digits
    ],
)
def test_values_have_sensible_digits(column, value, text):
    assert format_value(column, value) == text


def test_text_table_reads_like_the_report():
    frame = pl.DataFrame(
        {
            "cluster_id": ["c0032", "c1024-long-name"],
            "failures": [5, 1_411],
            "rate_per_node_hour": [5.77e-4, 4.8e-5],
        }
    )
    header, rule, *rows = text_table(frame).splitlines()
    assert header.split("  ")[0] == "Cluster" and header.endswith("Rate (% per instance-hour)")
    assert rows[1].startswith("c1024-long-name") and rows[1].endswith("0.00480%")
    # columns line up: numbers right-aligned under their header, text left-aligned
    assert len({len(line) for line in (header, rule, *rows)}) == 1
    assert rows[0].index("5 ") + 1 == rows[1].index("1,411") + len("1,411")


def test_text_table_says_how_many_rows_it_leaves_out():
    lines = text_table(pl.DataFrame({"failures": list(range(10))}), max_rows=3).splitlines()
    assert len(lines) == 2 + 3 + 1 and lines[-1] == "... 7 more rows (--json prints all)"


def test_negative_money_in_cards_and_the_cli_reads_minus_dollars():
    """A spare past the recommendation costs more than it saves; a mode can cost more than the
    baseline: -$35,196 and -$1.20M, never $-35,196."""
    from pipeline.projection.explain import _usd
    from pipeline.report.format import usd
    from pipeline.report.outlook import saving_card

    assert usd(-35196.2) == "-$35,196" and usd(1234.5, 2) == "$1,234.50"
    assert saving_card({"days": -2.0, "usd": -1.2e6}) == "-2.0 days · -$1.20M"
    assert _usd(-35196.2) == ", cost -$35,196"
