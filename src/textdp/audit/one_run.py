"""One-run privacy audit: an ε lower bound from ONE training run with randomly included canaries.

Setting (Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023,
§3, Algorithm 1). There are ``m`` canaries; canary ``j`` is included in the training data iff an
independent fair coin ``S_j ∈ {−1, +1}`` shows ``+1``. After the one run every canary gets a score
(higher = "looks included": minus its loss, or the alignment of the model's change with its
gradient). The auditor sorts the scores and guesses IN (``T_j = +1``) for the ``k+`` highest, OUT
(``T_j = −1``) for the ``k−`` lowest, and abstains on the rest; ``r = k+ + k−`` guesses, ``v`` of them
correct (``T_j = S_j``). The guess rule looks at the scores only, never at the coins.

**The bound** (Steinke et al. 2023, Theorem 3.1, main result, with its δ term). If the training run
is (ε, δ)-DP with respect to adding or removing one canary, then for every ``v``

    P[W ≥ v] ≤ P[B ≥ v] + 2 m δ · max_{i = 1..m} (1/i) · P[v − i ≤ B < v],   B ~ Binomial(r, e^ε/(1 + e^ε)),

where ``W`` is the number of correct guesses (for δ = 0 only the binomial tail remains: each
guess is at most as good as ε-DP randomized response). :func:`p_value` is this right-hand side;
:func:`epsilon_lower_bound` is the largest ε whose p-value is at most β (searched upward from
ε = 0, so every smaller ε is refuted too): the run is not (ε, δ)-DP for any smaller ε, at
confidence 1 − β. The maximum over ``i`` needs only ``i ≤ v`` (larger ``i`` add no mass and
divide by more).

**Ceiling.** With ``m`` canaries the bound cannot exceed ``ln(q/(1−q))``, ``q = β^{1/m}`` (all ``m``
guessed, all correct: ``P[B ≥ m] = q^m`` must reach β), about 5.8 for ``m = 1,000`` and 8.1 for
``m = 10,000`` at β = 0.05 (:func:`ceiling`). A pre-declared grid of guess counts and δ > 0 lower
what this audit can reach further (``attainable`` in :class:`OneRunAudit`).

**Choosing the guess counts.** The theorem holds for a guess rule fixed before the coins are
seen. Choosing ``(k+, k−)`` after seeing which guesses were right is not covered, so textdp either
uses ONE pre-declared ``(k+, k−)`` at level β, or a pre-declared grid of ``K`` pairs
(:func:`guess_grid`, the default) with each bound at β/K and their maximum reported (union
bound: all K statements hold together with probability ≥ 1 − β).

**f-DP refinement** (Mahloujifar, Melis & Chaudhuri, "Auditing f-Differential Privacy in One
Run", arXiv:2410.22235, 2024; ICML 2025). Instead of ε-DP randomized response, the recursion of
their analysis uses the whole trade-off curve ``f`` of the claim. Reconstructed here with its
derivation (property tested in tests/audit/test_one_run.py: the bound holds over repeated simulated
runs of mechanisms with a known curve). Let ``C`` be the number of correct guesses out of exactly
``k`` and, for ``i = 0..k``,

    r_i = E[C · 1{C ≥ i}] / m,    h_i = E[(k − C) · 1{C ≥ i}] / m,    so r_0 + h_0 = k/m.

(1) For canary ``j`` and the others' coins fixed, "guess ``j`` IN and at least ``i − 1`` other guesses
correct" is an event of the output alone; its probabilities with ``j`` in and out are bounded by
the claim: ``P_in ≤ f̄(P_out)`` and ``P_out ≤ f̄(P_in)``, ``f̄(x) = 1 − f(x)`` (concave, increasing).
Averaging both guess directions, the other coins and the ``m`` canaries (Jensen) gives
``r_i ≤ f̄(h_{i−1})`` for ``i = 1..k``, i.e. ``h_{i−1} ≥ f̄⁻¹(r_i)``.
(2) Mass at exactly ``i`` correct adds ``(i/m)p_i`` to ``r`` and ``((k−i)/m)p_i`` to ``h``, so
``r_i − r_{i+1} = i/(k−i) · (h_i − h_{i+1})``.
(3) If ``P[C ≥ c] ≥ τ``, moving all mass above ``c`` down to ``c`` keeps (1) (it lowers every ``r`` and
raises every ``h``), so start at ``r_c = τc/m``, ``h_c = τ(k−c)/m`` and go down:
``h_i = max(h_{i+1}, f̄⁻¹(r_{i+1}))``, ``r_i = r_{i+1} + i/(k−i)·(h_i − h_{i+1})``. By induction (and
summation by parts, since ``i/(k−i)`` increases with ``i``) these are lower bounds of the true
``h_i, r_i``; if they end with ``r_0 + h_0 > k/m``, ``P[C ≥ c] ≥ τ`` is impossible under ``f``, so the
claim is refuted at level τ = β. This is the recursion of Mahloujifar et al.'s numerical audit.
Two families of curves (:func:`fdp_epsilon_lower_bound`):

* ``"approx-dp"``: the (ε, δ)-DP curve ``f(x) = max(0, 1 − δ − e^ε x, e^{−ε}(1 − δ − x))``: a lower
  bound on ε at the same δ, for any mechanism, comparable with the theorem above;
* ``"gaussian"``: μ-GDP, ``f̄⁻¹(y) = Φ(Φ⁻¹(y) − μ)`` (Dong, Roth & Su 2022): the largest μ refuted, and
  the ε at δ of that Gaussian curve. It refutes "the run is μ-GDP", a stronger claim than (ε,
  δ)-DP: a lower bound on ε only for mechanisms whose trade-off curve is Gaussian (DP-SGD's is
  close to one for many steps, not exactly).

Public API::

    guesses(scores, k_plus, k_minus) -> (m,) int8 in {−1, 0, +1}
    p_value(m, r, v, epsilon, delta=0) -> float
    epsilon_lower_bound(m, r, v, beta, delta=0) -> float
    fdp_refutes(m, k, c, beta, inverse_blowup) -> bool
    fdp_epsilon_lower_bound(m, k, c, beta, delta=0, curve="approx-dp") -> float
    gdp_epsilon(mu, delta) -> float
    ceiling(m, beta) -> float
    guess_grid(m) -> list[(k_plus, k_minus)]
    one_run_audit(scores, included, beta=0.05, delta=0, guess_counts=None, fdp=True) -> OneRunAudit

No randomness here: everything is a function of the scores and the coins.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Callable, Sequence

import numpy as np

from textdp.errors import ParameterError

__all__ = ["guesses", "p_value", "epsilon_lower_bound", "fdp_refutes", "fdp_epsilon_lower_bound", "gdp_epsilon",
           "ceiling", "guess_grid", "one_run_audit", "OneRunAudit", "GuessRow", "CITATION", "FDP_CITATION"]

CITATION = "Steinke, Nasr & Jagielski 2023 (Privacy Auditing with One (1) Training Run), Theorem 3.1"
FDP_CITATION = "Mahloujifar, Melis & Chaudhuri 2024 (Auditing f-Differential Privacy in One Run)"

#: fractions of m guessed in the default grid (half IN from the top, half OUT from the bottom)
GRID_FRACTIONS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)

_N = NormalDist()


# ----------------------------------------------------------------------------------------- checks
def _check_beta(beta) -> float:
    try:
        b = float(beta)
    except (TypeError, ValueError):
        raise ParameterError(f"beta must be a number in (0, 1), got {beta!r}") from None
    if not 0.0 < b < 1.0:
        raise ParameterError(f"beta must be in (0, 1) (e.g. 0.05 for 95% confidence), got {beta!r}")
    return b


def _check_delta(delta) -> float:
    try:
        d = float(delta)
    except (TypeError, ValueError):
        raise ParameterError(f"delta must be a number in [0, 1), got {delta!r}") from None
    if not 0.0 <= d < 1.0:
        raise ParameterError(f"delta must be in [0, 1), got {delta!r}")
    return d


def _check_counts(m, r, v) -> tuple[int, int, int]:
    try:
        ok = all(float(x) == int(x) for x in (m, r, v))
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok or not 0 <= int(v) <= int(r) <= int(m) or int(m) < 1:
        raise ParameterError(f"need whole numbers 0 <= correct <= guesses <= canaries, canaries >= 1; "
                             f"got canaries={m!r}, guesses={r!r}, correct={v!r}")
    return int(m), int(r), int(v)


# ------------------------------------------------------------------------------------ guessing
def guesses(scores, k_plus: int, k_minus: int) -> np.ndarray:
    """The auditor's guesses from the scores alone: ``+1`` (IN) for the ``k_plus`` highest scores,
    ``−1`` (OUT) for the ``k_minus`` lowest, 0 (abstain) for the rest (Steinke et al. 2023,
    Algorithm 1). Ties are broken by canary index (fixed before the coins).

    ``scores``: (m,) finite floats. Returns (m,) int8. Raises ParameterError when
    ``k_plus + k_minus > m``, a count is negative, or a score is not finite."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    m = s.size
    if m == 0:
        raise ParameterError("no canary scores given; need at least one canary")
    if not np.all(np.isfinite(s)):
        raise ParameterError(f"canary scores must be finite numbers; {int(np.sum(~np.isfinite(s)))} are NaN or infinite")
    kp, km = int(k_plus), int(k_minus)
    if kp < 0 or km < 0 or kp + km > m or kp != k_plus or km != k_minus:
        raise ParameterError(f"guess counts must be whole numbers >= 0 with k+ + k- <= {m} canaries, "
                             f"got k+={k_plus!r}, k-={k_minus!r}")
    order = np.argsort(s, kind="stable")  # ascending; equal scores keep index order
    t = np.zeros(m, dtype=np.int8)
    if km:
        t[order[:km]] = -1
    if kp:
        t[order[m - kp:]] = 1
    return t


def _coins(included, m: int) -> np.ndarray:
    a = np.asarray(included).ravel()
    if a.size != m:
        raise ParameterError(f"included must have one entry per canary: {a.size} entries for {m} scores")
    if a.dtype == bool:
        return np.where(a, 1, -1).astype(np.int8)
    if not np.all(np.isin(a, (0, 1, -1, True, False))):
        raise ParameterError("included must be booleans (or 1 = included, 0 or -1 = not included)")
    return np.where(a == 1, 1, -1).astype(np.int8)


# ------------------------------------------------------------------------- Steinke et al. bound
def p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """Upper bound on ``P[W ≥ v]`` (``v`` or more correct out of ``r`` guesses about ``m`` canaries) when
    the run is (ε, δ)-DP per canary (add/remove one): Steinke et al. 2023, Theorem 3.1 (module
    docstring). ``epsilon >= 0`` (per canary, for the whole run). Returns a float in [0, 1].
    Raises ParameterError for counts outside ``0 <= v <= r <= m`` or a bad δ."""
    from textdp.audit.oracle import binom_logsf, binom_pmf

    m, r, v = _check_counts(m, r, v)
    delta = _check_delta(delta)
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-float(epsilon))) if epsilon < 700 else 1.0
    tail = 1.0 if v - 1 >= r else 0.0
    if v - 1 < r:
        tail = math.exp(binom_logsf(v - 1, r, q)) if 0.0 < q < 1.0 else (1.0 if q >= 1.0 else 0.0)
    if delta == 0.0:
        return min(1.0, tail)
    # P[v - i <= B < v] for i = 1..v: cumulative sums of the pmf at v-1, v-2, ..., 0
    pm = binom_pmf(np.arange(v - 1, -1, -1), r, q)
    alpha = float(np.max(np.cumsum(pm) / np.arange(1, v + 1)))
    return min(1.0, tail + 2.0 * m * delta * alpha)


def ceiling(m: int, beta: float = 0.05) -> float:
    """``ln(q/(1−q))`` with ``q = β^{1/m}``: no one-run bound from ``m`` canaries at confidence ``1 − β``
    can exceed it (all ``m`` guessed and all correct). About 5.8 for m = 1,000, β = 0.05."""
    beta = _check_beta(beta)
    if int(m) < 1:
        raise ParameterError(f"the number of canaries must be >= 1, got {m!r}")
    lq = math.log(beta) / int(m)  # ln q
    return lq - math.log(-math.expm1(lq))


def _first_crossing(pval: Callable[[float], float], beta: float, hi: float, step: float = 0.25,
                    tol: float = 1e-4) -> float:
    """Largest ε in [0, hi] such that ``pval(ε') <= beta`` on the scan ε' = 0, step, 2·step, … up to it,
    refined by bisection inside the first step where it fails; 0.0 when ``pval(0) > beta``."""
    if pval(0.0) > beta:
        return 0.0
    lo = 0.0
    x = step
    while x <= hi + step:
        if pval(x) > beta:
            break
        lo = x
        x += step
    else:
        return lo
    up = x
    while up - lo > tol:
        mid = 0.5 * (lo + up)
        if pval(mid) <= beta:
            lo = mid
        else:
            up = mid
    return lo


def epsilon_lower_bound(m: int, r: int, v: int, beta: float = 0.05, delta: float = 0.0) -> float:
    """The largest ε such that ``v`` correct out of ``r`` guesses (``m`` canaries) has p-value at most β
    under (ε, δ)-DP (:func:`p_value`), found from ε = 0 upward so that every smaller ε is refuted too
    (resolution 1e-4, rounded down). 0.0 when even ε = 0 is not refuted. Per canary (add/remove
    one), for the whole run. Raises ParameterError for bad counts, β or δ."""
    m, r, v = _check_counts(m, r, v)
    beta, delta = _check_beta(beta), _check_delta(delta)
    return _first_crossing(lambda e: p_value(m, r, v, e, delta), beta, ceiling(m, beta))


# --------------------------------------------------------------------------------- f-DP refinement
def fdp_refutes(m: int, k: int, c: int, beta: float, inverse_blowup: Callable[[float], float]) -> bool:
    """Whether ``c`` or more correct out of exactly ``k`` guesses about ``m`` canaries has probability
    below β under every mechanism with trade-off curve ``f`` (the recursion of Mahloujifar et al.
    2024, derived in the module docstring). ``inverse_blowup(y)`` is ``f̄⁻¹(y)``: the least
    probability, under one neighbour, of an event that has probability ``y`` under the other
    (nondecreasing, from [0, 1] to [0, 1]). Raises ParameterError for bad counts or β."""
    m, k, c = _check_counts(m, k, c)
    beta = _check_beta(beta)
    total = k / m
    r = beta * c / m
    h = beta * (k - c) / m
    for i in range(c - 1, -1, -1):
        h_new = max(h, float(inverse_blowup(min(r, 1.0))))
        if h_new <= h:  # a fixed point: nothing changes below
            break
        r += i / (k - i) * (h_new - h)
        h = h_new
        if r + h > total * (1.0 + 1e-12):
            return True
    return r + h > total * (1.0 + 1e-12)


def _approx_dp_inverse(epsilon: float, delta: float) -> Callable[[float], float]:
    """f̄⁻¹ of the (ε, δ)-DP trade-off curve: ``max(0, (y − δ)e^{−ε}, 1 − δ − e^{ε}(1 − y))``."""
    e_neg = math.exp(-epsilon)
    e_pos = math.exp(min(epsilon, 700.0))

    def inv(y: float) -> float:
        return max(0.0, (y - delta) * e_neg, 1.0 - delta - e_pos * (1.0 - y))

    return inv


def _gaussian_inverse(mu: float) -> Callable[[float], float]:
    """f̄⁻¹ of μ-GDP: ``Φ(Φ⁻¹(y) − μ)``."""

    def inv(y: float) -> float:
        if y <= 0.0:
            return 0.0
        if y >= 1.0:
            return 1.0
        return _N.cdf(_N.inv_cdf(y) - mu)

    return inv


def gdp_epsilon(mu: float, delta: float) -> float:
    """The ε at which μ-GDP is (ε, δ)-DP, tightly: the root of
    ``δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)`` (Dong, Roth & Su 2022, Corollary 2.13). 0 for μ = 0;
    ``inf`` for δ = 0 and μ > 0. Raises ParameterError for μ < 0 or δ outside [0, 1)."""
    delta = _check_delta(delta)
    if mu < 0:
        raise ParameterError(f"mu must be >= 0, got {mu!r}")
    if mu == 0:
        return 0.0
    if delta == 0:
        return math.inf

    def d(eps: float) -> float:
        return _N.cdf(-eps / mu + mu / 2) - math.exp(eps) * _N.cdf(-eps / mu - mu / 2)

    if d(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while d(hi) > delta:
        lo, hi = hi, 2 * hi
        if hi > 1e4:
            return math.inf
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if d(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def _bisect_up(refuted: Callable[[float], bool], hi: float, tol: float = 1e-4) -> float:
    """Largest x in [0, hi] with ``refuted(x)`` (``refuted`` is monotone: true below a threshold)."""
    if not refuted(0.0):
        return 0.0
    if refuted(hi):
        return hi
    lo = 0.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if refuted(mid):
            lo = mid
        else:
            hi = mid
    return lo


def fdp_epsilon_lower_bound(m: int, k: int, c: int, beta: float = 0.05, delta: float = 0.0,
                            curve: str = "approx-dp") -> float:
    """f-DP refinement (Mahloujifar et al. 2024) of the one-run bound for ``c`` correct out of ``k``
    guesses about ``m`` canaries, at confidence ``1 − β``:

    * ``curve="approx-dp"``: the largest ε whose (ε, δ)-DP trade-off curve is refuted (a lower
      bound on ε at δ for any mechanism, like :func:`epsilon_lower_bound`);
    * ``curve="gaussian"``: the largest μ whose μ-GDP curve is refuted (returned as μ; convert with
      :func:`gdp_epsilon`).

    Resolution 1e-4, rounded down. Raises ParameterError for bad counts, β, δ or curve."""
    m, k, c = _check_counts(m, k, c)
    beta, delta = _check_beta(beta), _check_delta(delta)
    if curve == "approx-dp":
        return _bisect_up(lambda e: fdp_refutes(m, k, c, beta, _approx_dp_inverse(e, delta)), ceiling(m, beta) + 1.0)
    if curve == "gaussian":
        return _bisect_up(lambda mu: fdp_refutes(m, k, c, beta, _gaussian_inverse(mu)), 2.0 * _N.inv_cdf(1 - beta / 2) + 10.0)
    raise ParameterError(f"curve must be 'approx-dp' or 'gaussian', got {curve!r}")


# ------------------------------------------------------------------------------------ the audit
def guess_grid(m: int, fractions: Sequence[float] = GRID_FRACTIONS) -> list[tuple[int, int]]:
    """The default pre-declared guess counts: for each fraction ``f`` of :data:`GRID_FRACTIONS`,
    ``r = round(f·m)`` guesses (at least 2), half IN from the top (``k+ = ⌈r/2⌉``) and half OUT from the
    bottom; duplicates removed, order kept. Declared before any coin is seen."""
    if int(m) < 1:
        raise ParameterError(f"the number of canaries must be >= 1, got {m!r}")
    out: list[tuple[int, int]] = []
    for f in fractions:
        r = min(int(m), max(2, int(round(f * m))))
        pair = ((r + 1) // 2, r // 2)
        if pair not in out:
            out.append(pair)
    return out


@dataclass
class GuessRow:
    """One pre-declared guess count: ``k_plus`` IN guesses, ``k_minus`` OUT guesses, ``guesses = k_plus +
    k_minus``, ``correct`` of them right, the bound ``epsilon_lower`` at level ``beta_each`` and the
    f-DP bounds (``None`` when not computed)."""

    k_plus: int
    k_minus: int
    guesses: int
    correct: int
    beta_each: float
    epsilon_lower: float
    attainable: float
    fdp_epsilon_lower: float | None = None
    gdp_mu_lower: float | None = None


@dataclass
class OneRunAudit:
    """Result of :func:`one_run_audit`. ``epsilon_lower`` is the one-run lower bound (Steinke et al.
    2023) at confidence ``1 − beta`` over all rows (each row at β/K); ``ceiling`` is ``ln(q/(1−q))``,
    ``q = β^{1/m}``; ``attainable`` is the most this audit could have shown (every guess right, with its
    grid and δ). ``fdp_epsilon_lower`` / ``gdp_mu_lower`` / ``gdp_epsilon_lower``: the f-DP refinement
    with the (ε, δ)-DP curve and with the Gaussian curve (module docstring), ``None`` when not
    computed. Units: ε per canary (add/remove one) for the whole run."""

    canaries: int
    included: int
    beta: float
    delta: float
    selection: str
    rows: list[GuessRow]
    epsilon_lower: float
    best: GuessRow
    ceiling: float
    attainable: float
    fdp_epsilon_lower: float | None = None
    gdp_mu_lower: float | None = None
    gdp_epsilon_lower: float | None = None
    citation: str = CITATION
    fdp_citation: str = FDP_CITATION
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def one_run_audit(scores, included, beta: float = 0.05, delta: float = 0.0,
                  guess_counts: Sequence[tuple[int, int]] | None = None, fdp: bool = True) -> OneRunAudit:
    """One-run audit from canary ``scores`` (m,) (higher = looks included) and the coins ``included``
    (m,) bool (True = the canary was in the training data).

    ``guess_counts``: pre-declared ``(k+, k−)`` pairs; None = :func:`guess_grid`. With K pairs each
    bound is computed at β/K and the maximum is reported (valid at 1 − β by the union bound); one
    pair is used at β itself. ``delta``: the δ of the claim (δ term of Theorem 3.1; the (ε, δ)
    curve of the f-DP refinement and the ε of the Gaussian curve). ``fdp``: also compute the f-DP
    refinement (Mahloujifar et al. 2024), whose recursion costs up to ``correct`` steps per
    bisection step (about a second per pair at m = 10,000).

    Raises ParameterError for mismatched lengths, non-finite scores, bad β, δ or guess counts."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    m = s.size
    if m < 2:
        raise ParameterError(f"a one-run audit needs at least 2 canaries, got {m}")
    sgn = _coins(included, m)
    beta, delta = _check_beta(beta), _check_delta(delta)
    pairs = guess_grid(m) if guess_counts is None else [tuple(p) for p in guess_counts]
    if not pairs:
        raise ParameterError("give at least one (k+, k-) guess count")
    b_each = beta / len(pairs)
    rows = []
    for kp, km in pairs:
        t = guesses(s, kp, km)
        r = int(kp + km)
        if r == 0:
            raise ParameterError("a guess count (k+, k-) = (0, 0) makes no guess")
        v = int(np.sum(t == sgn))
        row = GuessRow(int(kp), int(km), r, v, b_each, epsilon_lower_bound(m, r, v, b_each, delta),
                       epsilon_lower_bound(m, r, r, b_each, delta))
        if fdp:
            row.fdp_epsilon_lower = fdp_epsilon_lower_bound(m, r, v, b_each, delta, "approx-dp")
            row.gdp_mu_lower = fdp_epsilon_lower_bound(m, r, v, b_each, delta, "gaussian")
        rows.append(row)
    best = max(rows, key=lambda x: (x.epsilon_lower, x.guesses))
    selection = (f"one pre-declared guess count (k+={pairs[0][0]}, k-={pairs[0][1]}) at beta={beta:g}" if len(pairs) == 1
                 else f"best of {len(pairs)} pre-declared guess counts, each at beta/{len(pairs)} = {b_each:.3g} "
                      f"(union bound)")
    res = OneRunAudit(m, int(np.sum(sgn == 1)), beta, delta, selection, rows, best.epsilon_lower, best,
                      ceiling(m, beta), max(x.attainable for x in rows))
    if fdp:
        res.fdp_epsilon_lower = max(x.fdp_epsilon_lower for x in rows)
        res.gdp_mu_lower = max(x.gdp_mu_lower for x in rows)
        res.gdp_epsilon_lower = gdp_epsilon(res.gdp_mu_lower, delta) if delta > 0 else None
    return res
