"""The shared base of the document-level sanitizers (DP-Prompt, DP-MLM): a document in, a document
out, every token of the output drawn by the clipped exponential mechanism over a language model's
vocabulary.

The clipped exponential mechanism (Utpala et al. 2023, Sec. 3; Meisenbacher et al. 2024, Sec. 3):
at one step the model gives logits ``l_v(c)`` for every vocabulary token ``v`` in context ``c``;
with bounds ``b_l < b_u`` and temperature ``T``

    p(v | c) = exp(clip(l_v(c), b_l, b_u) / T) / Σ_w exp(clip(l_w(c), b_l, b_u) / T)

an exponential mechanism with utility ``clip(l)`` of sensitivity ``Δ = b_u − b_l`` whatever the
context (McSherry & Talwar 2007): for ANY two contexts ``c, c'`` and any token,
``p(v|c) / p(v|c') <= exp(2Δ/T)`` (the numerator ratio is at most ``exp(Δ/T)``, the normaliser
ratio at most ``exp(Δ/T)``). So one draw is ``ε_tok = 2(b_u − b_l)/T`` local DP with respect to
everything in the context.

Float-safe sampling (issue 8): the law is mixed with a uniform share ``eta`` over the allowed
tokens, turned into integer weights summing to about 2**62 and sampled with one exact keyed
uniform integer (:class:`textdp.noise.ExactCategorical`; :func:`clipped_draw`); mixing cannot raise
the log-ratio, and rounding adds at most ``epsilon0 = categorical_discretisation_epsilon(V, eta)``
per draw (about 1.2e-7 for Gemma's 256k allowed tokens), which the guarantee includes. Every allowed
token keeps a positive integer weight.

Banned tokens (special and unused tokens, padding rows beyond the tokenizer): chosen from the
tokenizer alone, never from the data; their probability is 0 for every input, so banning is
data-independent and the ratio bound holds over the allowed set.

Randomness: per-record keyed ChaCha20 streams (:mod:`textdp.noise.keyed`): document ``r`` (its
global index in input order, ``first_record + i``) and step ``t`` address the uniform of its
``t``-th draw, so the output does not depend on chunking. Documents are processed one at a time
(no batching across documents): a document's logits, hence its law, never depend on the other
documents, not even at the float level.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from textdp.errors import ParameterError
from textdp.noise import DEFAULT_ETA, ExactCategorical, categorical_discretisation_epsilon
from textdp.noise import keyed
from textdp.noise.keyed import ReleaseKey
from textdp.sanitize.base import ReleaseKeys, SanitizeStats, check_epsilon

__all__ = ["DocumentSanitizer", "clipped_law", "clipped_draw", "check_clip", "model_identity"]

#: files that identify a model folder publicly (configuration and tokenizer; weights excluded: large)
IDENTITY_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt",
                  "tokenizer.model", "textdp_mlm.json")
#: bytes of a single-file model (GGUF: its header holds the configuration and the tokenizer) that are hashed
IDENTITY_PREFIX_BYTES = 4 << 20


def model_identity(path) -> str:
    """The public name of a local model for a privacy card: ``"<folder or file name> sha256:<12 hex>"``.

    The hash is SHA-256 over the configuration and tokenizer files of the folder that exist
    (:data:`IDENTITY_FILES`, each as its name, a NUL and its bytes, in that order), or, for a single
    file (``.gguf``), over its size and first :data:`IDENTITY_PREFIX_BYTES` bytes. The absolute
    path (which may hold a user name) is never part of it; the curator's terminal shows the path."""
    import hashlib
    from pathlib import Path

    p = Path(path).expanduser()
    h = hashlib.sha256()
    if p.is_dir():
        for name in IDENTITY_FILES:
            f = p / name
            if f.is_file():
                h.update(name.encode() + b"\0" + f.read_bytes())
    elif p.is_file():
        h.update(str(p.stat().st_size).encode() + b"\0")
        with open(p, "rb") as fh:
            h.update(fh.read(IDENTITY_PREFIX_BYTES))
    return f"{p.resolve().name or p.name} sha256:{h.hexdigest()[:12]}"


def check_clip(b_l, b_u, temperature=None) -> tuple[float, float, float | None]:
    """Validated ``(b_l, b_u, temperature)``: finite floats with ``b_l < b_u`` and ``T > 0``;
    ParameterError with one line otherwise."""
    try:
        lo, hi = float(b_l), float(b_u)
    except (TypeError, ValueError):
        raise ParameterError(f"b_l and b_u must be numbers, got b_l={b_l!r}, b_u={b_u!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ParameterError(f"b_l and b_u must be finite, got b_l={b_l!r}, b_u={b_u!r}")
    if not lo < hi:
        raise ParameterError(f"the clipping bounds need b_l < b_u, got b_l={lo:g}, b_u={hi:g}")
    t = None
    if temperature is not None:
        try:
            t = float(temperature)
        except (TypeError, ValueError):
            raise ParameterError(f"temperature must be a positive number, got {temperature!r}") from None
        if not (math.isfinite(t) and t > 0):
            raise ParameterError(f"temperature must be positive and finite (T > 0), got {temperature!r}")
    return lo, hi, t


def clipped_law(logits: np.ndarray, allowed: np.ndarray, b_l: float, b_u: float, temperature: float,
                eta: float = DEFAULT_ETA) -> ExactCategorical:
    """The integer law the sampler draws from, over the ``allowed`` columns.

    logits: float ``(n, V)`` (one row per draw); allowed: int64 ``(V_a,)`` column indices (the
    tokens that may be output). Returns an :class:`~textdp.noise.ExactCategorical` over
    ``V_a`` outcomes (outcome ``j`` = token ``allowed[j]``): weights
    ``rint(2**62 ((1 − eta) softmax(clip(l, b_l, b_u)/T) + eta/V_a))``."""
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    lw = np.clip(x[:, allowed], b_l, b_u)  # also maps -inf/+inf into the bounds; NaN is refused below
    if np.isnan(lw).any():
        raise ParameterError("the language model returned NaN logits")
    lw /= temperature
    return ExactCategorical(lw, eta)


def clipped_draw(logits: np.ndarray, allowed: np.ndarray, b_l: float, b_u: float, temperature: float,
                 key: ReleaseKey, streams, positions, eta: float = DEFAULT_ETA) -> np.ndarray:
    """One float-safe draw per row of ``logits`` (``(n, V)``): token ids (int64 ``(n,)``, values in
    ``allowed``), row ``i``'s uniform from keyed stream ``(streams[i], positions[i])``."""
    law = clipped_law(logits, allowed, b_l, b_u, temperature, eta)
    totals = law.cdf[:, -1]
    u = keyed.keyed_uniform_below(key, streams, positions, keyed.MAIN, totals)
    cols = (law.cdf <= u[:, None]).sum(axis=1)  # the smallest j with cdf[j] > u (cdf is nondecreasing)
    return allowed[cols]


@dataclass
class _DocFitted:
    """What partial_fit counts (curator's statistics only; never on a card)."""

    documents: int = 0
    tokens: int = 0
    oov_tokens: int = 0


class DocumentSanitizer(ReleaseKeys):
    """Base class of the document-level sanitizers: keys, fitting counts, the release loop and the
    card hooks the CLI (:mod:`textdp.cli.sanitize`) uses.

    Common parameters (the same names as :class:`textdp.sanitize.base.TokenSanitizer`, so that
    :func:`textdp.sanitize.make_mechanism` and the CLI pass them alike):

    embeddings: accepted for the common signature and NOT used (the model replaces the embedding
        table; pass the model as ``model=``).
    epsilon: the mechanism's privacy parameter (see each class for its unit).
    output_vocabulary, oov: only their defaults (``"public"``, ``"uniform"``) are accepted: the
        output vocabulary is the model's (public) vocabulary, and no token is ever kept or dropped.
    rng: None (fresh 256-bit key per release), an int seed (reproducible, not for release) or a
        ``numpy.random.Generator`` (keys drawn from it), as for the token sanitizers.
    eta: the sampler's uniform share (default ``2**-20``).
    device: where the model runs (``cpu``, ``cuda[:N]``, ``auto``); the sampler itself runs on
        the CPU from the logits.
    workers, block_bytes: accepted for the common signature; one thread (``workers`` > 1 refused).
    """

    name = "document-sanitizer"
    paper: str = ""
    document_level = True
    supports_workers = False
    #: the model runs on a torch device (the CLI's --device applies)
    torch_sampler = True
    exact_probabilities = False
    corpus_dependent = False
    output_vocabulary = "public"
    oov = "uniform"
    unk_token = "[UNK]"
    epsilon_min = 0.0
    epsilon_max = math.inf

    def __init__(self, embeddings=None, epsilon: float | None = None, *, output_vocabulary="public",
                 oov: str = "uniform", unk_token: str = "[UNK]", rng=None, block_bytes: int | None = None,
                 workers: int | None = None, eta: float = DEFAULT_ETA, device: str = "cpu"):
        if epsilon is not None:
            check_epsilon(epsilon)
        if not (isinstance(output_vocabulary, str) and output_vocabulary == "public"):
            raise ParameterError(f"--output-vocabulary does not apply to {self.name}: its output vocabulary is "
                                 "the language model's (public) vocabulary")
        if oov != "uniform":
            raise ParameterError(f"--oov does not apply to {self.name}: every position of the output is "
                                 "sampled, no input token is kept or dropped")
        if workers is not None and int(workers) > 1:
            raise ParameterError(f"--workers N > 1 does not apply to {self.name} (it runs in one thread)")
        try:
            self.eta = float(eta)
        except (TypeError, ValueError):
            raise ParameterError(f"eta must be a number in (0, 1), got {eta!r}") from None
        if not (0.0 < self.eta < 1.0):
            raise ParameterError(f"eta must be in (0, 1), got {eta!r}")
        from textdp.models.device import resolve_device

        self.device = resolve_device(device)
        self.workers = 1
        self.block_bytes = block_bytes
        self._init_keys(rng)
        self._fitted: _DocFitted | None = None
        self.last_stats: SanitizeStats | None = None

    # ------------------------------------------------------------------ counting (the CLI's pass 1)
    def fit(self, texts: Iterable[str]) -> "DocumentSanitizer":
        """Count documents and words of ``texts`` (the curator's statistics: the law does not depend
        on them). Returns ``self``."""
        self._fitted = None
        return self.partial_fit(texts)

    def partial_fit(self, texts: Iterable[str], keep_tokens: bool = True) -> "DocumentSanitizer":
        """Add ``texts`` to the counts (documents, word tokens); nothing of them is kept."""
        from textdp.data.tokenize import WordTokenizer

        if self._fitted is None:
            self._fitted = _DocFitted()
        tk = WordTokenizer()
        for t in texts:
            self._fitted.documents += 1
            self._fitted.tokens += len(tk.tokenize(t or ""))
        return self

    @property
    def is_fitted(self) -> bool:
        return True

    def _prepare(self) -> None:
        """Nothing to build from the data (the law depends on each document only)."""

    # ------------------------------------------------------------------ the release
    def sanitize(self, texts: Iterable[str], progress: Callable[[int], None] | None = None) -> list[str]:
        """Sanitize each document; returns the sanitized documents in order."""
        return self.sanitize_with_stats(texts, progress=progress)[0]

    def sanitize_with_stats(self, texts: Iterable[str], progress: Callable[[int], None] | None = None,
                            first_record: int | None = None) -> tuple[list[str], SanitizeStats]:
        """Sanitize each document and return ``(texts, stats)`` (stats: the curator's exact counts,
        never on a card). ``first_record``: global index of ``texts[0]`` within a release started with
        :meth:`begin_release`; None: a release of its own (new key, records from 0). ``progress(k)``
        is called with each document's input word count once it is done."""
        from textdp.data.tokenize import WordTokenizer
        from textdp.sanitize.corpus import normalize_texts

        t0 = time.perf_counter()
        texts = normalize_texts(["" if t is None else t for t in texts])
        if first_record is None:
            self.begin_release()
            first_record = 0
        elif self._release_key is None:
            self.begin_release()
        if int(first_record) < 0:
            raise ParameterError("first_record must be >= 0")
        key = self._release_key
        tk = WordTokenizer()
        out: list[str] = []
        n_tok = changed = longest = 0
        for i, text in enumerate(texts):
            text_out, n_in, n_changed = self._sanitize_document(text, key, int(first_record) + i)
            out.append(text_out)
            n_words = len(tk.tokenize(text))
            n_tok += n_words
            changed += n_changed
            longest = max(longest, n_words)
            if progress is not None:
                progress(n_words)
        secs = time.perf_counter() - t0
        stats = SanitizeStats(documents=len(texts), tokens=n_tok, in_vocabulary_tokens=n_tok, changed_tokens=changed,
                              oov_tokens=0, oov_policy="none", max_document_tokens=longest, seconds=secs,
                              sampling_seconds=secs)
        self.last_stats = stats
        return out, stats

    def _sanitize_document(self, text: str, key: ReleaseKey, record: int) -> tuple[str, int, int]:
        """``(output text, input tokens, changed tokens)`` for one document, drawing from stream
        ``record`` of ``key``."""  # pragma: no cover - overridden
        raise NotImplementedError

    # ------------------------------------------------------------------ card hooks
    @property
    def guarantee(self):  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def sampling_epsilon0(self) -> float:
        """Accounted extra loss of one float-safe draw over the allowed vocabulary."""
        return categorical_discretisation_epsilon(len(self.allowed_tokens), self.eta)

    def card_warnings(self) -> list[str]:
        return []

    def card_units(self) -> dict:  # pragma: no cover - overridden
        return {}

    def epsilon0_meaning(self) -> str:
        return "the accounted cost of float-safe sampling (integer weights), per generated token"

    def parameters(self) -> dict:
        return {"epsilon": self.epsilon, "eta": self.eta}

    def model_info(self) -> dict:  # pragma: no cover - overridden
        """Public facts about the model, for the card's ``data``."""
        return {}

    def output_vocabulary_info(self) -> dict:
        """The output vocabulary: the model's tokens less the banned ones (public)."""
        return {"kind": "model", "name": f"{self.model_info().get('name', 'model')} vocabulary",
                "size": int(len(self.allowed_tokens)), "banned_tokens": int(self.n_banned),
                "note": "special/unused tokens are banned from the tokenizer alone (data-independent)"}

    def card_statistics(self) -> dict:
        """The card's ``statistics``: the composition rule (no statistic of the data)."""
        return {"per_document": {"rule": self.card_units().get("per_document", "")}}

    @property
    def output_words(self) -> list[str]:  # pragma: no cover - overridden
        raise NotImplementedError
