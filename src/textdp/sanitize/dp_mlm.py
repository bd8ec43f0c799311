"""DP-MLM: every word of a document masked in its context and replaced by a word drawn from a masked
language model's clipped, tempered logits.

Paper: Meisenbacher, Chevli, Vladika, Matthes. *DP-MLM: Differentially Private Text Rewriting Using
Masked Language Models.* Findings of ACL 2024, Sec. 3 (the mechanism reuses DP-Prompt's clipped
exponential mechanism, Utpala et al. 2023, at each masked position; epsilon is stated per token).

Law (document ``x = x_1 .. x_L`` of word tokens): for each position ``i`` independently given ``x``,

    y_i ~ softmax(clip(MLM logits at [MASK] in context c_i(x), b_l, b_u) / T)   over the allowed words

where ``c_i(x)`` is ``x`` with ``x_i`` replaced by ``[MASK]`` (textdp's MLM: a window of at most
``max_len − 2`` words around ``i``, the same windows as :meth:`textdp.models.mlm.MaskedLM.predict_masked`;
the paper's reference code also prepends the unmasked sentence, which textdp's 16-position MLM has no
room for). Banned outputs: the 5 special tokens (``[PAD] [UNK] [CLS] [SEP] [MASK]``), from the
vocabulary alone (data-independent). Sampling: :mod:`textdp.sanitize.document` (float-safe,
per-record keyed streams: document ``r``, position ``i``).

Guarantee (:attr:`DPMLM.guarantee`), for the standard relation "replace one word token" (two
documents of the same number of words that differ in one word):

* one position: ``ε_pos = 2(b_u − b_l)/T`` (+ ``epsilon0`` for float-safe sampling) -- for ANY two
  contexts (clipped utility, sensitivity ``b_u − b_l``);
* position ``i``'s own word is replaced by ``[MASK]``, so output ``i`` never depends on ``x_i``;
  word ``x_k`` reaches the release only through the OTHER positions whose context window holds it.
  The L draws are independent given ``x``, so replacing ``x_k`` costs at most
  ``C · (ε_pos + epsilon0)`` where ``C`` is the number of positions ``j ≠ k`` whose window holds
  ``k``;
* windows (:func:`window_start`): ``W`` words (the model's public window: ``max_len − 2`` = 14
  for textdp's MLM, 64 for a Hugging Face folder), centred on ``j`` but shifted to lie inside
  the document. Counted exactly (:func:`positions_seeing_a_word`): ``C = L − 1`` for
  ``L ≤ 2W − 1`` words, ``C = W + ⌊W/2⌋ − 1`` for ``L ≥ 2W`` (the shifted windows at both ends
  each hold up to ``⌊W/2⌋`` extra positions); the largest, over every length, is
  ``2(W − 1)`` (at ``L = 2W − 1``, where every window holds the middle word). The length is
  released, but the guarantee states the public constant:

      ε_token = 2(W − 1) · (ε_pos + epsilon0)        per replaced word (neighbours "replace-one")

  (:data:`MAX_POSITIONS_PER_WORD`; 26 · (ε_pos + epsilon0) for textdp's MLM, 126 · (…) for a
  64-word window);
* a whole document: two documents of the same length ``L`` (any number of words differing) are
  ``L · (ε_pos + epsilon0)``-indistinguishable (stated in the card's units, not as the guarantee);
* documents of different lengths are NOT protected against each other: the output has exactly as
  many words as the input and keeps its layout (separators and line breaks, :func:`textdp.sanitize.corpus.glue`).

``epsilon`` (the CLI's ``--epsilon``) is the paper's per-POSITION ε_pos: ``T = 2(b_u − b_l)/ε``.
The card's guarantee, the terminal and the budget ledger carry the per-token ε_token above, in the
currency ``dp/token/replace-one``.

Model: a masked LM trained on PUBLIC data only: by default textdp's own word-level BERT trained on
BBC News (:func:`textdp.models.mlm.default_mlm`, trained once on first use and cached; environment
variable ``TEXTDP_DP_MLM_MODEL`` names another folder), or ``model=`` a textdp MLM folder or a local
Hugging Face masked-LM folder (``local_files_only``; the masked word is one [MASK] token, outputs are
whole-word tokens, 64 words of context). The card names a folder by its name and a short hash of
its configuration and tokenizer files (:func:`textdp.sanitize.document.model_identity`), never by
its local path; the curator's terminal shows the path.
No pretrained MLM head installs offline (spec ``offline-models-and-data.md`` §2): textdp's small
MLM (held-out top-1 accuracy 0.14 on clean BBC News words, against 0.06 for always 'the') makes DP-MLM WEAK in utility -- at useful
epsilon the replacements are mostly frequent words.

Differences from the reference code (``sjmeis/DPMLM``, ``core.py``): there stop words and
punctuation are kept unchanged (released unprotected), capitalisation of the input is copied onto
the output (released), sampling is ``np.random.choice`` on float probabilities; here every position
is sampled, the output is lower-cased, and sampling is float-safe and keyed.
"""

from __future__ import annotations

import os

import numpy as np

from textdp.errors import ParameterError
from textdp.noise import DEFAULT_ETA
from textdp.sanitize.document import DocumentSanitizer, check_clip, clipped_draw

__all__ = ["DPMLM", "ENV_MODEL", "window_start", "positions_seeing_a_word", "max_positions_per_word"]

#: environment variable naming the default MLM folder (a textdp word-level MLM)
ENV_MODEL = "TEXTDP_DP_MLM_MODEL"


def window_start(j: int, n: int, width: int) -> int:
    """First word of position ``j``'s context window in a document of ``n`` words: ``width``
    words centred on ``j`` (``j − width//2``), shifted to lie inside the document; the window is
    words ``[start, start + min(n, width))`` and always holds ``j``."""
    return max(0, min(j - width // 2, n - width))


def positions_seeing_a_word(n: int, width: int) -> int:
    """Exactly the largest number, over the words ``k`` of an ``n``-word document, of OTHER
    positions ``j ≠ k`` whose window (:func:`window_start`) holds ``k``: the number of draws that
    one replaced word can move. ``n − 1`` for ``n ≤ 2·width − 1``, ``width + width//2 − 1`` for
    ``n ≥ 2·width`` (``width ≥ 1``)."""
    if n <= 1:
        return 0
    w = min(n, width)
    cover = np.zeros(n + 1, dtype=np.int64)
    for j in range(n):
        s = window_start(j, n, width)
        cover[s] += 1
        cover[s + w] -= 1
    return int(np.cumsum(cover)[:n].max()) - 1


def max_positions_per_word(width: int) -> int:
    """``2(width − 1)``: the largest :func:`positions_seeing_a_word` over every document length
    (reached at ``n = 2·width − 1``; at least 1, so that a guarantee is never 0). Proof: a word
    ``k`` lies in window ``j`` iff ``window_start(j) ∈ [k − width + 1, k]``; that interval holds
    at most ``width`` distinct starts, start 0 is shared by ``width//2 + 1`` positions, the last
    start by ``width − width//2`` and every other start by one position, so at most
    ``2·width − 1`` positions, ``k`` itself included."""
    return max(1, 2 * (int(width) - 1))


def _load_mlm(model):
    """``(textdp MaskedLM or _HFMaskedModel, public name, local path or None)`` for ``model`` (None:
    the default). The public name of a folder is :func:`textdp.sanitize.document.model_identity`
    (no local path)."""
    from textdp.models.mlm import MaskedLM, default_mlm
    from textdp.sanitize.document import model_identity

    path = model if model is not None else os.environ.get(ENV_MODEL)
    if path is None:
        return default_mlm(), "textdp default MLM (BERT, word-level, trained on BBC News: public)", None
    from pathlib import Path

    p = Path(path).expanduser()
    if not p.is_dir():
        raise ParameterError(f"dp-mlm model {str(p)!r} is not a folder (give a textdp MLM folder or a local "
                             "Hugging Face masked-LM folder)")
    if MaskedLM.is_textdp_dir(p):
        return MaskedLM.load(p), model_identity(p), str(p)
    if (p / "config.json").is_file():
        return _HFMaskedModel(p), model_identity(p), str(p)
    raise ParameterError(f"dp-mlm model {str(p)!r} holds neither a textdp MLM (textdp_mlm.json) nor a Hugging Face "
                         "model (config.json)")


class _HFMaskedModel:
    """A local Hugging Face masked LM (``local_files_only``): whole words in, one [MASK] token for the
    masked word, one whole-word token out. Allowed outputs (from the tokenizer alone): not special,
    not ``[unused..]``/``<unused..>``, and a word START (no ``##`` continuation; for byte-level BPE /
    SentencePiece vocabularies, only tokens with the word-start marker ``Ġ`` / ``▁``), non-empty once
    the marker is stripped. Context: a window of :attr:`window` words around the masked one."""

    window = 64

    def __init__(self, path):
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        from textdp.models.classifier import _quiet_transformers

        _quiet_transformers()
        try:
            self.tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            self.model = AutoModelForMaskedLM.from_pretrained(str(path), local_files_only=True).eval()
        except (OSError, ValueError, KeyError) as exc:
            raise ParameterError(f"cannot load a masked LM from {str(path)!r} offline ({type(exc).__name__})") from None
        if self.tok.mask_token_id is None:
            raise ParameterError(f"{str(path)!r}: the tokenizer has no mask token (not a masked LM)")
        v = int(self.model.get_output_embeddings().weight.shape[0])
        toks = self.tok.convert_ids_to_tokens(list(range(min(v, len(self.tok)))))
        marker = "Ġ" if any(t.startswith("Ġ") for t in toks) else ("▁" if any(t.startswith("▁") for t in toks) else None)
        special = set(self.tok.all_special_ids)
        words, ok = [], []
        for i, t in enumerate(toks):
            w = t[len(marker):] if marker and t.startswith(marker) else t
            words.append(w)
            good = (i not in special and not t.startswith(("##", "[unused", "<unused")) and bool(w.strip())
                    and (marker is None or t.startswith(marker)))
            if good:
                ok.append(i)
        words += [""] * (v - len(words))
        self.words = np.asarray(words, dtype=object)
        self.allowed = np.asarray(ok, dtype=np.int64)
        self.info = {"architecture": type(self.model).__name__, "tokenizer": type(self.tok).__name__}

    def to(self, device):
        from textdp.models.device import place

        place(self.model, device)
        return self

    def logits(self, words: list[str]) -> np.ndarray:
        """float32 ``(L, V)`` logits at the [MASK] replacing word ``j``, for every ``j``."""
        import torch

        from textdp.models.device import module_device

        n, width = len(words), self.window
        rows = []
        for j in range(n):
            s = window_start(j, n, width)
            w = list(words[s:s + width])
            w[j - s] = self.tok.mask_token
            rows.append(w)
        enc = self.tok(rows, is_split_into_words=True, padding=True, truncation=True,
                       max_length=min(int(getattr(self.tok, "model_max_length", 512) or 512), 512), return_tensors="pt")
        dev = module_device(self.model)
        enc = {k: v.to(dev) for k, v in enc.items()}
        with torch.no_grad():
            out = self.model(**enc).logits
        mpos = (enc["input_ids"] == self.tok.mask_token_id).int().argmax(dim=1)
        return out[torch.arange(n, device=dev), mpos].float().cpu().numpy()


class DPMLM(DocumentSanitizer):
    """DP-MLM (Meisenbacher et al. 2024): see the module docstring for the law and the guarantee.

    model: a textdp word-level MLM folder, a local Hugging Face masked-LM folder (whole words masked
        by one [MASK]; outputs restricted to whole-word tokens; 64 words of context), or None
        (textdp's default MLM trained on BBC News; or ``$TEXTDP_DP_MLM_MODEL``).
    epsilon: the paper's per-POSITION epsilon ε_pos (sets ``T = 2(b_u − b_l)/epsilon``); the
        guarantee per replaced word is ``2(W − 1) · (ε_pos + epsilon0)`` (module docstring).
    b_l, b_u: logit clipping bounds, ``b_l < b_u``. Defaults -7, 7: measured with the default MLM on
        40 BBC News test documents (public; 120M logits): 1 % quantile of all logits -6.7, median of
        each position's largest logit 6.1 (95 %: 7.5).
    temperature: T > 0 instead of ``epsilon`` (both: they must agree).

    Raises ParameterError (one line) for T <= 0, b_l >= b_u and the like, before loading the model.
    """

    name = "dp-mlm"
    paper = ("Meisenbacher, Chevli, Vladika, Matthes. DP-MLM: Differentially Private Text Rewriting Using Masked "
             "Language Models. Findings of ACL 2024, Sec. 3")

    def __init__(self, embeddings=None, epsilon: float | None = None, *, model: str | None = None,
                 b_l: float = -7.0, b_u: float = 7.0, temperature: float | None = None, output_vocabulary="public",
                 oov: str = "uniform", unk_token: str = "[UNK]", rng=None, block_bytes: int | None = None,
                 workers: int | None = None, eta: float = DEFAULT_ETA, device: str = "cpu"):
        import math

        self.b_l, self.b_u, t = check_clip(b_l, b_u, temperature)
        span = 2.0 * (self.b_u - self.b_l)
        if t is None and epsilon is None:
            raise ParameterError("dp-mlm needs epsilon (per position) or temperature")
        if t is None:
            t = span / float(epsilon)
            if not (math.isfinite(t) and t > 0):
                raise ParameterError(f"epsilon={epsilon!r} gives temperature {t!r}; use a finite positive epsilon")
        implied = span / t
        if epsilon is not None and not math.isclose(float(epsilon), implied, rel_tol=1e-9):
            raise ParameterError(f"epsilon {float(epsilon):g} and temperature {t:g} disagree: with b_l={self.b_l:g}, "
                                 f"b_u={self.b_u:g}, T={t:g} means epsilon {implied:.6g} per position (give one of them)")
        self.temperature = t
        self.epsilon = float(epsilon) if epsilon is not None else implied
        self.epsilon_token = implied
        super().__init__(embeddings, self.epsilon, output_vocabulary=output_vocabulary, oov=oov, unk_token=unk_token,
                         rng=rng, block_bytes=block_bytes, workers=workers, eta=eta, device=device)
        self.model_arg = None if model is None else str(model)
        self._default_model = model is None and not os.environ.get(ENV_MODEL)
        #: the model's public name (card) and its local path (the curator's terminal only; None: default)
        self.mlm, self.model_name, self.model_path = _load_mlm(model)
        self.mlm.to(self.device)
        from textdp.embeddings import Embeddings

        self._hf = isinstance(self.mlm, _HFMaskedModel)
        if self._hf:
            # a one-entry table: only the word split and the layout rule are used (the context is the raw words)
            self._table = Embeddings(["\x00"], np.zeros((1, 1), dtype=np.float32), source=self.model_name,
                                     kind="word", lowercase=False)
            self.allowed_tokens = self.mlm.allowed
            self._words = self.mlm.words
            self.n_banned = int(len(self._words) - len(self.allowed_tokens))
        else:
            from textdp.models.mlm import SPECIALS

            words = list(self.mlm.vocab.words)
            # a word table without geometry: only for tokenizing to the MLM's words and the layout rule
            self._table = Embeddings(words, np.zeros((len(words), 1), dtype=np.float32), source=self.model_name,
                                     kind="word", lowercase=True)
            self.allowed_tokens = np.arange(len(SPECIALS), len(words), dtype=np.int64)
            self.n_banned = len(SPECIALS)
            self._words = np.asarray(words, dtype=object)

    @property
    def output_words(self) -> list[str]:
        return self._words[self.allowed_tokens].tolist()

    @property
    def window(self) -> int:
        """Words of context per masked position (textdp's MLM: its positions less [CLS] and [SEP])."""
        if self._hf:
            return self.mlm.window
        return int(self.mlm.model.config.max_position_embeddings) - 2

    def position_logits(self, ids: np.ndarray) -> np.ndarray:
        """float32 ``(L, V)``: the MLM's logits at the masked position for every position of the
        document ``ids`` (MLM vocabulary ids, OOV = [UNK]), one forward pass over its L windows."""
        import torch

        from textdp.models.device import module_device
        from textdp.models.mlm import CLS, MASK, SEP

        n = len(ids)
        width = self.window
        w = min(n, width)
        inp = np.empty((n, w + 2), dtype=np.int64)
        centre = np.empty(n, dtype=np.int64)
        for j in range(n):
            s = window_start(j, n, width)
            inp[j, 1:w + 1] = ids[s:s + w]
            inp[j, j - s + 1] = MASK
            centre[j] = j - s + 1
        inp[:, 0], inp[:, w + 1] = CLS, SEP
        dev = module_device(self.mlm.model)
        with torch.no_grad():
            h = self.mlm.model.bert(input_ids=torch.from_numpy(inp).to(dev)).last_hidden_state
            hc = h[torch.arange(n, device=dev), torch.from_numpy(centre).to(dev)]
            return self.mlm.model.cls(hc).float().cpu().numpy()

    def document_logits(self, tok) -> np.ndarray:
        """float32 ``(L, V)``: logits of every masked position of one tokenized document."""
        if self._hf:
            return self.mlm.logits(tok.raw_tokens(np.arange(tok.n_tokens)).tolist())
        from textdp.models.mlm import UNK

        return self.position_logits(np.where(tok.rows >= 0, tok.rows, UNK))

    def _sanitize_document(self, text, key, record):
        from textdp.sanitize.corpus import tokenize_texts

        tok = tokenize_texts([text], self._table)
        n = tok.n_tokens
        if n == 0:
            return tok.rebuild([])[0], 0, 0
        logits = self.document_logits(tok)
        y = clipped_draw(logits, self.allowed_tokens, self.b_l, self.b_u, self.temperature, key,
                         np.full(n, record, dtype=np.int64), np.arange(n, dtype=np.int64), self.eta)
        new = self._words[y]
        changed = int((new != tok.raw_tokens(np.arange(n))).sum())
        return tok.rebuild(new)[0], n, changed

    # ------------------------------------------------------------------ guarantee and card
    @property
    def positions_per_word(self) -> int:
        """``2(W − 1)``: the most draws one replaced word can move, over every document length
        (:func:`max_positions_per_word` of :attr:`window`)."""
        return max_positions_per_word(self.window)

    @property
    def guarantee(self):
        """LocalDP per word token, neighbours "replace-one": ``2(W − 1) · (ε_pos + epsilon0)``."""
        from textdp.accounting.guarantees import LocalDP

        return LocalDP(epsilon=self.positions_per_word * (self.epsilon_token + self.sampling_epsilon0), unit="token",
                       neighbours="replace-one")

    def parameters(self) -> dict:
        p = {"epsilon": self.epsilon, "eta": self.eta, "b_l": self.b_l, "b_u": self.b_u,
             "temperature": self.temperature, "epsilon_per_position": self.epsilon_token,
             "context_window_words": self.window, "positions_per_word": self.positions_per_word}
        if self.model_arg is not None:
            p["model"] = self.model_name  # never the local path (it may hold a user name)
        return p

    def model_info(self) -> dict:
        if self._hf:
            info = dict(self.mlm.info)
        else:
            info = {k: v for k, v in self.mlm.info.items() if k in ("corpus", "preset_name", "seed", "preset", "heldout")}
            info["architecture"] = "BertForMaskedLM (textdp word-level MLM)"
        info.update({"name": self.model_name, "vocabulary_size": len(self._words), "context_window_words": self.window})
        return info

    def card_units(self) -> dict:
        e0 = self.sampling_epsilon0
        w, c = self.window, self.positions_per_word
        return {
            "epsilon": f"per word token, neighbours replace-one (two documents of the same number of words that "
                       f"differ in one word): 2(W - 1) x (epsilon_per_position + epsilon0) = {c} x "
                       f"({self.epsilon_token:.6g} + {e0:.3g}), W = {w} words of context. A position's own word is "
                       "masked, so a word reaches the output only through the other positions whose window holds "
                       f"it: L - 1 of them for L <= {2 * w - 1} words, {w + w // 2 - 1} for longer documents, at "
                       f"most {c} (at L = {2 * w - 1})",
            "epsilon_per_position": "the --epsilon given (the paper's per-token epsilon): each position's word is a "
                                    "2(b_u - b_l)/T-LDP exponential mechanism over the MLM's clipped logits, for ANY "
                                    "two contexts; it is NOT the protection of a word",
            "per_document": "two documents of the same length L (any words differing): L x (epsilon_per_position + "
                            "epsilon0); documents of different lengths are NOT protected (the output keeps the "
                            "input's number of words and its layout)",
            "neighbours": "replace-one: documents with the same number of word tokens that differ in one",
            "epsilon0": f"additive per position ({e0:.3g}): {self.epsilon0_meaning()}",
        }

    def epsilon0_meaning(self) -> str:
        return "the accounted cost of float-safe sampling (integer weights), per position"

    def card_warnings(self) -> list[str]:
        return ["DP-MLM keeps the input's number of words and its layout (spaces, line breaks): the document "
                "length is released unprotected",
                f"--epsilon is per position ({self.epsilon_token:g}); one replaced word moves up to "
                f"{self.positions_per_word} positions (their context windows hold it), so the guarantee per word is "
                f"{self.guarantee.epsilon:.6g}; per document of L words it is L x {self.epsilon_token:g}",
                "the masked LM is textdp's small word-level BERT trained on public text (no pretrained MLM head "
                "installs offline): replacements are weak in meaning"
                if self._default_model else
                "the masked LM is a folder given by the user: it must be trained on public data only"]


REGISTERED = (
    ("dp-mlm", DPMLM,
     "DP-MLM (Meisenbacher et al. 2024): each word masked in context and redrawn from softmax(clip(MLM logits)/T); "
     "2(W-1) x 2(b_u-b_l)/T LDP per replaced word (W: the MLM's context window), L x 2(b_u-b_l)/T per document "
     "of L words", ("sanitize", "document-level", "ldp",
                                                                        "language-model")),
)
