"""Trend tests: is a cluster's failure rate rising, falling (burn-in, reliability growth) or flat?

:class:`TrendTest` takes n failures at times t_1..t_n of a window (0, T] (time-terminated):

- Laplace test (Cox & Lewis 1966, *The Statistical Analysis of Series of Events*; Ascher &
  Feingold 1984, *Repairable Systems Reliability*; MIL-HDBK-189C 2011):
  U = (sum t_i / n - T / 2) / (T sqrt(1 / (12 n))) ~ N(0, 1) under a homogeneous Poisson
  process; U > 0 means failures bunch late (rising rate).
- MIL-HDBK-189 / Crow-AMSAA power-law test (Crow 1974, "Reliability analysis for complex,
  repairable systems"; MIL-HDBK-189C 2011, time-terminated data): intensity
  lambda beta t^(beta - 1), MLE beta = n / sum ln(T / t_i); 2 n / beta = 2 sum ln(T / t_i)
  ~ chi2(2n) when beta = 1, and 2 n beta_true / beta_hat ~ chi2(2n) exactly given n, which gives
  beta's interval. beta < 1 is a falling rate (burn-in), beta > 1 a rising one.

Both p-values are two-sided; the verdict is "rising" / "falling" / "flat" at the test level.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import chi2, norm

TREND_VERDICTS = ("rising", "falling", "flat")


class TrendTest:
    """Laplace and MIL-HDBK-189 (Crow-AMSAA) trend tests on one window's failure times."""

    def __init__(self, significance: float = 0.05) -> None:
        self.significance = significance

    def fit(self, event_times_hours, observed_hours: float) -> TrendTest:
        t = np.sort(np.asarray(event_times_hours, float))
        end = float(observed_hours)
        if t.size < 2:
            raise ValueError("a trend test needs at least two failures")
        if end <= 0 or t[0] < 0 or t[-1] > end:
            raise ValueError("failure times must lie in (0, observed_hours]")
        n = t.size
        self.failures_ = int(n)
        self.laplace_statistic_ = float((t.mean() - end / 2) / (end * math.sqrt(1 / (12 * n))))
        self.laplace_p_value_ = float(2 * norm.sf(abs(self.laplace_statistic_)))
        log_sum = float(np.log(end / np.clip(t, end * 1e-12, None)).sum())
        self.crow_beta_ = n / log_sum
        self.crow_beta_confidence_interval_ = (
            float(chi2.ppf(0.025, 2 * n) / (2 * log_sum)),
            float(chi2.ppf(0.975, 2 * n) / (2 * log_sum)),
        )
        self.crow_statistic_ = 2 * log_sum
        self.crow_p_value_ = float(
            min(1.0, 2 * min(chi2.cdf(self.crow_statistic_, 2 * n), chi2.sf(self.crow_statistic_, 2 * n)))
        )
        self.laplace_verdict_ = self._verdict(self.laplace_p_value_, self.laplace_statistic_ > 0)
        self.crow_verdict_ = self._verdict(self.crow_p_value_, self.crow_beta_ > 1)
        return self

    def _verdict(self, p_value: float, rising: bool) -> str:
        if p_value >= self.significance:
            return "flat"
        return "rising" if rising else "falling"
