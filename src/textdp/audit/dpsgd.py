"""One-run audit of DP-SGD on a text classifier (``textdp audit dpsgd``).

What runs (Steinke, Nasr & Jagielski 2023, Algorithm 1, with the bound of :mod:`textdp.audit.one_run`):

1. **Model** (``model``), trained on a built-in dataset (default Rotten Tomatoes, 10,246 training
   snippets) with DP-SGD through Opacus (``GradSampleModule`` per-example gradients and
   ``DPOptimizer``: clipping to ``clip``, Gaussian noise ``σ·clip``), Poisson sampling at a fixed rate
   ``q = batch_size / (n + m/2)`` (public: it never depends on which canaries are in) for
   ``T = ⌈epochs / q⌉`` steps:

   * ``"bag-of-words"`` (the default): a logistic regression (``torch.nn.Linear`` without bias, zero
     start) on the L2-normalised word counts of a text, words hashed into ``2^hash_bits`` rows (zlib
     CRC-32: public, independent of the corpus), plain SGD, on the CPU;
   * a transformer (``"minilm"``, a local Hugging Face folder such as your own BERT/MiniLM, or a name
     in the local Hugging Face cache; :func:`textdp.models.classifier.load_classifier`, pretrained
     encoder plus a fresh head, pooling ``"auto"``): **all layers fine-tuned**, embeddings included
     (``freeze_embeddings=True`` keeps the word-embedding table fixed; nothing else can be frozen),
     Adam, dropout on, texts truncated to ``max_len`` WordPieces, on CUDA when torch sees one and the
     CPU otherwise (``device``). Opacus gives per-example gradients of BERT's layers (``Linear``,
     ``LayerNorm``, ``Embedding``); one fix is needed: BERT looks up its position embeddings with
     ids of batch size 1 broadcast over the batch, for which Opacus would record a batch of one, so
     the audit expands such inputs to the batch (same forward values, true per-example gradients;
     tested against one backward pass per example). A model whose trained parameters still get no
     (batch, …) per-example gradient after the first step is refused with one line. Memory: Opacus
     stores a dense (batch, vocabulary, hidden) per-example gradient for the word-embedding table
     (1.5 GB for MiniLM at batch 32); ``freeze_embeddings`` avoids it.
2. **Canaries** (``canary_kind``, :func:`make_canaries`), each added to the training data by an
   independent fair coin drawn from its own generator (never from the canary's content):

   * ``"random-tokens"`` (default): ``m`` canary sentences, each a made-up random word with a random
     label. In the bag-of-words model each canary word has its own row (the vocabulary reserves ``m``
     rows beyond the hashed ones), so a canary's gradient touches that row only: the Dirac canary
     of the white-box audit, realised as text. A transformer splits the word into WordPieces shared
     with other text.
   * ``"mislabelled"``: ``m`` real examples of the dataset's training split (drawn uniformly without
     replacement and set aside, so they appear only as canaries, never with their own label) with
     their label replaced (the other class; with more than two, a uniformly random other class).
3. **Scores** (higher = looks included), from the final model only:

   * ``"loss"`` (black box: the model is queried with the canary sentence): minus the
     cross-entropy of the canary's label;
   * ``"gradient"`` (white box: the parameters are read): the alignment
     ``⟨θ_T − θ_0, −∇ℓ(θ_0; canary)⟩`` of the model's change with the canary's gradient at the start
     (for a transformer: over all trained parameters, by forward-mode differentiation at θ_0 along
     θ_T − θ_0, eval mode, eager attention).

   For the bag-of-words model with one row per canary and two classes both rank the canaries the same
   way (each is an increasing function of the canary row's logit margin), so the black-box audit is as
   strong as the white-box one there. Plain SGD without momentum or weight decay adds every step's
   noisy gradient to the parameters, so the final model holds the sum over all steps of each canary
   row: a final-model audit sees what an all-steps audit would see for these coordinates. Neither
   holds for a transformer (shared parameters, Adam): its audit sees the final model only.
4. **Claim** (``accountant``): the noise multiplier σ is calibrated to the target (ε, δ) for (q, T) by
   Opacus's RDP accountant (``"rdp"``, ``get_noise_multiplier``) or dp-accounting's PLD accountant
   (``"pld"``); the claimed ε is that accountant's ε for (σ, q, T) (per example, add/remove one, the
   whole run). **FLAG** iff the one-run lower bound exceeds the claimed ε at confidence 1 − β.
5. **Broken replica** (``broken=True``, for testing the audit): the optimiser adds noise with σ/10
   while the claim is still the accountant's ε for σ.

The audit's randomness (coins, labels, canary words, Poisson sampling, the DP-SGD noise through a
seeded ``torch.Generator``) is a simulation, not a release: it comes from
:func:`textdp.noise.simulation_source` (PCG64DXSM; seeded runs are not for release).

Public API::

    audit_dpsgd(epsilon=2.0, delta=1e-5, canaries=1000, ..., model="bag-of-words", canary_kind="random-tokens",
                accountant="rdp", broken=False, seed=None) -> DPSGDAudit
    make_canaries(kind, m, texts, y, n_classes, rng_canary, rng_coin) -> Canaries
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

__all__ = ["audit_dpsgd", "DPSGDAudit", "SCORES", "BROKEN_FACTOR", "THREAT_MODELS", "TRANSFORMER_THREAT_MODELS",
           "CANARY_KINDS", "ACCOUNTANTS", "BOW_NAMES", "Canaries", "make_canaries"]

SCORES = ("gradient", "loss")
#: what ``canary_kind`` accepts (:func:`make_canaries`)
CANARY_KINDS = ("random-tokens", "mislabelled")
#: ``accountant`` -> the name printed with the claimed ε
ACCOUNTANTS = {"rdp": "Opacus RDP", "pld": "dp-accounting PLD"}
#: the names of the default target, the hashed bag-of-words logistic regression
BOW_NAMES = ("bag-of-words", "bow")
#: the broken replica divides the noise multiplier by this, the claim is unchanged
BROKEN_FACTOR = 10.0
THREAT_MODELS = {
    "gradient": "white box: the final model's parameters are read (for these canary rows plain SGD makes them "
                "the sum of every step's noisy gradient, so this equals observing all steps)",
    "loss": "black box: the final model is queried with each canary sentence (its loss)",
}
#: the bag-of-words gradient score with mislabelled canaries: they share hashed rows with the training examples, so
#: the final parameters are not the sum of each canary's own noisy gradients
MISLABELLED_BOW_GRADIENT = ("white box: the final model's parameters are read (mislabelled canaries share hashed rows "
                            "with other examples, so the final model only, not the intermediate steps)")
TRANSFORMER_THREAT_MODELS = {
    "gradient": "white box: the parameters at the start and at the end are read (the alignment of the model's change "
                "with each canary's gradient at the start; the final model only, not the intermediate steps)",
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

    ``claimed_epsilon``: the accountant's ε (``accountant``: Opacus RDP or dp-accounting PLD) for the noise
    multiplier ``sigma``, sample rate
    ``sample_rate`` and ``steps``, at ``delta``; per example (add/remove one), for the whole run.
    ``sigma_used``: the noise multiplier the optimiser really used (``sigma / 10`` when ``broken``).
    ``audit``: the one-run bound (:class:`textdp.audit.one_run.OneRunAudit`). ``flagged``: the lower
    bound exceeds the claimed ε at confidence ``1 − beta``. ``test_accuracy``: the trained model on the
    dataset's test split (utility check of the run). ``seconds``: wall time (training, audit).
    ``canary_kind``: ``"random-tokens"`` or ``"mislabelled"``; ``device``: where the model trained;
    ``optimizer``: ``"SGD"`` (bag-of-words) or ``"Adam"`` (transformer); ``trainable_parameters`` and
    ``frozen``: for a transformer, how many parameters DP-SGD trained and what was frozen.
    The audit's data (not in ``to_dict``): ``canary_scores`` (m,) float64, ``canary_included`` (m,) bool,
    ``canary_labels`` (m,) int64 (the label each canary was trained and scored with),
    ``canary_sources`` (m,) int64 and ``canary_source_labels`` (m,) int64 (a mislabelled canary's
    source example in the training split and its own label; −1 for random-token canaries)."""

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
    canary_kind: str = "random-tokens"
    device: str = "cpu"
    optimizer: str = "SGD"
    trainable_parameters: int | None = None
    frozen: str | None = None
    canary_scores: np.ndarray | None = field(default=None, repr=False)
    canary_included: np.ndarray | None = field(default=None, repr=False)
    canary_labels: np.ndarray | None = field(default=None, repr=False)
    canary_sources: np.ndarray | None = field(default=None, repr=False)
    canary_source_labels: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        """Everything but the (m,) arrays (``canary_scores``, ``canary_included``, ``canary_labels``,
        ``canary_sources``, ``canary_source_labels``)."""
        d = asdict(self)
        for k in _ARRAYS:
            d.pop(k)
        return d


_ARRAYS = ("canary_scores", "canary_included", "canary_labels", "canary_sources", "canary_source_labels")


@functools.lru_cache(maxsize=64)
def _calibrate(epsilon: float, delta: float, q: float, steps: int, accountant: str = "rdp") -> tuple[float, float]:
    """``(σ, claimed ε)``: the noise multiplier calibrated to (ε, δ) for Poisson rate ``q`` and ``steps``
    steps by ``accountant``, and that accountant's ε for σ.

    ``"rdp"``: Opacus's RDP accountant (``get_noise_multiplier``, Opacus's default orders 1.1 … 63).
    ``"pld"``: dp-accounting's privacy-loss-distribution accountant (``PLDAccountant``, add/remove one,
    pessimistic discretisation): σ searched by ``calibrate_dp_mechanism`` on a grid of 1e-3 (coarser, so
    more pessimistic: the claim is at most the target), the claim at dp-accounting's default 1e-4."""
    if accountant == "pld":
        import dp_accounting
        from dp_accounting import pld

        def event(s):
            return dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), steps)

        sigma = float(dp_accounting.calibrate_dp_mechanism(
            lambda: pld.PLDAccountant(value_discretization_interval=1e-3), event, epsilon, delta, tol=1e-3))
        acct = pld.PLDAccountant()
        acct.compose(event(sigma))
        return sigma, float(acct.get_epsilon(delta))
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


def _bow_name(model) -> bool:
    return model is None or str(model).strip().lower() in BOW_NAMES


@dataclass
class Canaries:
    """The canaries of one audit and their coins (:func:`make_canaries`).

    ``kind``: ``"random-tokens"`` or ``"mislabelled"``. ``texts``: the m canary sentences (for random-token
    canaries one made-up word each; for mislabelled ones the source example's text unchanged).
    ``labels`` (m,) int64: the label each canary is trained and scored with. ``sources`` (m,) int64:
    the index of the source example in the training split (−1 for random-token canaries);
    ``source_labels`` (m,) int64: that example's own label (−1 for random-token canaries).
    ``included`` (m,) bool: the fair coins (True = in the training data). ``words``: the made-up
    words of random-token canaries (empty for mislabelled ones)."""

    kind: str
    texts: list
    labels: np.ndarray
    sources: np.ndarray
    source_labels: np.ndarray
    included: np.ndarray
    words: list = field(default_factory=list)


def make_canaries(kind: str, m: int, texts: Sequence[str], y: Sequence[int], n_classes: int,
                  rng_canary: np.random.Generator, rng_coin: np.random.Generator) -> Canaries:
    """``m`` canaries of ``kind`` for a training split (``texts``, class ids ``y`` (n,) in
    ``0..n_classes−1``), each included by an independent fair coin.

    * ``"random-tokens"``: ``m`` distinct made-up words of 12 random letters (none a word of
      ``texts``), each with a label uniform over the classes (both from ``rng_canary``).
    * ``"mislabelled"``: ``m`` distinct examples of the split drawn uniformly without replacement
      (``rng_canary``), their text unchanged and their label replaced: the other class with two
      classes, a uniformly random other class with more. The caller takes them out of the training
      data, so each appears only as a canary.

    The coins are ``rng_coin.random(m) < 0.5``, drawn from their own generator and never from a
    canary's content: the same ``rng_coin`` gives the same coins for either kind. Raises
    ParameterError when ``"mislabelled"`` asks for more than half of the split or ``kind`` is unknown."""
    if kind not in CANARY_KINDS:
        raise ParameterError(f"canary kind must be one of {', '.join(CANARY_KINDS)}, got {kind!r}")
    y = np.asarray(y, dtype=np.int64)
    if kind == "random-tokens":
        vocab = {t for text in texts for t in _tokens(text)}
        words = _canary_words(m, rng_canary, vocab)
        labels = rng_canary.integers(0, n_classes, size=m)
        included = rng_coin.random(m) < 0.5  # fair coins: canary j is in the training data iff True
        none = np.full(m, -1, dtype=np.int64)
        return Canaries(kind, list(words), labels.astype(np.int64), none, none.copy(), included, list(words))
    n = len(texts)
    if 2 * m > n:
        raise ParameterError(f"mislabelled canaries take {m:,} examples out of the {n:,}-example training split; "
                             f"use at most half of it ({n // 2:,})")
    if n_classes < 2:
        raise ParameterError("mislabelled canaries need at least 2 classes")
    sources = np.sort(rng_canary.choice(n, size=m, replace=False)).astype(np.int64)
    src_lab = y[sources]
    if n_classes == 2:
        labels = 1 - src_lab
    else:  # uniform over the other classes
        labels = (src_lab + rng_canary.integers(1, n_classes, size=m)) % n_classes
    included = rng_coin.random(m) < 0.5
    return Canaries(kind, [str(texts[i]) for i in sources], labels.astype(np.int64), sources, src_lab, included)


def audit_dpsgd(
    epsilon: float = 2.0,
    delta: float = 1e-5,
    canaries: int = 1000,
    *,
    dataset: str = "rotten-tomatoes",
    max_examples: int | None = None,
    max_test_examples: int | None = None,
    model: str | None = "bag-of-words",
    canary_kind: str = "random-tokens",
    epochs: float = 4.0,
    batch_size: int = 256,
    lr: float | None = None,
    clip: float = 0.5,
    hash_bits: int = 12,
    max_len: int = 64,
    freeze_embeddings: bool = False,
    device: str | None = None,
    accountant: str = "rdp",
    score: str = "gradient",
    broken: bool = False,
    beta: float = 0.05,
    guess_counts: Sequence[tuple[int, int]] | None = None,
    fdp: bool = True,
    seed: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> DPSGDAudit:
    """One-run audit of DP-SGD on a text classifier (module docstring).

    ``epsilon``, ``delta``: the target (ε, δ) the noise is calibrated to (ε per example, add/remove
    one, for the whole run). ``canaries``: m (each included by a fair coin). ``dataset``: a built-in
    dataset name (:func:`textdp.data.datasets.load_dataset`); its training split is the private data,
    its test split measures the model's accuracy; ``max_examples`` keeps only its first rows (a
    deterministic slice, for quick runs and tests); ``max_test_examples`` likewise keeps the first rows of
    the test split (None: all of it).

    ``model``: ``"bag-of-words"`` (the default, alias ``"bow"``: the hashed logistic regression, CPU),
    or a transformer classifier fine-tuned with all its layers: ``"minilm"`` (the packaged
    MiniLM-L6), a local Hugging Face model folder (config, tokenizer, weights; e.g. your own
    BERT/MiniLM) or a model name already in the local Hugging Face cache (nothing is downloaded;
    :func:`textdp.models.classifier.load_classifier`, fresh head, pooling ``"auto"``).
    ``canary_kind``: ``"random-tokens"`` (default) or ``"mislabelled"`` (:func:`make_canaries`).

    ``epochs`` (expected passes, ``T = ⌈epochs/q⌉``), ``batch_size`` (expected Poisson batch), ``lr``
    (None: 8 for plain SGD on the bag-of-words model, 5e-4 for Adam on a transformer), ``clip``
    (per-example L2 clip). Bag-of-words only: ``hash_bits`` (2^bits hashed word rows). Transformer
    only: ``max_len`` (WordPieces per text, [CLS]/[SEP] included), ``freeze_embeddings`` (keep the
    word-embedding table fixed: Opacus stores a dense (batch, vocabulary, hidden) per-example gradient
    for it, 1.5 GB for MiniLM at batch 32), ``device`` (``auto``/``cpu``/``cuda[:N]``,
    :func:`textdp.models.device.resolve_device`; None = ``auto`` for a transformer; the bag-of-words
    model trains on the CPU). ``accountant``: ``"rdp"`` (Opacus RDP, default) or ``"pld"``
    (dp-accounting's privacy-loss distribution): calibrates σ and gives the claimed ε.

    ``score``: ``"gradient"`` (white box) or ``"loss"`` (black box). ``broken``: noise multiplier
    divided by :data:`BROKEN_FACTOR`, claim unchanged (a test replica). ``beta``, ``guess_counts``,
    ``fdp``: as in :func:`textdp.audit.one_run.one_run_audit` (δ of the bound = ``delta``). ``seed``:
    reproducible simulation (not for release); None = fresh. ``on_step(step, total)``: progress callback.

    Returns :class:`DPSGDAudit`. Raises ParameterError for bad values, InputError for an unknown
    dataset or a model that cannot be loaded offline or whose layers Opacus cannot give per-example
    gradients, MissingPackageError without torch/opacus (transformers for a transformer).
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
    bow = _bow_name(model)
    lr = (8.0 if bow else 5e-4) if lr is None else _check_pos(lr, "lr")
    clip = _check_pos(clip, "clip")
    hash_bits = _check_pos(hash_bits, "hash_bits", integer=True, lo=3, hi=22)
    max_len = _check_pos(max_len, "max_len", integer=True, lo=2, hi=4096)
    if score not in SCORES:
        raise ParameterError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
    if canary_kind not in CANARY_KINDS:
        raise ParameterError(f"canary kind must be one of {', '.join(CANARY_KINDS)}, got {canary_kind!r}")
    if accountant not in ACCOUNTANTS:
        raise ParameterError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")
    if bow and freeze_embeddings:
        raise ParameterError("freeze_embeddings applies to a transformer model, not to the bag-of-words model")
    from textdp.models.device import resolve_device

    if bow and device is not None and resolve_device(device) != "cpu":
        raise ParameterError("the bag-of-words model trains on the CPU; device applies to a transformer model")
    dev_name = "cpu" if bow else resolve_device("auto" if device is None else device)
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
    if max_test_examples is not None:
        max_test_examples = _check_pos(max_test_examples, "max_test_examples", integer=True, lo=0)
    src = simulation_source(seed)  # checks the seed before the slow imports
    if not bow:
        from textdp.models.classifier import resolve_model_path

        resolve_model_path(model)  # an unknown folder or name: one line before the slow imports and the data
    try:
        import importlib

        for mod in ("torch", "opacus.optimizers"):
            importlib.import_module(mod)
    except ImportError:
        raise MissingPackageError("the DP-SGD audit needs torch and opacus; run: pip install 'textdp[privacy]'") from None
    ds = load_dataset(dataset)
    if max_examples is not None or max_test_examples is not None:
        ds = ds.head(len(ds.train) if max_examples is None else max_examples,
                     len(ds.test) if max_test_examples is None else max_test_examples)
    labels = list(ds.labels)
    n_cls = len(labels)
    lab_idx = {v: i for i, v in enumerate(labels)}
    all_texts = ds.train[ds.text_column].astype(str).tolist()
    all_y = np.array([lab_idx[v] for v in ds.train[ds.label_column]], dtype=np.int64)

    g_canary, g_coin, g_sample, g_noise = src.spawn(4)
    can = make_canaries(canary_kind, m, all_texts, all_y, n_cls, g_canary, g_coin)
    if can.kind == "mislabelled":  # the sources appear only as canaries
        keep = np.ones(len(all_texts), dtype=bool)
        keep[can.sources] = False
        texts = [t for t, k in zip(all_texts, keep) if k]
        y_real = all_y[keep]
    else:
        texts, y_real = all_texts, all_y
    n = len(texts)
    if batch_size > n:
        raise ParameterError(f"batch_size {batch_size} is larger than the {n} training examples")
    included = can.included
    inc_idx = np.flatnonzero(included)

    q = batch_size / (n + m / 2.0)  # fixed from public sizes, never from the coins
    if not 0 < q < 1:
        raise ParameterError(f"sample rate batch_size/(n + m/2) = {q:.3g} must be below 1; lower batch_size")
    steps = int(math.ceil(epochs / q))
    sigma, claimed = _calibrate(epsilon, delta, q, steps, accountant)
    sigma_used = sigma / BROKEN_FACTOR if broken else sigma
    train_y = np.concatenate([y_real, can.labels[included]])
    test_texts = ds.test[ds.text_column].astype(str).tolist()
    y_test = np.array([lab_idx[v] for v in ds.test[ds.label_column]], dtype=np.int64)
    run = dict(sigma_used=sigma_used, q=q, steps=steps, batch_size=batch_size, lr=lr, clip=clip, g_sample=g_sample,
               g_noise=g_noise, on_step=on_step, score=score)
    if bow:
        scores, acc, desc, extra = _run_bow(texts, train_y, can, inc_idx, test_texts, y_test, n_cls, hash_bits, **run)
    else:
        scores, acc, desc, extra = _run_transformer(model, labels, texts, train_y, can, inc_idx, test_texts, y_test,
                                                    max_len, freeze_embeddings, dev_name, **run)
    t_train = time.perf_counter() - t0
    t1 = time.perf_counter()
    audit = one_run_audit(scores, included, beta=beta, delta=delta, guess_counts=guess_counts, fdp=fdp)
    t_audit = time.perf_counter() - t1
    threat = THREAT_MODELS[score] if bow else TRANSFORMER_THREAT_MODELS[score]
    if bow and score == "gradient" and can.kind == "mislabelled":
        threat = MISLABELLED_BOW_GRADIENT
    return DPSGDAudit(
        dataset=ds.name, model=desc, canaries=m, included=int(included.sum()), train_examples=n,
        epsilon_target=epsilon, claimed_epsilon=claimed, delta=delta, sigma=sigma, sigma_used=sigma_used,
        sample_rate=q, steps=steps, clip=clip, lr=lr, broken=bool(broken), score=score, threat_model=threat,
        audit=audit, flagged=bool(audit.epsilon_lower > claimed), test_accuracy=acc,
        seconds={"train": t_train, "audit": t_audit, "total": time.perf_counter() - t0},
        accountant=ACCOUNTANTS[accountant], seed=src.describe(), simulation_rng=simulation_statement(seed),
        canary_kind=can.kind, device=dev_name, **extra, canary_scores=scores, canary_included=included,
        canary_labels=can.labels, canary_sources=can.sources, canary_source_labels=can.source_labels)


def _run_bow(texts, train_y, can, inc_idx, test_texts, y_test, n_cls, hash_bits, *, sigma_used, q, steps, batch_size,
             lr, clip, g_sample, g_noise, on_step, score):
    """DP-SGD on the bag-of-words logistic regression: ``(scores (m,), test accuracy, description, extra fields)``."""
    import torch
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    from scipy.sparse import vstack

    m = len(can.texts)
    feat = _Featurizer(hash_bits, can.words)  # random-token canaries: one reserved row per canary word
    Xr = feat.matrix(texts)
    Xc = feat.matrix(can.texts)
    X = vstack([Xr, Xc[inc_idx]], format="csr")
    N = X.shape[0]
    torch_gen = torch.Generator().manual_seed(int(g_noise.integers(0, 2**63 - 1)))
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
        torch.manual_seed(int(g_noise.integers(0, 2**63 - 1)))
        lin = torch.nn.Linear(feat.dim, n_cls, bias=False)
        torch.nn.init.zeros_(lin.weight)
        gsm = GradSampleModule(lin, loss_reduction="mean")
        opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=lr), noise_multiplier=sigma_used, max_grad_norm=clip,
                          expected_batch_size=batch_size, loss_reduction="mean", generator=torch_gen)
        yt = torch.from_numpy(train_y)
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
        W = lin.weight.detach().double().numpy()  # (n_cls, dim); θ_0 = 0
        gsm._close()
    logits = np.asarray(Xc @ W.T)  # (m, n_cls): each canary sentence's logits
    lab = can.labels
    if score == "loss":
        lse = np.logaddexp.reduce(logits, axis=1)
        scores = logits[np.arange(m), lab] - lse  # minus the cross-entropy of its label
    else:  # ⟨θ_T − θ_0, −∇ℓ(θ_0)⟩ with θ_0 = 0: −∇ℓ(0) = (e_y − 1/K) ⊗ x
        scores = logits[np.arange(m), lab] - logits.mean(axis=1)
    Xt = feat.matrix(test_texts)
    acc = float(np.mean(np.asarray(Xt @ W.T).argmax(axis=1) == y_test)) if len(y_test) else float("nan")
    if can.words:
        desc = f"bag-of-words logistic regression (2^{hash_bits} hashed word rows + {m:,} canary rows)"
    else:
        desc = f"bag-of-words logistic regression (2^{hash_bits} hashed word rows)"
    return scores, acc, desc, {"optimizer": "SGD"}


def _pad_ids(rows, pad_id: int):
    """Right-padded ``(input_ids, attention_mask)``: the classifier's own padding."""
    from textdp.models.classifier import _pad

    return _pad(rows, pad_id)


def _expand_batch_one_inputs(model, state: dict) -> list:
    """Forward pre-hooks on every ``torch.nn.Embedding`` of ``model`` that expand an index tensor of batch
    size 1 to the batch's size ``state["B"]``. Hugging Face BERT looks its position embeddings up with
    position ids of shape (1, T) and broadcasts them over the batch; Opacus's embedding hook then
    records a batch of one and gives the position table a (1, …) "per-example" gradient. Expanding the
    ids gives the same forward values and a true (B, …) per-example gradient. Returns the hook handles."""
    import torch

    def pre(mod, args):
        x = args[0] if args else None
        B = state.get("B", 1)
        if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == 1 and B > 1:
            return (x.expand(B, *x.shape[1:]),) + tuple(args[1:])
        return None

    return [mod.register_forward_pre_hook(pre) for mod in model.modules() if isinstance(mod, torch.nn.Embedding)]


def _run_transformer(name, labels, texts, train_y, can, inc_idx, test_texts, y_test, max_len, freeze_embeddings,
                     dev_name, *, sigma_used, q, steps, batch_size, lr, clip, g_sample, g_noise, on_step, score):
    """DP-SGD fine-tuning of a transformer classifier, all layers (word embeddings frozen only when asked):
    ``(scores (m,), test accuracy, description, extra fields)``."""
    import torch
    import torch.nn.functional as F
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    from textdp.models.classifier import load_classifier
    from textdp.models.device import describe_device, fork_rng, place

    clf = load_classifier(name, labels, rng=g_noise, pooling="auto")
    net = clf.model
    n_pos = getattr(net.config, "max_position_embeddings", None)
    if isinstance(n_pos, int) and max_len > n_pos:
        raise ParameterError(f"max_len {max_len} is more than the {n_pos} positions of model {str(name)!r}")
    dev = place(net, dev_name)
    for p in net.parameters():
        p.requires_grad_(True)
    if freeze_embeddings:
        net.get_input_embeddings().weight.requires_grad_(False)
    trainable = [(k, p) for k, p in net.named_parameters() if p.requires_grad]
    theta0 = {k: p.detach().clone() for k, p in trainable}
    rows = clf.encode_ids(list(texts) + [can.texts[i] for i in inc_idx], max_len)
    N = len(rows)
    pad = clf.tokenizer.pad_token_id or 0
    yt = torch.from_numpy(train_y)
    state = {"B": 1}
    handles = _expand_batch_one_inputs(net, state)
    noise_gen = torch.Generator(device=dev).manual_seed(int(g_noise.integers(0, 2**63 - 1)))
    try:
        with fork_rng(dev), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
            warnings.filterwarnings("ignore", message=".*[Ss]ecure RNG.*", category=UserWarning)
            torch.manual_seed(int(g_noise.integers(0, 2**63 - 1)))  # dropout
            try:
                gsm = GradSampleModule(net, loss_reduction="mean")
            except (NotImplementedError, ValueError) as exc:
                raise InputError(f"Opacus cannot compute per-example gradients for model {str(name)!r}: "
                                 f"{str(exc).splitlines()[0][:200]}") from None
            opt = DPOptimizer(torch.optim.Adam([p for _, p in trainable], lr=lr), noise_multiplier=sigma_used,
                              max_grad_norm=clip, expected_batch_size=batch_size, loss_reduction="mean",
                              generator=noise_gen)
            net.train()
            checked = False
            for step in range(steps):
                idx = np.flatnonzero(g_sample.random(N) < q)
                opt.zero_grad(set_to_none=True)
                if len(idx):
                    ids, mask = _pad_ids([rows[i] for i in idx], pad)
                    state["B"] = len(idx)
                    out = gsm(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits
                    F.cross_entropy(out, yt[idx].to(dev)).backward()
                    if not checked:
                        _check_grad_samples(trainable, len(idx), name)
                        checked = True
                else:  # an empty Poisson batch: no gradient, the noise is still added
                    for _, p in trainable:
                        p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
                opt.step()
                if on_step is not None:
                    on_step(step + 1, steps)
            gsm._close()
    finally:
        for h in handles:
            h.remove()
    net.eval()
    delta = {k: (p.detach() - theta0[k]) for k, p in trainable}
    c_rows = clf.encode_ids(can.texts, max_len)
    c_lab = torch.from_numpy(can.labels)
    scores = np.zeros(len(can.texts))
    chunk = 64
    if score == "loss":
        with torch.inference_mode():
            for a in range(0, len(c_rows), chunk):
                ids, mask = _pad_ids(c_rows[a:a + chunk], pad)
                out = net(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits.float()
                scores[a:a + chunk] = -F.cross_entropy(out, c_lab[a:a + chunk].to(dev), reduction="none").cpu().numpy()
    else:
        scores = _alignment_scores(net, theta0, delta, c_rows, c_lab, pad, dev, chunk)
    acc = clf.accuracy(test_texts, y_test, max_len) if len(y_test) else float("nan")
    n_all = sum(p.numel() for p in net.parameters())
    n_tr = sum(p.numel() for _, p in trainable)
    cfg = net.config
    what = "all layers" + (" except the word embeddings (frozen)" if freeze_embeddings else "")
    desc = (f"{type(net).__name__} from {name} ({getattr(cfg, 'num_hidden_layers', '?')} layers, hidden "
            f"{getattr(cfg, 'hidden_size', '?')}, {n_all:,} parameters, {n_tr:,} fine-tuned: {what}; "
            f"{clf.pooling} pooling; max {max_len} WordPieces; {describe_device(dev_name)})")
    return scores, acc, desc, {"optimizer": "Adam", "trainable_parameters": int(n_tr),
                               "frozen": "word embeddings" if freeze_embeddings else "nothing"}


def _check_grad_samples(trainable, B: int, name) -> None:
    """Every trained parameter got a (B, …) per-example gradient from Opacus; InputError (one line) otherwise."""
    bad = [k for k, p in trainable if getattr(p, "grad_sample", None) is None or p.grad_sample.shape[0] != B]
    if bad:
        raise InputError(f"Opacus gives no per-example gradient for {len(bad)} parameter(s) of model {str(name)!r} "
                         f"(first: {bad[0]}): a layer it cannot handle or a parameter the forward pass does not use; "
                         f"freeze it (freeze_embeddings for the word embeddings) or use another model")


def _alignment_scores(net, theta0: dict, delta: dict, c_rows, c_lab, pad: int, dev, chunk: int) -> np.ndarray:
    """``⟨θ_T − θ_0, −∇ℓ(θ_0; canary)⟩`` for every canary, (m,) float64, eval mode.

    Forward-mode differentiation (``torch.func.jvp``) of the per-canary losses at θ_0 along θ_T − θ_0,
    a batch of canaries per pass, with eager attention (PyTorch's fused CPU attention has no forward
    mode); when the model still has an operation without one, one reverse-mode gradient per canary."""
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call, jvp

    try:
        net.set_attn_implementation("eager")
    except Exception:  # noqa: BLE001 - models without a choice of attention
        pass
    out = np.zeros(len(c_rows))
    keys = list(theta0)

    def losses_at(ids, mask, lab):
        def f(params):
            lo = functional_call(net, params, (), {"input_ids": ids, "attention_mask": mask}).logits.float()
            return F.cross_entropy(lo, lab, reduction="none")
        return f

    try:
        for a in range(0, len(c_rows), chunk):
            ids, mask = _pad_ids(c_rows[a:a + chunk], pad)
            f = losses_at(ids.to(dev), mask.to(dev), c_lab[a:a + chunk].to(dev))
            _, d = jvp(f, (theta0,), (delta,))
            out[a:a + chunk] = -d.detach().double().cpu().numpy()
        return out
    except (NotImplementedError, RuntimeError):
        pass
    params = [theta0[k].clone().requires_grad_(True) for k in keys]
    for j, r in enumerate(c_rows):
        ids, mask = _pad_ids([r], pad)
        lo = functional_call(net, dict(zip(keys, params)), (),
                             {"input_ids": ids.to(dev), "attention_mask": mask.to(dev)}).logits.float()
        g = torch.autograd.grad(F.cross_entropy(lo, c_lab[j:j + 1].to(dev)), params, allow_unused=True)
        out[j] = -float(sum((gi * delta[k]).sum() for gi, k in zip(g, keys) if gi is not None))
    return out
