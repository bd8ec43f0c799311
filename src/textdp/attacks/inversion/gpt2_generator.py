"""A pretrained GPT-2-style generator for Text Revealer, bridged to a WordPiece target.

Spec ``text-revealer.md`` §5.2 ("cross-tokenizer mode", ``alignment =
"bpe_to_wordpiece"``). The generator ``G`` predicts byte-level BPE tokens
(GPT-2: 50,257); the target classifier reads WordPiece embeddings (BERT /
MiniLM: 30,522). A constant, row-stochastic, sparse **alignment matrix**
``A`` (|V_bpe| × |V_wp|, ``scipy.sparse.csr_matrix`` float32) maps each BPE
token to the WordPiece piece(s) of its decoded string, and the classifier reads
the expected next-token embedding

    ê_{t+1} = p̃ᵀ A E_c        (p̃: (V_bpe,) perturbed next-token distribution,
                                E_c: (V_wp, d) the target's word-embedding table)

so the gradient of the target's cross-entropy reaches ``p̃`` and, through ``G``,
the perturbed key/value history (PPLM). ``A E_c`` is precomputed per target
(:meth:`BpeVocab.bridge`, a (V_bpe, d) float32 table).

**How a row of A is built** (:func:`build_alignment`), for BPE token ``v``:

1. decode ``v`` to its surface string (byte-level BPE: ``Ġ`` is a leading space);
2. it *starts a word* when the surface starts with whitespace (or the raw token
   starts with ``Ġ``/``▁``); otherwise it *continues* the previous word;
3. normalise it with the target tokenizer's own normaliser (lowercase, accents)
   and pre-tokeniser (whitespace and punctuation split, exactly as BERT does).
   A word-initial word is WordPiece-tokenised as BERT would; the first word of a
   continuation token is tokenised greedily (longest match first) with ``##``
   pieces only (``ing`` -> ``##ing``), falling back to BERT's word-initial
   tokenisation if no ``##`` segmentation exists. Punctuation is always its own
   word in BERT, so a continuation ``,`` maps to ``,``;
4. **policy** ``first`` (textdp's default): all mass on the first piece.
   ``mean``: mass spread uniformly over the pieces (the spec's suggestion);
5. tokens that give no piece (pure whitespace ``Ġ``/``Ċ``, partial UTF-8 bytes
   that decode to U+FFFD, which BERT's normaliser deletes) and the generator's
   special tokens map to ``[UNK]``, except end-of-text, which maps to ``[SEP]``
   (the text ends there). Ids beyond the tokenizer's length (padded embedding
   rows) map to ``[UNK]``. Every row sums to 1.

Why ``first`` by default: a BPE token occupies *one* soft position, and when the
text is re-tokenised for the target, the classifier position right after the
hard prefix holds the **first** WordPiece piece of the next token. With
``first``, ``ê_{t+1}`` is therefore exactly the expected embedding of the
classifier's next input position (for word-initial tokens, which carry most of
the mass after a complete word); ``mean`` feeds an average of piece embeddings
that no real input ever has. The share of the generator's mass on multi-piece
tokens is reported (:meth:`BpeAlignment.multi_piece_mass`) so the size of the
approximation is visible. Known approximation (both policies): a continuation
token can change how the *previous* word is split after re-tokenisation.

**Hard prefix**: the generated BPE ids are decoded to text and re-tokenised by
the target's tokenizer (:meth:`BpeBridge.prefix_cls_ids`); inverted texts are
decoded by the BPE tokenizer and scored from their strings. Rows of a batch
re-tokenise to different WordPiece lengths: the target reads them right-padded
and masked (see "Batched rows" below).

**Loading, offline only** (:func:`resolve_generator`, :func:`load_generator`), through the
loader shared with DP-Prompt (:func:`textdp.models.pretrained.load_causal_lm`): ``PATH`` is a
local folder holding a causal LM (``config.json``, weights) and its tokenizer, e.g. written by
``save_pretrained``, or a ``.gguf`` file (dequantised once and saved as a folder); ``gemma`` is
the offline Gemma 3 270M (``$TEXTDP_CAUSAL_LM`` when set); a hub name such as ``gpt2`` is
used only when it is already in the local Hugging Face cache
(``local_files_only=True``; textdp never downloads). GPT-2 checkpoints are
converted onto :class:`textdp.models.causal_lm.CausalLM` (explicit per-layer
``(K, V)`` history; GPT-2's ``Conv1D`` ``[in, out]`` weights transposed); any
other ``AutoModelForCausalLM`` (Gemma 3 included) runs through :class:`HFCausalLMAdapter`, which
rebuilds a fresh ``DynamicCache`` from the ``(K, V)`` list at every call (never
reused, so PPLM's iterations cannot grow it in place).

**Fine-tuning on the public split** (:func:`prepare_pretrained_generator` with ``finetune``): the
paper fine-tunes its GPT-2 on the public data before the attack. The loaded model is copied (the
shared loader's instance stays as it is), fine-tuned with LoRA or fully
(:func:`textdp.models.finetune.finetune_causal_lm`; a few public texts held out to measure its
perplexity before and after), and saved ONCE to a folder under the cache the user controls
(``cache=``, default ``$TEXTDP_CACHE/attack-invert``), keyed by the base model's fingerprint, the
public texts and the fine-tuning knobs; later runs load that folder.

**Banned tokens**: every special, added or undecodable output row of the generator
(:func:`textdp.models.pretrained.banned_token_ids`: Gemma 3's 6,384 added tokens, its
begin-of-text, padding, unknown and mask tokens) is in :attr:`BpeVocab.banned`; TR and VTG set
their logits to -inf before every softmax (:func:`textdp.attacks.inversion.pplm.generate`), so
they are never sampled and carry no mass in TR's expected embedding. End-of-text stays allowed.

**Alignment cache**: building ``A`` walks the whole generator vocabulary (262,144 rows for
Gemma 3); it is computed once per (generator tokenizer, target vocabulary, policy) and saved under
the same cache folder (``alignment-<key>.npz``).

**Batched rows**: rows of a batch whose texts re-tokenise to different WordPiece lengths are
right-padded for the target (attention mask 0 on the padding; :meth:`BpeBridge.prefix_cls_ragged`),
so TR and VTG run ``batch_size`` rows at a time with the same per-row seeds as one row at a time.
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from textdp.attacks.inversion.templates import jobs_by_prefix_length
from textdp.errors import InputError, MissingPackageError, ParameterError, excerpt

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover
    raise MissingPackageError("the GPT-2 generator needs torch; run: pip install 'textdp[nlp]'") from None

__all__ = ["POLICIES", "BpeAlignment", "BpeVocab", "BpeBridge", "HFCausalLMAdapter", "build_alignment",
           "wordpiece_pieces", "resolve_generator", "load_generator", "prepare_pretrained_generator",
           "generate_texts_bpe", "cached_alignment", "GEMMA_NAME"]

#: ``--generator gemma``: the offline Gemma 3 270M (or ``$TEXTDP_CAUSAL_LM``)
GEMMA_NAME = "gemma"

POLICIES = ("first", "mean")

_LOCAL_HELP = ("pass a local folder instead: --generator PATH, holding config.json, the model weights and the "
               "tokenizer files (e.g. written by save_pretrained)")


# =========================================================================== loading
def resolve_generator(name: str | os.PathLike) -> Path:
    """The local folder (or ``.gguf`` file) of generator ``name``, checked offline (nothing is
    downloaded).

    ``gemma`` -> :func:`textdp.models.pretrained.default_causal_lm_path` (MissingPackageError when
    the offline Gemma is not installed and ``$TEXTDP_CAUSAL_LM`` is not set). An existing ``.gguf``
    file -> itself. An existing folder holding ``config.json`` -> itself. A path-like value that
    does not exist, a file, or a folder without ``config.json`` -> InputError. Any other value is a Hugging Face hub name (``gpt2``,
    ``org/name``) that must already be in the local cache (``HF_HOME`` /
    ``HF_HUB_CACHE``); it resolves to the cached snapshot folder, else InputError
    saying how to pass a local folder.
    """
    from textdp.models.classifier import looks_like_path

    s = str(name).strip()
    if not s:
        raise InputError(f"empty --generator; use scratch or {_LOCAL_HELP}")
    if s.lower() == GEMMA_NAME:
        from textdp.models.pretrained import default_causal_lm_path

        p = default_causal_lm_path()  # MissingPackageError (one line) when Gemma is not installed
        if not p.exists():
            raise InputError(f"the default causal language model {excerpt(str(p), 80)} does not exist; {_LOCAL_HELP}")
        return _check_model_folder(p, s) if p.is_dir() else p
    p = Path(s).expanduser()
    if p.is_dir():
        return _check_model_folder(p, s)
    if p.is_file() and p.suffix.lower() == ".gguf":
        return p
    if p.exists():
        raise InputError(f"generator {excerpt(s, 80)} is a file (not a .gguf model); {_LOCAL_HELP}")
    if looks_like_path(s):
        raise InputError(f"generator folder {excerpt(s, 80)} does not exist; {_LOCAL_HELP}")
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(repo_id=s, local_files_only=True)
    except Exception:  # noqa: BLE001 - LocalEntryNotFoundError, HFValidationError, ...
        raise InputError(f"generator {excerpt(s, 80)} is not in the local Hugging Face cache and textdp never "
                         f"downloads models; {_LOCAL_HELP}") from None
    return _check_model_folder(Path(folder), s)


def _check_model_folder(folder: Path, name: str) -> Path:
    """``folder`` when it holds a ``config.json`` (a saved model), else InputError: checked
    before any work, so an empty or wrong folder fails before the target is trained."""
    if not (folder / "config.json").is_file():
        raise InputError(f"generator folder {excerpt(name, 80)} has no config.json, so it is not a saved causal "
                         "language model; it must hold config.json, the model weights (model.safetensors or "
                         "pytorch_model.bin) and the tokenizer files (tokenizer.json), e.g. written by "
                         "save_pretrained")
    return folder


class HFCausalLMAdapter(nn.Module):
    """Any Hugging Face ``AutoModelForCausalLM`` behind :class:`CausalLM`'s interface.

    ``forward(input_ids=None, inputs_embeds=None, past=None) -> (logits (B, T, V),
    new_past, hidden (B, T, d))`` with ``past`` a list of per-layer ``(K, V)``
    tensors. A fresh ``DynamicCache`` is built from ``past`` at every call, so the
    caller's tensors are never modified and gradients flow into them.
    """

    def __init__(self, hf_model):
        import inspect

        super().__init__()
        self.hf = hf_model
        params = inspect.signature(hf_model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        c = hf_model.config
        self.config = type("Cfg", (), {"max_len": getattr(c, "max_position_embeddings", None)
                                       or getattr(c, "n_positions", 10**9), "vocab_size": c.vocab_size})()

    def forward(self, input_ids=None, inputs_embeds=None, past=None):
        from transformers.cache_utils import DynamicCache

        if (input_ids is None) == (inputs_embeds is None):
            raise ParameterError("pass exactly one of input_ids and inputs_embeds")
        cache = DynamicCache([(k, v) for k, v in past]) if past else DynamicCache()
        kw = {self._cache_arg: cache}  # transformers >= 5.2x renamed past_key_values to cache
        out = self.hf(input_ids=input_ids, inputs_embeds=inputs_embeds, use_cache=True, output_hidden_states=True,
                      return_dict=True, **kw)
        pkv = out.get("cache") if out.get("cache") is not None else out.get("past_key_values")
        new_past = [(layer.keys, layer.values) for layer in pkv.layers]
        return out.logits, new_past, out.hidden_states[-1]


def _gpt2_convertible(c) -> bool:
    return (getattr(c, "model_type", "") == "gpt2" and abs(float(c.layer_norm_epsilon) - 1e-5) < 1e-12
            and c.activation_function in ("gelu_new", "gelu_pytorch_tanh")
            and getattr(c, "scale_attn_weights", True) and not getattr(c, "scale_attn_by_inverse_layer_idx", False)
            and not getattr(c, "reorder_and_upcast_attn", False) and getattr(c, "n_inner", None) in (None, 4 * c.n_embd))


def _gpt2_to_causal_lm(hf):
    """A :class:`CausalLM` with the weights of a Hugging Face ``GPT2LMHeadModel``."""
    from textdp.models.causal_lm import causal_lm_from_hf_gpt2

    return causal_lm_from_hf_gpt2(hf)


def _as_generator(hf, conf, convert_gpt2: bool):
    """``(model, runtime)``: a frozen, eval-mode :class:`CausalLM` converted from a GPT-2 checkpoint
    whose architecture it reproduces (when ``convert_gpt2``), else :class:`HFCausalLMAdapter`."""
    if convert_gpt2 and _gpt2_convertible(conf):
        model, kind = _gpt2_to_causal_lm(hf), "gpt2 -> textdp CausalLM (explicit K/V)"
        model.to(next(hf.parameters()).device)
    else:
        model, kind = HFCausalLMAdapter(hf), f"{conf.model_type} via transformers (DynamicCache rebuilt per call)"
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, kind


def load_generator(name_or_path: str | os.PathLike, *, convert_gpt2: bool = True, device: str = "cpu"):
    """``(model, tokenizer, info)`` for a pretrained causal LM, offline, through the shared loader
    :func:`textdp.models.pretrained.load_causal_lm` (on ``device``: ``auto``/``cpu``/``cuda``).

    ``model`` is a frozen, eval-mode :class:`CausalLM` (GPT-2 checkpoints whose
    architecture it reproduces, when ``convert_gpt2``) or
    :class:`HFCausalLMAdapter` (wrapping the loader's shared instance: it is not modified);
    ``tokenizer`` the model's fast tokenizer. Raises InputError when the folder/name cannot be
    loaded offline.
    """
    from textdp.models.pretrained import load_causal_lm

    path = resolve_generator(name_or_path)
    try:
        lm = load_causal_lm(path, device)
    except InputError as exc:
        raise InputError(f"{exc}; {_LOCAL_HELP}") from None
    tok, hf = lm.tokenizer, lm.model
    if not getattr(tok, "is_fast", False):
        raise InputError(f"the generator tokenizer in {excerpt(str(path), 80)} is not a fast tokenizer; "
                         "save it with tokenizers/transformers (tokenizer.json)")
    conf = hf.config
    model, kind = _as_generator(hf, conf, convert_gpt2)
    info = {"generator": str(name_or_path), "folder": str(path), "model_type": conf.model_type, "runtime": kind,
            "parameters": int(sum(p.numel() for p in model.parameters())), "bpe_vocab_size": len(tok),
            "model_vocab_size": int(conf.vocab_size), "device": lm.device}
    return model, tok, info


# =========================================================================== alignment
_ASCII_PUNCT = {chr(c) for c in list(range(33, 48)) + list(range(58, 65)) + list(range(91, 97)) + list(range(123, 127))}


def _is_punct(w: str) -> bool:
    return len(w) == 1 and (w in _ASCII_PUNCT or unicodedata.category(w).startswith("P"))


def _greedy_continuation(word: str, vocab: dict, prefix: str, max_chars: int) -> list[int] | None:
    """Longest-match-first WordPiece split of ``word`` with every piece ``##``-prefixed, or None."""
    if len(word) > max_chars:
        return None
    out, start = [], 0
    while start < len(word):
        end, cur = len(word), None
        while start < end:
            sub = prefix + word[start:end]
            if sub in vocab:
                cur = vocab[sub]
                break
            end -= 1
        if cur is None:
            return None
        out.append(cur)
        start = end
    return out


class _WordPieceSplitter:
    """The target tokenizer's normaliser, pre-tokeniser and WordPiece model, read once."""

    def __init__(self, cls_tokenizer):
        be = getattr(cls_tokenizer, "backend_tokenizer", None)
        if be is None or type(be.model).__name__ != "WordPiece":
            raise ParameterError("the BPE alignment needs a fast WordPiece target tokenizer (BERT family), got "
                                 f"{type(be.model).__name__ if be is not None else type(cls_tokenizer).__name__}")
        self.normalizer, self.pre_tokenizer, self.model = be.normalizer, be.pre_tokenizer, be.model
        self.vocab = cls_tokenizer.get_vocab()
        self.prefix = getattr(self.model, "continuing_subword_prefix", "##")
        self.max_chars = getattr(self.model, "max_input_chars_per_word", 100)

    def __call__(self, surface: str, word_initial: bool) -> list[int]:
        norm = self.normalizer.normalize_str(surface) if self.normalizer is not None else surface
        words = (self.pre_tokenizer.pre_tokenize_str(norm) if self.pre_tokenizer is not None
                 else [(norm, (0, len(norm)))])
        out: list[int] = []
        for w, (start, _) in words:
            if not w:
                continue
            if not word_initial and start == 0 and not _is_punct(w):
                ids = _greedy_continuation(w, self.vocab, self.prefix, self.max_chars)
                if ids is not None:
                    out.extend(ids)
                    continue
            out.extend(t.id for t in self.model.tokenize(w))
        return out


def wordpiece_pieces(surface: str, word_initial: bool, cls_tokenizer) -> list[int]:
    """WordPiece ids of one generator token's surface string (step 3 of the module doc).

    ``surface``: the decoded token (may start with a space); ``word_initial``:
    whether it starts a word; ``cls_tokenizer``: the target's fast WordPiece
    tokenizer. Returns ``[]`` when nothing remains after normalisation. (For many
    tokens, :func:`build_alignment` reads the tokenizer once.)
    """
    return _WordPieceSplitter(cls_tokenizer)(surface, word_initial)


@dataclass
class BpeAlignment:
    """The alignment matrix ``A`` and its diagnostics.

    ``matrix``: ``scipy.sparse.csr_matrix`` (V_g, V_c) float32, row-stochastic;
    ``n_pieces``: (V_g,) int32 WordPiece pieces of each generator token (0 =
    nothing, mapped to [UNK]/[SEP]); ``word_initial``: (V_g,) bool; ``policy``.
    """

    matrix: object
    n_pieces: np.ndarray
    word_initial: np.ndarray
    policy: str
    stats: dict = field(default_factory=dict)

    def multi_piece_mass(self, probs) -> np.ndarray:
        """Share of each row's probability mass (B, V_g) on tokens of >= 2 pieces: (B,) float."""
        p = probs.detach().cpu().numpy() if isinstance(probs, torch.Tensor) else np.asarray(probs)
        return p[..., : len(self.n_pieces)] @ (self.n_pieces >= 2).astype(p.dtype)


def build_alignment(gen_tokenizer, cls_tokenizer, *, vocab_size: int | None = None, policy: str = "first") -> BpeAlignment:
    """Build ``A`` (module docstring, steps 1-5) from the generator's BPE tokenizer
    and the target's WordPiece tokenizer (both fast tokenizers).

    ``vocab_size``: rows of ``A`` = the generator's output size (defaults to
    ``len(gen_tokenizer)``; extra rows map to [UNK]). ``policy``: ``first`` or
    ``mean``. Raises ParameterError for an unknown policy or a target vocabulary
    without [UNK]/[SEP].
    """
    from scipy import sparse

    if policy not in POLICIES:
        raise ParameterError(f"unknown alignment policy {policy!r}; choose one of: {', '.join(POLICIES)}")
    n_tok = len(gen_tokenizer)
    V = int(vocab_size or n_tok)
    cvocab = cls_tokenizer.get_vocab()
    unk, sep = cls_tokenizer.unk_token_id, cls_tokenizer.sep_token_id
    if unk is None or sep is None:
        raise ParameterError("the target tokenizer needs [UNK] and [SEP] tokens (a BERT-style WordPiece vocabulary)")
    special = set(gen_tokenizer.all_special_ids) | {i for i in getattr(gen_tokenizer, "added_tokens_decoder", {})
                                                    if i < n_tok and gen_tokenizer.added_tokens_decoder[i].special}
    eos = gen_tokenizer.eos_token_id
    raw = gen_tokenizer.convert_ids_to_tokens(list(range(min(n_tok, V))))
    split = _WordPieceSplitter(cls_tokenizer)
    rows, cols, vals = [], [], []
    n_pieces = np.zeros(V, dtype=np.int32)
    initial = np.zeros(V, dtype=bool)
    n_unk_rows = 0
    for v in range(V):
        if v >= n_tok or v in special or raw[v] is None:
            target = sep if v == eos else unk
            n_unk_rows += target == unk
            rows.append(v), cols.append(target), vals.append(1.0)
            continue
        r = raw[v]
        surface = gen_tokenizer.convert_tokens_to_string([r])
        init = surface[:1].isspace() or r.startswith(("Ġ", "▁"))
        initial[v] = init
        pieces = split(surface, init)
        n_pieces[v] = len(pieces)
        if not pieces:
            pieces = [unk]
        if all(p == unk for p in pieces):
            n_unk_rows += 1
        if policy == "first" or len(pieces) == 1:
            rows.append(v), cols.append(pieces[0]), vals.append(1.0)
        else:
            w = 1.0 / len(pieces)
            for p in pieces:
                rows.append(v), cols.append(p), vals.append(w)
    n_cols = max(cvocab.values()) + 1
    A = sparse.coo_matrix((np.asarray(vals, np.float32), (np.asarray(rows), np.asarray(cols))), shape=(V, n_cols))
    A = A.tocsr()  # duplicate (row, col) entries of `mean` are summed
    stats = {"rows": V, "policy": policy, "unk_rows": int(n_unk_rows),
             "multi_piece_rows": int((n_pieces >= 2).sum()), "word_initial_rows": int(initial.sum()),
             "distinct_wordpieces": int(len(np.unique(A.indices)))}
    return BpeAlignment(A, n_pieces, initial, policy, stats)


# =========================================================================== vocabulary + bridge
@dataclass
class BpeVocab:
    """The generator's BPE vocabulary with its alignment to the target.

    Plays the role :class:`textdp.models.causal_lm.SharedVocab` plays for the
    from-scratch generator: ``bos``/``eos`` ids, :meth:`encode_text`,
    :meth:`decode`, and :meth:`bridge` for TR. ``kind = "bpe"`` tells the
    pipeline to generate with :func:`generate_texts_bpe`. ``banned``: sorted int64 ids TR and
    VTG never emit (None: begin-of-text and the unknown token, unless either is end-of-text).
    """

    tokenizer: object
    alignment: BpeAlignment
    bos: int
    eos: int
    kind: str = "bpe"
    banned: np.ndarray | None = None

    def banned_ids(self) -> list[int]:
        """The ids generation never emits (:attr:`banned`, or begin-of-text and unknown)."""
        if self.banned is not None:
            return [int(i) for i in self.banned if int(i) != self.eos]
        return sorted({self.bos, self.unk} - {self.eos})

    @property
    def unk(self) -> int:
        u = self.tokenizer.unk_token_id
        return self.eos if u is None else int(u)

    def __len__(self) -> int:
        return self.alignment.matrix.shape[0]

    def encode_text(self, text: str) -> list[int]:
        """BPE ids of ``text`` (no special tokens)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, gen_ids: Sequence[int], stop_at_eos: bool = True) -> str:
        """BPE ids -> text: stops at ``eos`` after the first position (the begin-of-text
        id may equal ``eos``, as in GPT-2), drops special tokens, strips spaces."""
        ids = [int(g) for g in gen_ids]
        if ids and ids[0] == self.bos:
            ids = ids[1:]
        if stop_at_eos and self.eos in ids:
            ids = ids[: ids.index(self.eos)]
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False).strip()

    def bridge(self, clf) -> "BpeBridge":
        """The TR bridge to target ``clf`` (its current embedding table)."""
        return BpeBridge.build(self, clf)


@dataclass
class BpeBridge:
    """Generator -> classifier bridge in cross-tokenizer mode (duck-types
    :class:`textdp.attacks.inversion.pplm.SharedBridge`).

    ``soft_table``: (V_g, d_c) float32 = ``A E_c`` (constant); the classifier reads
    ``probs @ soft_table``. :meth:`prefix_cls_ids` re-tokenises the hard prefix.
    """

    vocab: BpeVocab
    clf: object
    soft_table: torch.Tensor
    cls_id: int
    sep_id: int

    @classmethod
    def build(cls, vocab: BpeVocab, clf) -> "BpeBridge":
        E = clf.embedding_matrix().detach().cpu().numpy().astype(np.float32)
        A = vocab.alignment.matrix
        if A.shape[1] > E.shape[0]:
            raise ParameterError(f"the alignment has {A.shape[1]} WordPiece columns but the target has "
                                 f"{E.shape[0]} embedding rows; build it with the target's tokenizer")
        if A.shape[1] < E.shape[0]:
            from scipy import sparse

            A = sparse.csr_matrix((A.data, A.indices, A.indptr), shape=(A.shape[0], E.shape[0]))
        sp = clf.special_ids()
        return cls(vocab, clf, torch.from_numpy(np.asarray(A @ E, dtype=np.float32)).to(clf.device), sp["cls"],
                   sp["sep"])

    def prefix_cls_ragged(self, gen_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) generator ids (begin-of-text first) -> ``(ids, lengths)``: the classifier ids of
        each decoded, re-tokenised row, right-padded with 0 to the longest, (B, T') int64, and
        each row's length (B,) int64, on ``gen_ids``' device (read by
        :func:`textdp.attacks.inversion.pplm.perturb_past`, which masks the padding)."""
        texts = [self.vocab.decode(r) for r in gen_ids.tolist()]
        ids = self.clf.token_ids(texts)
        out = torch.zeros((len(ids), max(len(x) for x in ids)), dtype=torch.long)
        for i, x in enumerate(ids):
            out[i, : len(x)] = torch.as_tensor(x, dtype=torch.long)
        lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
        return out.to(gen_ids.device), lengths.to(gen_ids.device)

    def prefix_cls_ids(self, gen_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) generator ids (begin-of-text first) -> (B, T') classifier ids of the
        decoded, re-tokenised text. Raises ParameterError when rows re-tokenise to
        different lengths (:meth:`prefix_cls_ragged` pads them)."""
        texts = [self.vocab.decode(r) for r in gen_ids.tolist()]
        ids = self.clf.token_ids(texts)
        if len({len(x) for x in ids}) > 1:
            raise ParameterError("rows re-tokenise to different WordPiece lengths; generate one row at a time")
        return torch.tensor(ids, dtype=torch.long, device=gen_ids.device).reshape(len(ids), -1)


# =========================================================================== pipeline hooks
def _tokenizer_fingerprint(tok) -> str:
    """A 16-hex-digit key of a fast tokenizer's full definition (its ``tokenizer.json``
    serialisation) and length."""
    import hashlib

    be = getattr(tok, "backend_tokenizer", None)
    blob = be.to_str() if be is not None else repr(sorted(tok.get_vocab().items()))
    return hashlib.sha256(f"{len(tok)}|{blob}".encode()).hexdigest()[:16]


def _default_cache() -> Path:
    from textdp.models.causal_lm import cache_root

    return cache_root() / "attack-invert"


def cached_alignment(gen_tokenizer, cls_tokenizer, *, vocab_size: int, policy: str = "first",
                     cache: str | os.PathLike | None = None) -> BpeAlignment:
    """:func:`build_alignment`, computed once and saved as ``alignment-<key>.npz`` in ``cache``
    (default ``$TEXTDP_CACHE/attack-invert``); the key hashes both tokenizers' definitions, the
    number of rows and the policy. ``stats["cached"]`` says whether it was read back. A cache
    that cannot be written only costs the build next time."""
    import json

    from scipy import sparse

    from textdp.models.causal_lm import config_key

    root = Path(cache).expanduser() if cache is not None else _default_cache()
    key = config_key({"gen": _tokenizer_fingerprint(gen_tokenizer), "cls": _tokenizer_fingerprint(cls_tokenizer),
                      "rows": int(vocab_size), "policy": policy})
    f = root / f"alignment-{key}.npz"
    if f.is_file():
        with np.load(f, allow_pickle=False) as z:
            A = sparse.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(int(x) for x in z["shape"]))
            stats = {**json.loads(str(z["stats"])), "cached": True}
            return BpeAlignment(A, z["n_pieces"], z["word_initial"], policy, stats)
    al = build_alignment(gen_tokenizer, cls_tokenizer, vocab_size=vocab_size, policy=policy)
    A = al.matrix
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".alignment-{key}.{os.getpid()}.tmp.npz"
        np.savez(tmp, data=A.data, indices=A.indices, indptr=A.indptr, shape=np.asarray(A.shape),
                 n_pieces=al.n_pieces, word_initial=al.word_initial, stats=json.dumps(al.stats))
        os.replace(tmp, f)
    except OSError:
        pass
    al.stats = {**al.stats, "cached": False}
    return al


def _finetuned(path: Path, lm, public_texts: Sequence[str], finetune, *, cache, seed: int, device: str,
               progress=None, eval_texts: int = 64):
    """``(hf model, tokenizer, info)``: the base model ``lm`` (a
    :class:`textdp.models.pretrained.PretrainedLM`) fine-tuned on ``public_texts`` (a copy; the
    shared instance is untouched), saved once under ``cache`` and loaded from there later.
    ``eval_texts`` public texts (the last ones; at most a fifth) are held out of the fine-tuning
    to measure the perplexity per model token before and after."""
    import copy
    import json
    import time

    from textdp.errors import OutputError
    from textdp.models.causal_lm import config_key
    from textdp.models.finetune import causal_lm_nll, finetune_causal_lm
    from textdp.models.pretrained import load_causal_lm, model_fingerprint, save_causal_lm_folder
    from textdp.noise import make_rng

    texts = [str(t) for t in public_texts if str(t).strip()]
    n_eval = min(int(eval_texts), len(texts) // 5)
    train, held = (texts[:-n_eval], texts[-n_eval:]) if n_eval else (texts, [])
    root = Path(cache).expanduser() if cache is not None else _default_cache()
    key = config_key({"kind": "generator-finetuned", "base": model_fingerprint(path), "texts": config_key(texts),
                      "finetune": finetune.to_dict(), "seed": int(seed), "eval": n_eval,
                      "device": "cpu" if device == "cpu" else "cuda"})
    folder = root / f"generator-ft-{key}"
    meta_file = folder / "textdp-finetune.json"
    if meta_file.is_file():
        ft = load_causal_lm(folder, device)
        info = json.loads(meta_file.read_text())
        return ft.model, ft.tokenizer, {**info, "cached": True, "folder": str(folder)}

    def ppl(model):
        if not held:
            return None
        nll, cnt = causal_lm_nll(model, lm.tokenizer, held, batch_size=4, max_tokens=finetune.max_tokens)
        return float(np.exp(nll.sum() / max(1, cnt.sum())))

    t0 = time.perf_counter()
    model = copy.deepcopy(lm.model)
    before = ppl(model)
    adv = progress("generator fine-tuning (public split)", finetune.steps) if progress else None
    model, stats = finetune_causal_lm(model, lm.tokenizer, train, finetune, rng=make_rng(int(seed) + 29),
                                      device=device, on_step=(lambda s, t, l: adv(1)) if adv else None)
    after = ppl(model)
    info = {**stats, "heldout_public_texts": len(held), "heldout_ppl_before": before, "heldout_ppl_after": after,
            "base": str(path), "total_seconds": round(time.perf_counter() - t0, 1)}
    try:
        save_causal_lm_folder(model, lm.tokenizer, folder)
        _write_json_atomic(meta_file, info)
    except (OSError, OutputError):
        info["save_failed"] = True
    return model, lm.tokenizer, {**info, "cached": False, "folder": str(folder)}


def _write_json_atomic(path: Path, obj) -> None:
    import json

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def prepare_pretrained_generator(clf, name_or_path: str, *, policy: str = "first", progress=None,
                                 public_texts: Sequence[str] | None = None, finetune=None,
                                 cache: str | os.PathLike | None = None, seed: int = 0, device: str | None = None):
    """``(model, BpeVocab, info)``: the pretrained generator ``name_or_path`` (offline, through
    :func:`textdp.models.pretrained.load_causal_lm`) with its alignment to ``clf``'s WordPiece
    tokenizer (:func:`cached_alignment`) and its banned tokens
    (:func:`textdp.models.pretrained.banned_token_ids`, end-of-text exempt).

    ``finetune``: a :class:`textdp.models.finetune.FineTuneConfig` to fine-tune it on
    ``public_texts`` first (module docstring; saved once under ``cache``, default
    ``$TEXTDP_CACHE/attack-invert``; ``seed`` seeds batch order and adapter initialisation), or
    None to use it as loaded. ``device``: ``auto``/``cpu``/``cuda`` (None: ``clf``'s device).
    ``info`` holds the load details, the alignment statistics and the fine-tuning record
    (held-out public perplexity before and after, seconds per step).
    """
    import time

    from textdp.models.device import resolve_device
    from textdp.models.pretrained import banned_token_ids, load_causal_lm

    t0 = time.perf_counter()
    dev = resolve_device(device if device is not None else str(getattr(clf, "device", "cpu")))
    path = resolve_generator(name_or_path)
    try:
        lm = load_causal_lm(path, dev)
    except InputError as exc:
        raise InputError(f"{exc}; {_LOCAL_HELP}") from None
    tok = lm.tokenizer
    if not getattr(tok, "is_fast", False):
        raise InputError(f"the generator tokenizer in {excerpt(str(path), 80)} is not a fast tokenizer; "
                         "save it with tokenizers/transformers (tokenizer.json)")
    hf, ft_info = lm.model, None
    if finetune is not None:
        if not public_texts:
            raise InputError("fine-tuning the generator needs the public texts")
        hf, tok, ft_info = _finetuned(path, lm, public_texts, finetune, cache=cache, seed=seed, device=dev,
                                      progress=progress)
    model, kind = _as_generator(hf, hf.config, True)
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    eos = tok.eos_token_id if tok.eos_token_id is not None else bos
    if bos is None:
        raise InputError(f"generator {excerpt(str(name_or_path), 80)}: its tokenizer has neither a begin- nor an "
                         "end-of-text token")
    logits_rows = int(hf.get_output_embeddings().weight.shape[0])
    rows = max(logits_rows, len(tok))
    al = cached_alignment(tok, clf.tokenizer, vocab_size=rows, policy=policy, cache=cache)
    banned = banned_token_ids(tok, logits_rows, keep=(eos,))
    vocab = BpeVocab(tok, al, int(bos), int(eos), banned=banned)
    info = {"generator": str(name_or_path), "folder": str(path), "model_type": hf.config.model_type,
            "runtime": kind, "parameters": int(sum(p.numel() for p in model.parameters())),
            "bpe_vocab_size": len(tok), "model_vocab_size": logits_rows, "device": dev,
            "alignment": f"bpe_to_wordpiece (policy {policy})", "alignment_stats": al.stats,
            "banned_tokens": int(len(banned)), "finetuned_on_public": ft_info is not None, "finetune": ft_info,
            "load_seconds": round(time.perf_counter() - t0, 2), "cached": bool(ft_info and ft_info.get("cached"))}
    return model, vocab, info


def generate_texts_bpe(method: str, *, clf, generator, vocab: BpeVocab, templates: Sequence[str],
                       labels: Sequence[str], cfg, attack_key: int, gen_length: int,
                       template_label: Sequence[str] | None = None,
                       on_text: Callable[[int], None] | None = None, batch_size: int | None = None):
    """TR / VTG texts with a BPE generator; same contract and seeds as
    :func:`textdp.attacks.inversion.pipeline.generate_texts`.

    Each (label a, template t, sample s) row is sampled with the seed
    ``_row_seed(attack_key, t, a·num_samples + s)``, for both methods, so TR
    with ``stepsize = 0`` reproduces VTG token for token. Rows whose templates have the same
    number of BPE tokens run together, ``batch_size`` (default ``cfg.batch_size``) at a time; a
    row's text depends only on its own seed (per-row sampling generators, per-row gradient norms,
    the target's input right-padded and masked per row), so the batch size changes only the
    float rounding. :meth:`BpeVocab.banned_ids` are never emitted. Templates are BPE-encoded
    from their text; outputs are decoded by the BPE tokenizer.
    """
    import pandas as pd

    from textdp.attacks.inversion.pipeline import _row_seed
    from textdp.attacks.inversion.pplm import generate

    if method not in ("tr", "vtg"):
        raise ParameterError(f"generate_texts_bpe handles tr and vtg, not {method!r}")
    ns = cfg.num_samples
    bs = int(batch_size or cfg.batch_size)
    if bs < 1:
        raise ParameterError(f"batch_size must be >= 1, got {bs}")
    pcfg = cfg.pplm.__class__(**{**cfg.pplm.__dict__, "gen_length": gen_length})
    bridge = vocab.bridge(clf) if method == "tr" else None
    tpl_ids = []
    for t in templates:
        ids = vocab.encode_text(t)
        if not ids:
            raise InputError(f"template {excerpt(t)} encodes to no generator token")
        tpl_ids.append([vocab.bos] + ids)
    banned = vocab.banned_ids()
    jobs = [(a, t, s) for a in range(len(labels)) for t in range(len(templates)) for s in range(ns)]
    out: dict[tuple, str] = {}
    for chunk in jobs_by_prefix_length(tpl_ids, len(labels), ns, bs):
        prefix = torch.tensor([tpl_ids[t] for _, t, _ in chunk], dtype=torch.long)
        seeds = [_row_seed(attack_key, t, a * ns + s) for a, t, s in chunk]
        res = generate(generator, clf if method == "tr" else None, bridge, prefix, [a for a, _, _ in chunk],
                       pcfg, seeds, perturb=(method == "tr"), eos=vocab.eos, banned=banned)
        for job, ids in zip(chunk, res["ids"].tolist()):
            out[job] = vocab.decode(ids)
        if on_text:
            on_text(len(chunk))
    rows = [{"label": labels[a], "template": templates[t], "sample": s, "text": out[(a, t, s)],
             "label_for_acc": (template_label[t] if (method == "vtg" and template_label) else labels[a])}
            for a, t, s in jobs]
    # the pipeline's row order: label-major, then template, then sample (as generate_texts)
    return pd.DataFrame(rows)
