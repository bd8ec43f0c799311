"""Fine-tuning a pretrained causal LM (``transformers`` ``*ForCausalLM``) on a list of texts, and
its perplexity on other texts.

Used by the Text Revealer attack to fine-tune its pretrained generator on the PUBLIC split before
the attack, as the paper does with GPT-2 (Zhang, Hidano & Koushanfar 2022, §5.1); the model comes
from the shared loader :func:`textdp.models.pretrained.load_causal_lm`.

* Rows: each text is ``[bos] tokens [eos]`` (cut to ``max_tokens`` model tokens in all), rows of
  a batch right-padded to the longest one, padding masked out of the attention and of the loss.
* ``method="lora"``: low-rank adapters (Hu et al. 2022) on every linear layer but the output head
  (``peft``, ``target_modules="all-linear"``), merged into the weights after training, so the
  result is a plain model of the original architecture; ``method="full"``: every weight trained.
* AdamW, linear warm-up (first 10 % of the steps) then linear decay, global gradient norm clipped
  to 1 (:func:`textdp.models.training.clipped_step`); the batches are drawn from a textdp
  generator (an epoch-wise permutation), LoRA's initialisation from a torch seed drawn from it.

Measured with Gemma 3 270M on 2 CPU cores: docs/attacks.md, "Generators and fluency".
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np

from textdp.errors import InputError, MissingPackageError, ParameterError

__all__ = ["FineTuneConfig", "FINETUNE_METHODS", "token_rows", "causal_lm_nll", "finetune_causal_lm"]

FINETUNE_METHODS = ("lora", "full")


@dataclass(frozen=True)
class FineTuneConfig:
    """Knobs of :func:`finetune_causal_lm`.

    ``method``: ``lora`` or ``full``; ``steps``: optimiser steps; ``batch_size``: rows per step;
    ``max_tokens``: model tokens per row, begin- and end-of-text included; ``lr``: peak learning
    rate; ``lora_r`` / ``lora_alpha`` / ``lora_dropout``: the adapters' rank, scale and dropout.
    Raises ParameterError for values out of range.
    """

    method: str = "lora"
    steps: int = 200
    batch_size: int = 8
    max_tokens: int = 48
    lr: float = 2e-4
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0

    def __post_init__(self):
        if self.method not in FINETUNE_METHODS:
            raise ParameterError(f"fine-tuning method must be one of {', '.join(FINETUNE_METHODS)}, got "
                                 f"{self.method!r}")
        if self.steps < 1 or self.batch_size < 1 or self.max_tokens < 3 or self.lora_r < 1 or self.lora_alpha <= 0:
            raise ParameterError("fine-tuning: steps, batch_size, lora_r >= 1, max_tokens >= 3, lora_alpha > 0")
        if not (self.lr > 0 and math.isfinite(self.lr)) or not 0 <= self.lora_dropout < 1:
            raise ParameterError("fine-tuning: lr > 0 (finite), 0 <= lora_dropout < 1")

    def to_dict(self) -> dict:
        return asdict(self)


def _special(tokenizer) -> tuple[int, int, int]:
    """(bos, eos, pad) ids: bos falls back to eos (GPT-2), pad to eos."""
    eos = tokenizer.eos_token_id
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos
    if bos is None or eos is None:
        raise InputError("the language model's tokenizer needs an end-of-text token")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    return int(bos), int(eos), int(pad)


def token_rows(tokenizer, texts: Sequence[str], max_tokens: int | None = None) -> list[list[int]]:
    """``[bos] tokens [eos]`` of each text (model ids; no other special token), cut so that a row
    has at most ``max_tokens`` ids (the end-of-text id is kept)."""
    bos, eos, _ = _special(tokenizer)
    enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    rows = []
    for ids in enc:
        body = list(ids) if max_tokens is None else list(ids)[: max(0, int(max_tokens) - 2)]
        rows.append([bos] + body + [eos])
    return rows


def _batch(rows: Sequence[Sequence[int]], pad: int, device):
    """(input_ids, attention_mask, labels) (B, T) int64, right-padded; labels -100 on padding."""
    import torch

    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids.to(device), mask.to(device), labels.to(device)


def _row_nll(model, ids, mask, labels):
    """Summed next-token NLL (nats) per row (B,) and the number of scored tokens per row (B,)."""
    import torch.nn.functional as F

    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    tgt = labels[:, 1:]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100,
                          reduction="none").view(tgt.shape)
    return nll.sum(1), (tgt != -100).sum(1)


def causal_lm_nll(model, tokenizer, texts: Sequence[str], *, batch_size: int = 8,
                  max_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-text negative log-likelihood (nats, summed over the text's tokens and its end-of-text)
    and the number of scored tokens, each an (N,) array (float64, int64), of a Hugging Face causal
    LM on ``[bos] text [eos]`` (:func:`token_rows`). Runs on the model's device in eval mode,
    ``batch_size`` rows at a time (each row padded to its batch's longest, padding masked)."""
    import torch

    from textdp.models.device import module_device

    rows = token_rows(tokenizer, texts, max_tokens)
    _, _, pad = _special(tokenizer)
    dev = module_device(model)
    was_training = model.training
    model.eval()
    nll = np.zeros(len(rows))
    cnt = np.zeros(len(rows), dtype=np.int64)
    order = np.argsort([len(r) for r in rows], kind="stable")  # less padding
    with torch.no_grad():
        for b in range(0, len(rows), batch_size):
            idx = order[b:b + batch_size]
            s, c = _row_nll(model, *_batch([rows[i] for i in idx], pad, dev))
            nll[idx] = s.double().cpu().numpy()
            cnt[idx] = c.cpu().numpy()
    model.train(was_training)
    return nll, cnt


def finetune_causal_lm(model, tokenizer, texts: Sequence[str], cfg: FineTuneConfig, *, rng: np.random.Generator,
                       device: str | None = None,
                       on_step: Callable[[int, int, float], None] | None = None) -> tuple[object, dict]:
    """Fine-tune ``model`` (a ``transformers`` causal LM; modified IN PLACE: pass a copy to keep the
    original) on ``texts`` with the causal-LM cross-entropy (module docstring).

    ``cfg``: :class:`FineTuneConfig`; ``rng``: a textdp generator (batch order, adapter init);
    ``device``: ``auto``/``cpu``/``cuda`` (:func:`textdp.models.device.resolve_device`; None: where
    the model is); ``on_step(step, total, loss)`` reports progress. Returns ``(model, stats)``: the
    model in eval mode, adapters merged, every parameter with ``requires_grad=False``; stats: the
    configuration, trainable parameters, the mean loss of the first and last tenth of the steps,
    seconds and seconds per step. Raises InputError for no texts, MissingPackageError when
    ``method="lora"`` and ``peft`` is missing.
    """
    import torch

    from textdp.models.causal_lm import torch_seed
    from textdp.models.device import fork_rng, place
    from textdp.models.training import clipped_step

    if not isinstance(cfg, FineTuneConfig):
        raise ParameterError("cfg must be a FineTuneConfig")
    rows = [r for r in token_rows(tokenizer, texts, cfg.max_tokens) if len(r) >= 3]
    if not rows:
        raise InputError("no texts to fine-tune the language model on")
    _, _, pad = _special(tokenizer)
    dev = place(model, device)
    t0 = time.perf_counter()
    with fork_rng(dev):
        torch.manual_seed(torch_seed(rng))
        net = model
        if cfg.method == "lora":
            try:
                from peft import LoraConfig, get_peft_model
            except ImportError:
                raise MissingPackageError("LoRA fine-tuning needs peft; run: pip install 'textdp[nlp]' "
                                          "(or use method='full')") from None
            with warnings.catch_warnings():  # peft calls a transformers property deprecated in v5
                warnings.filterwarnings("ignore", category=FutureWarning)
                net = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                                                       lora_dropout=cfg.lora_dropout, target_modules="all-linear",
                                                       bias="none", task_type="CAUSAL_LM"))
        else:
            for p in net.parameters():
                p.requires_grad_(True)
        params = [p for p in net.parameters() if p.requires_grad]
        n_train = int(sum(p.numel() for p in params))
        opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
        warm = max(1, cfg.steps // 10)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min((s + 1) / warm, max(0.0, (cfg.steps - s) / max(1, cfg.steps - warm))))
        net.train()
        losses: list[float] = []
        queue: list[int] = []
        for step in range(cfg.steps):
            while len(queue) < cfg.batch_size:
                queue.extend(rng.permutation(len(rows)).tolist())
            idx, queue = queue[: cfg.batch_size], queue[cfg.batch_size:]
            ids, mask, labels = _batch([rows[i] for i in idx], pad, dev)
            s, c = _row_nll(net, ids, mask, labels)
            loss = s.sum() / c.sum().clamp(min=1)
            losses.append(clipped_step(loss, opt, sched, params))
            if on_step:
                on_step(step + 1, cfg.steps, losses[-1])
        if cfg.method == "lora":
            model = net.merge_and_unload()
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    secs = time.perf_counter() - t0
    tenth = max(1, cfg.steps // 10)
    stats = {"method": cfg.method, "config": cfg.to_dict(), "texts": len(rows), "trainable_parameters": n_train,
             "loss_first": float(np.mean(losses[:tenth])), "loss_last": float(np.mean(losses[-tenth:])),
             "seconds": round(secs, 2), "seconds_per_step": round(secs / cfg.steps, 3), "device": str(dev)}
    return model, stats
