"""A fast, NON-cryptographic generator for simulations: never for releases.

Some sampling in textdp is not a release: the empirical audit (:mod:`textdp.audit`) runs a
mechanism millions of times on the fixed records ``0^n`` and ``1^n`` and keeps only counts, so
nothing its noise touches leaves the process as private data. Such simulations need speed
and independent streams, not unpredictability against an adversary, so they draw from numpy's
``PCG64DXSM`` (O'Neill's permuted congruential generator with the "DXSM" output function,
numpy's recommended generator for many parallel streams) instead of the ChaCha20 CSPRNG of
:mod:`textdp.noise.rng`. On the shared 2-core project machine it gives 110–280 M uniforms per
second against 24–39 M from ChaCha20, 5–7× as many (``benchmarks/bench_audit.py``, floor row).

**Not for releases.** A sanitizer, a noisy statistic, a DP model: anything whose output is
published draws from :func:`textdp.noise.make_rng` (ChaCha20) or the keyed streams of
:mod:`textdp.noise.keyed`, never from here. PCG64DXSM's state can be recovered from its
outputs, so noise drawn from it protects nothing once an adversary sees enough of it.

Seeding: ``seed=None`` seeds from the operating system's CSPRNG (:func:`secrets.randbits`,
256 bits into a :class:`numpy.random.SeedSequence`), so an unseeded run is unpredictable and
never repeats another; ``seed=<int>`` gives a reproducible run. Parallel workers get
independent streams from :meth:`SimulationSource.spawn` (``SeedSequence.spawn``), so a result
depends on the seed and the way work is split into streams, never on the number of threads.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

__all__ = ["SimulationSource", "simulation_source", "simulation_rng", "SIMULATION_GENERATOR"]

#: name of the bit generator (numpy class) behind :func:`simulation_rng`
SIMULATION_GENERATOR = "PCG64DXSM"
SEEDED_NOTE = "non-cryptographic simulation generator, seeded: reproducible; never for releases"
FRESH_NOTE = "non-cryptographic simulation generator, seeded from the OS's CSPRNG; never for releases"


@dataclass(frozen=True)
class SimulationSource:
    """The root of a simulation's generators: a :class:`numpy.random.SeedSequence` and whether
    it came from a user seed (``seed``) or from the OS's CSPRNG (``seed is None``)."""

    seed_sequence: np.random.SeedSequence
    seeded: bool
    seed: int | None = None

    def generator(self) -> np.random.Generator:
        """A generator on the root stream (``PCG64DXSM``)."""
        return np.random.Generator(np.random.PCG64DXSM(self.seed_sequence))

    def spawn(self, n: int) -> list[np.random.Generator]:
        """``n`` independent generators (``SeedSequence.spawn``), one per stream of work."""
        return [np.random.Generator(np.random.PCG64DXSM(s)) for s in self.seed_sequence.spawn(int(n))]

    def describe(self) -> dict:
        """``{"seeded": bool, "seed": int|None, "generator": "PCG64DXSM", "cryptographic": False,
        "note": str}`` (for a result's record of how it was drawn)."""
        return {
            "seeded": self.seeded,
            "seed": self.seed,
            "generator": SIMULATION_GENERATOR,
            "cryptographic": False,
            "note": SEEDED_NOTE if self.seeded else FRESH_NOTE,
        }


def simulation_source(seed: int | None = None) -> SimulationSource:
    """A :class:`SimulationSource`: from 256 bits of the OS's CSPRNG when ``seed`` is None,
    else reproducible from ``seed``. NOT for releases (module docstring).

    Raises :class:`textdp.errors.ParameterError` for a negative or non-integer seed.
    """
    from textdp.errors import ParameterError

    if seed is None:
        return SimulationSource(np.random.SeedSequence(secrets.randbits(256)), seeded=False)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f"seed must be a non-negative integer, got {seed!r}")
    return SimulationSource(np.random.SeedSequence(int(seed)), seeded=True, seed=int(seed))


def simulation_rng(seed: int | None | np.random.Generator = None) -> np.random.Generator:
    """A fast NON-cryptographic numpy Generator (``PCG64DXSM``) for simulations that are not
    releases (audits, Monte-Carlo checks); never for releases, which use
    :func:`textdp.noise.make_rng`.

    ``seed``: None (seeded from the OS's CSPRNG, unpredictable), a non-negative int
    (reproducible) or an existing Generator (returned unchanged). Raises
    :class:`textdp.errors.ParameterError` for a negative or non-integer seed.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    return simulation_source(seed).generator()
