"""Backtest of job interruption predictions against what happened (see
:mod:`pipeline.transform.backtest` for how each job's prediction is made from earlier data).

:class:`JobBacktest` takes per job the expected interruptions Λ over the hours it ran, whether it
was interrupted, and its predicted interruption rate h (per job-hour, known when it started):

* **Verdict**: observed interruptions O against expected E = ΣΛ. A job stops at its first
  interruption, and for a counting process stopped there E[N] = E[Λ] (the compensator of a
  stopped martingale), so O/E is unbiased although interrupted jobs ran short. Interval: the
  exact Garwood interval of O, divided by E. Calibrated when it contains 1; "too optimistic by
  X" when jobs were interrupted more (X = O/E − 1), "too pessimistic" when less.
  The interval counts the jobs' randomness only, not the error of the rates estimated from the
  history: on simulated fleets whose jobs follow the true model, O/E averages 1.00 with sd 0.09
  (0.06 from the jobs alone) and its interval covers 1 about 85% of the time (slow test).
* **Calibration table**: jobs in up to ``bins`` quantile bins of h (known at the start; binning
  on Λ or on 1 − exp(−Λ) would sort interrupted jobs, which ran short, into the low bins and
  make any model look wrong), predicted share interrupted = mean Λ, observed share with the
  Wilson (1927) score interval.
* **Coverage of the predicted time to first interruption**: under the model a job's time to its
  first interruption T is exponential with rate h, so its P10–P90 is −ln(0.9)/h … −ln(0.1)/h, and
  the residual Λ = h x elapsed (Cox & Snell 1968) is a unit exponential, right-censored for jobs
  that finished. The Kaplan–Meier estimate S of the residuals gives the shares of jobs whose T
  fell before the P10 (1 − S(0.105), nominal 10%), inside the P10–P90 (S(0.105) − S(2.303),
  nominal 80%) and after the P90 (S(2.303), 10%); a share is None when no job ran long enough
  to observe it. (The P10–P90 of the interruption *count* says nothing: a job has 0 or 1.)
* **Brier score** of p = 1 − exp(−Λ) against interrupted (0/1), beside the score of always
  forecasting the observed share (``brier_reference_``). p uses the hours the job actually ran,
  so an interrupted job's p is lower than its forecast at the start would have been: compare
  Brier scores between models on the same jobs, take the verdict from O/E.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from scipy.stats import norm

from pipeline.models.nonparametric import KaplanMeier
from pipeline.transform import poisson_interval

P10_RESIDUAL = -math.log(0.9)
P90_RESIDUAL = -math.log(0.1)
VERDICTS = ("calibrated", "too optimistic", "too pessimistic")


def wilson_interval(successes: np.ndarray, trials: np.ndarray, confidence: float = 0.95):
    """Wilson score interval for a binomial proportion (Wilson 1927, JASA 22:209)."""
    k, n = np.asarray(successes, float), np.asarray(trials, float)
    z = norm.ppf(0.5 + confidence / 2)
    p = k / n
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)


def _survival_at(km: KaplanMeier, residual: float) -> float | None:
    """KM survival at ``residual``, None past the largest residual observed (not estimable)."""
    if residual > km.timeline_hours_[-1]:
        return None
    return float(km.survival_[np.searchsorted(km.timeline_hours_, residual, side="right") - 1])


class JobBacktest:
    """Observed against predicted job interruptions: verdict, calibration table, coverage, Brier."""

    def __init__(self, confidence: float = 0.95, bins: int = 10) -> None:
        self.confidence = confidence
        self.bins = bins

    def fit(self, expected_interruptions, interrupted, hazard_per_hour) -> JobBacktest:
        expected = np.asarray(expected_interruptions, float)
        hit = np.asarray(interrupted, bool)
        hazard = np.asarray(hazard_per_hour, float)
        if expected.size == 0 or not expected.sum() > 0:
            raise ValueError("no job with a positive predicted interruption count to backtest")
        self.jobs_ = int(expected.size)
        self.observed_ = int(hit.sum())
        self.expected_ = float(expected.sum())
        self.ratio_ = self.observed_ / self.expected_
        low, high = poisson_interval(np.array([self.observed_]), np.array([self.expected_]), self.confidence)
        self.ratio_confidence_interval_ = (float(low[0]), float(high[0]))
        self.verdict_ = "too optimistic" if low[0] > 1 else "too pessimistic" if high[0] < 1 else "calibrated"
        self.calibration_ = self._calibration(expected, hit, hazard)
        km = KaplanMeier().fit(expected, hit)
        before = _survival_at(km, P10_RESIDUAL)
        after = _survival_at(km, P90_RESIDUAL)
        self.coverage_ = {
            "before_p10": None if before is None else 1 - before,
            "within_p10_p90": None if before is None or after is None else before - after,
            "after_p90": after,
        }
        p = 1 - np.exp(-expected)
        share = hit.mean()
        self.brier_score_ = float(np.mean((p - hit) ** 2))
        self.brier_reference_ = float(share * (1 - share))
        return self

    def _calibration(self, expected: np.ndarray, hit: np.ndarray, hazard: np.ndarray) -> pl.DataFrame:
        edges = np.unique(np.quantile(hazard, np.linspace(0, 1, self.bins + 1)))
        bin_of = np.clip(np.searchsorted(edges, hazard, side="right") - 1, 0, max(edges.size - 2, 0))
        table = (
            pl.DataFrame({"bin": bin_of + 1, "hazard": hazard, "expected": expected, "hit": hit})
            .group_by("bin")
            .agg(
                hazard_low_per_hour=pl.col("hazard").min(),
                hazard_high_per_hour=pl.col("hazard").max(),
                jobs=pl.len(),
                interrupted=pl.col("hit").sum().cast(pl.Int64),
                expected_interruptions=pl.col("expected").sum(),
            )
            .sort("bin")
        )
        low, high = wilson_interval(
            table["interrupted"].to_numpy(), table["jobs"].to_numpy(), self.confidence
        )
        return table.with_columns(
            predicted_share=pl.col("expected_interruptions") / pl.col("jobs"),
            observed_share=pl.col("interrupted") / pl.col("jobs"),
            observed_ci_low=pl.Series(low),
            observed_ci_high=pl.Series(high),
        )

    @property
    def headline(self) -> str:
        """The verdict in words, e.g. "predictions are too optimistic by 180% (...)"."""
        low, high = self.ratio_confidence_interval_
        detail = (
            f"{self.observed_:,} interrupted jobs against {self.expected_:,.1f} predicted "
            f"(ratio {self.ratio_:.2f}, 95% CI {low:.2f}–{high:.2f}, {self.jobs_:,} jobs)"
        )
        if self.verdict_ == "too optimistic":
            return f"predictions are too optimistic by {self.ratio_ - 1:.0%}: {detail}"
        if self.verdict_ == "too pessimistic":
            return f"predictions are too pessimistic by {1 - self.ratio_:.0%}: {detail}"
        return f"predictions are calibrated: {detail}"
