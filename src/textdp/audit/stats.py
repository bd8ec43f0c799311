"""Exact confidence bounds for empirical privacy loss.

The privacy loss of a mechanism ``M`` between neighbours ``D, D'`` on an output
event ``y`` is ``ln P(M(D)=y) − ln P(M(D')=y)``; ε-DP says its absolute value is at
most ε for every ``y``. An audit observes counts of ``y`` in ``N`` runs on each
dataset, so the loss is a ratio of two binomial proportions: *two* unknown
probabilities per output, each estimated from its own count.

Method (documented choice; conservative and exact, no normal approximation):

* Each probability gets one-sided Clopper–Pearson bounds (Clopper & Pearson 1934):
  ``lower(k, N, a) = Beta⁻¹(a; k, N−k+1)``, ``upper(k, N, a) = Beta⁻¹(1−a; k+1, N−k)``.
* For every output ``y`` and both directions the loss is bounded below by
  ``ln lower(p_D(y)) − ln upper(p_D'(y))`` and above by
  ``ln upper(p_D(y)) − ln lower(p_D'(y))`` (and the mirror direction).
* Multiple comparisons (the max over outputs and directions, and the two counts of
  each ratio) are handled by a Bonferroni union bound over *all* one-sided
  statements used: ``4K`` statements at level ``α/(4K)`` for ``K`` outputs; for
  ``K = 2`` the complement ``P(y=0) = 1 − P(y=1)`` reduces this to 4 statements
  at ``α/4``. All hold simultaneously with probability ``≥ 1 − α``, so the max
  of the per-output lower bounds is a valid one-sided ``1 − α`` lower bound on
  ``max_y |loss(y)|`` and ``[ε_lo, ε_hi]`` is a simultaneous ``1 − α`` interval.
* A data-chosen event (:func:`selected_event_bound`) is picked on an independent
  selection sample, so only its own two counts need bounds (``α/2`` each).

An audit can only *refute* a DP claim (Ding et al. 2018): ``ε_lo > ε_claimed``
means a violation at confidence ``1 − α``; ``ε_lo <= ε_claimed`` certifies nothing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import betaincinv

from textdp.errors import ParameterError

__all__ = [
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "EpsilonBound",
    "empirical_epsilon_lower_bound",
    "selected_event_bound",
    "check_alpha",
]


def check_alpha(alpha: float) -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise ParameterError(f"alpha must be a number in (0, 1), got {alpha!r}") from None
    if not (0.0 < a < 1.0):
        raise ParameterError(f"alpha must be in (0, 1) (e.g. 0.05 for 95% confidence), got {alpha!r}")
    return a


def clopper_pearson_lower(k, n, alpha):
    """One-sided ``1 − alpha`` Clopper–Pearson lower bound on a binomial proportion.

    ``k`` successes (may be a float, used for predicted counts), ``n`` trials;
    arrays broadcast. Returns float64; 0 where ``k <= 0``.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float64), np.broadcast(k, n).shape)
    with np.errstate(invalid="ignore"):
        out = betaincinv(np.maximum(k, 1e-300), np.maximum(n - k + 1, 1e-300), a)
    return np.where(k <= 0, 0.0, out)


def clopper_pearson_upper(k, n, alpha):
    """One-sided ``1 − alpha`` Clopper–Pearson upper bound; 1 where ``k >= n``."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float64), np.broadcast(k, n).shape)
    with np.errstate(invalid="ignore"):
        out = betaincinv(k + 1, np.maximum(n - k, 1e-300), 1.0 - a)
    return np.where(k >= n, 1.0, out)


def _log(x):
    with np.errstate(divide="ignore"):
        return np.log(x)


@dataclass(frozen=True)
class EpsilonBound:
    """Empirical privacy loss of a discrete output with its confidence bounds.

    epsilon_hat: plug-in ``max_y |ln p̂_D(y) − ln p̂_D'(y)|`` (``inf`` when some output is
      seen under one dataset only); epsilon_lower / epsilon_upper: simultaneous
      ``1 − alpha`` bounds (one-sided lower bound ``epsilon_lower``);
      output / direction: where the lower bound is attained (``"D>D'"`` means
      ``P(y|D) > P(y|D')``); ceiling: ``ln N``, the largest finite plug-in value the
      sample size can show (an ``inf`` estimate reads "> ceiling");
      lower_ceiling: the largest ``epsilon_lower`` attainable at this ``N`` and ``alpha``.
    """

    epsilon_hat: float
    epsilon_lower: float
    epsilon_upper: float
    output: int
    direction: str
    ceiling: float
    lower_ceiling: float
    alpha: float
    method: str

    def to_dict(self) -> dict:
        return asdict(self)


def _counts(c, name):
    c = np.asarray(c)
    if c.ndim != 1 or c.size < 2:
        raise ParameterError(f"{name} must be a 1-D array of counts with at least 2 outputs, got shape {c.shape}")
    if not np.issubdtype(c.dtype, np.number) or np.any(~np.isfinite(c)) or np.any(c < 0) or np.any(c != np.floor(c)):
        raise ParameterError(f"{name} must hold non-negative integer counts")
    if c.sum() <= 0:
        raise ParameterError(f"{name} is empty (all counts zero); run the mechanism at least once")
    return c.astype(np.float64)


def empirical_epsilon_lower_bound(counts_D, counts_D2, alpha: float = 0.05) -> EpsilonBound:
    """Empirical ε of a discrete-output mechanism with an exact simultaneous confidence interval.

    counts_D, counts_D2: 1-D integer arrays of length ``K >= 2``; entry ``y`` is how often
    output ``y`` was seen in independent runs on ``D`` and on ``D'`` (totals may differ).
    alpha: ``1 − alpha`` is the confidence level (e.g. 0.05).

    Returns an :class:`EpsilonBound`. The lower bound is valid for the privacy loss of
    this output partition, which is a lower bound on the mechanism's ε (post-processing).
    Method: Clopper–Pearson bounds with a Bonferroni split over all ``4K`` one-sided
    statements (4 when ``K = 2``); see the module docstring.

    Raises :class:`ParameterError` for mismatched lengths, negative/non-integer counts,
    an empty dataset, or alpha outside (0, 1).
    """
    a = check_alpha(alpha)
    c1 = _counts(counts_D, "counts_D")
    c2 = _counts(counts_D2, "counts_D2")
    if c1.shape != c2.shape:
        raise ParameterError(f"counts_D and counts_D2 must have the same length, got {c1.size} and {c2.size}")
    n1, n2 = c1.sum(), c2.sum()
    K = c1.size
    if K == 2:
        a1 = a / 4.0
        lo1 = np.empty(2); up1 = np.empty(2); lo2 = np.empty(2); up2 = np.empty(2)
        lo1[1] = clopper_pearson_lower(c1[1], n1, a1); up1[1] = clopper_pearson_upper(c1[1], n1, a1)
        lo2[1] = clopper_pearson_lower(c2[1], n2, a1); up2[1] = clopper_pearson_upper(c2[1], n2, a1)
        lo1[0], up1[0] = 1.0 - up1[1], 1.0 - lo1[1]
        lo2[0], up2[0] = 1.0 - up2[1], 1.0 - lo2[1]
        method = "Clopper-Pearson, Bonferroni over 4 one-sided bounds (2 outputs)"
    else:
        a1 = a / (4.0 * K)
        lo1 = clopper_pearson_lower(c1, n1, a1); up1 = clopper_pearson_upper(c1, n1, a1)
        lo2 = clopper_pearson_lower(c2, n2, a1); up2 = clopper_pearson_upper(c2, n2, a1)
        method = f"Clopper-Pearson, Bonferroni over {4 * K} one-sided bounds ({K} outputs)"

    # plug-in estimate over observed outputs
    seen = (c1 + c2) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = _log(c1 / n1) - _log(c2 / n2)
    hat = float(np.max(np.abs(lr[seen]))) if seen.any() else 0.0

    fwd_lo = _log(lo1) - _log(up2)   # P(y|D) > P(y|D')
    bwd_lo = _log(lo2) - _log(up1)
    cand = np.concatenate([fwd_lo, bwd_lo])
    cand = np.where(np.isnan(cand), -np.inf, cand)
    j = int(np.argmax(cand))
    lower = max(0.0, float(cand[j]))
    with np.errstate(divide="ignore", invalid="ignore"):
        fwd_up = _log(up1) - _log(lo2)
        bwd_up = _log(up2) - _log(lo1)
    upper = float(np.nanmax(np.concatenate([fwd_up, bwd_up])))
    upper = max(upper, lower)
    nmax = max(n1, n2)
    a_ceil = a1
    lower_ceiling = float(_log(clopper_pearson_lower(nmax, nmax, a_ceil)) - _log(clopper_pearson_upper(0, nmax, a_ceil)))
    return EpsilonBound(
        epsilon_hat=hat,
        epsilon_lower=lower,
        epsilon_upper=upper,
        output=j % K,
        direction="D>D'" if j < K else "D'>D",
        ceiling=math.log(nmax),
        lower_ceiling=lower_ceiling,
        alpha=a,
        method=method,
    )


@dataclass(frozen=True)
class SelectedEvent:
    """A threshold event chosen on a selection sample and its bound on an evaluation sample.

    event: ``"s <= t"`` or ``"s >= t"`` on the statistic's bin index ``t``; direction: which
    dataset is more likely on it; epsilon_hat: plug-in loss of the event on the evaluation
    sample; epsilon_lower: one-sided ``1 − alpha`` lower bound (``alpha/2`` for each count).
    """

    event: str
    threshold: int
    direction: str
    epsilon_hat: float
    epsilon_lower: float
    counts: tuple[int, int]
    totals: tuple[int, int]
    alpha: float

    def to_dict(self) -> dict:
        return asdict(self)


SELECTION_SCORE = "selection"  # or "predicted"


def selected_event_bound(sel_D, sel_D2, eval_D, eval_D2, alpha: float = 0.05) -> SelectedEvent:
    """DP-Sniper-style bound (Bichsel et al., IEEE S&P 2021, in spirit): choose a threshold event
    on an ordered statistic using a *selection* sample, then bound its privacy loss on an
    independent *evaluation* sample.

    sel_D, sel_D2, eval_D, eval_D2: 1-D integer histograms over the same ordered bins of a
    scalar statistic (e.g. the number of coordinates >= 0.5), from independent runs.
    Candidates: all events ``{s <= t}`` and ``{s >= t}`` in both directions. The score of a
    candidate is its own Clopper–Pearson lower bound on the selection sample (so rare events
    whose selection counts are noise are not picked; ``SELECTION_SCORE = "predicted"`` scores
    the bound the selection frequencies would get at the evaluation size instead, which
    overfits on weak signals); the best is then evaluated on ``eval_*`` with Clopper–Pearson
    at ``alpha/2`` per count (valid because the choice is independent of the evaluation
    sample).
    """
    a = check_alpha(alpha)
    s1 = _counts(sel_D, "sel_D"); s2 = _counts(sel_D2, "sel_D2")
    e1 = _counts(eval_D, "eval_D"); e2 = _counts(eval_D2, "eval_D2")
    if not (s1.shape == s2.shape == e1.shape == e2.shape):
        raise ParameterError("selection and evaluation histograms must have the same bins")
    ns1, ns2, ne1, ne2 = s1.sum(), s2.sum(), e1.sum(), e2.sum()
    B = s1.size
    # events: le[t] = {s <= t}, ge[t] = {s >= t}
    le1, le2 = np.cumsum(s1), np.cumsum(s2)
    ge1, ge2 = np.cumsum(s1[::-1])[::-1], np.cumsum(s2[::-1])[::-1]
    a2 = a / 2.0

    def score(k_num, n_num_s, n_num_e, k_den, n_den_s, n_den_e):
        if SELECTION_SCORE == "predicted":
            # the bound the event would get at the evaluation size if its frequencies were these
            pk_num = k_num * (n_num_e / n_num_s)
            pk_den = k_den * (n_den_e / n_den_s)
            return _log(clopper_pearson_lower(pk_num, n_num_e, a2)) - _log(clopper_pearson_upper(pk_den, n_den_e, a2))
        # the bound the event gets on the selection sample itself: penalises events whose
        # counts are too small to be trusted, so noise in rare events is not selected
        return _log(clopper_pearson_lower(k_num, n_num_s, a2)) - _log(clopper_pearson_upper(k_den, n_den_s, a2))

    cands = [
        ("s <= t", "D>D'", score(le1, ns1, ne1, le2, ns2, ne2)),
        ("s <= t", "D'>D", score(le2, ns2, ne2, le1, ns1, ne1)),
        ("s >= t", "D>D'", score(ge1, ns1, ne1, ge2, ns2, ne2)),
        ("s >= t", "D'>D", score(ge2, ns2, ne2, ge1, ns1, ne1)),
    ]
    best = None
    for ev, dirn, sc in cands:
        sc = np.where(np.isnan(sc), -np.inf, sc)
        t = int(np.argmax(sc))
        if best is None or sc[t] > best[3]:
            best = (ev, dirn, t, float(sc[t]))
    ev, dirn, t, _ = best
    mask = np.arange(B) <= t if ev == "s <= t" else np.arange(B) >= t
    k1, k2 = float(e1[mask].sum()), float(e2[mask].sum())
    if dirn == "D>D'":
        kn, nn, kd, nd = k1, ne1, k2, ne2
    else:
        kn, nn, kd, nd = k2, ne2, k1, ne1
    lower = float(_log(clopper_pearson_lower(kn, nn, a2)) - _log(clopper_pearson_upper(kd, nd, a2)))
    with np.errstate(divide="ignore", invalid="ignore"):
        hat = float(_log(kn / nn) - _log(kd / nd)) if kn > 0 else (0.0 if kd == 0 else -math.inf)
    return SelectedEvent(
        event=ev, threshold=t, direction=dirn, epsilon_hat=hat if not math.isnan(hat) else 0.0,
        epsilon_lower=max(0.0, lower) if not math.isnan(lower) else 0.0,
        counts=(int(k1), int(k2)), totals=(int(ne1), int(ne2)), alpha=a,
    )
