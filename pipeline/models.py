"""Models: reliability estimators in the style of lifelines fitters.

Every model's ``fit(...)`` returns ``self``; fitted values end in ``_`` (``rate_``, ``mtbf_hours_``,
``confidence_interval_``); models never print or plot.

* :class:`PoissonRate` — failures / exposure with the exact Garwood interval; MTBF = 1 / rate.
* :class:`ParametricTBF` — a lifelines parametric fit (exponential, Weibull, log-normal,
  log-logistic) of right-censored times between failures, on aggregated data (unique durations
  with counts as weights). MTBF is the mean of the fitted distribution; its interval comes from
  the delta method on the fitted parameters' covariance.
* :class:`KaplanMeier` — the non-parametric survival curve, also on aggregated data.
* :class:`MTBFScaling` — cluster MTBF against instance count, MTBF(N) = MTBF_1 / N^alpha, fitted as a
  Poisson regression of cluster failure counts with log(exposure hours) as offset:
  log E[k] = log T + log(1/MTBF_1) + alpha log N. alpha = 1 when instances fail independently.
"""

from __future__ import annotations

import math

import lifelines
import numpy as np
from scipy.special import gamma as gamma_fn
from scipy.stats import norm

from pipeline.transform import poisson_interval

_Z95 = norm.ppf(0.975)


class PoissonRate:
    """Constant failure rate per exposure hour with its exact interval."""

    def __init__(self, confidence: float = 0.95) -> None:
        self.confidence = confidence

    def fit(self, failures: int, exposure_hours: float) -> PoissonRate:
        if exposure_hours <= 0:
            raise ValueError("exposure_hours must be positive")
        self.failures_ = int(failures)
        self.exposure_hours_ = float(exposure_hours)
        self.rate_ = failures / exposure_hours
        low, high = poisson_interval(np.array([failures]), np.array([exposure_hours]), self.confidence)
        self.confidence_interval_ = (float(low[0]), float(high[0]))
        self.mtbf_hours_ = math.inf if failures == 0 else 1.0 / self.rate_
        self.mtbf_confidence_interval_ = (
            1.0 / self.confidence_interval_[1],
            math.inf if low[0] == 0 else 1.0 / self.confidence_interval_[0],
        )
        return self


_FAMILIES = {
    "exponential": lifelines.ExponentialFitter,
    "weibull": lifelines.WeibullFitter,
    "lognormal": lifelines.LogNormalFitter,
    "loglogistic": lifelines.LogLogisticFitter,
}


def _mean(family: str, p: np.ndarray) -> float:
    """Mean of the lifelines parameterisation of each family (``p`` in lifelines' order)."""
    if family == "exponential":
        return p[0]
    if family == "weibull":  # lambda_, rho_
        return p[0] * gamma_fn(1 + 1 / p[1])
    if family == "lognormal":  # mu_, sigma_
        return math.exp(p[0] + p[1] ** 2 / 2)
    # loglogistic alpha_, beta_: mean exists only for beta > 1
    a, b = p
    return math.inf if b <= 1 else a * (math.pi / b) / math.sin(math.pi / b)


class ParametricTBF:
    """A parametric time-between-failures model fitted with lifelines on weighted data."""

    def __init__(self, family: str = "weibull") -> None:
        if family not in _FAMILIES:
            raise ValueError(f"unknown family {family!r}; use one of {', '.join(_FAMILIES)}")
        self.family = family

    def fit(self, durations_hours, observed, weights=None) -> ParametricTBF:
        durations = np.asarray(durations_hours, dtype=float)
        weights = np.ones_like(durations) if weights is None else np.asarray(weights, float)
        if not np.any(np.asarray(observed, bool) & (weights > 0)):
            raise ValueError("no observed failures to fit")
        fitter = _FAMILIES[self.family]()
        fitter.fit(np.clip(durations, 1e-9, None), event_observed=np.asarray(observed, bool), weights=weights)
        names = list(fitter._fitted_parameter_names)
        values = np.array([getattr(fitter, n) for n in names], dtype=float)
        self.params_ = dict(zip(names, values, strict=True))
        ci = fitter.summary
        self.confidence_interval_ = {
            n: (float(ci.loc[n, "coef lower 95%"]), float(ci.loc[n, "coef upper 95%"])) for n in names
        }
        self.log_likelihood_ = float(fitter.log_likelihood_)
        self.aic_ = float(fitter.AIC_)
        self.mtbf_hours_ = float(_mean(self.family, values))
        self.mtbf_confidence_interval_ = self._mean_interval(values, fitter.variance_matrix_.values)
        self.shape_ = self.params_.get("rho_")
        return self

    def _mean_interval(self, values: np.ndarray, cov: np.ndarray) -> tuple[float, float]:
        """Delta method on log(mean): symmetric in log space, so the interval stays positive."""
        grad = np.zeros_like(values)
        base = math.log(_mean(self.family, values))
        for i, v in enumerate(values):
            step = 1e-6 * max(abs(v), 1e-6)
            shifted = values.copy()
            shifted[i] += step
            grad[i] = (math.log(_mean(self.family, shifted)) - base) / step
        se = math.sqrt(max(float(grad @ cov @ grad), 0.0))
        return math.exp(base - _Z95 * se), math.exp(base + _Z95 * se)


class KaplanMeier:
    """Kaplan–Meier survival of times between failures (weighted, right-censored)."""

    def fit(self, durations_hours, observed, weights=None) -> KaplanMeier:
        fitter = lifelines.KaplanMeierFitter()
        fitter.fit(
            np.asarray(durations_hours, float),
            event_observed=np.asarray(observed, bool),
            weights=None if weights is None else np.asarray(weights, float),
        )
        sf = fitter.survival_function_
        ci = fitter.confidence_interval_survival_function_
        self.timeline_hours_ = sf.index.to_numpy(float)
        self.survival_ = sf.iloc[:, 0].to_numpy(float)
        self.confidence_interval_ = (ci.iloc[:, 0].to_numpy(float), ci.iloc[:, 1].to_numpy(float))
        self.median_hours_ = float(fitter.median_survival_time_)
        return self


class MTBFScaling:
    """MTBF(N) = MTBF_1 / N^alpha by Poisson regression (IRLS) with an offset for exposure."""

    def fit(self, instances, failures, exposure_cluster_hours) -> MTBFScaling:
        n = np.asarray(instances, float)
        k = np.asarray(failures, float)
        t = np.asarray(exposure_cluster_hours, float)
        if len(n) < 2 or np.unique(n).size < 2:
            raise ValueError("need clusters of at least two different sizes to fit a scaling law")
        x = np.column_stack([np.ones_like(n), np.log(n)])
        beta = np.array([math.log(max(k.sum(), 0.5) / (t * n).sum()), 1.0])
        for _ in range(100):
            mu = t * np.exp(x @ beta)
            info = x.T @ (x * mu[:, None])
            step = np.linalg.solve(info, x.T @ (k - mu))
            beta = beta + step
            if np.max(np.abs(step)) < 1e-10:
                break
        cov = np.linalg.inv(x.T @ (x * (t * np.exp(x @ beta))[:, None]))
        se = np.sqrt(np.diag(cov))
        self.alpha_ = float(beta[1])
        self.alpha_confidence_interval_ = (beta[1] - _Z95 * se[1], beta[1] + _Z95 * se[1])
        self.mtbf_one_hours_ = float(math.exp(-beta[0]))
        self._beta, self._cov = beta, cov
        return self

    def predict_mtbf_hours(self, instances) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """MTBF and its 95% interval at the given cluster sizes (may be unobserved sizes)."""
        x = np.column_stack([np.ones(len(instances)), np.log(np.asarray(instances, float))])
        log_rate = x @ self._beta
        se = np.sqrt(np.einsum("ij,jk,ik->i", x, self._cov, x))
        return (np.exp(-log_rate), np.exp(-(log_rate + _Z95 * se)), np.exp(-(log_rate - _Z95 * se)))
