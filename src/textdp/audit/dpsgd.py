"""One-run audit of DP-SGD on a text classifier (``textdp audit dpsgd``).

What runs (Steinke, Nasr & Jagielski 2023, Algorithm 1, with the bound of :mod:`textdp.audit.one_run`):

1. **Model**: a bag-of-words logistic regression (``torch.nn.Linear`` without bias, zero start) on the
   L2-normalised word counts of a text, words hashed into ``2^hash_bits`` rows (zlib CRC-32: public,
   independent of the corpus), trained on a built-in dataset (default Rotten Tomatoes, 10,246
   training snippets) with DP-SGD through Opacus (``GradSampleModule`` per-example gradients and
   ``DPOptimizer``: clipping to ``clip``, Gaussian noise ``σ·clip``, plain SGD), Poisson sampling at a
   fixed rate ``q = batch_size / (n + m/2)`` (public: it never depends on which canaries are in)
   for ``T = ⌈epochs / q⌉`` steps.
2. **Canaries**: ``m`` canary sentences, each a made-up random word with a random label. Each canary
   word has its own row of the model (the vocabulary reserves ``m`` rows beyond the hashed ones), so
   a canary's gradient touches that row only: the Dirac canary of the white-box audit (one
   coordinate per canary, no interference between canaries), realised as text. Each canary is
   added to the training data by an independent fair coin.
3. **Scores** (higher = looks included), from the final model only:

   * ``"loss"`` (black box: the model is queried with the canary sentence): minus the
     cross-entropy of the canary's label;
   * ``"gradient"`` (white box: the parameters are read): the alignment
     ``⟨θ_T − θ_0, −∇ℓ(θ_0; canary)⟩`` of the model's change with the canary's gradient at the start.

   For this linear model with one row per canary and two classes both rank the canaries the same way
   (each is an increasing function of the canary row's logit margin), so the black-box audit is as strong as the
   white-box one here. Plain SGD without momentum or weight decay adds every step's noisy gradient
   to the parameters, so the final model holds the sum over all steps of each canary row: a
   final-model audit sees what an all-steps audit would see for these coordinates.
4. **Claim**: the noise multiplier σ is calibrated with Opacus's RDP accountant
   (``get_noise_multiplier``) to the target (ε, δ) for (q, T); the claimed ε is that accountant's
   ε for (σ, q, T) (per example, add/remove one, the whole run). **FLAG** iff the one-run lower
   bound exceeds the claimed ε at confidence 1 − β.
5. **Broken replica** (``broken=True``, for testing the audit): the optimiser adds noise with σ/10
   while the claim is still the accountant's ε for σ.

The audit's randomness (coins, labels, canary words, Poisson sampling, the DP-SGD noise through a
seeded ``torch.Generator``) is a simulation, not a release: it comes from
:func:`textdp.noise.simulation_source` (PCG64DXSM; seeded runs are not for release).

Public API::

    audit_dpsgd(epsilon=2.0, delta=1e-5, canaries=1000, ..., broken=False, seed=None) -> DPSGDAudit
"""

from __future__ import annotations

import functools
import math
import re
import time
import warnings
import zlib
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np

from textdp.audit.one_run import OneRunAudit, _check_beta, one_run_audit
from textdp.errors import InputError, MissingPackageError, ParameterError

__all__ = ["audit_dpsgd", "DPSGDAudit", "SCORES", "BROKEN_FACTOR", "THREAT_MODELS"]

SCORES = ("gradient", "loss")
#: the broken replica divides the noise multiplier by this, the claim is unchanged
BROKEN_FACTOR = 10.0
THREAT_MODELS = {
    "gradient": "white box: the final model's parameters are read (for these canary rows plain SGD makes them "
                "the sum of every step's noisy gradient, so this equals observing all steps)",
    "loss": "black box: the final model is queried with each canary sentence (its loss)",
}
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(str(text).lower())


class _Featurizer:
    """Text -> L2-normalised word counts over ``2^bits`` hashed rows plus reserved rows for the canary
    words (one each)."""

    def __init__(self, bits: int, reserved: Sequence[str]):
        self.buckets = 1 << bits
        self.reserved = {w: self.buckets + i for i, w in enumerate(reserved)}
        self.dim = self.buckets + len(self.reserved)

    def row(self, token: str) -> int:
        j = self.reserved.get(token)
        return j if j is not None else zlib.crc32(token.encode("utf-8")) & (self.buckets - 1)

    def matrix(self, texts: Sequence[str]):
        """CSR (len(texts), dim) float32 with unit-norm rows (a text without words is a zero row)."""
        from scipy.sparse import coo_matrix

        cache: dict[str, int] = {}
        ids: list[int] = []
        lens: list[int] = []
        for text in texts:
            toks = _tokens(text)
            lens.append(len(toks))
            for t in toks:
                j = cache.get(t)
                if j is None:
                    j = cache[t] = self.row(t)
                ids.append(j)
        docs = np.repeat(np.arange(len(texts)), lens)
        X = coo_matrix((np.ones(len(ids), dtype=np.float64), (docs, np.asarray(ids, dtype=np.int64))),
                       shape=(len(texts), self.dim)).tocsr()  # duplicates summed: word counts
        X.sum_duplicates()
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        X = X.multiply(1.0 / np.where(norms > 0, norms, 1.0)[:, None]).tocsr()
        return X.astype(np.float32)


def _canary_words(m: int, rng: np.random.Generator, taken: set[str], length: int = 12) -> list[str]:
    """``m`` distinct made-up lower-case words of ``length`` letters, none of them a word of the data."""
    words: list[str] = []
    seen = set(taken)
    while len(words) < m:
        need = m - len(words)
        raw = _LETTERS[rng.integers(0, 26, size=(need, length))]
        for row in raw:
            w = row.tobytes().decode("ascii")
            if w not in seen:
                seen.add(w)
                words.append(w)
    return words


@dataclass
class DPSGDAudit:
    """Result of :func:`audit_dpsgd`.

    ``claimed_epsilon``: the accountant's ε (Opacus RDP) for the noise multiplier ``sigma``, sample rate
    ``sample_rate`` and ``steps``, at ``delta``; per example (add/remove one), for the whole run.
    ``sigma_used``: the noise multiplier the optimiser really used (``sigma / 10`` when ``broken``).
    ``audit``: the one-run bound (:class:`textdp.audit.one_run.OneRunAudit`). ``flagged``: the lower
    bound exceeds the claimed ε at confidence ``1 − beta``. ``test_accuracy``: the trained model on the
    dataset's test split (utility check of the run). ``seconds``: wall time (training, audit).
    ``canary_scores`` (m,) float64 and ``canary_included`` (m,) bool: the audit's data (not in ``to_dict``)."""

    dataset: str
    model: str
    canaries: int
    included: int
    train_examples: int
    epsilon_target: float
    claimed_epsilon: float
    delta: float
    sigma: float
    sigma_used: float
    sample_rate: float
    steps: int
    clip: float
    lr: float
    broken: bool
    score: str
    threat_model: str
    audit: OneRunAudit
    flagged: bool
    test_accuracy: float
    seconds: dict
    accountant: str = "Opacus RDP"
    seed: dict = field(default_factory=dict)
    simulation_rng: str = ""
    canary_scores: np.ndarray | None = field(default=None, repr=False)
    canary_included: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        """Everything but the (m,) arrays ``canary_scores`` and ``canary_included``."""
        d = asdict(self)
        d.pop("canary_scores")
        d.pop("canary_included")
        return d


@functools.lru_cache(maxsize=64)
def _calibrate(epsilon: float, delta: float, q: float, steps: int) -> tuple[float, float]:
    """``(σ, claimed ε)``: Opacus's RDP calibration of the noise multiplier to (ε, δ) for Poisson rate ``q``
    and ``steps`` steps, and that accountant's ε for σ (Opacus's default orders 1.1 … 63)."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():  # "optimal order is the largest alpha": the search's large-σ trials
        warnings.simplefilter("ignore", UserWarning)
        sigma = float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=q, steps=steps,
                                           accountant="rdp"))
        acct = RDPAccountant()
        acct.history = [(sigma, q, steps)]
        return sigma, float(acct.get_epsilon(delta))


def _check_pos(x, name: str, integer: bool = False, lo: float = 0.0, hi: float | None = None):
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number, got {x!r}") from None
    if isinstance(x, bool) or not math.isfinite(v) or v <= lo or (hi is not None and v > hi) or (integer and v != int(v)):
        rng = f"in ({lo:g}, {hi:g}]" if hi is not None else f"> {lo:g}"
        kind = "a whole number" if integer else "a finite number"
        raise ParameterError(f"{name} must be {kind} {rng}, got {x!r}")
    return int(v) if integer else v


def audit_dpsgd(
    epsilon: float = 2.0,
    delta: float = 1e-5,
    canaries: int = 1000,
    *,
    dataset: str = "rotten-tomatoes",
    max_examples: int | None = None,
    epochs: float = 4.0,
    batch_size: int = 256,
    lr: float = 8.0,
    clip: float = 0.5,
    hash_bits: int = 12,
    score: str = "gradient",
    broken: bool = False,
    beta: float = 0.05,
    guess_counts: Sequence[tuple[int, int]] | None = None,
    fdp: bool = True,
    seed: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> DPSGDAudit:
    """One-run audit of DP-SGD on a bag-of-words text classifier (module docstring).

    ``epsilon``, ``delta``: the target (ε, δ) the noise is calibrated to (ε per example, add/remove
    one, for the whole run). ``canaries``: m (each included by a fair coin). ``dataset``: a built-in
    dataset name (:func:`textdp.data.datasets.load_dataset`); its training split is the private data,
    its test split measures the model's accuracy; ``max_examples`` keeps only its first rows (a
    deterministic slice, for quick runs and tests). ``epochs`` (expected passes, ``T = ⌈epochs/q⌉``),
    ``batch_size`` (expected Poisson batch), ``lr`` (plain SGD), ``clip`` (per-example L2 clip),
    ``hash_bits`` (2^bits hashed word rows). ``score``: ``"gradient"`` (white box) or ``"loss"`` (black
    box). ``broken``: noise multiplier divided by :data:`BROKEN_FACTOR`, claim unchanged (a test
    replica). ``beta``, ``guess_counts``, ``fdp``: as in :func:`textdp.audit.one_run.one_run_audit`
    (δ of the bound = ``delta``). ``seed``: reproducible simulation (not for release); None = fresh.
    ``on_step(step, total)``: progress callback.

    Returns :class:`DPSGDAudit`. Raises ParameterError for bad values, InputError for an unknown
    dataset, MissingPackageError without torch/opacus.
    """
    t0 = time.perf_counter()
    epsilon = _check_pos(epsilon, "epsilon", hi=100.0)
    try:
        delta = float(delta)
    except (TypeError, ValueError):
        raise ParameterError(f"delta must be a number in (0, 1), got {delta!r}") from None
    if not 0.0 < delta < 1.0:
        raise ParameterError(f"delta must be in (0, 1) (e.g. 1e-5), got {delta!r}")
    m = _check_pos(canaries, "canaries", integer=True, lo=1, hi=1_000_000)
    epochs = _check_pos(epochs, "epochs", hi=1000.0)
    batch_size = _check_pos(batch_size, "batch_size", integer=True, lo=0)
    lr = _check_pos(lr, "lr")
    clip = _check_pos(clip, "clip")
    hash_bits = _check_pos(hash_bits, "hash_bits", integer=True, lo=3, hi=22)
    if score not in SCORES:
        raise ParameterError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
    beta = _check_beta(beta)
    if guess_counts is not None:  # checked before training, not after
        for kp, km in guess_counts:
            if min(int(kp), int(km)) < 0 or int(kp) + int(km) > m or int(kp) + int(km) == 0:
                raise ParameterError(f"guess counts (k+, k-) must be >= 0 with 0 < k+ + k- <= {m} canaries, "
                                     f"got ({kp}, {km})")
    from textdp.audit.core import simulation_statement
    from textdp.data.datasets import is_builtin, load_dataset
    from textdp.noise import simulation_source

    if not is_builtin(dataset):
        raise InputError(f"unknown dataset {dataset!r}; the DP-SGD audit trains on a built-in dataset "
                         f"(see textdp datasets), e.g. rotten-tomatoes")
    if max_examples is not None:
        max_examples = _check_pos(max_examples, "max_examples", integer=True, lo=0)
    src = simulation_source(seed)  # checks the seed before the slow imports
    try:
        import torch
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer
    except ImportError:
        raise MissingPackageError("the DP-SGD audit needs torch and opacus; run: pip install 'textdp[privacy]'") from None
    ds = load_dataset(dataset)
    if max_examples is not None:
        ds = ds.head(max_examples, len(ds.test))
    labels = list(ds.labels)
    n_cls = len(labels)
    lab_idx = {v: i for i, v in enumerate(labels)}
    texts = ds.train[ds.text_column].astype(str).tolist()
    y_real = np.array([lab_idx[v] for v in ds.train[ds.label_column]], dtype=np.int64)
    n = len(texts)
    if batch_size > n:
        raise ParameterError(f"batch_size {batch_size} is larger than the {n} training examples")

    g_canary, g_coin, g_sample, g_noise = src.spawn(4)
    vocab = {t for text in texts for t in _tokens(text)}
    words = _canary_words(m, g_canary, vocab)
    c_labels = g_canary.integers(0, n_cls, size=m)
    included = g_coin.random(m) < 0.5  # fair coins: canary j is in the training data iff True

    feat = _Featurizer(hash_bits, words)
    from scipy.sparse import vstack

    Xr = feat.matrix(texts)
    Xc = feat.matrix(words)  # canary sentences: one made-up word each
    X = vstack([Xr, Xc[np.flatnonzero(included)]], format="csr")
    y = np.concatenate([y_real, c_labels[included]])
    N = X.shape[0]

    q = batch_size / (n + m / 2.0)  # fixed from public sizes, never from the coins
    if not 0 < q < 1:
        raise ParameterError(f"sample rate batch_size/(n + m/2) = {q:.3g} must be below 1; lower batch_size")
    steps = int(math.ceil(epochs / q))
    sigma, claimed = _calibrate(epsilon, delta, q, steps)
    sigma_used = sigma / BROKEN_FACTOR if broken else sigma

    torch_gen = torch.Generator().manual_seed(int(g_noise.integers(0, 2**63 - 1)))
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
        torch.manual_seed(int(g_noise.integers(0, 2**63 - 1)))
        model = torch.nn.Linear(feat.dim, n_cls, bias=False)
        torch.nn.init.zeros_(model.weight)
        gsm = GradSampleModule(model, loss_reduction="mean")
        opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=lr), noise_multiplier=sigma_used, max_grad_norm=clip,
                          expected_batch_size=batch_size, loss_reduction="mean", generator=torch_gen)
        yt = torch.from_numpy(y)
        for step in range(steps):
            idx = np.flatnonzero(g_sample.random(N) < q)
            xb = torch.from_numpy(X[idx].toarray()) if len(idx) else torch.zeros((0, feat.dim))
            opt.zero_grad(set_to_none=True)
            out = gsm(xb)
            if len(idx):
                loss = torch.nn.functional.cross_entropy(out, yt[idx])
            else:  # an empty Poisson batch: no gradient, the noise is still added
                loss = out.sum() * 0.0
            loss.backward()
            opt.step()
            if on_step is not None:
                on_step(step + 1, steps)
        W = model.weight.detach().double().numpy()  # (n_cls, dim); θ_0 = 0
        gsm._close()
    t_train = time.perf_counter() - t0

    rows = feat.buckets + np.arange(m)
    logits = W[:, rows].T  # (m, n_cls): each canary sentence's logits (its unit feature on its own row)
    if score == "loss":
        lse = np.logaddexp.reduce(logits, axis=1)
        scores = logits[np.arange(m), c_labels] - lse  # minus the cross-entropy of its label
    else:  # ⟨θ_T − θ_0, −∇ℓ(θ_0)⟩ with θ_0 = 0: −∇ℓ(0) = (e_y − 1/K) ⊗ x on the canary's row
        scores = logits[np.arange(m), c_labels] - logits.mean(axis=1)
    t1 = time.perf_counter()
    audit = one_run_audit(scores, included, beta=beta, delta=delta, guess_counts=guess_counts, fdp=fdp)
    t_audit = time.perf_counter() - t1

    Xt = feat.matrix(ds.test[ds.text_column].astype(str).tolist())
    yt_test = np.array([lab_idx[v] for v in ds.test[ds.label_column]])
    acc = float(np.mean(np.asarray(Xt @ W.T).argmax(axis=1) == yt_test)) if len(yt_test) else float("nan")
    return DPSGDAudit(
        dataset=ds.name, model=f"bag-of-words logistic regression (2^{hash_bits} hashed word rows + {m:,} canary rows)",
        canaries=m, included=int(included.sum()), train_examples=n, epsilon_target=epsilon, claimed_epsilon=claimed,
        delta=delta, sigma=sigma, sigma_used=sigma_used, sample_rate=q, steps=steps, clip=clip, lr=lr, broken=bool(broken),
        score=score, threat_model=THREAT_MODELS[score], audit=audit, flagged=bool(audit.epsilon_lower > claimed),
        test_accuracy=acc, seconds={"train": t_train, "audit": t_audit, "total": time.perf_counter() - t0},
        seed=src.describe(), simulation_rng=simulation_statement(seed), canary_scores=scores,
        canary_included=included)
