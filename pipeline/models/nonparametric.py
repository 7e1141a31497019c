"""Non-parametric survival of times between failures, beside the parametric families of
:mod:`pipeline.models.survival`: :class:`KaplanMeier` (survival, the median) and
:class:`NelsonAalen` (cumulative hazard), both lifelines fitters run on aggregated data (unique
durations with counts as weights), each with lifelines' pointwise 95% band."""

from __future__ import annotations

import lifelines
import numpy as np


def _fitted(fitter, durations_hours, observed, weights):
    """``fitter`` (a lifelines univariate fitter) fitted to weighted, right-censored durations."""
    return fitter.fit(
        np.asarray(durations_hours, float),
        event_observed=np.asarray(observed, bool),
        weights=None if weights is None else np.asarray(weights, float),
    )


def _columns(frame) -> tuple[np.ndarray, ...]:
    """The index and the columns of a lifelines one- or two-column frame as float arrays."""
    return (frame.index.to_numpy(float), *(frame.iloc[:, k].to_numpy(float) for k in range(frame.shape[1])))


class KaplanMeier:
    """Kaplan–Meier survival of times between failures (weighted, right-censored)."""

    def fit(self, durations_hours, observed, weights=None) -> KaplanMeier:
        fitter = _fitted(lifelines.KaplanMeierFitter(), durations_hours, observed, weights)
        self.timeline_hours_, self.survival_ = _columns(fitter.survival_function_)
        self.confidence_interval_ = _columns(fitter.confidence_interval_survival_function_)[1:]
        self.median_hours_ = float(fitter.median_survival_time_)
        return self


class NelsonAalen:
    """Nelson–Aalen cumulative hazard of times between failures (weighted, right-censored)."""

    def fit(self, durations_hours, observed, weights=None) -> NelsonAalen:
        fitter = _fitted(lifelines.NelsonAalenFitter(), durations_hours, observed, weights)
        self.timeline_hours_, self.cumulative_hazard_ = _columns(fitter.cumulative_hazard_)
        self.confidence_interval_ = _columns(fitter.confidence_interval_)[1:]
        return self
