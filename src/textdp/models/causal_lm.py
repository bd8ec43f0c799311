"""A small causal language model with explicit per-layer key/value tensors.

Why self-written (spec ``text-revealer.md`` §10): PPLM-style attacks perturb the
generator's key/value history ``H_t`` by gradient steps. Hugging Face's cache
objects changed format three times and ``DynamicCache`` is updated in place, so
it would grow across the perturbation iterations. Here the history is a plain
``list[(K, V)]`` with ``K, V`` of shape ``(B, n_heads, T, d_head)`` (float32),
which can be perturbed, differentiated and copied freely.

The architecture is GPT-2's (pre-LayerNorm blocks, learned positions, tied
input/output embeddings, tanh-GELU, LayerNorm eps 1e-5) and its parameter names
map 1:1 onto Hugging Face GPT-2 checkpoints (:func:`from_hf_gpt2`; GPT-2's
``Conv1D`` stores ``[in, out]`` and is transposed on load).

textdp trains it from scratch on the *classifier's* WordPiece ids
(:class:`SharedVocab`: a sub-vocabulary of the ids seen in the public corpus plus
``[CLS]`` as begin-of-text, ``[SEP]`` as end-of-text and ``[UNK]``), so a soft
next-token distribution maps exactly onto the classifier's embedding table.
Trained models are cached under ``$TEXTDP_CACHE`` (default ``~/.cache/textdp``)
keyed by a hash of their configuration and data.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from textdp.errors import InputError, MissingPackageError, ParameterError
from textdp.models.device import fork_rng, module_device, torch_device
from textdp.models.training import clipped_step

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # pragma: no cover
    raise MissingPackageError("textdp.models needs torch; run: pip install 'textdp[nlp]'") from None

__all__ = [
    "CausalLMConfig", "CausalLM", "SharedVocab", "Past", "train_causal_lm", "sequence_nll", "perplexity",
    "cache_root", "config_key", "torch_seed", "from_hf_gpt2", "causal_lm_from_hf_gpt2", "save_causal_lm", "load_causal_lm",
]

Past = list  # list[tuple[Tensor, Tensor]], one (K, V) per layer, each (B, n_heads, T, d_head)


# ----------------------------------------------------------------------------- cache helpers
def cache_root() -> Path:
    """The textdp cache folder: ``$TEXTDP_CACHE`` or ``~/.cache/textdp`` (created)."""
    from textdp.cache import cache_dir

    return cache_dir()


def config_key(obj) -> str:
    """A 16-hex-digit SHA-256 key of a JSON-serialisable configuration."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def torch_seed(rng: np.random.Generator) -> int:
    """A 63-bit integer drawn from a textdp generator, to seed a ``torch.Generator``."""
    return int(rng.integers(0, 2**63 - 1))


# ----------------------------------------------------------------------------- model
@dataclass
class CausalLMConfig:
    """Shape of a :class:`CausalLM`. ``max_len`` is the number of learned positions."""

    vocab_size: int
    d_model: int = 128
    n_layers: int = 3
    n_heads: int = 4
    max_len: int = 128
    dropout: float = 0.1

    def __post_init__(self):
        if self.vocab_size < 2 or self.d_model < 1 or self.n_layers < 1 or self.n_heads < 1:
            raise ParameterError("causal LM config: vocab_size >= 2, d_model, n_layers, n_heads >= 1")
        if self.d_model % self.n_heads:
            raise ParameterError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")


class _Attn(nn.Module):
    def __init__(self, cfg: CausalLMConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.d_head = cfg.d_model // cfg.n_heads
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, past_kv):
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, self.d_head).transpose(1, 2) for t in (q, k, v))
        if past_kv is not None:
            k = torch.cat([past_kv[0], k], dim=2)
            v = torch.cat([past_kv[1], v], dim=2)
        new_kv = (k, v)  # the full history after this call
        T_all = k.shape[2]
        T_past = T_all - T
        # query i (absolute position T_past+i) sees keys 0..T_past+i
        mask = torch.ones(T, T_all, dtype=torch.bool, device=x.device).tril(diagonal=T_past)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           dropout_p=self.drop.p if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, D)
        return self.drop(self.c_proj(y)), new_kv


class _MLP(nn.Module):
    def __init__(self, cfg: CausalLMConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class _Block(nn.Module):
    def __init__(self, cfg: CausalLMConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.attn = _Attn(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.mlp = _MLP(cfg)

    def forward(self, x, past_kv):
        a, kv = self.attn(self.ln_1(x), past_kv)
        x = x + a
        return x + self.mlp(self.ln_2(x)), kv


class CausalLM(nn.Module):
    """GPT-2-style causal LM whose history is an explicit list of (K, V) tensors.

    ``forward(input_ids=None, inputs_embeds=None, past=None)`` takes ``input_ids``
    (B, T) int64 **or** ``inputs_embeds`` (B, T, d_model) float32, and ``past`` a
    list of ``n_layers`` pairs ``(K, V)`` of shape (B, n_heads, T_past, d_head);
    it returns ``(logits (B, T, V), new_past, hidden (B, T, d_model))``, where
    ``new_past`` is the *full* history (past + the T new positions). Positions of
    the new tokens start at ``T_past``.
    """

    def __init__(self, cfg: CausalLMConfig):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([_Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, input_ids=None, inputs_embeds=None, past: Past | None = None):
        if (input_ids is None) == (inputs_embeds is None):
            raise ParameterError("pass exactly one of input_ids and inputs_embeds")
        x = self.wte(input_ids) if inputs_embeds is None else inputs_embeds
        B, T, _ = x.shape
        t0 = 0 if not past else past[0][0].shape[2]
        if t0 + T > self.config.max_len:
            raise ParameterError(f"sequence of {t0 + T} tokens exceeds the model's {self.config.max_len} positions")
        pos = torch.arange(t0, t0 + T, device=x.device)
        x = self.drop(x + self.wpe(pos)[None])
        new_past = []
        for i, blk in enumerate(self.h):
            pkv = past[i] if past else None
            x, kv = blk(x, pkv)
            new_past.append(kv)
        hidden = self.ln_f(x)
        logits = hidden @ self.wte.weight.T
        return logits, new_past, hidden


# ----------------------------------------------------------------------------- vocabulary
@dataclass
class SharedVocab:
    """Generator vocabulary that is a subset of the classifier's WordPiece vocabulary.

    ``gen_to_cls``: int64 array (V_g,), the classifier id of each generator id.
    Generator ids 0, 1, 2 are ``[CLS]`` (begin of text), ``[SEP]`` (end of text)
    and ``[UNK]``. ``cls_tokens`` is the classifier's full token list (so text can
    be decoded). The alignment matrix of spec §5.2 is the 0/1 selection
    ``A[g, gen_to_cls[g]] = 1`` (row-stochastic by construction).
    """

    gen_to_cls: np.ndarray
    cls_tokens: list[str]
    bos: int = 0
    eos: int = 1
    unk: int = 2

    @classmethod
    def from_corpus(cls, cls_id_lists: Sequence[Sequence[int]], cls_tokens: list[str], min_count: int = 1,
                    max_size: int | None = None) -> "SharedVocab":
        """Keep the classifier ids seen ``>= min_count`` times (most frequent first,
        ties by id), at most ``max_size`` including the three special tokens."""
        idx = {t: i for i, t in enumerate(cls_tokens)}
        for t in ("[CLS]", "[SEP]", "[UNK]"):
            if t not in idx:
                raise InputError(f"classifier vocabulary has no {t} token; a BERT WordPiece vocabulary is needed")
        specials = [idx["[CLS]"], idx["[SEP]"], idx["[UNK]"]]
        cnt = Counter(i for ids in cls_id_lists for i in ids)
        keep = sorted((i for i, c in cnt.items() if c >= min_count and i not in specials), key=lambda i: (-cnt[i], i))
        if max_size is not None:
            keep = keep[: max(0, max_size - 3)]
        if not keep:
            raise InputError("the public corpus has no tokens to train a generator on")
        return cls(np.array(specials + keep, dtype=np.int64), list(cls_tokens))

    def __len__(self) -> int:
        return len(self.gen_to_cls)

    def cls_to_gen(self) -> dict[int, int]:
        return {int(c): g for g, c in enumerate(self.gen_to_cls)}

    def encode(self, cls_id_lists: Sequence[Sequence[int]]) -> list[list[int]]:
        """Map classifier ids to generator ids (unknown -> ``[UNK]``)."""
        m = self.cls_to_gen()
        return [[m.get(int(i), self.unk) for i in ids] for ids in cls_id_lists]

    def decode(self, gen_ids: Sequence[int], stop_at_eos: bool = True) -> str:
        """Generator ids -> text (WordPiece ``##`` pieces glued; specials dropped)."""
        out: list[str] = []
        for g in gen_ids:
            g = int(g)
            if g == self.eos and stop_at_eos:
                break
            if g in (self.bos, self.eos):
                continue
            t = self.cls_tokens[int(self.gen_to_cls[g])]
            if t.startswith("##") and out:
                out[-1] += t[2:]
            else:
                out.append(t)
        return " ".join(out)

    def to_json(self) -> dict:
        return {"gen_to_cls": self.gen_to_cls.tolist()}


# ----------------------------------------------------------------------------- training / scoring
def _blocks(id_lists: Sequence[Sequence[int]], bos: int, eos: int, block: int) -> np.ndarray:
    """Each text as ``[bos] ids [eos]``, cut/padded to ``block+1`` (pad = eos, loss-masked by -1)."""
    rows = []
    for ids in id_lists:
        seq = [bos] + list(ids)[: block - 1] + [eos]
        rows.append(seq + [-1] * (block + 1 - len(seq)))
    return np.asarray(rows, dtype=np.int64)


def train_causal_lm(
    id_lists: Sequence[Sequence[int]],
    config: CausalLMConfig,
    *,
    epochs: int = 8,
    lr: float = 1e-3,
    batch_size: int = 32,
    block_size: int = 64,
    bos: int = 0,
    eos: int = 1,
    rng: np.random.Generator,
    on_step: Callable[[int, int, float], None] | None = None,
    device: str | None = "cpu",
) -> tuple[CausalLM, dict]:
    """Train a :class:`CausalLM` from scratch with the causal-LM cross-entropy.

    ``id_lists``: one list of generator ids per text (each becomes one row
    ``[bos] ids [eos]``, truncated to ``block_size`` tokens). AdamW with linear
    warm-up/decay; shuffling from ``rng`` (a textdp generator) and weight init /
    dropout from a ``torch`` seed drawn from it (global torch RNG forked, so the
    caller's state is untouched). ``on_step(step, total, loss)`` reports progress.
    ``device``: where to train (``auto``/``cpu``/``cuda``,
    :func:`textdp.models.device.resolve_device`); the model is returned there. Weight init
    runs on the CPU, so it is the same on every device; dropout on CUDA uses CUDA's generator.
    Returns ``(model in eval mode, stats)`` with the final mean training loss.
    """
    if epochs < 1 or batch_size < 1 or block_size < 2 or lr <= 0:
        raise ParameterError("generator training: epochs, batch_size >= 1, block_size >= 2, lr > 0")
    if len(id_lists) == 0:
        raise InputError("no texts to train the generator on")
    if block_size + 1 > config.max_len:
        config = CausalLMConfig(**{**asdict(config), "max_len": block_size + 1})
    dev = torch_device(device or "cpu")
    data = torch.from_numpy(_blocks(id_lists, bos, eos, block_size))
    n = len(data)
    steps_per_epoch = math.ceil(n / batch_size)
    total = steps_per_epoch * epochs
    with fork_rng(dev):
        torch.manual_seed(torch_seed(rng))
        model = CausalLM(config).to(dev)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
        warm = max(1, total // 20)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
        step, losses = 0, []
        lengths = (data >= 0).sum(1).numpy()
        for _ in range(epochs):
            perm = rng.permutation(n)
            # length bucketing: sort each chunk of 50 batches by length (less padding), then shuffle the batches
            chunk = 50 * batch_size
            perm = np.concatenate([c[np.argsort(lengths[c], kind="stable")]
                                   for c in np.array_split(perm, max(1, math.ceil(n / chunk)))])
            batches = [perm[b * batch_size:(b + 1) * batch_size] for b in range(steps_per_epoch)]
            order = rng.permutation(len(batches))
            for b in order:
                batch = data[torch.from_numpy(batches[b])]
                # trim to the longest row of the batch
                L = int((batch >= 0).sum(1).max())
                batch = batch[:, :L].to(dev)
                inp = batch[:, :-1].clamp(min=0)
                tgt = batch[:, 1:]
                logits, _, _ = model(inp)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-1)
                losses.append(clipped_step(loss, opt, sched, model.parameters()))
                step += 1
                if on_step:
                    on_step(step, total, losses[-1])
    model.eval()
    last = losses[-steps_per_epoch:]
    return model, {"final_train_loss": float(np.mean(last)), "steps": total, "texts": n,
                   "parameters": int(sum(p.numel() for p in model.parameters()))}


@torch.no_grad()
def sequence_nll(model: CausalLM, id_lists: Sequence[Sequence[int]], bos: int = 0, eos: int | None = 1,
                 max_length: int | None = None, stride: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-text negative log-likelihood (nats, summed) and number of scored tokens.

    Each text is scored as ``[bos] ids [eos]`` (``eos=None``: no end token), every
    token once, with Hugging Face's "perplexity of fixed-length models" sliding
    window (``max_length`` positions, advanced by ``stride``; tokens already scored
    in an earlier window are masked). Returns two float64/int64 arrays of shape (N,).
    """
    model.eval()
    dev = module_device(model)
    max_length = max_length or model.config.max_len
    stride = stride or max_length
    nll = np.zeros(len(id_lists))
    cnt = np.zeros(len(id_lists), dtype=np.int64)
    for i, ids in enumerate(id_lists):
        seq = torch.tensor([bos] + list(ids) + ([eos] if eos is not None else []), dtype=torch.long, device=dev)
        if len(seq) < 2:
            continue
        prev_end = 1  # position 0 (bos) is never a target
        for begin in range(0, len(seq) - 1, stride):
            end = min(begin + max_length, len(seq))
            window = seq[begin:end][None]
            logits, _, _ = model(window[:, :-1])
            tgt = window[:, 1:].clone()
            first_new = max(prev_end, begin + 1) - (begin + 1)
            tgt[:, :first_new] = -1
            lp = F.cross_entropy(logits[0], tgt[0], ignore_index=-1, reduction="sum")
            nll[i] += float(lp)
            cnt[i] += int((tgt >= 0).sum())
            prev_end = end
            if end == len(seq):
                break
    return nll, cnt


def perplexity(model: CausalLM, id_lists: Sequence[Sequence[int]], **kw) -> np.ndarray:
    """Per-text perplexity ``exp(nll / n_tokens)`` (float64, shape (N,)); lower is more fluent."""
    nll, cnt = sequence_nll(model, id_lists, **kw)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(cnt > 0, np.exp(nll / np.maximum(cnt, 1)), np.nan)


# ----------------------------------------------------------------------------- persistence
def save_causal_lm(model: CausalLM, folder: Path, extra: dict | None = None) -> None:
    """Write ``config.json`` and ``model.safetensors`` (and ``extra`` as ``meta.json``) into ``folder``."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(asdict(model.config)))
    if extra is not None:
        (folder / "meta.json").write_text(json.dumps(extra))


def load_causal_lm(folder: Path) -> tuple[CausalLM, dict]:
    """Inverse of :func:`save_causal_lm`: ``(model in eval mode, meta dict)``."""
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg = CausalLMConfig(**json.loads((folder / "config.json").read_text()))
    model = CausalLM(cfg)
    model.load_state_dict(load_file(str(folder / "model.safetensors"), device="cpu"))
    model.eval()
    meta = json.loads((folder / "meta.json").read_text()) if (folder / "meta.json").exists() else {}
    return model, meta


def causal_lm_from_hf_gpt2(hf) -> CausalLM:
    """A :class:`CausalLM` holding the weights of a loaded Hugging Face ``GPT2LMHeadModel``.

    GPT-2's ``Conv1D`` weights ``[in, out]`` are transposed to ``Linear`` ``[out, in]``;
    the causal-mask buffers (``h.N.attn.bias`` / ``masked_bias``, not the ``c_attn.bias``
    parameters) are skipped. Raises InputError when the state dict does not map 1:1.
    """
    c = hf.config
    model = CausalLM(CausalLMConfig(vocab_size=c.vocab_size, d_model=c.n_embd, n_layers=c.n_layer,
                                    n_heads=c.n_head, max_len=c.n_positions, dropout=0.0))
    dst = {}
    for k, v in hf.transformer.state_dict().items():
        if k.endswith((".attn.bias", ".attn.masked_bias")):  # causal-mask buffers (not c_attn.bias)
            continue
        if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            v = v.T  # Conv1D [in, out] -> Linear [out, in]
        dst[k] = v.contiguous()
    missing, unexpected = model.load_state_dict(dst, strict=False)
    if missing or unexpected:
        raise InputError(f"not a GPT-2 checkpoint (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model


def from_hf_gpt2(name_or_path: str) -> tuple[CausalLM, object]:
    """Load a Hugging Face GPT-2 checkpoint into a :class:`CausalLM` (+ its tokenizer), offline.

    ``name_or_path``: a local folder, or a hub name already in the local Hugging Face
    cache (nothing is downloaded). Raises InputError when it cannot be loaded.
    The attack's ``--generator PATH|gpt2`` goes through
    :func:`textdp.attacks.inversion.gpt2_generator.load_generator`, which uses the same conversion.
    """
    try:
        from transformers import AutoTokenizer, GPT2LMHeadModel
    except ImportError:
        raise MissingPackageError("loading GPT-2 needs transformers; run: pip install 'textdp[nlp]'") from None
    try:
        hf = GPT2LMHeadModel.from_pretrained(name_or_path, local_files_only=True)
        tok = AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - HF raises OSError/ValueError
        raise InputError(
            f"cannot load GPT-2 generator {name_or_path!r} ({type(exc).__name__}); textdp never downloads models: "
            "pass a local folder holding config.json, model weights, vocab.json and merges.txt") from None
    model = causal_lm_from_hf_gpt2(hf)
    model.eval()
    return model, tok
