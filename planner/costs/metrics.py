"""Error and ranking measures shared by the estimators' fitting and validation code (one definition each)."""
from __future__ import annotations

import numpy as np


def percent_errors(predicted, measured) -> np.ndarray:
    """Signed error of each prediction, in percent of the measurement."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    return 100.0 * (p - m) / m


def mape(predicted, measured) -> float:
    """Mean absolute percentage error (percent)."""
    return float(np.mean(np.abs(percent_errors(predicted, measured))))


def spearman(a, b) -> float:
    """Spearman's rank correlation; NaN where it is undefined (fewer than 3 pairs, or a constant side)."""
    from scipy.stats import spearmanr
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return float("nan")
    return float(spearmanr(a, b).statistic)
