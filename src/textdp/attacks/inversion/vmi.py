"""VMI, vanilla model inversion (Zhang et al. 2022 §4.1; spec §7.1).

Free input embeddings ``Z`` (R, L, d) float32 start from i.i.d. normal noise
with the standard deviation of the classifier's embedding table and are
optimised with Adam to minimise ``Σ_r CE(f([E[CLS], Z_r, E[SEP]]), a)`` for
``steps`` full-batch steps (the paper's "50 epochs"). Each position is then
decoded to the vocabulary token of highest cosine similarity, excluding special
and ``[unused*]`` tokens; metrics are computed on the decoded text (the soft
``Z`` would trivially fool the target).
"""

from __future__ import annotations

import re

import numpy as np
import torch
import torch.nn.functional as F

from textdp.errors import ParameterError
from textdp.models.causal_lm import torch_seed
from textdp.models.classifier import TextClassifier

__all__ = ["vmi_invert"]

_SPECIAL = re.compile(r"^\[(?:CLS|SEP|PAD|UNK|MASK|unused\d+)\]$")


def vmi_invert(clf: TextClassifier, label: int, n_restarts: int, length: int, *, steps: int = 50, lr: float = 0.05,
               rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """Invert class ``label`` with ``n_restarts`` random starts of ``length`` tokens.

    Returns ``(texts, final_ce)``: the decoded texts and the per-restart CE (R,)
    of the *soft* embeddings at the last step. Runs on ``clf``'s device; the random
    starts are drawn on the CPU (the same on every device). Raises ParameterError for
    non-positive sizes.
    """
    if n_restarts < 1 or length < 1 or steps < 0 or lr <= 0:
        raise ParameterError("VMI needs n_restarts, length >= 1, steps >= 0 and lr > 0")
    E = clf.embedding_matrix().detach()
    dev = E.device
    sp = clf.special_ids()
    d = E.shape[1]
    g = torch.Generator().manual_seed(torch_seed(rng))
    Z = (torch.randn(n_restarts, length, d, generator=g) * float(E.std())).to(dev).requires_grad_(True)
    opt = torch.optim.Adam([Z], lr=lr)
    y = torch.full((n_restarts,), int(label), dtype=torch.long, device=dev)
    cls_row = E[sp["cls"]].expand(n_restarts, 1, d)
    sep_row = E[sp["sep"]].expand(n_restarts, 1, d)
    mask = torch.ones(n_restarts, length + 2, dtype=torch.long, device=dev)
    ce = torch.zeros(n_restarts, device=dev)
    for _ in range(steps):
        logits = clf.logits_from_embeds(torch.cat([cls_row, Z, sep_row], 1), mask)
        ce = F.cross_entropy(logits, y, reduction="none")
        opt.zero_grad(set_to_none=True)
        ce.sum().backward()
        opt.step()
    with torch.no_grad():
        if steps == 0:
            ce = F.cross_entropy(clf.logits_from_embeds(torch.cat([cls_row, Z, sep_row], 1), mask), y, reduction="none")
        toks = clf.vocab_tokens
        bad = torch.tensor([bool(_SPECIAL.match(t)) or t == "" for t in toks], device=dev)
        En = F.normalize(E, dim=-1)
        sims = F.normalize(Z.detach().reshape(-1, d), dim=-1) @ En.T
        sims[:, bad] = float("-inf")
        ids = sims.argmax(-1).reshape(n_restarts, length)
    texts = []
    for row in ids.tolist():
        out: list[str] = []
        for i in row:
            t = toks[i]
            if t.startswith("##") and out:
                out[-1] += t[2:]
            else:
                out.append(t[2:] if t.startswith("##") else t)
        texts.append(" ".join(out))
    return texts, ce.detach().cpu().numpy().astype(np.float64)
