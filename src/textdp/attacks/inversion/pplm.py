"""Text Revealer's guided generation: PPLM key/value perturbation steered by a
target classifier (Zhang, Hidano & Koushanfar 2022; Dathathri et al. 2020).

Spec ``text-revealer.md`` §3 and §5. At every decoding step ``t`` the history
``H_t`` (the generator's per-layer keys/values of ``x_1..x_{t-1}``) is perturbed by
``ΔH``, initialised at zero and updated ``num_iterations`` times by normalised
gradient descent on

    L(ΔH) = CE(f(ê_{t+1}), a) + λ_KL · KL(p̃ ‖ p)

where ``p̃ = softmax(G(x_t | H_t + ΔH))`` is the perturbed next-token
distribution, ``p`` the unperturbed one, and the classifier ``f`` reads the
*expected embedding* of the next token, ``ê = p̃ᵀ A E_c`` (``A``: generator ->
classifier vocabulary alignment; in shared-vocabulary mode a 0/1 selection so
``ê`` is the exact expected WordPiece embedding), after the hard prefix
``[CLS] · E_c[prefix] · ê · [SEP]``. Per layer ``l`` and per sample ``b``:

    ΔH_l ← ΔH_l − α · (g_l ⊙ M) / (‖g_l ⊙ M‖₂ + 1e-15)^γ

with ``M`` the window mask over history positions (``window_length`` positions
at the ``"oldest"`` end as in the PPLM reference code, or ``"recent"``). After the
loop the perturbed history produces ``p̃_{t+1}`` (temperature ``T``), fused with
the unperturbed distribution in log space,
``log q = log p + γ_gm (log p̃ − log p)`` (= geometric mean
``p̃^γ_gm p^(1−γ_gm)``; written this way so that ``p̃ = p`` gives ``q = p`` bit for
bit), top-k filtered and sampled (Gumbel-max with a per-row ``torch.Generator``,
so a row's text depends only on its own seed, not on the batch). The
perturbed history is carried forward, as in PPLM.

VTG (vanilla text generation) is the same loop without perturbation; with
``stepsize = 0`` TR produces exactly VTG's tokens (tested).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from textdp.errors import ParameterError
from textdp.models.causal_lm import CausalLM, SharedVocab
from textdp.models.classifier import TextClassifier
from textdp.models.device import module_device

__all__ = ["PPLMConfig", "SharedBridge", "perturb_past", "generate", "window_mask"]


@dataclass
class PPLMConfig:
    """Knobs of Text Revealer / PPLM (defaults: PPLM reference-code values; TR's
    window 3 and KL 0 from the paper's App. A.3).

    ``stepsize`` α; ``num_iterations`` gradient steps per generated token;
    ``window_length`` w (0 = whole history); ``window_anchor`` "oldest" (reference
    code) or "recent"; ``kl_scale`` λ_KL; ``gamma`` gradient-norm exponent;
    ``gm_scale`` γ_gm fusion weight of the perturbed distribution; ``top_k``;
    ``temperature``; ``sample`` (False = greedy); ``gen_length`` tokens generated
    after the template; ``grad_length`` perturb only the first tokens;
    ``horizon_length`` (only 1 is implemented).
    """

    stepsize: float = 0.02
    num_iterations: int = 3
    window_length: int = 3
    window_anchor: str = "oldest"
    kl_scale: float = 0.0
    gamma: float = 1.5
    gm_scale: float = 0.9
    top_k: int = 10
    temperature: float = 1.0
    sample: bool = True
    gen_length: int = 20
    grad_length: int = 10000
    horizon_length: int = 1

    def __post_init__(self):
        if self.stepsize < 0 or self.num_iterations < 0 or self.window_length < 0 or self.kl_scale < 0:
            raise ParameterError("stepsize, num_iterations, window_length and kl_scale must be >= 0")
        if self.window_anchor not in ("oldest", "recent"):
            raise ParameterError(f"window_anchor must be 'oldest' or 'recent', got {self.window_anchor!r}")
        if not 0 <= self.gm_scale <= 1:
            raise ParameterError(f"gm_scale must be in [0, 1], got {self.gm_scale}")
        if self.top_k < 1 or self.temperature <= 0 or self.gen_length < 1:
            raise ParameterError("top_k >= 1, temperature > 0 and gen_length >= 1 are required")
        if self.horizon_length != 1:
            raise ParameterError("only horizon_length=1 is implemented (PPLM's default)")


@dataclass
class SharedBridge:
    """Generator -> classifier bridge for a generator trained on the classifier's
    WordPiece ids (``alignment = "shared"``, spec §5.2).

    ``soft_table`` (V_g, d_c) float32 = ``A E_c`` = ``E_c[gen_to_cls]``; prefix ids
    are mapped one to one. ``cls_id``/``sep_id``: the classifier's specials.
    """

    vocab: SharedVocab
    soft_table: torch.Tensor
    cls_id: int
    sep_id: int
    gen_to_cls_t: torch.Tensor = field(init=False)

    @classmethod
    def build(cls, vocab: SharedVocab, clf: TextClassifier) -> "SharedBridge":
        E = clf.embedding_matrix().detach()
        g2c = torch.as_tensor(vocab.gen_to_cls, device=E.device)
        sp = clf.special_ids()
        return cls(vocab, E[g2c].clone(), sp["cls"], sp["sep"])

    def __post_init__(self):
        self.gen_to_cls_t = torch.as_tensor(self.vocab.gen_to_cls, device=self.soft_table.device)

    def prefix_cls_ids(self, gen_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) generator ids (position 0 = begin-of-text) -> (B, T-1) classifier ids."""
        return self.gen_to_cls_t[gen_ids[:, 1:]]


def window_mask(history_len: int, window_length: int, anchor: str = "oldest", device=None) -> torch.Tensor:
    """(history_len,) float32 mask on ``device`` (default CPU): ones on ``window_length`` positions
    at the ``anchor`` end when ``0 < window_length < history_len``, else all ones."""
    m = torch.ones(history_len, device=device)
    if 0 < window_length < history_len:
        m.zero_()
        if anchor == "oldest":
            m[:window_length] = 1
        else:
            m[-window_length:] = 1
    return m


def _classifier_loss(clf, bridge, probs, prefix_cls, label):
    """Per-row target CE (B,) of ``[CLS] E[prefix] ê [SEP]``. ``prefix_cls``: (B, T') classifier
    ids, or ``(ids (B, T') right-padded, lengths (B,))`` when rows have different lengths (the
    cross-tokenizer bridge): then row b is ``[CLS] E[ids[b, :len_b]] ê_b [SEP]`` followed by
    padding with attention mask 0 (equal lengths give exactly the unpadded input)."""
    E = clf.embedding_matrix()
    B = probs.shape[0]
    e_hat = probs @ bridge.soft_table  # (B, d)
    cls_row = E[bridge.cls_id].detach().expand(B, 1, -1)
    sep_row = E[bridge.sep_id].detach().expand(B, 1, -1)
    if isinstance(prefix_cls, tuple):
        ids, lengths = prefix_cls
        Tp = ids.shape[1]
        body = E[ids].detach()  # (B, Tp, d)
        pad = torch.zeros_like(cls_row)
        inp = torch.cat([cls_row, body, pad, pad], dim=1)  # (B, Tp + 3, d)
        pos = torch.arange(Tp + 3, device=inp.device)[None, :, None]
        L = lengths.view(B, 1, 1)
        inp = torch.where(pos == L + 1, e_hat[:, None], inp)
        inp = torch.where(pos == L + 2, sep_row, inp)
        inp = torch.where(pos > L + 2, torch.zeros_like(inp), inp)
        mask = (pos[..., 0] <= L[..., 0] + 2).long()
        logits = clf.logits_from_embeds(inp, mask)
        return F.cross_entropy(logits, label, reduction="none")
    inp = torch.cat([cls_row, E[prefix_cls].detach(), e_hat[:, None], sep_row], dim=1)
    logits = clf.logits_from_embeds(inp, torch.ones(inp.shape[:2], dtype=torch.long, device=inp.device))
    return F.cross_entropy(logits, label, reduction="none")  # (B,)


def perturb_past(G: CausalLM, clf: TextClassifier, bridge: SharedBridge, past, last: torch.Tensor,
                 seq: torch.Tensor, label: torch.Tensor, cfg: PPLMConfig, p_unpert: torch.Tensor | None = None,
                 active: torch.Tensor | None = None, banned: torch.Tensor | None = None):
    """One PPLM perturbation of the history (spec §3.2).

    ``past``: list of (K, V), each (B, H, T_h, D); ``last``: (B, 1) the current
    token; ``seq``: (B, T) all tokens so far (begin-of-text first); ``label``: (B,)
    int64 attacked class; ``p_unpert``: (B, V_g) unperturbed next-token
    probabilities (only for the KL term); ``active``: (B,) bool rows to steer;
    ``banned``: generator ids that can never be emitted (their logits are set to
    -inf before the softmax, so they carry no mass in the expected embedding).
    Returns ``(deltas, losses)``: the list of (ΔK, ΔV) and the per-iteration
    classifier CE (num_iterations, B) measured *before* each update.
    """
    T_h = past[0][0].shape[2]
    M = window_mask(T_h, cfg.window_length, cfg.window_anchor, device=seq.device).view(1, 1, T_h, 1)
    deltas = [(torch.zeros_like(k), torch.zeros_like(v)) for k, v in past]
    ragged = getattr(bridge, "prefix_cls_ragged", None)  # cross-tokenizer rows re-tokenise to different lengths
    prefix_cls = ragged(seq) if ragged is not None else bridge.prefix_cls_ids(seq)
    w = active.float() if active is not None else torch.ones(seq.shape[0], device=seq.device)
    losses = []
    for _ in range(cfg.num_iterations):
        leaves = [(dk.requires_grad_(True), dv.requires_grad_(True)) for dk, dv in deltas]
        pp = [(k + dk, v + dv) for (k, v), (dk, dv) in zip(past, leaves)]
        logits, _, _ = G(last, past=pp)
        lg = logits[:, -1]
        if banned is not None and banned.numel():
            lg = lg.index_fill(-1, banned, float("-inf"))
        probs = torch.softmax(lg, dim=-1)
        ce = _classifier_loss(clf, bridge, probs, prefix_cls, label)
        loss = (ce * w).sum()
        if cfg.kl_scale > 0 and p_unpert is not None:
            pu = p_unpert + (p_unpert <= 1e-15).float() * 1e-15
            pt = probs + (probs <= 1e-15).float().detach() * 1e-15
            loss = loss + cfg.kl_scale * ((pt * (pt / pu).log()).sum(-1) * w).sum()
        flat = [t for kv in leaves for t in kv]
        grads = torch.autograd.grad(loss, flat)
        losses.append(ce.detach())
        new = []
        for li, (dk, dv) in enumerate(leaves):
            gk, gv = grads[2 * li] * M, grads[2 * li + 1] * M
            norm = (gk.pow(2).sum(dim=(1, 2, 3)) + gv.pow(2).sum(dim=(1, 2, 3))).sqrt() + 1e-15  # per sample
            scale = (cfg.stepsize / norm.pow(cfg.gamma)).view(-1, 1, 1, 1)
            new.append((dk.detach() - scale * gk, dv.detach() - scale * gv))
        deltas = new
    return deltas, (torch.stack(losses) if losses else torch.zeros(0, seq.shape[0], device=seq.device))


@torch.no_grad()
def _sample(logq: torch.Tensor, gens: Sequence[torch.Generator], sample: bool) -> torch.Tensor:
    if not sample:
        return logq.argmax(-1)
    V = logq.shape[-1]
    # uniforms from the rows' CPU generators on every device: the same numbers whatever the device
    u = torch.stack([torch.rand(V, generator=g, dtype=torch.float64) for g in gens]).clamp_(1e-300, 1.0)
    u = u.to(logq.device)
    gumbel = -torch.log(-torch.log(u))
    return (logq.double() + gumbel).argmax(-1)


def generate(G: CausalLM, clf: TextClassifier | None, bridge: SharedBridge | None, prefix: torch.Tensor,
             label: int | Sequence[int] | None, cfg: PPLMConfig, row_seeds: Sequence[int], *, perturb: bool = True,
             eos: int = 1, on_token: Callable[[], None] | None = None, banned: Sequence[int] = ()) -> dict:
    """Generate ``cfg.gen_length`` tokens after each row of ``prefix``.

    ``prefix``: (B, T0) int64 generator ids, equal lengths, begin-of-text first,
    ``T0 >= 2``. ``perturb=False`` (or ``clf is None``) is VTG; otherwise TR
    steering each row towards class ``label`` (an int, or one per row). ``row_seeds``: one int per row, seeding that
    row's ``torch.Generator`` for sampling. Rows that emit ``eos`` stop (padded
    with ``eos``). ``banned``: generator ids never emitted by TR nor VTG (the
    pipeline bans ``[UNK]`` and begin-of-text: an ``[UNK]`` carries no word and
    would only feed the target its ``[UNK]`` embedding). Runs on ``G``'s device (``clf`` and
    ``bridge`` must be on the same one); the sampling uniforms come from the rows' CPU generators,
    so only the float arithmetic differs between devices. Returns ``{"ids": (B, T0+n) int64, "ce_first": (B,) float,
    "ce_last": (B,) float}`` where the CE values are the classifier losses at the
    first/last perturbation iteration averaged over steps (NaN for VTG).
    """
    if prefix.ndim != 2 or prefix.shape[1] < 2:
        raise ParameterError("prefix must be (B, T0) with T0 >= 2 (begin-of-text + at least one token)")
    if len(row_seeds) != prefix.shape[0]:
        raise ParameterError("one seed per row is needed")
    steer = perturb and clf is not None and cfg.num_iterations > 0
    B = prefix.shape[0]
    dev = module_device(G)
    prefix = prefix.to(dev)
    gens = [torch.Generator().manual_seed(int(s) % (2**63 - 1)) for s in row_seeds]
    if label is None:
        lab = torch.full((B,), -1, dtype=torch.long, device=dev)
    elif isinstance(label, (int, np.integer)):
        lab = torch.full((B,), int(label), dtype=torch.long, device=dev)
    else:
        lab = torch.as_tensor(list(label), dtype=torch.long, device=dev)
        if lab.shape != (B,):
            raise ParameterError("label must be an int or one label per row")
    ban = torch.as_tensor(sorted({int(b) for b in banned}), dtype=torch.long, device=dev)
    with torch.no_grad():
        _, past_clean, _ = G(prefix[:, :-1])
    past_pert = past_clean
    last = prefix[:, -1:]
    seq = prefix.clone()
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    first, final = [], []
    T = cfg.temperature
    for step in range(cfg.gen_length):
        with torch.no_grad():
            logits_u, new_clean, _ = G(last, past=past_clean)
        lu = logits_u[:, -1] if not ban.numel() else logits_u[:, -1].index_fill(-1, ban, float("-inf"))
        logp_u = torch.log_softmax(lu / T, dim=-1)
        if steer:
            if step < cfg.grad_length:
                p_u = torch.softmax(lu, dim=-1) if cfg.kl_scale > 0 else None
                with torch.enable_grad():
                    deltas, ls = perturb_past(G, clf, bridge, past_pert, last, seq, lab, cfg, p_u, ~done, ban)
                if ls.numel():
                    first.append(ls[0])
                    final.append(ls[-1])
                used = [(k + dk, v + dv) for (k, v), (dk, dv) in zip(past_pert, deltas)]
            else:
                used = past_pert
            with torch.no_grad():
                logits_p, new_pert, _ = G(last, past=used)
            lp = logits_p[:, -1] if not ban.numel() else logits_p[:, -1].index_fill(-1, ban, float("-inf"))
            logp_p = torch.log_softmax(lp / T, dim=-1)
            logq = logp_u + cfg.gm_scale * (logp_p - logp_u)
            if ban.numel():  # -inf - -inf is NaN: banned ids stay impossible
                logq = logq.index_fill(-1, ban, float("-inf"))
        else:
            new_pert = new_clean
            logq = logp_u
        kth = torch.topk(logq, min(cfg.top_k, logq.shape[-1]), dim=-1).values[:, -1:]
        logq = logq.masked_fill(logq < kth, float("-inf"))
        logq = logq - torch.logsumexp(logq, dim=-1, keepdim=True)
        nxt = _sample(logq, gens, cfg.sample)
        nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
        done = done | (nxt == eos)
        seq = torch.cat([seq, nxt[:, None]], dim=1)
        past_clean, past_pert = new_clean, (new_pert if steer else new_clean)
        last = nxt[:, None]
        if on_token:
            on_token()
        if bool(done.all()):
            break
    nan = torch.full((B,), float("nan"), device=dev)
    return {"ids": seq,
            "ce_first": torch.stack(first).mean(0) if first else nan,
            "ce_last": torch.stack(final).mean(0) if final else nan}
