"""The audit zoo: simple and deliberately broken mechanisms on ``[0,1]^n`` records.

These are the mechanisms of the neighbouring-dataset sanity check of
Habernal (ACL 2022, "How reparametrization trick broke differentially-private
text representation learning", Sec. 4 and the official ``experiment.py``).
One record is a vector ``x in [0,1]^n`` (float64); the query is the identity,
whose L1 sensitivity on ``[0,1]^n`` is ``n``; every mechanism releases a
vector of the same shape (local DP, unit = one record).

Every mechanism is a callable ``mech(x, rng) -> y`` with ``x`` an ``(N, n)``
float64 array of records (rows are records) and ``rng`` a
:class:`numpy.random.Generator` (from :func:`textdp.noise.make_rng`), and
exposes ``.guarantee`` (the guarantee it *claims*, as data), ``.broken`` and
``.reason``.

========================  =====================================================  =========================
name                      output per coordinate                                  claimed guarantee
========================  =====================================================  =========================
``copy``                  ``x`` unchanged                                        none (NoPrivacy)
``random``                fair random bit, independent of ``x``                  ε-DP (true: 0-DP)
``laplace``               ``x + b·L``, ``L ~ Laplace(0,1)``, ``b = n/ε``         ε-DP for the ideal real law;
                          (float inverse-CDF sampler: NOT float-safe)            its float outputs are not
``adept``                 ``x + b·L`` with ``b = 1/ε`` whatever ``n`` (BROKEN)   ε-DP (false for n ≥ 2)
``dptext``                ``x + b·T``, ``T = −sgn(U)ln(1−2|U|)``, ``U~U(0,1)``,  ε-DP (false for every ε)
                          NaN → 0, ``b = n/ε`` (BROKEN)
``wrong-sensitivity``     ``½·(x + (n/ε)·L)`` (official code only; halves the     ε-DP (true: post-
                          output, not the sensitivity)                           processing of Laplace)
========================  =====================================================  =========================

The broken replicas exist to be caught by :mod:`textdp.audit`; do not use them
for anything else.

Float safety (``float_safe``): every mechanism here except ``copy``, ``random`` and
``laplace-secure`` adds textbook floating-point noise. Its *ideal* real-valued law has the
stated guarantee, but the float outputs do not: the low-order bits of ``x + b·L`` depend on
``x`` (Mironov 2012), and a low-bit attack separates the outputs of neighbouring inputs,
so the privacy loss of the float implementation is unbounded. The audit's bit statistic
(a coordinate ``>= 0.5``) cannot see this, so ``laplace`` passes the audit *as a model of
the ideal law*; ``float_safe = False`` and ``float_note`` say so in the registry, the
audit's output and docs/audit.md. Only ``laplace-secure`` is a release mechanism.

Sufficient statistic (the audit's fast path): for all of these mechanisms the
coordinates of one output are independent given the input, so on the
constant inputs ``0^n`` and ``1^n`` the number of coordinates ``>= 0.5`` of one
record is ``Binomial(n, p)`` with ``p = bit_probability(value)`` in closed form
(derivations in each docstring). ``tests/audit/test_fastpath.py`` checks this
against the full-noise path.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from textdp.accounting.guarantees import Guarantee, NoPrivacy, PureDP
from textdp.errors import ParameterError
from textdp.mechanisms.registry import MechanismInfo, register
from textdp.noise import laplace_mechanism as _secure_laplace_mechanism

__all__ = [
    "ZooMechanism",
    "CopyMechanism",
    "RandomMechanism",
    "LaplaceMechanism",
    "ADePTLaplaceMechanism",
    "DPTextLaplaceMechanism",
    "WrongSensitivityLaplaceMechanism",
    "SecureLaplaceMechanism",
    "HABERNAL2022_MECHANISMS",
    "ZOO",
    "make_zoo_mechanism",
]


def _check_eps_n(epsilon: float, n: int) -> tuple[float, int]:
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise ParameterError(f"epsilon must be a number, got {epsilon!r}") from None
    if not math.isfinite(eps) or eps <= 0:
        raise ParameterError(f"epsilon must be a positive finite number, got {epsilon!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or int(n) < 1:
        raise ParameterError(f"dimension n must be a positive integer, got {n!r}")
    return eps, int(n)


def _as_records(x: np.ndarray, n: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != n:
        raise ParameterError(f"records must be an (N, {n}) array, got shape {x.shape}")
    return x


_FLOAT_NOTE = ("not float-safe: textbook floating-point noise, whose low-order bits separate the outputs of "
               "neighbouring inputs (Mironov 2012); the guarantee holds for the ideal real-valued law only")


@dataclass
class ZooMechanism:
    """Base class: a per-coordinate mechanism on ``(N, n)`` float64 records.

    ``epsilon``: the ε the mechanism is run with (per record, replace-one);
    ``n``: record dimension. Subclasses implement :meth:`__call__` and
    :meth:`bit_probability`.
    """

    epsilon: float
    n: int
    name: str = field(default="", init=False)
    broken: bool = field(default=False, init=False)
    reason: str = field(default="", init=False)
    #: False when the outputs are textbook float noise: the ideal law's guarantee does not hold
    #: for the float values (the low-order bits separate neighbouring inputs, Mironov 2012)
    float_safe: bool = field(default=False, init=False)
    float_note: str = field(default=_FLOAT_NOTE, init=False)

    def __post_init__(self):
        self.epsilon, self.n = _check_eps_n(self.epsilon, self.n)

    @property
    def guarantee(self) -> Guarantee:
        """The guarantee the mechanism claims: ε-DP per record (replace-one)."""
        return PureDP(epsilon=self.epsilon, unit="record", neighbours="replace-one")

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def bit_probability(self, value: float) -> float:  # pragma: no cover
        """P(one output coordinate >= 0.5) when the input record is the constant ``value`` (0 or 1)."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name, "epsilon": self.epsilon, "n": self.n, "broken": self.broken,
                "reason": self.reason, "float_safe": self.float_safe, "float_note": self.float_note,
                "guarantee": self.guarantee.to_dict()}


@dataclass
class CopyMechanism(ZooMechanism):
    """No privacy: returns the records unchanged (the upper baseline; the audit must flag it at every ε)."""

    def __post_init__(self):
        super().__post_init__()
        self.name = "copy"
        self.float_safe = True
        self.float_note = "float-safe: no noise (outputs the input; no privacy claimed)"
        self.reason = "releases the input unchanged (no privacy at all)"

    @property
    def guarantee(self) -> Guarantee:
        return NoPrivacy(reason="identity: releases the record unchanged", unit="record")

    def __call__(self, x, rng):
        return _as_records(x, self.n).copy()

    def bit_probability(self, value):
        return 1.0 if value >= 0.5 else 0.0


@dataclass
class RandomMechanism(ZooMechanism):
    """Maximum privacy: each coordinate is a fair random bit independent of the input (0-DP, so ε-DP for every ε)."""

    def __post_init__(self):
        super().__post_init__()
        self.name = "random"
        self.float_safe = True
        self.float_note = "float-safe: outputs fair random bits, independent of the input"

    def __call__(self, x, rng):
        x = _as_records(x, self.n)
        return rng.integers(0, 2, size=x.shape, dtype=np.uint8).astype(np.float64)

    def bit_probability(self, value):
        return 0.5


# ---------------------------------------------------------------------------------------- backends
# The float noise of the zoo (and the audit's per-record statistics, textdp.audit.core) is computed
# by numba kernels (textdp.mechanisms._zoo_kernels, textdp.audit._kernels), imported on first use.
# A short audit computes the same values with numpy instead (the official float formulas, bit for
# bit the kernels' values: tests/audit/test_simulation_rng.py) and skips numba's start-up (import
# and cached kernels, 0.5-1 s); once NUMPY_ELEMENT_BUDGET values of a kind have been computed with
# numpy in a process (about as long as that start-up), or the kernels are already loaded, the
# kernels take over. $TEXTDP_AUDIT_BACKEND=numba|numpy forces one.

#: environment variable choosing the backend of the zoo's noise and the audit's statistics
BACKEND_ENV = "TEXTDP_AUDIT_BACKEND"
#: values of each kind (noise, statistics) computed with numpy in one process before numba takes over
NUMPY_ELEMENT_BUDGET = 1 << 24
_numpy_used: dict[str, int] = {}


def use_numpy_backend(kind: str, size: int, kernels: str) -> bool:
    """Whether ``size`` values of ``kind`` are computed with numpy rather than the numba module
    ``kernels`` (see the comment above); counts them against the budget when so."""
    backend = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if backend not in ("auto", "numba", "numpy"):
        raise ParameterError(f"${BACKEND_ENV} must be auto, numba or numpy, got {backend!r}")
    if backend == "numpy":
        return True
    if backend == "numba" or kernels in sys.modules:
        return False
    used = _numpy_used.get(kind, 0)
    if used + size > NUMPY_ELEMENT_BUDGET:
        return False
    _numpy_used[kind] = used + size  # threads may race here: the budget is a heuristic, not a limit
    return True


def _laplace_add(x: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """``x + scale·L``, ``L = −sgn(U−½)·ln(1−2|U−½|)``, ``U = rng.random(x.shape)`` (the official formula)."""
    if not use_numpy_backend("noise", x.size, "textdp.mechanisms._zoo_kernels"):
        from textdp.mechanisms._zoo_kernels import laplace_add

        return laplace_add(x, scale, rng)
    u = rng.random(x.shape)
    with np.errstate(divide="ignore"):
        return x + scale * (-np.sign(u - 0.5) * np.log(1 - 2 * np.abs(u - 0.5)))


def _dptext_add(x: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """``x + scale·T``, DPText's ``T = −sgn(U)·ln(1−2|U|)`` with NaN → 0, ``U = rng.random(x.shape)``."""
    if not use_numpy_backend("noise", x.size, "textdp.mechanisms._zoo_kernels"):
        from textdp.mechanisms._zoo_kernels import dptext_add

        return dptext_add(x, scale, rng)
    u = rng.random(x.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = -np.sign(u) * np.log(1 - 2 * np.abs(u))
    t[np.isnan(t)] = 0.0
    return x + scale * t


def _inverse_cdf_laplace(shape, rng: np.random.Generator) -> np.ndarray:
    """Standard Laplace by the inverse CDF, as in the paper and the official code:
    ``L = −sgn(U − ½)·ln(1 − 2|U − ½|)`` with ``U ~ Uniform[0, 1)`` (float64), written with
    numpy operations (the reference the tests compare the zoo's vectorised kernel with)."""
    v = rng.random(shape)
    v -= 0.5
    s = np.sign(v)
    np.abs(v, out=v)
    v *= -2.0
    np.log1p(v, out=v)
    v *= -s
    return v


@dataclass
class LaplaceMechanism(ZooMechanism):
    """The Laplace mechanism, correct for its ideal real-valued law and NOT float-safe:
    ``x + Laplace(0, b)`` per coordinate, ``b = n/ε``
    (L1 sensitivity of the identity on ``[0,1]^n`` is ``n``; Dwork & Roth 2014, Thm 3.6).

    The noise is the textbook float inverse-CDF sampler of the paper and the official code,
    ``L = −sgn(U−½)·ln(1−2|U−½|)`` from one uniform ``U = rng.random()`` per coordinate, computed
    with the official code's float operations in vectorised blocks (numba passes around numpy's
    SIMD ``log``, ``textdp.mechanisms._zoo_kernels``; numpy alone for short audits), so for the
    same uniforms the outputs are bit-identical to the official ``x + b·L``. A faithful replica for the sanity check, not a release
    mechanism: floating-point Laplace leaks through its low-order bits (Mironov 2012), and a
    low-bit attack separates its outputs for neighbouring inputs, so the float mechanism is
    not ε-DP (``float_safe = False``). textdp's release primitive is ``laplace-secure``.

    Bit probability: a coordinate of ``0 + bL`` is ``>= 0.5`` with probability
    ``q = ½·exp(−1/(2b))``; a coordinate of ``1 + bL`` with ``1 − q``.
    """

    def __post_init__(self):
        super().__post_init__()
        self.name = "laplace"

    @property
    def scale(self) -> float:
        return self.n / self.epsilon

    def __call__(self, x, rng):
        return _laplace_add(_as_records(x, self.n), self.scale, rng)

    def bit_probability(self, value):
        q = 0.5 * math.exp(-1.0 / (2.0 * self.scale))
        return q if value < 0.5 else 1.0 - q


@dataclass
class ADePTLaplaceMechanism(LaplaceMechanism):
    """BROKEN replica of ADePT (Krishna et al. 2021): Laplace noise of scale ``b = 1/ε``
    whatever the dimension ``n``; the true L1 sensitivity on ``[0,1]^n`` is ``n``, so the
    real guarantee is only ``nε``-DP. Claims ε-DP; the audit catches it for n ≥ 2
    (Habernal 2021, 2022)."""

    def __post_init__(self):
        super().__post_init__()
        self.name = "adept"
        self.broken = True
        self.reason = "noise scale 1/ε ignores the dimension (true L1 sensitivity is n): really nε-DP"

    @property
    def scale(self) -> float:
        return 1.0 / self.epsilon


@dataclass
class DPTextLaplaceMechanism(ZooMechanism):
    """BROKEN replica of DPText's reparametrised Laplace sampling (Beigi et al. 2019):
    ``x + b·T`` with ``T = −sgn(U)·ln(1 − 2|U|)`` and ``U ~ Uniform(0, 1)`` (the formula needs
    ``U ~ Uniform(−½, ½)``), NaN set to 0, ``b = n/ε``.

    For ``U < ½`` the noise is Exp(1)·b; for ``U > ½`` the log of a negative number is NaN,
    replaced by 0. So the noise is never negative: inputs 1^n never produce a coordinate
    below 1 and the privacy loss is infinite for every ε. Bit probability: for input 0,
    ``P(bT >= ½) = ½·exp(−1/(2b))``; for input 1 it is 1.
    """

    def __post_init__(self):
        super().__post_init__()
        self.name = "dptext"
        self.broken = True
        self.reason = "inverse-CDF with U~U(0,1) instead of U(-1/2,1/2): one-sided noise, infinite privacy loss"

    @property
    def scale(self) -> float:
        return self.n / self.epsilon

    def __call__(self, x, rng):
        # x + b·T, T = −sgn(U)·ln(1 − 2|U|), NaN → 0, in vectorised blocks (textdp.mechanisms._zoo_kernels)
        return _dptext_add(_as_records(x, self.n), self.scale, rng)

    def bit_probability(self, value):
        if value >= 0.5:
            return 1.0
        return 0.5 * math.exp(-1.0 / (2.0 * self.scale))


@dataclass
class WrongSensitivityLaplaceMechanism(LaplaceMechanism):
    """``½·(x + (n/ε)·L)``: the official code's ``LaplaceMechanismWrongSensitivity`` (not in the
    paper). It halves the whole output, not the sensitivity; that is post-processing of the
    correct Laplace mechanism, so it *is* ε-DP (not broken). Bit probability: input 0,
    ``P(L >= 1/b) = ½·exp(−ε/n)``; input 1, ``P(L >= 0) = ½``."""

    def __post_init__(self):
        super().__post_init__()
        self.name = "wrong-sensitivity"

    def __call__(self, x, rng):
        y = super().__call__(x, rng)
        y *= 0.5
        return y

    def bit_probability(self, value):
        if value >= 0.5:
            return 0.5
        return 0.5 * math.exp(-1.0 / self.scale)


@dataclass
class SecureLaplaceMechanism(ZooMechanism):
    """textdp's own release primitive on ``[0,1]^n``: :func:`textdp.noise.laplace_mechanism`
    with L1 sensitivity ``n`` (snapped to a power-of-two grid, exact discrete Laplace noise
    with the discretisation cost paid in scale). Audited to show the release path keeps ε.
    No closed-form bit probability is used (no fast path, no oracle)."""

    def __post_init__(self):
        super().__post_init__()
        self.name = "laplace-secure"
        self.float_safe = True
        self.float_note = "float-safe: exact discrete Laplace on a power-of-two grid (textdp.noise)"

    def __call__(self, x, rng):
        x = _as_records(x, self.n)
        # one call per record row would be slow; the grid and scale depend on the number of
        # coordinates per call, so process the (N, n) block at once (sensitivity n per record)
        return _secure_laplace_mechanism(x, float(self.n), self.epsilon, rng)

    def bit_probability(self, value):
        return None


#: short name -> class, in the order of the published grid (Habernal 2022, B.5)
ZOO: dict[str, type[ZooMechanism]] = {
    "adept": ADePTLaplaceMechanism,
    "wrong-sensitivity": WrongSensitivityLaplaceMechanism,
    "laplace": LaplaceMechanism,
    "copy": CopyMechanism,
    "random": RandomMechanism,
    "dptext": DPTextLaplaceMechanism,
    "laplace-secure": SecureLaplaceMechanism,
}

#: the class names of the official ``experiment.py`` (keys of ``results.json``)
OFFICIAL_NAMES: dict[str, str] = {
    "adept": "LaplaceMechanismADePT",
    "wrong-sensitivity": "LaplaceMechanismWrongSensitivity",
    "laplace": "LaplaceMechanism",
    "copy": "NoPrivacyMechanism",
    "random": "CompletelyRandomMechanism",
    "dptext": "BeigiEtAlLaplaceMechanism",
}

#: the six mechanisms of the published grid, in its order
HABERNAL2022_MECHANISMS = ("adept", "wrong-sensitivity", "laplace", "copy", "random", "dptext")


def make_zoo_mechanism(name: str, epsilon: float, n: int) -> ZooMechanism:
    """Build the zoo mechanism ``name`` (a key of :data:`ZOO`, or ``"audit.<name>"``).

    Raises :class:`ParameterError` for an unknown name, ε <= 0 or n < 1.
    """
    key = name[len("audit."):] if name.startswith("audit.") else name
    if key not in ZOO:
        raise ParameterError(f"unknown zoo mechanism {name!r}; known: {', '.join(ZOO)}")
    return ZOO[key](epsilon, n)


def _factory(cls):
    def factory(epsilon: float = 1.0, n: int = 1) -> ZooMechanism:
        return cls(epsilon, n)

    factory.__name__ = f"make_{cls.__name__}"
    factory.__doc__ = f"Build a :class:`{cls.__name__}` (epsilon per record, dimension n)."
    return factory


_DESCRIPTIONS = {
    "copy": "identity (no privacy; audit baseline)",
    "random": "fair random bits (0-DP; audit baseline)",
    "laplace": "Laplace mechanism on [0,1]^n, scale n/ε: ε-DP as an ideal law, NOT float-safe (float sampler)",
    "adept": "ADePT-style Laplace, scale 1/ε ignoring n (BROKEN replica)",
    "dptext": "DPText reparametrised Laplace with U~U(0,1) (BROKEN replica)",
    "wrong-sensitivity": "½·(x + Laplace(n/ε)) from the official code (ε-DP by post-processing)",
    "laplace-secure": "textdp.noise.laplace_mechanism on [0,1]^n (sensitivity n): the release primitive",
}

for _name, _cls in ZOO.items():
    _probe = _cls(1.0, 1)
    register(MechanismInfo(
        name=f"audit.{_name}",
        factory=_factory(_cls),
        capability="audit",
        description=_DESCRIPTIONS[_name],
        broken=_probe.broken,
        reason=_probe.reason,
        tags=("zoo", "habernal2022") + (("no-privacy",) if _name == "copy" else ())
             + (() if _probe.float_safe else ("not-float-safe",)),
    ))
del _name, _cls, _probe
