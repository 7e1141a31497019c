"""Do clusters' failure counts scatter around a fitted size law more than Poisson noise allows?

Pearson's goodness-of-fit statistic of the count law (:class:`~pipeline.models.MTBFScaling`): with
k_i failures observed in cluster i and mu_i = T_i N_i^alpha / MTBF_1 expected by the law,

    X^2 = sum (k_i - mu_i)^2 / mu_i  ~  chi2(clusters - 2)  when the law and Poisson counts hold

(McCullagh & Nelder 1989, *Generalized Linear Models*, sec. 4.4). X^2 / df is the dispersion of
the clusters around the law; a small p-value says the clusters differ in more than their size
(hardware generation, age, workload): heterogeneity, under which a count fit (weighting clusters
by exposure) and a gap fit (weighting them by their number of gaps) can disagree.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import chi2


class ClusterHeterogeneity:
    """Pearson chi-square of cluster failure counts around a fitted MTBF(N) = MTBF_1 / N^alpha."""

    def fit(self, instances, failures, exposure_cluster_hours, law) -> ClusterHeterogeneity:
        n = np.asarray(instances, float)
        k = np.asarray(failures, float)
        t = np.asarray(exposure_cluster_hours, float)
        expected = t * np.exp(law.coef_[0] + law.coef_[1] * np.log(n))
        self.statistic_ = float(np.sum((k - expected) ** 2 / expected))
        self.df_ = int(n.size - 2)
        self.dispersion_ = self.statistic_ / self.df_ if self.df_ > 0 else float("nan")
        self.p_value_ = float(chi2.sf(self.statistic_, self.df_)) if self.df_ > 0 else float("nan")
        return self
