"""Agreement between two raters over the same items: percent agreement and Cohen's kappa.

Cohen's kappa (Cohen 1960): ``kappa = (p_o - p_e) / (1 - p_e)`` with ``p_o`` the observed share
of agreement and ``p_e = sum_k p_a(k) * p_b(k)`` the agreement expected from the two raters'
marginal label frequencies. The contingency table comes from
:func:`scipy.stats.contingency.crosstab` (scikit-learn's ``cohen_kappa_score`` computes the
same unweighted kappa; it is not a dependency of this project). Kappa is undefined when
``p_e == 1`` (both raters used one and the same label for every item): ``None`` then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats.contingency import crosstab


def agreement(a: Sequence[str], b: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    """Agreement of two raters' labels for the same items.

    Args:
        a, b: one label per item, same length and order.
        labels: every allowed label (fixes the table's rows and columns).

    Returns:
        ``{"n", "agree", "percent", "kappa"}``: items, agreeing items, ``100 * agree / n``
        (``None`` when ``n == 0``) and Cohen's kappa (``None`` when ``n == 0`` or undefined).

    Raises:
        ValueError: different lengths, or a label not in ``labels``.
    """
    if len(a) != len(b):
        raise ValueError(f"raters labelled different numbers of items: {len(a)} and {len(b)}")
    unknown = (set(a) | set(b)) - set(labels)
    if unknown:
        raise ValueError(f"labels {sorted(unknown)} are not among {list(labels)}")
    n = len(a)
    if n == 0:
        return {"n": 0, "agree": 0, "percent": None, "kappa": None}
    table = crosstab(list(a), list(b), levels=(list(labels), list(labels))).count / n
    p_o = float(np.trace(table))
    p_e = float(table.sum(axis=1) @ table.sum(axis=0))
    kappa = None if np.isclose(p_e, 1.0) else (p_o - p_e) / (1.0 - p_e)
    agree = sum(x == y for x, y in zip(a, b, strict=True))
    return {"n": n, "agree": agree, "percent": 100.0 * agree / n, "kappa": kappa}
