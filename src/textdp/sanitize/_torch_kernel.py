"""torch kernel of the secure SanText / SanText+ sampler (CPU or CUDA).

The same law, built the same way, as the CPU sampler (:mod:`textdp.sanitize.sampling`,
whose numba kernels are in :mod:`textdp.sanitize._kernels`), with every step in
float64 / int64 tensors on one torch device. For a block of ``B`` distinct input
words and the ``V`` output words:

1. ``g = (eps/2)^2 d~^2``, ``(B, V)`` float64: one float64 GEMM of the augmented
   centred vectors ``[x - c, |x - c|^2, 1] . (eps/2)^2 [-2 (y - c), 1, |y - c|^2]``
   (``c`` the table's mean). The augmented rows are built on the CPU in numpy by
   the same formulas as :class:`textdp.sanitize.sampling.DistanceKernel`; only the
   product runs on the device.
2. A row's own column (when its word is an output word) is set to 0 (the exact
   distance of a word to itself); ``s = sqrt(max(g, 0))``; the offset ``off`` is 0
   for such rows and ``sqrt(max(min_j g_j, 0))`` (the smallest ``s``) otherwise.
3. ``w_j = exp(max(off - s_j, -700))``, ``scale = (1 - eta) 2^62 / sum_j w_j``,
   ``c_j = rint(w_j scale + eta 2^62 / V)`` as int64 (round half to even, like numba's
   ``rint``), then ``cum = cumsum(c)`` in int64 (``torch.cumsum``, exact).
4. A draw is the smallest ``j`` with ``cum_j > u``, where ``u`` is an exact uniform
   integer in ``[0, cum_{V-1})`` from the token's own keyed ChaCha20 stream
   (:func:`textdp.noise.keyed.keyed_uniform_below`, purpose ``MAIN``), computed on the
   CPU from the totals, exactly as the CPU sampler does; the search is an integer
   binary search on the device (int64 comparisons only). Never ``torch.multinomial``
   and never a float cumulative sum.

Same law, same draws. Both samplers realise ``(1 - eta) softmax(-s) + eta / V`` in
integer weights summing to about ``2^62``, and they use the same uniform for the
same token. The integer weights differ only through the float error of ``exp``
(the numba kernel's polynomial is accurate to a relative ``1e-8``, torch's
``exp`` to a few ulp) and of the row sum (its summation order): a relative
difference below ``1e-8``. A seeded draw therefore agrees with the CPU sampler's
unless its uniform falls between the two samplers' cumulative weights at some
boundary -- a float tie, of probability at most ``sum_j |cum_j - cum'_j| / C``
per draw. Measured on GloVe 6B 50d with the 30,000-word output vocabulary against
the numba kernel: ``1e-8`` to ``2e-6`` per draw for eps 1 to 10 (mean ``9e-7`` at
eps 3: about 0.2 differing tokens in a 274k-token corpus); against the numpy
backend, whose exp is as accurate as torch's, the weights differ by a few units
in ``2^62`` and a tie has probability below ``1e-14`` per draw. The tests check
that every disagreement is such a tie.

Accounting (the additive ``epsilon0`` of :func:`textdp.sanitize.sampling.sampling_epsilon0`):

* ``exp``: CUDA's float64 ``exp`` has a maximum error of at most 2 ulp (CUDA C++
  Programming Guide, appendix "Mathematical Functions", double-precision table;
  NVIDIA states that these bounds come from extensive but not exhaustive tests),
  a relative ``2 * 2^-52`` (:data:`TORCH_EXP_RELATIVE_ERROR`); torch's CPU ``exp``
  (SLEEF's 1-ulp vector exp or the C library's) is within the same bound.
  ``--use_fast_math`` changes only single-precision functions. The CPU kernel
  accounts ``EXP_RELATIVE_ERROR = 1e-8``; the sampler accounts the larger of the
  two bounds (:func:`exp_relative_error`), which is the CPU one, so the accounted
  ``epsilon0`` of a release is the same on every device.
* The GEMM: the bound ``|g~ - g| <= gamma_k sum_i |a_i b_i|`` used there holds for
  any order of summation, with or without fused multiply-adds (an FMA rounds once
  where a product and a sum round twice), so it covers cuBLAS's blocked, split and
  FMA-based float64 reductions (cuBLAS's float64 GEMM is IEEE float64 unless an
  emulated float64 mode is switched on explicitly; textdp never does).
* ``sqrt``, division, the products and sums are IEEE-754 correctly rounded on CUDA
  for float64, as on the CPU; the row sum's error bound ``(V + 16) u`` holds for
  any summation order.
* The rounding to integers is exact arithmetic on floats below ``2^63`` and int64
  sums below ``2^63`` (``sum c`` is within ``V`` of ``2^62``).

Public interface (wired into the mechanisms by ``device=``):
:class:`TorchExpSampler` (``scaled_sq``, ``integer_weights``, ``probabilities``,
``sample``) and :func:`sample_tokens` (a whole ``_exp_sample`` job: distinct
words in blocks, every occurrence of a word at once).
"""

from __future__ import annotations

import numpy as np

from textdp.errors import ParameterError
from textdp.noise import DEFAULT_ETA
from textdp.sanitize import sampling

__all__ = ["TorchExpSampler", "sample_tokens", "TORCH_EXP_RELATIVE_ERROR", "exp_relative_error",
           "DEFAULT_DEVICE_BLOCK_BYTES"]

#: relative error bound of torch's float64 exp on CUDA (2 ulp: 2 * 2^-52) and on the CPU (<= 1 ulp)
TORCH_EXP_RELATIVE_ERROR = 2.0 * 2.0**-52
#: default memory budget of one (B, V) float64 block on a CUDA device (three such blocks are alive at once)
DEFAULT_DEVICE_BLOCK_BYTES = 512 * 2**20
_TWO62 = 4611686018427387904.0  # 2^62
_CLAMP = 700.0


def exp_relative_error() -> float:
    """The relative error of ``exp`` the sampler's ``epsilon0`` must account: the larger of the
    CPU kernel's bound (:data:`textdp.sanitize.sampling.EXP_RELATIVE_ERROR`, 1e-8) and torch's
    (:data:`TORCH_EXP_RELATIVE_ERROR`, 2 ulp); equal to the CPU one."""
    return max(float(sampling.EXP_RELATIVE_ERROR), TORCH_EXP_RELATIVE_ERROR)


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is in the nlp extra
        from textdp.errors import MissingPackageError

        raise MissingPackageError("the torch sampler needs torch; run: pip install 'textdp[nlp]' "
                                  "(or use --device cpu)") from None
    return torch


def _augmented_x(x: np.ndarray, center: np.ndarray) -> np.ndarray:
    """``[x - c, |x - c|^2, 1]`` float64 ``(B, m + 2)`` (as DistanceKernel.scaled_sq builds it)."""
    xc = np.asarray(x, dtype=np.float64) - center
    xa = np.empty((xc.shape[0], xc.shape[1] + 2), dtype=np.float64)
    xa[:, :-2] = xc
    xa[:, -2] = np.einsum("ij,ij->i", xc, xc)
    xa[:, -1] = 1.0
    return xa


class TorchExpSampler:
    """Float-safe exponential-mechanism sampler of SanText on a torch device.

    y: ``(V, m)`` output embeddings (any float dtype, may be a memory map);
    epsilon: the mechanism's epsilon (distances are scaled by ``eps/2``, Yue et al.
    2021, Sec. 4.2); center: float64 ``(m,)`` the whole table's mean
    (:func:`textdp.sanitize.sampling.table_geometry`); eta: the uniform share
    (default ``2**-20``); device: a torch device string (``"cpu"``, ``"cuda"``,
    ``"cuda:N"``; see :func:`textdp.models.device.resolve_device`).
    Device memory: ``8 (m + 2) V`` bytes for the output side, plus three ``(B, V)``
    8-byte blocks while a block is sampled. Raises ParameterError for a bad eta.
    """

    def __init__(self, y: np.ndarray, epsilon: float, center: np.ndarray, *, eta: float = DEFAULT_ETA,
                 device: str = "cpu", chunk_rows: int = 65536):
        torch = _torch()
        v, m = y.shape
        self.eta = float(eta)
        if not 0.0 < self.eta < 1.0 or self.eta * 2.0**52 < v:
            raise ParameterError(f"eta must be in (0, 1) and at least {v * 2.0**-52:.3g} for {v} outcomes")
        self.epsilon = float(epsilon)
        self.center = np.asarray(center, dtype=np.float64)
        self.device = torch.device(device)
        self.v, self.m = v, m
        c2 = (0.5 * self.epsilon) ** 2
        yat = torch.empty((m + 2, v), dtype=torch.float64, device=self.device)
        for s in range(0, v, chunk_rows):  # built on the CPU chunk by chunk (same formulas as DistanceKernel)
            yc = np.asarray(y[s:s + chunk_rows], dtype=np.float64) - self.center
            part = np.empty((m + 2, len(yc)), dtype=np.float64)
            part[:m] = (-2.0 * c2 * yc).T
            part[m] = c2
            part[m + 1] = c2 * np.einsum("ij,ij->i", yc, yc)
            yat[:, s:s + len(yc)] = torch.from_numpy(part).to(self.device)
        self._yaT = yat

    def block_rows(self, block_bytes: int | None = None) -> int:
        """Rows per block: ``block_bytes / (8 V)`` (default 512 MiB on CUDA, 32 MiB on the CPU), at least 1."""
        if block_bytes is None:
            block_bytes = DEFAULT_DEVICE_BLOCK_BYTES if self.device.type == "cuda" else sampling.DEFAULT_BLOCK_BYTES
        return max(1, int(block_bytes) // (8 * max(1, self.v)))

    def scaled_sq(self, x: np.ndarray):
        """float64 ``(B, V)`` tensor on the device: ``(eps/2)^2 d~(x_b, y_j)^2`` (may be slightly
        negative for coincident vectors; :meth:`integer_weights` clamps at 0)."""
        torch = _torch()
        xa = torch.from_numpy(_augmented_x(x, self.center)).to(self.device)
        return torch.matmul(xa, self._yaT)

    def integer_weights(self, g, self_cols):
        """The integer law of each row of ``g`` (float64 ``(B, V)`` tensor on the device,
        **overwritten**): int64 ``(B, V)`` cumulative weights ``cum`` (``cum[:, -1]`` the totals,
        about ``2^62``). ``self_cols``: int ``(B,)`` column of each row's own word or -1."""
        torch = _torch()
        if g.dim() != 2 or g.dtype != torch.float64:
            raise ParameterError("g must be a float64 (rows, outcomes) tensor")
        b, v = g.shape
        sc = torch.as_tensor(np.asarray(self_cols, dtype=np.int64).reshape(-1), device=g.device)
        if sc.shape != (b,) or (b and int(sc.max()) >= v):
            raise ParameterError("self_cols must give one column (or -1) per row")
        has = sc >= 0
        rows = torch.nonzero(has).reshape(-1)
        g[rows, sc[rows]] = 0.0  # d(x, x) = 0 exactly
        off = g.amin(dim=1).clamp_(min=0.0).sqrt_()  # sqrt is monotone: the smallest s
        off = torch.where(has, torch.zeros_like(off), off)
        s = g.clamp_(min=0.0).sqrt_()
        w = s.neg_().add_(off[:, None]).clamp_(min=-_CLAMP).exp_()  # off - s, exactly
        total = w.sum(dim=1)
        scale = (1.0 - self.eta) * _TWO62 / total
        c = w.mul_(scale[:, None]).add_(self.eta * _TWO62 / v).round_().to(torch.int64)
        del w, g
        return torch.cumsum(c, dim=1)

    @staticmethod
    def search(cum, rows, u):
        """Smallest ``j`` with ``cum[rows[k], j] > u[k]`` for every ``k`` (int64 tensors on the
        device; ``0 <= u[k] < cum[rows[k], -1]``): an integer binary search, ``ceil(log2 V)`` steps."""
        torch = _torch()
        v = cum.shape[1]
        lo = torch.zeros_like(u)
        hi = torch.full_like(u, v - 1)
        for _ in range(max(1, int(v - 1).bit_length())):
            mid = (lo + hi) >> 1
            above = cum[rows, mid] > u
            hi = torch.where(above, mid, hi)
            lo = torch.where(above, lo, mid + 1)
        return lo

    def probabilities(self, x: np.ndarray, self_cols) -> np.ndarray:
        """float64 ``(B, V)``: the law :meth:`sample` realises for the rows ``x`` (``c / sum c``)."""
        torch = _torch()
        cum = self.integer_weights(self.scaled_sq(x), self_cols)
        c = torch.diff(cum, dim=1, prepend=torch.zeros((cum.shape[0], 1), dtype=torch.int64, device=cum.device))
        return (c.to(torch.float64) / cum[:, -1:].to(torch.float64)).cpu().numpy()

    def sample(self, x: np.ndarray, self_cols, counts, uniforms) -> np.ndarray:
        """Draws for a block of input words ``x`` (``(B, m)``): ``counts[b]`` draws from row ``b``.

        uniforms: ``f(bounds) -> uint64`` giving draw ``k`` an exact uniform integer in
        ``[0, bounds[k])`` (the sanitizers pass per-token keyed streams,
        :func:`textdp.noise.keyed.keyed_uniform_below`); called once, on the CPU, with the uint64
        totals of the draws' rows in draw order. Returns int64 ``(counts.sum(),)`` output columns:
        the ``counts[0]`` draws of row 0, then those of row 1, ... (as
        :func:`textdp.sanitize.sampling.sample_block`)."""
        torch = _torch()
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (len(x),) or (counts < 0).any():
            raise ParameterError(f"counts must be {len(x)} non-negative integers")
        cum = self.integer_weights(self.scaled_sq(x), self_cols)
        totals = cum[:, -1].cpu().numpy().astype(np.uint64)
        rows = np.repeat(np.arange(len(x), dtype=np.int64), counts)
        u = np.asarray(uniforms(totals[rows]), dtype=np.uint64)
        if u.size and (u >= totals[rows]).any():
            raise ParameterError("a uniform is not below its bound")
        ut = torch.from_numpy(u.astype(np.int64)).to(cum.device)
        return self.search(cum, torch.from_numpy(rows).to(cum.device), ut).cpu().numpy()


def sample_tokens(sampler: TorchExpSampler, vectors, rows: np.ndarray, self_cols: np.ndarray, key, streams,
                  positions, *, block_rows: int | None = None, progress=None) -> np.ndarray:
    """Float-safe exponential-mechanism draws for every token of a job, on ``sampler``'s device.

    vectors: the embedding table (``(N, m)``, indexed by ``rows``); rows: int ``(n,)`` table row
    of each token; self_cols: int ``(n,)`` output column of each token's own word or -1; key:
    the release's :class:`textdp.noise.keyed.ReleaseKey`; streams, positions: int ``(n,)`` each
    token's record index and position (its keyed stream, purpose ``MAIN``); block_rows: distinct
    words per block (default :meth:`TorchExpSampler.block_rows`); progress: called with the number
    of tokens of each finished block. Distinct words are processed in blocks, every occurrence of
    a word at once, as the CPU sampler does, so the draws do not depend on the block size.
    Returns int64 ``(n,)`` output columns (indices into the sampler's ``y``).
    """
    from textdp.noise import keyed

    rows = np.asarray(rows, dtype=np.int64)
    self_cols = np.asarray(self_cols, dtype=np.int64)
    streams = np.asarray(streams, dtype=np.int64)
    positions = np.asarray(positions, dtype=np.int64)
    result = np.empty(len(rows), dtype=np.int64)
    if len(rows) == 0:
        return result
    uniq, first, inverse, counts = np.unique(rows, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    sc = self_cols[first]
    b = max(1, int(block_rows) if block_rows is not None else sampler.block_rows())
    for s in range(0, len(uniq), b):
        e = min(len(uniq), s + b)
        occ = order[bounds[s]:bounds[e]]
        st, pos = streams[occ], positions[occ]
        result[occ] = sampler.sample(
            np.asarray(vectors[uniq[s:e]]), sc[s:e], counts[s:e],
            lambda totals: keyed.keyed_uniform_below(key, st, pos, keyed.MAIN, totals))
        if progress is not None:
            progress(int(bounds[e] - bounds[s]))
    return result
