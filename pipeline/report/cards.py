"""The headline's cards, a verdict before the detail: the fleet's rate and MTBF, what to do (lemon
nodes, the biggest cause, trends), the scaling law and, with a projected job, its days, savings
and spares. Each card is (title, value, note); :mod:`.page` draws them."""

from __future__ import annotations

import polars as pl

from pipeline.analysis import PROJECTED_SIZES, FleetAnalysis, NodeAnalysis, RateAnalysis, ReliabilityFits
from pipeline.report.format import duration_text, format_value, interval_name
from pipeline.report.outlook import JobOutlook, mode_card, saving_card
from pipeline.report.planning import spares_card

MAX_TIED_CAUSES = 3  # tied biggest causes named in the card's value; more are counted there


def summary_cards(
    analysis: FleetAnalysis, projection: JobOutlook | None = None
) -> list[tuple[str, str, str]]:
    """(title, value, note) of the headline cards: the numbers people quote. The headline sums up
    every part (rates, fits, nodes, the projection), so it takes the whole analysis; each card
    below takes only its part."""
    overall = analysis.rates.overall.row(0, named=True)  # the rate table's figures, its interval
    low, high = (format_value("rate_ci_low", overall[k]) for k in ("rate_ci_low", "rate_ci_high"))
    hours = format_value("exposure_node_hours", overall["exposure_node_hours"])
    if analysis.has_failures:
        cards = [
            (
                "Fleet interruption rate",
                f"{format_value('rate_per_node_hour', overall['rate_per_node_hour'])} per instance-hour",
                f"95% CI {low}–{high}, {interval_name(analysis.rates.interval_method)}; "
                f"{overall['failures']:,} failures in {hours} instance-hours",
            ),
            (
                (
                    "Best time-between-failures model",
                    analysis.fits.best_family,
                    analysis.fits.node_fits["weibull"].hazard_message_ or "",
                )
                if analysis.has_fits
                else ("Time between failures", "not fitted", analysis.too_few_gaps)
            ),
        ]
    else:
        bound = format_value("rate_upper_bound", overall["rate_upper_bound"])
        cards = [
            (
                "Fleet interruption rate",
                "no failures yet",
                f"upper bound {bound} per instance-hour (95% one-sided, 3.0 / T) after "
                f"{hours} instance-hours; nothing to fit",
            )
        ]
    cards += _cause_card(analysis.rates)
    cards += _fleet_action_cards(analysis.nodes, analysis.has_failures, projection)
    at = "" if analysis.has_failures else " at the upper-bound rate"
    cards += _scaling_cards(analysis.fits, projection)
    cards += _trend_card(analysis.rates)
    if projection is not None:
        for m in projection.modes.iter_rows(named=True):
            cards.append((f"Projected job{at}, {m['mode']} recovery", *mode_card(m)))
        for s in projection.savings.iter_rows(named=True):
            cards.append(
                (
                    f"{s['mode'].capitalize()} recovery saves",
                    saving_card(s),
                    f"{s['percent']:.1f}% of the {s['baseline']} training time",
                )
            )
    return cards


LEMON_CARD_NODES = 5


def _fleet_action_cards(
    nodes: NodeAnalysis, has_failures: bool, projection: JobOutlook | None
) -> list[tuple[str, str, str]]:
    """What to act on: the lemon nodes to pull (once a failure counts), and the hot spares the
    projected job needs."""
    cards = []
    test = nodes.lemons
    lemons = test.lemons_
    if has_failures:
        names = lemons["node_id"].head(LEMON_CARD_NODES).to_list()
        more = f" and {lemons.height - len(names)} more" if lemons.height > len(names) else ""
        cards.append(
            (
                "Lemon nodes (fail more than their cluster)",
                f"{lemons.height:,} node{'s' if lemons.height != 1 else ''}" if lemons.height else "none",
                f"{', '.join(names)}{more}; drain list: failcast lemons --format hostlist. The test "
                "assumes Poisson counts per node: failures clustered in time add false alarms"
                if lemons.height
                else f"none of {test.table_.height:,} nodes at a {test.fdr:.0%} false-discovery rate",
            )
        )
    return cards + (spares_card(projection) if projection is not None else [])


def _cause_card(rates: RateAnalysis) -> list[tuple[str, str, str]]:
    """The root cause with the most interruptions, and its share; causes that tie for the most
    are named together (one picked would be a verdict the data do not give)."""
    causes = rates.by_category
    total = int(causes["failures"].sum()) if causes.height else 0
    if total == 0:
        return []
    most = int(causes["failures"].max())
    top = sorted(str(c) for c in causes.filter(pl.col("failures") == most)["failure_class"])
    each = f"{most:,} of {total:,} interruptions ({format_value('share', most / total)})"
    if len(top) == 1:
        return [("Biggest cause of interruptions", top[0], each)]
    value = ", ".join(top) if len(top) <= MAX_TIED_CAUSES else f"{len(top)} causes tie"
    return [("Biggest cause of interruptions", value, f"a tie: {', '.join(top)}, {each} each")]


def _scaling_cards(fits: ReliabilityFits, projection: JobOutlook | None) -> list[tuple[str, str, str]]:
    """α of the count law (the AFT's α in the note: the two views should agree), and the cluster
    MTBF at the planned size: the job's, from the failure model its projection uses, else the
    smallest of ``PROJECTED_SIZES``; the law's MTBF at the other sizes people plan for in the note."""
    s, aft = fits.scaling, fits.size_regression
    cards, law = [], {}
    if s is not None:
        # 3 decimals, as the scaling section's note and failcast fit print them
        note = f"95% CI {s.alpha_confidence_interval_[0]:.3f}–{s.alpha_confidence_interval_[1]:.3f}"
        if aft is not None:
            low, high = aft.alpha_confidence_interval_
            note += f"; Weibull AFT view {aft.alpha_:.3f} ({low:.3f}–{high:.3f})"
        cards.append(("MTBF scaling exponent α", f"{s.alpha_:.3f}", f"{note} (1 = independent failures)"))
        projected = fits.scaling_projection.filter(
            pl.col("instances").is_in([float(n) for n in PROJECTED_SIZES])
        )
        law = {int(r["instances"]): r for r in projected.iter_rows(named=True)}
    failure = projection.failure if projection is not None else None
    if failure is not None:
        n = projection.instances
        low, high = failure.rate_ci_low_per_instance_hour, failure.rate_ci_high_per_instance_hour
        interval = (
            f"95% CI {duration_text(1 / (n * high))}–{duration_text(1 / (n * low))}; " if low and high else ""
        )
        others = " · ".join(f"{k:,}: {duration_text(r['mtbf_hours'])}" for k, r in law.items() if k != n)
        cards.append(
            (
                f"Cluster MTBF at {n:,} instances (the job)",
                duration_text(failure.cluster_mtbf_hours(n)),
                f"{interval}source: {failure.source}" + (f"; scaling law at {others}" if others else ""),
            )
        )
    elif law:
        n = min(law)
        others = " · ".join(f"{k:,}: {duration_text(r['mtbf_hours'])}" for k, r in law.items() if k != n)
        cards.append(
            (
                f"Projected cluster MTBF at {n:,} instances",
                duration_text(law[n]["mtbf_hours"]),
                f"95% CI {duration_text(law[n]['mtbf_ci_low_hours'])}–"
                f"{duration_text(law[n]['mtbf_ci_high_hours'])} ({law_interval_words(s)}); {others}",
            )
        )
    return cards


def law_interval_words(law) -> str:
    """How a size law's interval was made: the count law's Poisson GLM, widened by the dispersion
    of every node's counts when they vary more than Poisson (:class:`pipeline.models.MTBFScaling`)."""
    if law.dispersion_ > 1:
        return (
            f"count-model scaling law, quasi-Poisson: widened by φ = {law.dispersion_:.2f} of every "
            "node's counts"
        )
    return "count-model scaling law, Poisson"


TREND_CARD_CLUSTERS = 3  # the card names the clusters with the strongest trends; the section has all


def _trend_card(rates: RateAnalysis) -> list[tuple[str, str, str]]:
    tested = rates.trend_tests.filter(pl.col("crow_verdict").is_not_null())
    if tested.height == 0:
        return []
    moving = tested.filter(pl.col("crow_verdict") != "flat").sort("crow_p_value")
    detail = ", ".join(
        f"{c} {v} (β {format_value('crow_beta', b)})"
        for c, v, b in moving.head(TREND_CARD_CLUSTERS)
        .select("cluster_id", "crow_verdict", "crow_beta")
        .iter_rows()
    )
    if moving.height > TREND_CARD_CLUSTERS:
        detail += f" and {moving.height - TREND_CARD_CLUSTERS} more (see the trend section)"
    flat = tested.height - moving.height
    return [
        (
            "Failure-rate trend (Crow-AMSAA)",
            f"flat in {flat} of {tested.height} clusters",
            detail or "no cluster's rate is rising or falling at the 5% level",
        )
    ]
