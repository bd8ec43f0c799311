"""Metric-DP audit of word-level text sanitizers: each word pair's privacy loss against its claim.

A word sanitizer ``M`` with a metric-DP guarantee promises, for every two input words ``x, x'`` and
every set ``S`` of outputs (Chatzikokolakis et al., PETS 2013, d_X-privacy; Feyisetan et al., WSDM 2020,
Def. 1)::

    P[M(x) ∈ S] <= exp(eps · d(x, x') + eps0) · P[M(x') ∈ S]

so the loss ``L(x, x') = max_S |ln P[M(x) ∈ S] - ln P[M(x') ∈ S]|`` of a pair is at most its *claim*
``eps · d(x, x') + eps0`` (``eps0`` where the guarantee states one: SanText's float-safe sampler,
SanText+'s ``ln(1/p)``, a perturbation's clipped float noise). This module measures ``L`` pair by pair
and compares it with the claim, read from the mechanism's ``guarantee`` (:class:`MetricClaim`,
:func:`claim_from_guarantee`).

**Exact audit** (mechanisms with an exact finite law, ``mech.probabilities(words)``: SanText,
SanText+, CusText, CusText+, TEM, 1-Diffractor). For a finite output set the maximum over events is
attained at a single output (a ratio of sums is at most the largest ratio of its terms), so
``L(x, x') = max_y |ln p(y|x) - ln p(y|x')|`` is computed exactly from the two rows of the law.

**Sampled audit** (any sampler: textdp's continuous-noise mechanisms FBDD, Mahalanobis, Vickrey,
TruncatedGumbel through ``mech.sample_rows``; the user's own ``f(word, n, rng)``; the peers of
:mod:`textdp.audit.peers`). ``2n`` outputs are drawn for every candidate word and split in two
halves. On the *selection* half, for each pair and direction, the candidate events are the single
outputs and the top-likelihood-ratio sets ``S_k`` (the ``k`` outputs with the largest smoothed ratio
``(c_x(y) + 1/2) / (c_x'(y) + 1/2)``, ``k = 1..64`` and doubling beyond); the event whose own
Clopper–Pearson lower bound is largest is chosen (as in DP-Sniper, Bichsel et al., IEEE S&P 2021, and
:func:`textdp.audit.stats.selected_event_bound`). Its counts on the *evaluation* half then give the
one-sided lower confidence bound::

    L_lo(x, x') = ln CP_lower(k_x(S), n, a) - ln CP_upper(k_x'(S), n, a),     a = alpha / (2 |E|)

(Clopper & Pearson 1934), ``|E|`` the number of pairs evaluated. The pairs and events depend on the
selection half only, so they are fixed given it, and a Bonferroni union bound over the ``2|E|``
one-sided statements makes every reported ``L_lo`` hold *simultaneously* with probability at least
``1 - alpha``: a pair whose ``L_lo`` exceeds its claim is a violation at that confidence (FLAG).
Because ``ln P[M(x) ∈ S] - ln P[M(x') ∈ S] <= L(x, x')`` for every fixed ``S``, ``L_lo`` is a valid lower
bound on the pair's loss. An audit can refute a claim, never certify one (Ding et al., CCS 2018): no
flag means "not refuted with these samples".

**Pairs** (both methods) over a set of candidate words (:func:`candidate_words`: random output words
plus each one's nearest word, public data only): the *closest* pair of each candidate in the claim's
metric, *random* pairs, and a *search* for the worst pairs: every pair of candidates (exact), or the
pairs with the largest selection-half excess over their claim (sampled). Reported: the worst pairs of
each kind by the ratio loss / claim, and whether any is flagged.

**Claims by guarantee kind** (:func:`claim_from_guarantee`): ``metric-dp`` ``eps·d + eps0``, ``d`` the
mechanism's own metric (Euclidean embedding distance; ``d_RM`` for Mahalanobis noise; list positions
for 1-Diffractor); ``umldp`` (SanText+, Yue et al. 2021 Def. 2) the same bound on events made of
*sensitive* outputs only, and a non-sensitive output may come from itself only (checked apart);
``group-dp`` (CusText) ``eps + eps0`` between words of the same group, nothing between groups;
``pure-dp``/``local-dp`` ``eps`` for every pair (the discrete metric). Every loss is also compared with
``guarantee.worst_case_epsilon``, the plain-DP bound over every pair of inputs, where stated.

Randomness: the audit's draws are a simulation, not a release: pair choice and the generators handed
to the samplers come from :func:`textdp.noise.simulation_rng` (PCG64DXSM), and the result says so.

Public API::

    audit_sanitizer(target, ...) -> MetricAuditResult
    sanitizer_target(mech_or_name, ...) -> SanitizerTarget, callable_target(f, claim, ...) -> CallableTarget
    claim_from_guarantee(guarantee) -> MetricClaim
    exact_loss_matrix(probabilities, columns=None) -> (k, k) float64
    worst_excess(probabilities, claims, columns=None) -> float
    cp_log_ratio_lower(counts, n, alpha) -> (k, k, V) float64
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from textdp.audit.stats import check_alpha, clopper_pearson_lower, clopper_pearson_upper
from textdp.errors import ParameterError

__all__ = [
    "MetricClaim", "claim_from_guarantee", "AuditTarget", "SanitizerTarget", "CallableTarget", "LawTarget",
    "sanitizer_target", "callable_target", "candidate_words", "nearest_word_candidates", "PairResult", "MetricAuditResult",
    "audit_sanitizer", "exact_loss_matrix", "worst_excess", "cp_log_ratio_lower", "SamplerFailure",
    "PAIR_KINDS", "METHODS",
]

PAIR_KINDS = ("closest", "random", "search")
METHODS = ("auto", "exact", "sampled")
#: relative float tolerance of an exact loss against its claim (the laws are float64 normalisations of
#: exact integer weights: their log-ratios carry errors near 1e-15; 1e-9 leaves a wide margin)
EXACT_TOLERANCE = 1e-9
#: prefix sizes of the top-likelihood-ratio sets tried on the selection half: 1..64, then doubling
_PREFIX_SMALL = 64


# ---------------------------------------------------------------------------------------------- claims
@dataclass(frozen=True)
class MetricClaim:
    """What a mechanism promises between two input words, as numbers.

    epsilon: per unit of ``d`` (``inf``: no metric claim, e.g. TruncatedGumbel); epsilon0: additive term;
    metric: the name of ``d``; kind: the guarantee kind it was read from (``metric-dp``, ``umldp``,
    ``group-dp``, ``pure-dp``, ``local-dp``, ``none``); within_groups: the claim holds only between words of
    the same group (``group-dp``), none between groups; sensitive_outputs_only: the claim covers events
    made of protected outputs only (``umldp``); worst_case_epsilon: the plain-DP bound over every pair of
    accepted inputs (None when not stated); description: the guarantee's own words.
    """

    epsilon: float
    epsilon0: float = 0.0
    metric: str = "euclidean"
    kind: str = "metric-dp"
    within_groups: bool = False
    sensitive_outputs_only: bool = False
    worst_case_epsilon: float | None = None
    description: str = ""

    @property
    def discrete(self) -> bool:
        """Whether ``d`` is the discrete metric (1 between any two distinct words: plain DP)."""
        return self.kind in ("pure-dp", "local-dp") or self.metric == "discrete"

    def bound(self, distance, same_group=None) -> np.ndarray:
        """The claimed loss bound ``eps · d + eps0`` for float64 distances ``distance`` (any shape;
        ``inf`` where nothing is claimed: across groups for ``group-dp``, everywhere for an infinite
        ``eps``). ``same_group``: bool array of the same shape (``group-dp`` only)."""
        d = np.asarray(distance, dtype=np.float64)
        if math.isinf(self.epsilon):
            return np.full(d.shape, math.inf)
        if self.within_groups:
            out = np.full(d.shape, self.epsilon + self.epsilon0)
            if same_group is not None:
                out = np.where(np.asarray(same_group, dtype=bool), out, math.inf)
            return out
        with np.errstate(invalid="ignore"):
            return np.where(d == 0, self.epsilon0, self.epsilon * d + self.epsilon0)

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        """One line: the claim audited."""
        e0 = f" + {self.epsilon0:.3g}" if self.epsilon0 else ""
        if math.isinf(self.epsilon):
            core = "no metric claim (epsilon = inf)"
        elif self.within_groups:
            core = f"{self.epsilon:g}{e0} between words of the same group, nothing between groups"
        elif self.discrete:
            core = f"{self.epsilon:g}{e0} for every pair of distinct words (plain DP)"
        else:
            core = f"{self.epsilon:g}·d(x, x′){e0}, d = {self.metric}"
        if self.sensitive_outputs_only:
            core += "; on events of sensitive outputs (a non-sensitive output comes from itself only)"
        wc = self.worst_case_epsilon
        if wc is not None:
            core += f"; plain-DP worst case {'∞' if math.isinf(wc) else f'{wc:.4g}'}"
        return core


def claim_from_guarantee(guarantee: Any, metric: str | None = None) -> MetricClaim:
    """The :class:`MetricClaim` a :mod:`textdp.accounting.guarantees` object states per word.

    ``metric-dp``: ``eps·d + eps0``; ``umldp``: the same on sensitive outputs; ``group-dp``:
    ``eps + eps0`` within a group; ``pure-dp``/``local-dp``: ``eps`` for any pair (the discrete metric;
    a ``local-dp`` claim per document or per token is audited as one word per unit); ``none``: no claim.
    ``metric`` overrides the guarantee's metric name. Raises ParameterError for a kind with no per-word
    reading (``approx-dp``, ``rdp``).
    """
    kind = getattr(guarantee, "kind", None)
    wc = getattr(guarantee, "worst_case_epsilon", None)
    desc = guarantee.describe() if hasattr(guarantee, "describe") else str(guarantee)
    if kind == "metric-dp":
        return MetricClaim(float(guarantee.epsilon), float(guarantee.epsilon0 or 0.0), metric or guarantee.metric,
                           kind, worst_case_epsilon=wc, description=desc)
    if kind == "umldp":
        return MetricClaim(float(guarantee.epsilon), float(guarantee.epsilon0 or 0.0), metric or guarantee.metric,
                           kind, sensitive_outputs_only=True, worst_case_epsilon=wc, description=desc)
    if kind == "group-dp":
        return MetricClaim(float(guarantee.epsilon), float(guarantee.epsilon0 or 0.0),
                           metric or f"groups ({guarantee.partition})", kind, within_groups=True,
                           worst_case_epsilon=wc, description=desc)
    if kind in ("pure-dp", "local-dp"):
        return MetricClaim(float(guarantee.epsilon), 0.0, "discrete", kind, worst_case_epsilon=float(guarantee.epsilon),
                           description=desc)
    if kind == "none":
        return MetricClaim(math.inf, 0.0, metric or "none", kind, worst_case_epsilon=math.inf, description=desc)
    raise ParameterError(f"a {kind!r} guarantee has no per-word claim the metric audit can check "
                         f"(metric-dp, umldp, group-dp, pure-dp or local-dp)")


# ---------------------------------------------------------------------------------------------- targets
class SamplerFailure(Exception):
    """A sampler failed on one input word (a peer's code raising): the word is left out, and the
    result says how often and why."""


class AuditTarget:
    """What the audit needs of a mechanism, over ``W`` candidate input words (index ``i`` = ``words[i]``).

    Subclasses set ``name``, ``claim``, ``words``, ``exact`` and implement :meth:`distance` (the claim's
    ``d``, float64, broadcast over index arrays), :meth:`sample` (``n`` output codes, int64, of word
    ``i``; codes index :meth:`output_label`) and, when ``exact``, :meth:`probabilities` (float64
    ``(W, V)``, rows sum to 1). Optional: :meth:`same_group` (``group-dp``), :meth:`unprotected_inputs`
    (inputs the claim does not cover, e.g. CusText+'s kept stop words), :meth:`protected_outputs`
    (``umldp``: bool mask over codes), :meth:`worst_case_inputs` (always all).
    """

    name: str = "mechanism"
    claim: MetricClaim
    words: list[str]
    exact: bool = False
    #: a line for the report on how the outputs are produced (e.g. "textdp keyed streams")
    sampler_note: str = ""

    def distance(self, i, j) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def same_group(self, i, j) -> np.ndarray:
        return np.ones(np.broadcast(np.asarray(i), np.asarray(j)).shape, dtype=bool)

    def unprotected_inputs(self) -> np.ndarray:
        return np.zeros(len(self.words), dtype=bool)

    def protected_outputs(self, n_codes: int) -> np.ndarray | None:
        return None

    def probabilities(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def sample(self, i: int, n: int, rng: np.random.Generator) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def n_codes(self) -> int:  # pragma: no cover - abstract
        """How many output codes exist so far (fixed for a finite output vocabulary)."""
        raise NotImplementedError

    def output_label(self, code: int) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    # claims of index pairs
    def claims(self, i, j) -> np.ndarray:
        """The claimed bound for index pairs ``(i, j)`` (float64, broadcast): inf where the claim does
        not cover the pair (different groups, an unprotected input)."""
        i, j = np.asarray(i), np.asarray(j)
        c = self.claim.bound(self.distance(i, j), self.same_group(i, j) if self.claim.within_groups else None)
        unprot = self.unprotected_inputs()
        if unprot.any():
            c = np.where(unprot[i] | unprot[j], math.inf, c)
        return c


def _check_words(words: Sequence[str], what: str) -> list[str]:
    words = list(dict.fromkeys(str(w) for w in words))
    if len(words) < 2:
        raise ParameterError(f"{what}: the audit needs at least 2 distinct words, got {len(words)}")
    return words


class SanitizerTarget(AuditTarget):
    """A textdp word sanitizer (:class:`textdp.sanitize.TokenSanitizer`) as an audit target.

    words: the candidate input words (output words of the mechanism, or any word with an embedding).
    Outputs are coded by their column in ``mech.output_words``. Exact when the class has an exact law
    (``mech.exact_probabilities``: SanText, SanText+, CusText, CusText+, TEM, 1-Diffractor); samples
    through ``mech.sample_rows(rows, rng)`` (the keyed streams, keyed from ``rng``). The claim's ``d``:
    ``mech.metric_distance`` where the mechanism has one (FBDD, Mahalanobis, Vickrey), ``mech.distance``
    (1-Diffractor's list positions), else the Euclidean distance of the raw embeddings.
    """

    def __init__(self, mech, words: Sequence[str], claim: MetricClaim | None = None, name: str | None = None):
        if getattr(mech, "document_level", False) or not hasattr(mech, "sample_rows"):
            raise ParameterError(f"{getattr(mech, 'name', mech)!r} is a document-level mechanism: the metric audit "
                                 "compares the output laws of single words (word sanitizers only)")
        self.mech = mech
        self.name = name or mech.name
        self.words = _check_words(words, self.name)
        rows = mech.input_rows(self.words)
        if (rows < 0).any():
            bad = [w for w, r in zip(self.words, rows.tolist()) if r < 0][:3]
            raise ParameterError(f"words without an embedding in {mech.embeddings.source}: {', '.join(map(repr, bad))}")
        self.rows = rows
        self.claim = claim or claim_from_guarantee(mech.guarantee)
        self.exact = bool(getattr(mech, "exact_probabilities", False))
        self.sampler_note = "textdp keyed streams (ChaCha20), keys drawn from the audit's simulation generator"
        self._dist = None

    def _distance_matrix(self) -> np.ndarray:
        if self._dist is None:
            m, r = self.mech, self.rows
            if self.claim.discrete:
                d = 1.0 - np.eye(len(r))
            elif hasattr(m, "metric_distance"):
                d = np.asarray(m.metric_distance(r[:, None], r[None, :]), dtype=np.float64)
            elif hasattr(m, "distance"):  # 1-Diffractor: max list-position difference
                d = np.zeros((len(r), len(r)))
                for a in range(len(r)):
                    for b in range(a + 1, len(r)):
                        d[a, b] = d[b, a] = m.distance(self.words[a], self.words[b])
            else:
                d = _euclidean(np.asarray(m.embeddings.vectors[r], dtype=np.float64))
            self._dist = d
        return self._dist

    def distance(self, i, j) -> np.ndarray:
        return self._distance_matrix()[np.asarray(i), np.asarray(j)]

    def same_group(self, i, j) -> np.ndarray:
        if not hasattr(self.mech, "groups"):
            return super().same_group(i, j)
        if not hasattr(self, "_gid"):
            firsts = [g[0] if g else "" for g in self.mech.groups(self.words)]
            ids = {w: k for k, w in enumerate(dict.fromkeys(firsts))}
            self._gid = np.array([ids[f] for f in firsts])
        return self._gid[np.asarray(i)] == self._gid[np.asarray(j)]

    def unprotected_inputs(self) -> np.ndarray:
        kept = getattr(self.mech, "kept_words", None)
        if not kept:
            return super().unprotected_inputs()
        kept = set(kept)
        return np.array([w in kept for w in self.words])

    def protected_outputs(self, n_codes: int) -> np.ndarray | None:
        if not self.claim.sensitive_outputs_only or not hasattr(self.mech, "is_sensitive"):
            return None
        return np.asarray(self.mech.is_sensitive(self.mech.output_rows), dtype=bool)

    def probabilities(self) -> np.ndarray:
        return np.asarray(self.mech.probabilities(self.rows), dtype=np.float64)

    def sample(self, i: int, n: int, rng: np.random.Generator) -> np.ndarray:
        out = self.mech.sample_rows(np.full(int(n), self.rows[i], dtype=np.int64), rng)
        return np.asarray(self.mech.output_positions(out), dtype=np.int64)

    def n_codes(self) -> int:
        return len(self.mech.output_rows)

    def output_label(self, code: int) -> str:
        return self.mech.embeddings.words[int(self.mech.output_rows[int(code)])]


class CallableTarget(AuditTarget):
    """A sampler given as a Python callable, with its claim: ``f(word: str, n: int, rng) -> n str``
    (a list, tuple or 1-D array of ``n`` output words; ``rng`` a :class:`numpy.random.Generator` to draw
    from). Outputs are coded by first appearance. ``distance(i, j)``: float64 ``d`` between the
    candidate words ``i`` and ``j`` (``distances``: a ``(W, W)`` matrix, or None for the discrete metric).
    A ``SamplerFailure`` raised by ``f`` leaves that word out of the audit (peers); any other exception is
    the caller's error (ParameterError naming it)."""

    def __init__(self, fn: Callable, words: Sequence[str], claim: MetricClaim, distances: np.ndarray | None = None,
                 name: str | None = None, sampler_note: str = ""):
        if not callable(fn):
            raise ParameterError(f"the sampler must be callable f(word, n, rng) -> list of n words, got "
                                 f"{type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "sampler")
        self.words = _check_words(words, self.name)
        self.claim = claim
        if distances is None:
            if not claim.discrete and not math.isinf(claim.epsilon):
                raise ParameterError(f"{self.name}: a {claim.metric!r} claim needs the distances between the words "
                                     "(give the embeddings)")
            distances = 1.0 - np.eye(len(self.words))
        distances = np.asarray(distances, dtype=np.float64)
        if distances.shape != (len(self.words), len(self.words)) or not np.isfinite(distances).all():
            raise ParameterError(f"{self.name}: distances must be a finite ({len(self.words)}, {len(self.words)}) "
                                 f"matrix, got shape {distances.shape}")
        self._dist = distances
        self._codes: dict[str, int] = {}
        self._labels: list[str] = []
        self.sampler_note = sampler_note or "the callable's own draws from the generator it is given"

    def distance(self, i, j) -> np.ndarray:
        return self._dist[np.asarray(i), np.asarray(j)]

    def sample(self, i: int, n: int, rng: np.random.Generator) -> np.ndarray:
        word = self.words[i]
        try:
            out = self.fn(word, int(n), rng)
        except SamplerFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's sampler failing: one line
            raise ParameterError(f"sampler {self.name!r} failed on {word!r}: {type(exc).__name__}: {exc}") from None
        if isinstance(out, str) or not hasattr(out, "__len__"):
            raise ParameterError(f"sampler {self.name!r} must return a list of {n} words, got {type(out).__name__}")
        if len(out) != n:
            raise ParameterError(f"sampler {self.name!r} returned {len(out)} words for n = {n} (of {word!r})")
        codes = np.empty(n, dtype=np.int64)
        get = self._codes.get
        for k, y in enumerate(out):
            if not isinstance(y, (str, np.str_)):
                raise ParameterError(f"sampler {self.name!r} must return words (str), got {type(y).__name__}")
            c = get(y)
            if c is None:
                c = self._codes[y] = len(self._labels)
                self._labels.append(str(y))
            codes[k] = c
        return codes

    def n_codes(self) -> int:
        return len(self._labels)

    def output_label(self, code: int) -> str:
        return self._labels[int(code)]


class LawTarget(AuditTarget):
    """A finite law given as a matrix, audited exactly: ``probabilities`` float64 ``(W, V)`` (row ``i``: the
    output law of ``words[i]`` over the outputs ``labels``), with ``claim`` and the ``(W, W)`` distances (None:
    the discrete metric). For a mechanism whose sampler cannot run but whose law can be read from its own
    code (e.g. pyPANTERA's CusText, :mod:`textdp.audit.peers`). Raises ParameterError for a bad shape or a
    row that is not a probability vector."""

    exact = True

    def __init__(self, words: Sequence[str], probabilities, labels: Sequence[str], claim: MetricClaim,
                 distances: np.ndarray | None = None, name: str = "law", sampler_note: str = ""):
        self.words = _check_words(words, name)
        p = np.asarray(probabilities, dtype=np.float64)
        if p.shape != (len(self.words), len(labels)):
            raise ParameterError(f"{name}: probabilities must be ({len(self.words)}, {len(labels)}), got {p.shape}")
        if (p < 0).any() or not np.isfinite(p).all() or np.abs(p.sum(axis=1) - 1).max() > 1e-6:
            raise ParameterError(f"{name}: every row of probabilities must be a probability vector")
        self._p = p
        self._labels = [str(x) for x in labels]
        self.claim = claim
        self.name = name
        self.sampler_note = sampler_note or "the law as given"
        d = 1.0 - np.eye(len(self.words)) if distances is None else np.asarray(distances, dtype=np.float64)
        if d.shape != (len(self.words), len(self.words)):
            raise ParameterError(f"{name}: distances must be ({len(self.words)}, {len(self.words)}), got {d.shape}")
        self._dist = d

    def distance(self, i, j) -> np.ndarray:
        return self._dist[np.asarray(i), np.asarray(j)]

    def probabilities(self) -> np.ndarray:
        return self._p

    def sample(self, i: int, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.choice(len(self._labels), size=int(n), p=self._p[i])

    def n_codes(self) -> int:
        return len(self._labels)

    def output_label(self, code: int) -> str:
        return self._labels[int(code)]


def _euclidean(x: np.ndarray) -> np.ndarray:
    sq = (x * x).sum(axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0)
    d = np.sqrt(d2)
    # exact differences where the GEMM form loses digits (small distances)
    small = d < 1e-3 * np.sqrt(np.maximum(sq[:, None], sq[None, :]) + 1e-300)
    if small.any():
        a, b = np.nonzero(small)
        d[a, b] = np.sqrt(((x[a] - x[b]) ** 2).sum(axis=1))
    np.fill_diagonal(d, 0.0)
    return d


def nearest_word_candidates(words: Sequence[str], vectors: np.ndarray, n_words: int = 40, seed: int | None = 0,
                            group_of: Callable[[list[str]], list[list[str]]] | None = None) -> list[str]:
    """``n_words`` of ``words`` drawn at random (``seed``: which words; not noise), each followed by its
    nearest other word of ``words`` in Euclidean distance of ``vectors`` (float ``(len(words), dim)``), so
    that close pairs exist; with ``group_of`` (a function giving each word's group as a list of words, e.g.
    CusText's ``mech.groups``) also one other word of its group. Returns distinct words (at most
    ``3·n_words``), in that order."""
    from textdp.noise import simulation_rng

    words = list(words)
    if len(words) < 2:
        raise ParameterError("the vocabulary has fewer than 2 words: nothing to compare")
    g = simulation_rng(seed)
    pick = np.sort(g.choice(len(words), size=min(int(n_words), len(words)), replace=False))
    vec = np.asarray(vectors, dtype=np.float64)
    groups = group_of([words[p] for p in pick.tolist()]) if group_of is not None else None
    sq = (vec * vec).sum(axis=1)
    out: list[str] = []
    for k, p in enumerate(pick.tolist()):
        out.append(words[p])
        d2 = sq - 2.0 * (vec @ vec[p]) + sq[p]
        d2[p] = np.inf
        out.append(words[int(np.argmin(d2))])
        if groups is not None:
            mates = [w for w in groups[k] if w != words[p]]
            if mates:
                out.append(mates[int(g.integers(len(mates)))])
    return list(dict.fromkeys(out))


def candidate_words(mech, n_words: int = 40, seed: int | None = 0) -> list[str]:
    """Candidate input words for auditing ``mech`` (a textdp word sanitizer): :func:`nearest_word_candidates`
    over its output vocabulary and embeddings (with its groups for CusText). Public data only."""
    out_words = mech.output_words
    vec = mech.embeddings.vectors[np.asarray(mech.output_rows)]
    return nearest_word_candidates(out_words, vec, n_words, seed, getattr(mech, "groups", None))


def sanitizer_target(mech, words: Sequence[str] | None = None, n_words: int = 40, seed: int | None = 0,
                     **kwargs) -> SanitizerTarget:
    """A :class:`SanitizerTarget` for ``mech``: a textdp word sanitizer, or a registry name built by
    :func:`textdp.sanitize.make_mechanism` with ``kwargs`` (embeddings, epsilon, parameters). ``words``:
    the candidate input words, else :func:`candidate_words` (``n_words``, ``seed``). Raises ParameterError
    for an unknown name, a document-level mechanism or words without embeddings."""
    if isinstance(mech, str):
        from textdp.sanitize import MECHANISMS, canonical_name, make_mechanism

        if getattr(MECHANISMS[canonical_name(mech)], "document_level", False):
            raise ParameterError(f"{mech!r} is a document-level mechanism: the metric audit compares the output "
                                 "laws of single words (word sanitizers only)")
        mech = make_mechanism(mech, **kwargs)
    elif kwargs:
        raise ParameterError(f"options {sorted(kwargs)} apply only when the mechanism is given by name")
    if getattr(mech, "document_level", False):
        raise ParameterError(f"{mech.name!r} is a document-level mechanism: the metric audit compares the output "
                             "laws of single words (word sanitizers only)")
    if words is None:
        words = candidate_words(mech, n_words, seed)
    return SanitizerTarget(mech, words)


def callable_target(fn: Callable, claim: MetricClaim, words: Sequence[str], embeddings=None,
                    name: str | None = None) -> CallableTarget:
    """A :class:`CallableTarget` for ``fn(word, n, rng) -> n words`` with ``claim``; ``d`` between the
    ``words`` is the Euclidean distance of their vectors in ``embeddings`` (an
    :class:`textdp.embeddings.Embeddings` or a name/path for :func:`textdp.embeddings.load_embeddings`),
    or the discrete metric when ``claim.discrete``. Raises ParameterError for words without a vector."""
    words = _check_words(words, name or getattr(fn, "__name__", "sampler"))
    dist = None
    if not claim.discrete and not math.isinf(claim.epsilon):
        if embeddings is None:
            raise ParameterError(f"a {claim.metric!r} claim needs --embeddings to measure d between the words "
                                 "(or --metric discrete for plain DP)")
        from textdp.embeddings import Embeddings, load_embeddings

        emb = embeddings if isinstance(embeddings, Embeddings) else load_embeddings(embeddings)
        idx, low = emb.index, emb.lowercase
        rows = [idx.get(w.lower() if low else w, -1) for w in words]
        bad = [w for w, r in zip(words, rows) if r < 0]
        if bad:
            raise ParameterError(f"words without an embedding in {emb.source}: {', '.join(map(repr, bad[:3]))}")
        dist = _euclidean(np.asarray(emb.vectors[np.asarray(rows)], dtype=np.float64))
    return CallableTarget(fn, words, claim, dist, name=name)


# ---------------------------------------------------------------------------------------------- exact losses
def exact_loss_matrix(probabilities, columns=None) -> np.ndarray:
    """Directed exact losses of a finite law: ``M[a, b] = max_y ln p(y|a) - ln p(y|b)`` over the output
    columns ``columns`` (a bool mask or index array; default all), float64 ``(k, k)``.

    ``probabilities``: float64 ``(k, V)`` rows (input ``a``'s law over ``V`` outputs). An output that
    ``a`` can produce and ``b`` cannot gives ``+inf``; outputs ``a`` cannot produce are ignored; a row
    with no admissible output gives ``-inf``. The pair's loss is ``max(M[a, b], M[b, a])``, attained at a
    single output (the largest ratio of any event ``S`` is that of one of its outputs).
    """
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim != 2:
        raise ParameterError(f"probabilities must be a (k, V) array, got shape {p.shape}")
    if columns is not None:
        p = p[:, np.asarray(columns)]
    with np.errstate(divide="ignore"):
        lp = np.log(p)
    k = len(p)
    out = np.full((k, k), -math.inf)
    for a in range(k):
        cols = p[a] > 0
        if not cols.any():
            continue
        out[a] = (lp[a, cols][None, :] - lp[:, cols]).max(axis=1)
    np.fill_diagonal(out, 0.0)
    return out


def worst_excess(probabilities, claims, columns=None) -> float:
    """``max_{a, b} (M[a, b] - claims[a, b])`` over ordered pairs ``a != b`` (see :func:`exact_loss_matrix`):
    positive iff some output's log-ratio exceeds the claimed bound (``inf`` if an output is possible for
    one input and impossible for the other where the claim is finite). ``claims``: float64 ``(k, k)``
    (e.g. ``eps · d + eps0``)."""
    m = exact_loss_matrix(probabilities, columns)
    c = np.asarray(claims, dtype=np.float64)
    off = ~np.eye(len(m), dtype=bool)
    with np.errstate(invalid="ignore"):
        ex = m - c
    ex = np.where(np.isnan(ex), -math.inf, ex)  # inf claim against inf loss: nothing claimed
    return float(ex[off].max()) if off.any() else -math.inf


def cp_log_ratio_lower(counts, n, alpha) -> np.ndarray:
    """Clopper–Pearson lower confidence bounds of ``ln p(y|x) - ln p(y|x')`` for every ``(x, x', y)``:
    float64 ``(k, k, V)`` from ``counts[x, y]`` (int ``(k, V)``) out of ``n`` draws per input, each of the
    two one-sided bounds at level ``alpha`` (the caller splits its error budget: e.g. ``alpha / k³``
    for a Bonferroni bound over all triples). ``-inf`` where ``counts[x, y] = 0``."""
    c = np.asarray(counts, dtype=np.float64)
    lo = clopper_pearson_lower(c, n, alpha)
    hi = clopper_pearson_upper(c, n, alpha)
    with np.errstate(divide="ignore"):
        return np.log(lo)[:, None, :] - np.log(hi)[None, :, :]


# ---------------------------------------------------------------------------------------------- results
@dataclass
class PairResult:
    """One audited pair.

    word_a, word_b: the pair (the loss is of ``a`` against ``b``: ``P[M(a) ∈ S] > P[M(b) ∈ S]``); kind:
    ``closest``/``random``/``search``; distance: the claim's ``d``; claim: the bound (inf: nothing
    claimed); loss: the exact loss, or the lower confidence bound (sampled); estimate: the plug-in loss
    of the chosen event on the evaluation half (exact: the loss); ratio: ``loss / claim``; flagged:
    ``loss > claim`` (exact: beyond :data:`EXACT_TOLERANCE`); event: the output or event; counts:
    ``(k_a, k_b, n)`` on the evaluation half (sampled).
    """

    word_a: str
    word_b: str
    kind: str
    distance: float
    claim: float
    loss: float
    estimate: float
    ratio: float
    flagged: bool
    event: str = ""
    counts: tuple[int, int, int] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class MetricAuditResult:
    """The outcome of :func:`audit_sanitizer`.

    name, method (``exact``/``sampled``), claim (:class:`MetricClaim`), alpha (sampled: simultaneous
    confidence ``1 - alpha``), samples (per word per half; 0 for exact), words (candidates audited),
    pairs (every evaluated :class:`PairResult`), worst (kind -> the worst pairs by ratio), flagged
    (a pair's loss above its claim), max_loss (the largest loss over all pairs and all outputs, against
    ``claim.worst_case_epsilon``: worst_case_flagged), umldp_violations (non-sensitive outputs produced
    by another input), failed_words (peer samplers that raised: word -> message), notes, wall_s,
    simulation (how the audit's draws were generated).
    """

    name: str
    method: str
    claim: MetricClaim
    alpha: float
    samples: int
    words: list[str]
    pairs: list[PairResult]
    worst: dict[str, list[PairResult]]
    flagged: bool
    max_loss: float
    worst_case_flagged: bool
    umldp_violations: list[str] = field(default_factory=list)
    failed_words: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    simulation: str = ""
    #: distinct pairs whose loss was computed (exact: every pair of candidates; sampled: the bounded ones)
    evaluated: int = 0
    #: sampled: the largest lower bound these sample sizes can give (an output seen n times out of n under one
    #: word and never under the other); a claim above it cannot be refuted by this audit. inf for exact.
    ceiling: float = math.inf

    @property
    def verdict(self) -> str:
        """``FLAG`` (a bound above the claim), or ``not refuted``."""
        return "FLAG" if (self.flagged or self.worst_case_flagged or self.umldp_violations) else "not refuted"

    def to_dict(self) -> dict:
        return {
            "name": self.name, "method": self.method, "claim": self.claim.to_dict(), "claim_text": self.claim.text(),
            "alpha": self.alpha, "samples": self.samples, "words": len(self.words), "pairs": len(self.pairs),
            "evaluated": self.evaluated, "ceiling": self.ceiling, "verdict": self.verdict, "flagged": self.flagged, "max_loss": self.max_loss,
            "worst_case_flagged": self.worst_case_flagged, "umldp_violations": self.umldp_violations,
            "failed_words": self.failed_words, "notes": self.notes, "wall_s": self.wall_s,
            "simulation": self.simulation,
            "worst": {k: [p.to_dict() for p in v] for k, v in self.worst.items()},
        }


def _ratio(loss: float, claim: float) -> float:
    if math.isinf(claim):
        return 0.0
    if claim <= 0:
        return math.inf if loss > 0 else 0.0
    return loss / claim


# ---------------------------------------------------------------------------------------------- pair choice
def _covered(claims: np.ndarray) -> np.ndarray:
    """Pairs the claim covers (finite claim); every pair when it covers none (no metric claim: the pairs
    are then checked against the plain-DP worst case only)."""
    fin = np.isfinite(claims)
    np.fill_diagonal(fin, False)
    if fin.any():
        return fin
    off = ~np.eye(len(claims), dtype=bool)
    return off


def _closest_pairs(target: AuditTarget, claims: np.ndarray, dist: np.ndarray) -> list[tuple[int, int]]:
    """Each candidate with its nearest other candidate in the claim's metric among the pairs the claim
    covers (finite claim), as unordered pairs."""
    w = len(target.words)
    dd = np.where(_covered(claims), dist, math.inf)
    np.fill_diagonal(dd, math.inf)
    pairs = set()
    for a in range(w):
        b = int(np.argmin(dd[a]))
        if math.isfinite(dd[a, b]):
            pairs.add((min(a, b), max(a, b)))
    return sorted(pairs)


def _random_pairs(target: AuditTarget, claims: np.ndarray, k: int, g: np.random.Generator) -> list[tuple[int, int]]:
    """``k`` distinct random unordered pairs among those the claim covers (fewer if there are fewer)."""
    iu, ju = np.triu_indices(len(target.words), 1)
    ok = _covered(claims)[iu, ju]
    iu, ju = iu[ok], ju[ok]
    if len(iu) == 0:
        return []
    pick = g.choice(len(iu), size=min(int(k), len(iu)), replace=False)
    return sorted((int(iu[p]), int(ju[p])) for p in pick)


def _claim_matrix(target: AuditTarget) -> tuple[np.ndarray, np.ndarray]:
    w = len(target.words)
    i, j = np.meshgrid(np.arange(w), np.arange(w), indexing="ij")
    dist = np.asarray(target.distance(i, j), dtype=np.float64)
    claims = np.asarray(target.claims(i, j), dtype=np.float64)
    np.fill_diagonal(claims, math.inf)
    return dist, claims


def _top(pairs: list[PairResult], k: int) -> list[PairResult]:
    def key(p):
        return (p.ratio if not math.isnan(p.ratio) else -1.0, p.loss - (p.claim if math.isfinite(p.claim) else 0))
    return sorted(pairs, key=key, reverse=True)[:k]


# ---------------------------------------------------------------------------------------------- the audit
def audit_sanitizer(target, *, method: str = "auto", samples: int = 20_000, alpha: float = 0.05,
                    random_pairs: int = 20, search_pairs: int = 20, top: int = 5, seed: int | None = None,
                    progress: Callable[[int], None] | None = None, **target_kwargs) -> MetricAuditResult:
    """Audit a word sanitizer's metric-DP claim pair by pair (module docstring: method and validity).

    target: an :class:`AuditTarget`, a textdp word sanitizer, or a registry name (built with
      ``target_kwargs``: ``embeddings``, ``epsilon``, the mechanism's parameters, ``words``, ``n_words``;
      see :func:`sanitizer_target`).
    method: ``exact`` (needs an exact law), ``sampled``, or ``auto`` (exact when available).
    samples: draws per candidate word in each half (sampled: ``2·samples`` per word; at least 100).
    alpha: the sampled bounds hold simultaneously with probability ``>= 1 - alpha``.
    random_pairs / search_pairs: how many random pairs, and how many pairs the search adds (sampled: the
      pairs with the largest selection-half excess; exact: every pair is searched, ``search_pairs`` only
      caps the report).
    top: pairs reported per kind. seed: the simulation generator's seed (None: from the OS).
    progress: called with the number of draws finished (sampled) or pairs computed (exact).

    Returns a :class:`MetricAuditResult` (its ``worst`` lists and ``verdict``). Units: losses and claims
    are natural-log privacy losses per word (per token). Raises ParameterError for a bad method,
    samples or alpha, a target without an exact law under ``method="exact"``, or a failing sampler.
    """
    from textdp.audit.core import simulation_statement
    from textdp.noise import simulation_source

    t0 = time.perf_counter()
    if method not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    a = check_alpha(alpha)
    for nm, v, lo in (("samples", samples, 100), ("random_pairs", random_pairs, 0), ("search_pairs", search_pairs, 0),
                      ("top", top, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ParameterError(f"{nm} must be an integer >= {lo}, got {v!r}")
    if not isinstance(target, AuditTarget):
        target = sanitizer_target(target, **target_kwargs)
    elif target_kwargs:
        raise ParameterError(f"options {sorted(target_kwargs)} apply only when the mechanism is given by name")
    if method == "exact" and not target.exact:
        raise ParameterError(f"{target.name} has no exact law (continuous noise or an external sampler): "
                             "use method 'sampled'")
    exact = target.exact if method == "auto" else method == "exact"
    src = simulation_source(seed)
    g = src.generator()
    dist, claims = _claim_matrix(target)
    notes = []
    if not np.isfinite(claims).any():
        notes.append("the claim covers no pair of the candidate words (no metric claim, or every pair "
                     "crosses groups): only the plain-DP worst case is checked")
    if exact:
        res = _audit_exact(target, dist, claims, g, random_pairs, search_pairs, top, progress)
    else:
        res = _audit_sampled(target, dist, claims, g, int(samples), a, random_pairs, search_pairs, top, src, progress)
    res.notes = notes + list(getattr(target, "notes", [])) + res.notes
    res.wall_s = time.perf_counter() - t0
    res.simulation = simulation_statement(seed)
    return res


def _pair_result(target, a, b, kind, dist, claims, loss, estimate, event, counts=None, exact=False) -> PairResult:
    c = float(claims[a, b])
    if exact:
        flagged = bool(loss > c + EXACT_TOLERANCE * max(1.0, abs(c))) if math.isfinite(c) else False
    else:
        flagged = bool(loss > c)
    return PairResult(target.words[a], target.words[b], kind, float(dist[a, b]), c, float(loss), float(estimate),
                      _ratio(float(loss), c), flagged, event, counts)


def _audit_exact(target, dist, claims, g, random_pairs, search_pairs, top, progress) -> MetricAuditResult:
    p = target.probabilities()
    w = len(target.words)
    if p.shape[0] != w:
        raise ParameterError(f"{target.name}: probabilities returned {p.shape[0]} rows for {w} words")
    prot = target.protected_outputs(p.shape[1])
    m_full = exact_loss_matrix(p)
    m = exact_loss_matrix(p, prot) if prot is not None else m_full
    if progress is not None:
        progress(w * w)
    notes = ["exact: the loss of each pair is max over single outputs of |ln p(y|x) - ln p(y|x')| from "
             "mech.probabilities (no sampling)"]
    viol = []
    if prot is not None:  # UMLDP (ii): a non-sensitive output is produced by its own input only
        for col in np.flatnonzero(~prot).tolist():
            who = np.flatnonzero(p[:, col] > 0)
            lab = target.output_label(col)
            if any(target.words[i] != lab for i in who.tolist()):
                viol.append(f"{lab!r} produced by {', '.join(repr(target.words[i]) for i in who[:3].tolist())}")
    kinds = {
        "closest": _closest_pairs(target, claims, dist),
        "random": _random_pairs(target, claims, random_pairs, g),
    }
    results = []
    seen = {}
    for kind, pairs in kinds.items():
        for a, b in pairs:
            results.append(_exact_pair(target, a, b, kind, dist, claims, m, p, prot))
            seen[(a, b)] = True
    # search: every pair of candidates (the loss matrix is already exact)
    iu, ju = np.triu_indices(w, 1)
    with np.errstate(invalid="ignore"):
        lossu = np.maximum(m[iu, ju], m[ju, iu])
        cu = claims[iu, ju]
        ratio = np.where(np.isfinite(cu), np.where(cu > 0, lossu / np.where(cu > 0, cu, 1.0),
                                                   np.where(lossu > 0, np.inf, 0.0)), 0.0)
    order = np.argsort(-np.nan_to_num(ratio, nan=-1.0), kind="stable")
    search = []
    for k in order[: max(search_pairs, top)].tolist():
        search.append(_exact_pair(target, int(iu[k]), int(ju[k]), "search", dist, claims, m, p, prot))
    results += search
    exceed = np.isfinite(cu) & (lossu > cu + EXACT_TOLERANCE * np.maximum(1.0, np.abs(np.where(np.isfinite(cu), cu, 0))))
    flagged = bool(exceed.any())
    full_u = np.maximum(m_full[iu, ju], m_full[ju, iu]) if len(iu) else np.zeros(0)
    max_loss = float(full_u.max()) if len(full_u) else 0.0
    wc = target.claim.worst_case_epsilon
    wc_flag = bool(wc is not None and max_loss > wc + EXACT_TOLERANCE * max(1.0, wc))
    if flagged:
        notes.append(f"{int(exceed.sum())} of {len(iu)} candidate pairs exceed their claim")
    worst = {k: _top([r for r in results if r.kind == k], top) for k in PAIR_KINDS}
    return MetricAuditResult(target.name, "exact", target.claim, 0.0, 0, list(target.words), results, worst,
                             flagged, max_loss, wc_flag, viol, {}, notes, evaluated=len(iu))


def _exact_pair(target, a, b, kind, dist, claims, m, p, prot) -> PairResult:
    if m[b, a] > m[a, b]:
        a, b = b, a
    loss = float(m[a, b])
    cols = np.flatnonzero(prot) if prot is not None else np.arange(p.shape[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = np.log(p[a, cols]) - np.log(p[b, cols])
    lr = np.where(p[a, cols] > 0, lr, -np.inf)
    y = int(cols[int(np.argmax(lr))]) if len(cols) else -1
    event = f"y = {target.output_label(y)!r}" if y >= 0 else ""
    return _pair_result(target, a, b, kind, dist, claims, loss, loss, event, exact=True)


# ---------------------------------------------------------------------------------------------- sampled
def _prefix_sizes(n: int) -> np.ndarray:
    small = np.arange(1, min(n, _PREFIX_SMALL) + 1)
    big = []
    s = _PREFIX_SMALL * 2
    while s < n:
        big.append(s)
        s *= 2
    if n > _PREFIX_SMALL:
        big.append(n)
    return np.unique(np.concatenate([small, np.asarray(big, dtype=np.int64)])).astype(np.int64)


def _select_event(ca: np.ndarray, cb: np.ndarray, n: int, a_sel: float):
    """The event (direction a>b) with the largest selection-half Clopper–Pearson lower bound among single
    outputs and top-likelihood-ratio sets: ``(score, codes)``; ``(-inf, None)`` when ``a`` saw nothing."""
    obs = np.flatnonzero(ca > 0)
    if len(obs) == 0:
        return -math.inf, None
    r = (ca[obs] + 0.5) / (cb[obs] + 0.5)
    order = obs[np.argsort(-r, kind="stable")]
    ka = np.cumsum(ca[order])
    kb = np.cumsum(cb[order])
    sizes = _prefix_sizes(len(order))
    with np.errstate(divide="ignore"):
        pre = np.log(clopper_pearson_lower(ka[sizes - 1], n, a_sel)) - np.log(clopper_pearson_upper(kb[sizes - 1], n, a_sel))
        top = order[:_PREFIX_SMALL]
        single = np.log(clopper_pearson_lower(ca[top], n, a_sel)) - np.log(clopper_pearson_upper(cb[top], n, a_sel))
    i_pre, i_single = int(np.argmax(pre)), int(np.argmax(single))
    if single[i_single] > pre[i_pre]:
        return float(single[i_single]), top[i_single:i_single + 1]
    return float(pre[i_pre]), order[: sizes[i_pre]]


def _sample_all(target, n, src, progress):
    """``(W, 2n)`` codes (selection half first) and the words that failed (peers)."""
    gens = src.spawn(len(target.words) + 1)[1:]
    draws = [None] * len(target.words)
    failed = {}
    for i in range(len(target.words)):
        try:
            draws[i] = target.sample(i, 2 * n, gens[i])
        except SamplerFailure as exc:
            failed[target.words[i]] = str(exc)
        if progress is not None:
            progress(2 * n)
    return draws, failed


def _audit_sampled(target, dist, claims, g, n, alpha, random_pairs, search_pairs, top, src, progress):
    draws, failed = _sample_all(target, n, src, progress)
    ok = np.array([d is not None for d in draws])
    if ok.sum() < 2:
        raise ParameterError(f"{target.name}: the sampler failed on all but {int(ok.sum())} of the "
                             f"{len(target.words)} words (first: {next(iter(failed.values()), '')})")
    v = max(1, target.n_codes())
    w = len(target.words)
    sel = np.zeros((w, v), dtype=np.int64)
    ev = np.zeros((w, v), dtype=np.int64)
    for i, d in enumerate(draws):
        if d is not None:
            sel[i] = np.bincount(d[:n], minlength=v)
            ev[i] = np.bincount(d[n:], minlength=v)
    prot = target.protected_outputs(v)
    viol = []
    if prot is not None:
        prot = np.asarray(prot, dtype=bool)
        if len(prot) < v:  # codes beyond the mask (cannot happen for a fixed output vocabulary)
            prot = np.concatenate([prot, np.zeros(v - len(prot), dtype=bool)])
        for col in np.flatnonzero(~prot).tolist():
            who = np.flatnonzero((sel[:, col] + ev[:, col]) > 0)
            lab = target.output_label(col)
            if any(target.words[i] != lab for i in who.tolist()):
                viol.append(f"{lab!r} produced by {', '.join(repr(target.words[i]) for i in who[:3].tolist())}")
        sel_p, ev_p = sel[:, prot], ev[:, prot]
        codes_p = np.flatnonzero(prot)
    else:
        sel_p, ev_p, codes_p = sel, ev, np.arange(v)
    covered = claims.copy()
    covered[~ok, :] = math.inf
    covered[:, ~ok] = math.inf
    a_sel = alpha / 2.0  # selection scores: a nominal level (the choice, not the validity, depends on it)
    # selection-half score of every pair (both directions) for the search
    iu, ju = np.triu_indices(w, 1)
    live = ok[iu] & ok[ju]
    score = np.full(len(iu), -math.inf)
    choice = {}
    for k in np.flatnonzero(live).tolist():
        a, b = int(iu[k]), int(ju[k])
        s1, e1 = _select_event(sel_p[a], sel_p[b], n, a_sel)
        s2, e2 = _select_event(sel_p[b], sel_p[a], n, a_sel)
        choice[(a, b)] = (a, b, e1, s1) if s1 >= s2 else (b, a, e2, s2)
        best = max(s1, s2)
        c = claims[a, b]
        if not math.isfinite(c):  # nothing claimed for the pair: rank by the plain-DP worst case, or the loss
            wc = target.claim.worst_case_epsilon
            c = wc if wc is not None and math.isfinite(wc) else 0.0
        score[k] = best - c
    kinds = {"closest": _closest_pairs(target, covered, dist),
             "random": _random_pairs(target, covered, random_pairs, g)}
    kinds = {k: [(a, b) for a, b in v if ok[a] and ok[b]] for k, v in kinds.items()}
    chosen = set(p for ps in kinds.values() for p in ps)
    order = np.argsort(-score, kind="stable")
    search = [(int(iu[k]), int(ju[k])) for k in order.tolist() if live[k] and math.isfinite(score[k])][:search_pairs]
    kinds["search"] = search
    evaluated = sorted(chosen | set(search))
    if not evaluated:
        raise ParameterError(f"{target.name}: no pair of candidate words to evaluate")
    a_ev = alpha / (2.0 * len(evaluated))  # Bonferroni: 2 one-sided bounds per evaluated pair
    cache = {}
    for a, b in evaluated:
        x, y, codes, _ = choice[(a, b)]
        if codes is None:
            cache[(a, b)] = PairResult(target.words[x], target.words[y], "", float(dist[a, b]), float(claims[a, b]),
                                       0.0, 0.0, 0.0, False, "nothing observed", (0, 0, n))
            continue
        ka, kb = int(ev_p[x, codes].sum()), int(ev_p[y, codes].sum())
        with np.errstate(divide="ignore"):
            lower = float(np.log(clopper_pearson_lower(ka, n, a_ev)) - np.log(clopper_pearson_upper(kb, n, a_ev)))
            hat = math.log(ka / kb) if ka > 0 and kb > 0 else (math.inf if ka > 0 else 0.0)
        lower = max(0.0, lower) if not math.isnan(lower) else 0.0
        labels = [target.output_label(int(codes_p[c])) for c in codes[:3].tolist()]
        event = (f"y = {labels[0]!r}" if len(codes) == 1 else
                 f"{{{', '.join(map(repr, labels))}{', …' if len(codes) > 3 else ''}}} ({len(codes)} outputs)")
        cache[(a, b)] = _pair_result(target, x, y, "", dist, claims, lower, hat, event, (ka, kb, n))
    results = []
    for kind in PAIR_KINDS:
        for pr in kinds[kind]:
            r = cache[pr]
            results.append(PairResult(**{**r.to_dict(), "kind": kind}))
    uniq = list(cache.values())
    flagged = any(r.flagged for r in uniq)
    max_loss = max((r.loss for r in uniq), default=0.0)
    wc = target.claim.worst_case_epsilon
    wc_flag = bool(wc is not None and prot is None and max_loss > wc)
    with np.errstate(divide="ignore"):
        ceiling = float(np.log(clopper_pearson_lower(n, n, a_ev)) - np.log(clopper_pearson_upper(0, n, a_ev)))
    unreachable = sum(1 for r in uniq if math.isfinite(r.claim) and r.claim >= ceiling)
    notes = [f"sampled: {n:,} draws per word for choosing pairs and events, {n:,} more for the bounds; "
             f"{len(evaluated)} pairs evaluated, each bound at level {alpha:g}/{2 * len(evaluated)} "
             f"(simultaneous {100 * (1 - alpha):g}% confidence)",
             f"sampler: {target.sampler_note}",
             f"ceiling: no lower bound from {n:,} draws can exceed {ceiling:.3g}; {unreachable} of the {len(uniq)} "
             f"evaluated pairs claim more, so this audit cannot refute their claims (more --samples raise it by ln 10 "
             f"per factor 10)"]
    if failed:
        first = next(iter(failed.values()))
        notes.append(f"the sampler failed on {len(failed)} of {w} words, left out (first: {first})")
    worst = {k: _top([r for r in results if r.kind == k], top) for k in PAIR_KINDS}
    return MetricAuditResult(target.name, "sampled", target.claim, alpha, n, list(target.words), results, worst,
                             flagged, max_loss, wc_flag, viol, failed, notes, evaluated=len(evaluated), ceiling=ceiling)
