"""DP-SGD with a Fisher-information-leakage (FIL) accountant, in PyTorch (Guo et al. 2022
§6.1; spec A.6–A.7), next to the RDP accountant of the same run.

Mechanism at step t (parameters θ_t, batch B_t of fixed size B drawn uniformly without
replacement, independently at every step; clip C; noise multiplier σ):

    g_i = ∇_θ ℓ(θ_t; x_i, y_i),   ĝ_i = g_i / (GELU(‖g_i‖/C − 1) + 1)          (soft clip)
    S_t = Σ_{i∈B_t} ĝ_i + N(0, (σC)² I),   v ← μ v + S_t/B + wd·θ,   θ ← θ − lr·v

The soft clip is smooth, so the output density is differentiable in x_i and the
Cramér–Rao bound applies; ‖ĝ_i‖ ≤ κC with κ = max_t t/(GELU(t−1)+1) ≈ 1.1152
(:func:`soft_clip_factor_max`, computed, not hard-coded).

FIL accountant (per example i, cumulative over steps):
  η²_i += w · Tr(J_tᵀJ_t) / (d (σC)²)  for every step with i ∈ B_t,  J_t = ∂ĝ_i/∂x_i (p × d),
evaluated at θ_t before the update. Tr(JᵀJ) is estimated without forming J: m **distinct**
Rademacher probes v per example and per step (Hutchinson: E‖Jv‖² = Tr(JᵀJ)). The official
code drew all its probes with one key (one probe in effect, spec A.9 bug 1); here every probe
is independent. Composition adds η² (chain rule of Fisher information) along the realised
trajectory, an unbiased single-sample estimate of the expected information.

Computation (one pass per step, shared with the clip): ``torch.func.jvp`` of the batched
raw-gradient map X ↦ (g_1 … g_B) (``torch.func.vmap`` of ``torch.func.grad``), vmapped over
the probe axis, gives the raw per-example gradients g_i and their tangents t_ik = (∂g_i/∂x_i) v_ik
together (forward over reverse; row i depends on x_i only, so one product with the stacked
probes gives every example's). The soft clip and its derivative are then closed-form
(:func:`_soft_clip_jvp`): with n = ‖g‖, u = (n + 10⁻⁷)/C − 1, f = GELU(u) + 1,

    ĝ = g / f,   (∂ĝ/∂x) v = [t − g · GELU'(u) (gᵀt) / (C n f)] / f,

and ĝ goes to the noise (:func:`noisy_clipped_sum`), so the per-example gradients are computed
once for both. For given probes this is the same quantity as the earlier per-example
``vmap(jvp(clipped gradient))`` (values equal up to float rounding, tests/bounds/test_dpsgd.py),
at a lower cost (benchmarks/bench_bounds.py); at g = 0 (saturated softmax) it takes the limit
t/f instead of autograd's 0·∞ (NaN). For a lone ``nn.Linear`` (logits z = W x + b, what ``textdp
bounds dpsgd --model logreg`` trains; also an ``nn.Sequential`` holding only one), g and t have
a closed form, computed directly (:func:`_linear_grads_and_tangents`): with s = softmax(z),
r = s − e_y and dr = s ⊙ (W v − sᵀW v), g = (r xᵀ, r) and t = (dr xᵀ + r vᵀ, dr), the same values
as the ``torch.func`` pass up to float rounding (tests/bounds/test_dpsgd_linear.py) without
the nested transforms' per-operation cost; every other model takes the ``torch.func`` pass.
The probe law is unchanged (i.i.d. Rademacher, distinct per example, probe and step); since
issue 14 their bits come from numpy's PCG64 instead of ``torch.randint``, which is several
times faster, so a seeded run's η values differ from earlier versions' (other draws, same
law); its batches and noise draws are unchanged.

Subsampling (``subsampling=``), i.e. how the step's information enters example i's total:

* ``"sampled"`` (default; ``"convexity"`` is its old name): add I₁ = Tr(J_tᵀJ_t)/(d (σC)²)
  only at the steps where i ∈ B_t. This is an **estimate**: unbiased for the expected
  information q·I₁ per step, but a single draw of the batches, so an example's total depends
  on how often it happened to be sampled; after one epoch about (1 − B/n)^{n/B} ≈ e⁻¹ ≈ 37 %
  of the examples were never sampled and show η = 0 (bound +inf). With Hutchinson probes
  the trace is an estimate too.
* ``"expected"`` (rigorous per example, along the run's trajectory): Fisher information is
  jointly convex, and the step's output law for i is the mixture "i ∈ B_t" (prob. q = B/n,
  information I₁) / "i ∉ B_t" (information 0), so its information is at most q·I₁. Every
  example is charged q·I₁ at **every** step, with the **exact** trace (all d input
  directions, no probes). No example can show zero; the cost is n/B × d/probes the
  sampled mode's FIL work. What remains is the FIL accountant's own conditioning (Guo et
  al. §6.1): the per-step information is evaluated at the realised parameters θ_t.
* ``"wmax"`` (the official code's tighter factor, on top of ``"sampled"``):
  w = q / (q + (1 − q) e^{−ε_step}) with ε_step the (ε, δ)-DP of one step from
  dp-accounting's exact Gaussian formula (the code used the classic formula, valid only for
  ε < 1: bug 7); it holds except with probability δ, so it is a heuristic.

RDP of the same run (replace-one, as the reconstruction game needs): dp-accounting
``SelfComposedDpEvent(SampledWithoutReplacementDpEvent(n, B, GaussianDpEvent(σ/(2κ))), T)``
under ``REPLACE_ONE`` (replace-one sensitivity of the clipped sum is 2κC); the epoch table
also shows Opacus's Poisson add/remove ε with noise σ/κ (what the official code reported)
for comparison.

Noise, float-safe (:func:`noisy_clipped_sum`): the per-example clipped gradients are
hard-rescaled to norm ≤ κC (float error of the soft clip; in float64) and rounded *toward zero*
(exactly: in float32 grid units where that is exact, else in float64) onto the grid g of
textdp's discrete Gaussian (``textdp.noise.gaussian_granularity(σC)``, a power of two):
rounding toward zero never increases a coordinate's magnitude, so each rounded gradient still
has norm ≤ κC and the replace-one sensitivity stays 2κC with no discretisation cost. Their
sum is exact (integers times g), and the noise g·Z, Z an exact discrete Gaussian N_ℤ(0, s²)
with s·g ≥ σC (Canonne, Kamath & Steinke 2020), lands on the same lattice, so S_t is computed
exactly and its low-order bits carry nothing but the lattice point. Its RDP is at most the
continuous Gaussian's (CKS20 Thm 14-15), and the without-replacement amplification of
dp-accounting (Wang, Balle & Kasiviswanathan 2019) takes any base RDP curve, so the accountant
above covers the actual release. Dividing by B, the float32 cast and the optimiser step are
post-processing. The FIL figures describe the idealised (unrounded) soft-clipped Gaussian
map, which is differentiable in x_i; the rounding toward zero is a deterministic map that
moves each coordinate by less than g. Batch indices come from the same textdp generator; only
the Hutchinson probes (not privacy noise) come from a numpy PCG64 generator seeded from it
(:func:`_probe_generator`, :func:`_rademacher_probes`).

Per-example FIL values depend on the data: treat them as secret (Guo et al. footnote 2).
Models with batch normalisation are refused: per-example Jacobians are undefined there.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from textdp.errors import InputError, ParameterError

__all__ = ["soft_clip_factor_max", "train_dpsgd_fil", "DPSGDResult", "EpochRecord", "per_example_fil",
           "dpsgd_rdp", "check_model", "noisy_clipped_sum", "SUBSAMPLING_MODES"]

#: subsampling modes of the FIL accountant (see the module docstring); "convexity" is the old name of "sampled"
SUBSAMPLING_MODES = ("sampled", "expected", "wmax")


@functools.lru_cache(maxsize=1)
def soft_clip_factor_max() -> float:
    """κ = max_{t ≥ 0} t / (GELU(t − 1) + 1) for the exact (erf) GELU, ≈ 1.1152."""
    from scipy.optimize import minimize_scalar
    from scipy.special import erf

    def neg(t):
        gelu = (t - 1) * 0.5 * (1 + erf((t - 1) / math.sqrt(2)))
        return -t / (gelu + 1)

    r = minimize_scalar(neg, bounds=(0.0, 10.0), method="bounded", options={"xatol": 1e-12})
    return float(-r.fun)


def check_model(model) -> None:
    """Refuse models whose per-example Jacobians are undefined (batch normalisation)."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):  # noqa: SLF001
            raise ParameterError(f"the model has {type(m).__name__}: per-example gradients and Jacobians are "
                                 "undefined with batch norm; use GroupNorm/LayerNorm or no normalisation")


from textdp.bounds.mechanisms import _pos  # noqa: E402  (one positive-number check for bounds)


def _as_tensors(X, y):
    import scipy.sparse as sp
    import torch

    if sp.issparse(X):
        X = X.toarray()
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float32) if not isinstance(X, torch.Tensor) else X,
                         dtype=torch.float32)
    yt = torch.as_tensor(np.asarray(y) if not isinstance(y, torch.Tensor) else y).long()
    if Xt.ndim != 2 or yt.ndim != 1 or Xt.shape[0] != yt.shape[0]:
        raise InputError(f"X must be (n, d) and y (n,), got {tuple(Xt.shape)} and {tuple(yt.shape)}")
    if Xt.shape[0] < 2:
        raise InputError("need at least 2 training records")
    if not torch.isfinite(Xt).all():
        raise InputError("X must be finite")
    return Xt, yt


def _functions(model, clip_norm: float):
    """Per-example soft-clipped gradient (flat) as a function of (params, x, y), written
    directly (autograd through the clip). The reference for the exact FIL
    (:func:`per_example_fil` with ``exact=True``, ``torch.func.jacfwd``); the training loop
    uses :func:`_raw_grad_fn` and :func:`_soft_clip_jvp`, which give the same values."""
    import torch

    raw = _raw_grad_fn(model)

    def clipped(params, x, y):
        flat = raw(params, x, y)
        nrm = torch.sqrt(torch.sum(flat * flat)) + 1e-7
        factor = torch.nn.functional.gelu(nrm / clip_norm - 1.0) + 1.0
        return flat / factor

    return clipped


#: use the closed-form gradients and tangents (:func:`_linear_grads_and_tangents`) when the model is a
#: lone ``nn.Linear``; tests switch it off to compare with the ``torch.func`` computation
_CLOSED_FORM_LINEAR = True


def _lone_linear(model):
    """``(weight name, bias name or None)`` when ``model`` is a plain ``torch.nn.Linear``, or an
    ``nn.Sequential`` holding exactly one, whose forward is z = W x + b as written (no forward or
    backward hooks, global or its own, no parametrisation, no forward replaced on the instance, no
    other parameter); else None."""
    import torch
    from torch.nn.modules import module as _module
    from torch.nn.utils import parametrize

    if (_module._global_forward_hooks or _module._global_forward_pre_hooks  # noqa: SLF001
            or _module._global_backward_hooks or _module._global_backward_pre_hooks):  # noqa: SLF001
        return None
    mods = [model]
    if type(model) is torch.nn.Sequential and len(model) == 1:
        mods.append(model[0])
    lin = mods[-1]
    if type(lin) is not torch.nn.Linear:
        return None
    for m in mods:
        if (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks  # noqa: SLF001
                or parametrize.is_parametrized(m) or "forward" in vars(m)):
            return None
    prefix = "0." if len(mods) == 2 else ""
    names = [k for k, _ in model.named_parameters()]
    wk, bk = prefix + "weight", (prefix + "bias" if lin.bias is not None else None)
    if names != [wk] + ([bk] if bk else []):
        return None
    return wk, bk


def _raw_grad_fn(model):
    """Per-example raw gradient g = ∇_θ ℓ(θ; x, y), flattened to ``(p,)`` (parameters in
    ``named_parameters`` order), as a function of (params, x ``(d,)``, y ``()``). Its attribute
    ``closed_form_linear`` holds the parameter names of a lone ``nn.Linear`` (:func:`_lone_linear`),
    for which :func:`_grads_and_tangents` and :func:`_per_example_grads` use closed-form formulas,
    or None (``torch.func``)."""
    import torch
    from torch.func import functional_call, grad

    def loss_fn(params, x, y):  # cross-entropy, written so that forward mode needs no decomposition
        logits = functional_call(model, params, (x.unsqueeze(0),))[0]
        return -torch.log_softmax(logits, dim=0).gather(0, y.unsqueeze(0))[0]

    gfn = grad(loss_fn)

    def raw(params, x, y):
        return torch.cat([t.reshape(-1) for t in gfn(params, x, y).values()])

    raw.closed_form_linear = _lone_linear(model) if _CLOSED_FORM_LINEAR else None
    return raw


def _per_example_grads(raw, params, xb, yb):
    """Raw per-example gradients ``(B, p)`` of ``xb`` (B, d), ``yb`` (B,): closed form for a lone
    ``nn.Linear`` (:func:`_linear_grads_and_tangents`), else ``torch.func.vmap`` of ``raw``."""
    from torch.func import vmap

    if getattr(raw, "closed_form_linear", None):
        return _linear_grads_and_tangents(raw.closed_form_linear, params, xb, yb)[0]
    return vmap(raw, in_dims=(None, 0, 0))(params, xb, yb)


def _linear_grads_and_tangents(names, params, xb, yb, V=None):
    """Per-example gradients of a linear softmax model and their tangents, in closed form.

    Model z = W x + b (W ``(K, d)``, b ``(K,)`` or absent; ``names`` = (weight name, bias name or
    None) in ``params``), loss ℓ = −log softmax(z)_y. With s = softmax(z) (computed as
    exp(log_softmax(z)), as autograd does) and r = s − e_y, the gradient is

        ∂ℓ/∂W = r xᵀ,   ∂ℓ/∂b = r,

    and its derivative along an input direction v (dz = W v; the softmax Jacobian
    diag(s) − s sᵀ gives dr = s ⊙ (dz − sᵀdz)) is

        (∂g/∂x) v = (dr xᵀ + r vᵀ, dr).

    These are the values :func:`_raw_grad_fn` and the ``torch.func.jvp`` of
    :func:`_grads_and_tangents` compute, up to float rounding, without the per-operation cost
    of the nested transforms. xb: ``(B, d)``; yb: ``(B,)`` class ids; V: ``(B, m, d)`` probes
    or None. Returns (G ``(B, p)``, T ``(B, m, p)`` or None), flattened in the order of
    ``params`` (weight row-major, then bias).
    """
    import torch

    wk, bk = names
    W = params[wk]
    b = params[bk] if bk else None
    B, d = xb.shape
    K = W.shape[0]
    s = torch.exp(torch.log_softmax(torch.nn.functional.linear(xb, W, b), dim=1))  # (B, K)
    r = s - torch.nn.functional.one_hot(yb, K).to(s.dtype)
    sizes = {k: v.numel() for k, v in params.items()}
    off, o = {}, 0
    for k, n in sizes.items():
        off[k] = o
        o += n
    G = torch.empty(B, o, dtype=s.dtype, device=s.device)
    torch.mul(r.unsqueeze(2), xb.unsqueeze(1), out=G[:, off[wk]:off[wk] + K * d].view(B, K, d))
    if bk:
        G[:, off[bk]:off[bk] + K] = r
    if V is None:
        return G, None
    m = V.shape[1]
    dz = torch.matmul(V, W.t())  # (B, m, K)
    sb = s.unsqueeze(1)
    dr = sb * (dz - torch.sum(sb * dz, dim=-1, keepdim=True))  # (B, m, K)
    T = torch.empty(B, m, o, dtype=s.dtype, device=s.device)
    Tw = T[:, :, off[wk]:off[wk] + K * d].view(B, m, K, d)
    torch.mul(dr.unsqueeze(3), xb[:, None, None, :], out=Tw)
    Tw.addcmul_(r[:, None, :, None], V.unsqueeze(2))
    if bk:
        T[:, :, off[bk]:off[bk] + K] = dr
    return G, T


def _soft_clip(G, clip_norm: float):
    """Soft clip of per-example raw gradients ``G`` (B, p): (ĝ (B, p), factor f (B,), ‖g‖ (B,)),
    ĝ = g / f with f = GELU(‖g‖/C − 1) + 1 (exact erf GELU; ‖g‖ carries the same + 1e-7 as
    :func:`_functions`)."""
    import torch

    nrm = torch.linalg.vector_norm(G, dim=-1)
    f = torch.nn.functional.gelu((nrm + 1e-7) / clip_norm - 1.0) + 1.0
    return G / f.unsqueeze(-1), f, nrm


def _soft_clip_jvp(G, T, clip_norm: float):
    """Soft clip and its directional derivatives, in closed form from the raw gradients.

    G: ``(B, p)`` raw per-example gradients g; T: ``(B, m, p)`` tangents t = (∂g/∂x) v for m
    probes v (overwritten). With n = ‖g‖, u = (n + 1e-7)/C − 1, f = GELU(u) + 1 and
    GELU'(u) = Φ(u) + u φ(u), the chain rule gives the tangent of ĝ = g/f:

        (∂ĝ/∂x) v = [t − g · GELU'(u) (gᵀt) / (C n f)] / f

    (at g = 0 the second term is 0, the limit of the map; autograd through ‖g‖ would give
    0 · ∞ there). The bracket is formed coordinate by coordinate, as forward-mode
    differentiation of :func:`_functions`'s map does (no cancellation between squared
    norms). Returns (ĝ ``(B, p)``, ‖(∂ĝ/∂x) v‖² ``(B, m)``), the same values as that map's
    ``torch.func.jvp`` up to float rounding.
    """
    import torch

    Gc, f, nrm = _soft_clip(G, clip_norm)
    u = (nrm + 1e-7) / clip_norm - 1.0
    dgelu = 0.5 * (1.0 + torch.erf(u * _SQRT_HALF)) + u * torch.exp(-0.5 * u * u) * _INV_SQRT_2PI
    Gb = G.unsqueeze(1)  # (B, 1, p)
    gt = torch.linalg.vecdot(T, Gb)  # (B, m): gᵀt per probe
    safe = torch.where(nrm > 0, nrm, torch.ones_like(nrm))
    c = torch.where(nrm > 0, dgelu / (clip_norm * safe * f), torch.zeros_like(nrm))  # (B,)
    T.addcmul_(Gb, (c[:, None] * gt).unsqueeze(-1), value=-1.0)  # the bracket, in place
    return Gc, torch.linalg.vector_norm(T, dim=-1) ** 2 / (f * f)[:, None]


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _grads_and_tangents(raw, params, xb, yb, V):
    """Raw per-example gradients and their tangents for the probes in one forward-over-reverse
    pass: ``torch.func.jvp`` of the batched gradient map X ↦ G (``vmap`` of
    :func:`_raw_grad_fn`) at ``xb`` (B, d), vmapped over the probe axis of ``V`` (B, m, d).
    Row i of G depends on x_i only, so the batched map's Jacobian is block-diagonal and its
    product with the probes gives every (∂g_i/∂x_i) v_ik at once; the gradient itself is
    computed once per step, not once per probe. For a lone ``nn.Linear`` (``raw.closed_form_linear``)
    the same values come from :func:`_linear_grads_and_tangents` instead. Returns (G (B, p), T (B, m, p))."""
    from torch.func import jvp, vmap

    if getattr(raw, "closed_form_linear", None):
        return _linear_grads_and_tangents(raw.closed_form_linear, params, xb, yb, V)
    if xb._base is not None:  # a view: jvp would allocate a zero tangent for its whole base storage
        xb = xb.clone()
    batched = vmap(raw, in_dims=(None, 0, 0))

    def f(X):
        return batched(params, X, yb)

    if V.shape[1] == 1:
        G, T = jvp(f, (xb,), (V[:, 0],))
        return G, T.unsqueeze(1)
    G, T = vmap(lambda v: jvp(f, (xb,), (v,)), in_dims=1, out_dims=0)(V)  # (m, B, p) each
    return G[0], T.transpose(0, 1)


def _probe_generator(rng):
    """The probes' own generator: numpy PCG64 seeded with one 63-bit draw from the textdp
    generator ``rng`` (probes are not privacy noise and need no cryptographic stream)."""
    return np.random.Generator(np.random.PCG64(int(rng.integers(0, 2**63 - 1))))


def _rademacher_probes(gen, shape) -> np.ndarray:
    """I.i.d. Rademacher (±1 with probability ½ each) float32 array of ``shape`` from the
    numpy generator ``gen``: one random bit per entry (``gen.bytes`` unpacked, bit 0 → −1,
    bit 1 → +1). The law of the Hutchinson probes; drawn on the CPU, so a seeded run uses the
    same probes on every device."""
    n = int(np.prod(shape))
    bits = np.unpackbits(np.frombuffer(gen.bytes((n + 7) // 8), dtype=np.uint8), count=n)
    v = bits.astype(np.float32)
    v *= 2.0
    v -= 1.0
    return v.reshape(shape)


def _fil_probes(raw, params, xb, yb, probes: int, gen, clip_norm: float):
    """(ĝ (B, p), mean over probes of ‖(∂ĝ/∂x) v‖² (B,)) with distinct Rademacher probes v
    ``(B, probes, d)`` from the numpy generator ``gen`` (:func:`_rademacher_probes`)."""
    import torch

    B, d = xb.shape
    V = torch.from_numpy(_rademacher_probes(gen, (B, probes, d))).to(xb.device)
    G, T = _grads_and_tangents(raw, params, xb, yb, V)
    Gc, sq = _soft_clip_jvp(G, T, clip_norm)
    return Gc, sq.mean(dim=1)


def _exact_traces(raw, params, xb, yb, clip_norm: float, max_floats: int = 1 << 24):
    """Exact Tr(JᵀJ) (B,) of J = ∂ĝ/∂x per example: Σ_j ‖J e_j‖² over all d input directions,
    by forward-mode products on the basis vectors (:func:`_grads_and_tangents`, closed-form
    clip), in column chunks of at most ``max_floats`` tangent values (memory bound)."""
    import torch

    B, d = xb.shape
    p = sum(v.numel() for v in params.values())
    cols = max(1, min(d, max_floats // max(1, B * p)))
    eye = torch.eye(d, dtype=xb.dtype, device=xb.device)
    tr = torch.zeros(B, dtype=torch.float64, device=xb.device)
    for c0 in range(0, d, cols):
        E = eye[c0:c0 + cols].unsqueeze(0).expand(B, -1, -1)  # (B, cols, d)
        G, T = _grads_and_tangents(raw, params, xb, yb, E)
        tr += torch.sum(_soft_clip_jvp(G, T, clip_norm)[1].double(), dim=1)
    return tr


def noisy_clipped_sum(G, bound: float, noise_std: float, rng) -> np.ndarray:
    """Float-safe Σ_i ĝ_i + N(0, noise_std²) for per-example vectors ``G`` (B, p) of norm ≤ ``bound``.

    Steps (see the module docstring): rows above ``bound·(1 − 2⁻³⁰)`` rescaled to it in float64
    (absorbs the float error of the clip); every coordinate rounded toward zero onto the grid
    g = ``gaussian_granularity(noise_std)`` (a power of two; norms can only shrink); the sum of
    the rounded rows (exact: integer multiples of g); plus ``textdp.noise.gaussian(noise_std)``
    noise, exact discrete Gaussian on the same grid with effective std ≥ ``noise_std``.
    Returns the released (p,) float64 vector, exact lattice points. The L2 sensitivity of
    the sum is 2·``bound`` (replace-one), as for real-valued vectors. Float32 and float64 input
    with the same values give the same release (float32 rows far below the bound are rounded in
    float32, which is exact there; see the comment in the code).
    """
    from textdp.noise import gaussian
    from textdp.noise.samplers import gaussian_granularity

    if hasattr(G, "detach"):
        G = G.detach().cpu().numpy()
    G = np.asarray(G)
    g = gaussian_granularity(noise_std)
    if G.shape[0] * bound / g >= 2.0**52:
        raise ParameterError("the noise is too small for the clip norm and batch (the exact lattice sum would "
                             "overflow 2^52 grid steps); raise the noise multiplier or lower the batch size")
    target = float(bound) * (1.0 - 2.0**-30)
    inv = 1.0 / g
    B, p = G.shape
    # Float32 input (the usual case) is rounded in float32, in grid units: x·(1/g) is exact (g a
    # power of two; a result below 1 in magnitude truncates to 0 either way) and so is trunc, for
    # |x|/g < 2^24. Every row whose float32 norm is below target·(1 − margin) has exact norm below
    # target (margin: over four times the relative error bound ≈ (p + 2)·2⁻²⁴/2 of a float32 norm,
    # any summation order; target ≥ 2⁻⁵⁰ keeps underflowing squares negligible), so it is not
    # rescaled and |x| ≤ target < 2^24·g; the other rows go through the float64 path below. The
    # sum is taken in float64 (integers below 2^52). Same released lattice point as the float64
    # path for every row, with half the memory traffic.
    margin = 2.0 * (p + 2) * 2.0**-24
    if (G.dtype == np.float32 and math.isfinite(inv) and inv * g == 1.0 and float(np.float32(inv)) == inv
            and 2.0**-50 <= target and target * inv < 2.0**24 and margin < 0.25):
        with np.errstate(over="ignore", invalid="ignore"):
            n32 = np.sqrt(np.einsum("ij,ij->i", G, G))
        if np.all(np.isfinite(n32)):
            K = np.multiply(G, np.float32(inv))
            np.trunc(K, out=K)  # toward zero: |K g| ≤ |x| coordinate-wise
            near = np.flatnonzero(n32 >= target * (1.0 - margin))
            if near.size:
                K[near] = _lattice_rows(G[near], target, g)  # integers of magnitude < 2^24: exact in float32
            S = K.sum(axis=0, dtype=np.float64) * g  # exact: integers below 2^52 times a power of two
            return S + gaussian(noise_std, S.shape, rng)
    X = _lattice_rows(G, target, g)
    S = X.sum(axis=0) * g  # exact: integers below 2^52 times a power of two
    return S + gaussian(noise_std, S.shape, rng)


def _lattice_rows(G, target: float, g: float) -> np.ndarray:
    """Rows of ``G`` in float64, rescaled to norm ``target`` where above it, divided by the grid
    ``g`` and rounded toward zero: integer-valued float64 ``(rows, p)``."""
    X = np.array(G, dtype=np.float64)  # own copy; float32 → float64 is exact
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    over = norms > target
    if over.any():
        X[over] *= (target / norms[over])[:, None]
    X /= g  # exact (g is a power of two)
    return np.trunc(X, out=X)  # toward zero: |K g| ≤ |x| coordinate-wise


def per_example_fil(model, X, y, clip_norm: float = 1.0, noise_multiplier: float = 1.0, probes: int = 8,
                    exact: bool = False, seed: int | None = None) -> np.ndarray:
    """One step's per-example dFIL η²_i = Tr(J_iᵀJ_i)/(d (σC)²) at the model's current
    parameters, J_i = ∂ĝ_i/∂x_i. ``exact=True`` forms J with ``torch.func.jacfwd`` through the
    soft-clipped gradient map (small models only; the reference the tests check the training
    loop's closed-form computation against); otherwise the Hutchinson estimate with ``probes``
    distinct Rademacher probes, computed as in :func:`train_dpsgd_fil`. Runs on the device of
    the model's parameters. Returns ``(n,)`` float64."""
    import torch
    from torch.func import jacfwd, vmap

    from textdp.models.device import module_device

    check_model(model)
    C = _pos(clip_norm, "clip_norm")
    s = _pos(noise_multiplier, "noise_multiplier")
    Xt, yt = _as_tensors(X, y)
    dev = module_device(model)
    Xt, yt = Xt.to(dev), yt.to(dev)
    d = Xt.shape[1]
    params = {k: v.detach() for k, v in model.named_parameters()}
    if exact:
        clipped = _functions(model, C)
        J = vmap(lambda x, yy: jacfwd(lambda xx: clipped(params, xx, yy))(x))(Xt, yt)  # (n, p, d)
        tr = torch.sum(J * J, dim=(1, 2))
    else:
        from textdp.noise import make_rng

        gen = _probe_generator(make_rng(seed))
        _, tr = _fil_probes(_raw_grad_fn(model), params, Xt, yt, int(probes), gen, C)
    return tr.double().cpu().numpy() / (d * (s * C) ** 2)


_DEFAULT_ORDERS = (1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0, 48.0, 64.0)


@functools.lru_cache(maxsize=32)
def _per_step_rdp(n: int, batch_size: int, noise_multiplier: float, orders: tuple) -> tuple:
    """RDP of ONE step: replace-one without-replacement (dp-accounting) and Poisson
    add/remove (Opacus). RDP composes additively, so T steps are T times this."""
    from dp_accounting import GaussianDpEvent, NeighboringRelation, SampledWithoutReplacementDpEvent
    from dp_accounting.rdp import RdpAccountant
    from opacus.accountants.analysis import rdp as ordp

    kappa = soft_clip_factor_max()
    acc = RdpAccountant(list(orders), NeighboringRelation.REPLACE_ONE)
    acc.compose(SampledWithoutReplacementDpEvent(int(n), int(batch_size),
                                                 GaussianDpEvent(noise_multiplier / (2 * kappa))))
    ro = np.asarray(acc._rdp, dtype=np.float64)  # noqa: SLF001
    ar = np.asarray(ordp.compute_rdp(q=batch_size / n, noise_multiplier=noise_multiplier / kappa, steps=1,
                                     orders=list(orders)), dtype=np.float64)
    return tuple(ro), tuple(ar)


def dpsgd_rdp(n: int, batch_size: int, noise_multiplier: float, steps: int, delta: float,
              orders=None) -> dict:
    """Replace-one RDP of a soft-clipped DP-SGD run (dp-accounting
    ``SampledWithoutReplacementDpEvent(n, B, GaussianDpEvent(σ/(2κ)))`` under REPLACE_ONE,
    composed ``steps`` times) and Opacus's Poisson add/remove ε (noise σ/κ) for comparison.

    Returns {"epsilon2": ε at order 2, "epsilon": (ε, δ)-DP replace-one, "order": optimal α,
    "epsilon_opacus_add_remove", "orders", "rdp"}; ε per record for the whole run.
    """
    import warnings

    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
    from opacus.accountants.analysis import rdp as ordp

    orders = tuple(float(o) for o in (orders or _DEFAULT_ORDERS))
    if 2.0 not in orders:
        orders = tuple(sorted(orders + (2.0,)))
    ro, ar = _per_step_rdp(int(n), int(batch_size), float(noise_multiplier), orders)
    rdp = np.asarray(ro) * int(steps)
    eps, order = compute_epsilon(orders, rdp, delta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimal order is the largest alpha": informational
        eps_o, _ = ordp.get_privacy_spent(orders=list(orders), rdp=np.asarray(ar) * int(steps), delta=delta)
    return {"epsilon2": float(rdp[orders.index(2.0)]), "epsilon": float(eps), "order": float(order),
            "epsilon_opacus_add_remove": float(eps_o), "orders": list(orders), "rdp": rdp.tolist()}


@dataclass
class EpochRecord:
    """One row of the per-epoch table. η values are sqrt of the cumulative dFIL η² per example."""

    epoch: int
    steps: int
    loss: float
    accuracy: float
    eta_median: float
    eta_max: float
    fil_bound_median: float  # 1/η² at the median example: unbiased per-coordinate MSE bound
    fil_bound_min: float  # 1/η² at the most exposed example
    rdp_epsilon2: float
    epsilon: float  # (ε, δ)-DP, replace-one, dp-accounting
    epsilon_opacus_add_remove: float
    seconds: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class DPSGDResult:
    """A finished run: ``history`` per epoch, ``eta2`` the ``(n,)`` cumulative per-example
    dFIL (secret: data-dependent), ``guarantee`` the replace-one RDP curve per record for the
    whole run, ``config`` the settings, ``seed`` the generator description."""

    model: object
    history: list
    eta2: np.ndarray | None
    guarantee: object
    config: dict
    seed: dict = field(default_factory=dict)

    def table(self):
        import pandas as pd

        return pd.DataFrame([h.to_dict() for h in self.history])


def train_dpsgd_fil(
    model,
    X,
    y,
    *,
    epochs: int = 1,
    batch_size: int = 64,
    lr: float = 0.1,
    momentum: float = 0.5,
    weight_decay: float = 0.0,
    clip_norm: float = 1.0,
    noise_multiplier: float = 1.0,
    delta: float = 1e-5,
    probes: int = 1,
    fil: bool = True,
    subsampling: str = "sampled",
    rng=None,
    progress: Callable[[int, int], None] | None = None,
    device: str | None = "cpu",
) -> DPSGDResult:
    """Train ``model`` (any small ``torch.nn.Module`` mapping ``(B, d)`` float32 to
    ``(B, K)`` logits; trained in place) with soft-clipped DP-SGD and account per-example
    FIL and RDP each epoch.

    X: ``(n, d)`` array/tensor/CSR (densified to float32); y: ``(n,)`` int class ids.
    epochs × ⌊n/B⌋ steps; each step a fresh uniform batch of B records (without replacement).
    probes: Hutchinson probes per example per step (distinct; default 1 keeps the cost near
    2× a plain DP-SGD step, and the composition over steps averages the estimate); unused
    with ``subsampling="expected"`` (exact traces).
    subsampling: ``"sampled"`` (default, an estimate: information only at the steps an
    example is sampled; ``"convexity"`` is accepted as its old name), ``"expected"``
    (rigorous per-example bound along the trajectory: q·I₁ for every example at every step,
    exact traces; n/B × d/probes times the FIL work) or ``"wmax"`` (official heuristic).
    fil=False skips the FIL accountant (the plain DP-SGD baseline of the benchmark).
    rng: textdp generator or seed (None: CSPRNG). ε is per record, for the whole run.
    device: ``"cpu"`` (default), ``"cuda"`` / ``"cuda:N"`` or ``"auto"`` (CUDA when
    ``torch.cuda.is_available()``, else CPU; :func:`textdp.models.device.resolve_device`).
    The model is moved there (in place) and the gradients, tangents and updates are computed
    there (closed-form gradients and tangents for a lone ``nn.Linear``, ``torch.func`` for other
    models; see the module docstring); the batch indices, the Hutchinson probes (numpy PCG64,
    :func:`_rademacher_probes`) and the float-safe noise (:func:`noisy_clipped_sum`) are drawn
    on the CPU, so a seeded run draws the same batches, probes and noise on every device (the
    float arithmetic of the gradients, hence the trained weights, differs across devices).
    Raises ParameterError (σ, C, lr, B, δ out of range, batch norm, unknown or absent device)
    / InputError (shapes).
    """
    import torch

    from textdp.models.device import resolve_device
    from textdp.noise import make_rng, random_source

    check_model(model)
    dev = torch.device(resolve_device(device))
    C = _pos(clip_norm, "clip_norm")
    sigma = _pos(noise_multiplier, "noise_multiplier")
    lr = _pos(lr, "lr")
    try:
        delta = float(delta)
    except (TypeError, ValueError):
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}") from None
    if not (0 < delta < 1):
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}")
    if int(epochs) < 1 or int(probes) < 1:
        raise ParameterError("epochs and probes must be ≥ 1")
    if subsampling == "convexity":  # the old name of the single-draw estimate
        subsampling = "sampled"
    if subsampling not in SUBSAMPLING_MODES:
        raise ParameterError(f"subsampling must be one of {', '.join(SUBSAMPLING_MODES)}, got {subsampling!r}")
    Xt, yt = _as_tensors(X, y)
    n, d = Xt.shape
    Xt, yt = Xt.to(dev), yt.to(dev)
    model.to(dev)
    B = int(batch_size)
    if not (1 <= B <= n):
        raise ParameterError(f"batch_size must be in [1, {n}], got {batch_size!r}")
    if delta * n > 1:
        raise ParameterError(f"delta = {delta:g} is ≥ 1/n = {1 / n:.3g}; choose delta < 1/n")
    seed_desc = random_source(rng).describe() if (rng is None or isinstance(rng, int)) else {"seeded": None}
    gen_np = make_rng(rng)
    gen_p = _probe_generator(gen_np)  # probes only (not privacy noise)
    q = B / n
    kappa = soft_clip_factor_max()
    w = 1.0
    if subsampling == "wmax":
        import dp_accounting

        eps_step = dp_accounting.get_epsilon_gaussian(sigma / (2 * kappa), delta)
        w = q / (q + (1 - q) * math.exp(-eps_step))
    raw = _raw_grad_fn(model)
    chunk = 64  # examples per exact-trace call in "expected" mode
    steps_per_epoch = max(n // B, 1)
    eta2 = np.zeros(n) if fil else None
    params = dict(model.named_parameters())
    vel = {k: torch.zeros_like(v) for k, v in params.items()}
    shapes = [(k, v.shape, v.numel()) for k, v in params.items()]
    p_total = sum(s[2] for s in shapes)
    history = []
    total_steps = 0
    for ep in range(1, int(epochs) + 1):
        t0 = time.perf_counter()
        for _ in range(steps_per_epoch):
            idx = np.sort(gen_np.choice(n, size=B, replace=False))
            it = torch.from_numpy(idx).to(dev)
            xb, yb = Xt.index_select(0, it), yt.index_select(0, it)
            detached = {k: v.detach() for k, v in params.items()}
            if fil and subsampling != "expected":  # one pass: gradients (for the clip) and their tangents
                G, tr = _fil_probes(raw, detached, xb, yb, int(probes), gen_p, C)
                eta2[idx] += w * tr.double().cpu().numpy() / (d * (sigma * C) ** 2)
            else:
                G = _soft_clip(_per_example_grads(raw, detached, xb, yb), C)[0]
            if fil and subsampling == "expected":  # every example, every step: q·I₁ with the exact trace
                for c0 in range(0, n, chunk):
                    tr = _exact_traces(raw, detached, Xt[c0:c0 + chunk], yt[c0:c0 + chunk], C)
                    eta2[c0:c0 + chunk] += q * tr.cpu().numpy() / (d * (sigma * C) ** 2)
            S = torch.from_numpy(noisy_clipped_sum(G, kappa * C, sigma * C, gen_np) / B).to(G.dtype).to(dev)
            with torch.no_grad():
                off = 0
                for k, shp, m in shapes:
                    g = S[off:off + m].reshape(shp)
                    if weight_decay:
                        g = g + weight_decay * params[k]
                    off += m
                    vel[k].mul_(momentum).add_(g)
                    params[k].sub_(lr * vel[k])
            total_steps += 1
            if progress is not None:
                progress(total_steps, steps_per_epoch * int(epochs))
        secs = time.perf_counter() - t0
        with torch.no_grad():
            logits = model(Xt)
            loss = float(torch.nn.functional.cross_entropy(logits, yt))
            acc = float((logits.argmax(1) == yt).float().mean())
        acct = dpsgd_rdp(n, B, sigma, total_steps, delta)
        if fil:
            eta = np.sqrt(eta2)
            med, mx = float(np.median(eta)), float(eta.max())
            bmed = 1.0 / med**2 if med > 0 else math.inf
            bmin = 1.0 / mx**2 if mx > 0 else math.inf
        else:
            med = mx = bmed = bmin = float("nan")
        history.append(EpochRecord(ep, total_steps, loss, acc, med, mx, bmed, bmin, acct["epsilon2"],
                                   acct["epsilon"], acct["epsilon_opacus_add_remove"], secs))
    from textdp.accounting.guarantees import RDP

    guarantee = RDP(orders=tuple(acct["orders"]), epsilons=tuple(acct["rdp"]), unit="record", neighbours="replace-one")
    config = {"n": n, "d": d, "params": p_total, "epochs": int(epochs), "batch_size": B, "lr": lr,
              "momentum": momentum, "weight_decay": weight_decay, "clip_norm": C, "noise_multiplier": sigma,
              "delta": delta, "probes": int(probes), "subsampling": subsampling, "subsampling_factor": w,
              "soft_clip_kappa": kappa, "device": str(dev),
              "sampling": "uniform fixed-size batches, without replacement, per step",
              "fil": None if not fil else ("bound per example along the trajectory: q·I₁ every step, exact trace"
                                           if subsampling == "expected" else
                                           "estimate: single draw of the batches, Hutchinson trace"),
              "noise": "float-safe: clipped gradients rounded toward zero onto the discrete Gaussian's grid, "
                       "exact lattice sum + exact discrete Gaussian (textdp.noise)"}
    return DPSGDResult(model, history, eta2, guarantee, config, seed_desc)
