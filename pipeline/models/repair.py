"""Repair times: how long an outage keeps a node out, with unresolved outages right-censored.

* Kaplan–Meier (Kaplan & Meier 1958) survival of repair time S(t) = P(repair > t), with the
  exponential-Greenwood (log-log) pointwise 95% band lifelines computes. Quantiles (median, p50,
  p90) are the first time S drops to 1 - q; their intervals invert the band (Brookmeyer & Crowley
  1982: the times where the band covers 1 - q), the usual KM quantile interval. An upper end that
  the band never reaches is unbounded (infinite).
* Mean (MTTR): the restricted mean survival time (RMST, Irwin 1949; Klein & Moeschberger 2003,
  4.5) mu(tau) = integral_0^tau S(t) dt, tau = the longest repair time seen (or ``horizon_hours``),
  with variance sum_i A_i^2 d_i / (n_i (n_i - d_i)), A_i = integral_{t_i}^tau S. When the longest
  time is a completed repair, S(tau) = 0 and mu is exactly the mean of the repairs (the sample mean
  with no censoring). When it is censored the true mean is not identified (an open repair may last
  any time): mu(tau) is then a lower bound and ``mean_restricted_`` says so. The mean is positive,
  so its 95% interval is the log-scale Wald interval (delta method, se(log mu) = se(mu) / mu):
  exp(log mu -/+ 1.96 se / mu), never below zero (the raw mu -/+ 1.96 se went negative with a few
  heavy-tailed repairs and had to be clipped at 0).
* Repairs of 0 h (a fault cleared when it began, ``resolved_at`` = start) are completed repairs at
  t = 0: lifelines' Kaplan–Meier takes a 0 duration as is (S drops at 0; checked with warnings as
  errors), the restricted mean integrates S from 0, so with no censoring MTTR is the plain mean
  with the zeros in it and the median is 0 h once half the repairs are (tests/test_zero_length_repairs.py).
"""

from __future__ import annotations

import math

import lifelines
import numpy as np

from pipeline.models.survival import log_scale_interval


def _first_below(timeline: np.ndarray, curve: np.ndarray, level: float) -> float:
    """The first time ``curve`` (non-increasing) is at or below ``level``; inf if never."""
    hit = np.flatnonzero(curve <= level + 1e-12)
    return float(timeline[hit[0]]) if hit.size else math.inf


class RepairTimes:
    """Repair-time distribution of outages (hours), right-censored where a repair was not over."""

    def fit(self, repair_hours, resolved, weights=None, horizon_hours: float | None = None) -> RepairTimes:
        hours = np.asarray(repair_hours, float)
        done = np.asarray(resolved, bool)
        w = np.ones_like(hours) if weights is None else np.asarray(weights, float)
        if hours.size == 0 or not done.any():
            raise ValueError("no completed repairs to fit: repair times need outages with an end")
        if (hours < 0).any():
            raise ValueError("repair times must not be negative")
        fitter = lifelines.KaplanMeierFitter().fit(hours, event_observed=done, weights=w)
        timeline = fitter.survival_function_.index.to_numpy(float)
        survival = fitter.survival_function_.iloc[:, 0].to_numpy(float)
        band = fitter.confidence_interval_survival_function_
        low_band, high_band = band.iloc[:, 0].to_numpy(float), band.iloc[:, 1].to_numpy(float)

        self.outages_ = float(w.sum())
        self.resolved_ = float(w[done].sum())
        self.timeline_hours_ = timeline
        self.survival_ = survival
        self.confidence_interval_ = (low_band, high_band)
        self.quantiles_ = {
            q: (
                _first_below(timeline, survival, 1 - q),
                _first_below(timeline, low_band, 1 - q),
                _first_below(timeline, high_band, 1 - q),
            )
            for q in (0.5, 0.9)
        }
        self.median_hours_, *median_ci = self.quantiles_[0.5]
        self.median_confidence_interval_ = tuple(median_ci)
        self._restricted_mean(hours, done, w, horizon_hours)
        return self

    def _restricted_mean(self, hours, done, w, horizon_hours) -> None:
        tau = float(hours.max()) if horizon_hours is None else float(horizon_hours)
        counted = done & (hours <= tau)
        times, which = np.unique(hours[counted], return_inverse=True)
        events = np.bincount(which, weights=w[counted], minlength=times.size)
        order = np.argsort(hours, kind="stable")
        below = np.concatenate([[0.0], np.cumsum(w[order])])  # weight of the i shortest repairs
        at_risk = w.sum() - below[np.searchsorted(hours[order], times, side="left")]
        survival = np.cumprod(1 - events / at_risk)
        # S is a step function: S(t) = survival[i] on [times[i], times[i+1]), 1 before times[0]
        edges = np.append(times, tau)
        areas = survival * np.diff(edges)  # area of each step after an event time
        mean = float(times[0] + areas.sum()) if times.size else tau
        tail = np.cumsum(areas[::-1])[::-1]  # A_i = integral from t_i to tau
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(at_risk > events, tail**2 * events / (at_risk * (at_risk - events)), 0.0)
        se = float(np.sqrt(terms.sum()))
        self.mean_hours_ = mean
        low, high = log_scale_interval(mean, se) if mean > 0 else (0.0, 0.0)
        self.mean_confidence_interval_ = (float(low), float(high))
        self.mean_horizon_hours_ = tau
        last = hours == hours.max()
        self.mean_restricted_ = bool(horizon_hours is not None or not done[last].all())
