"""Random generators for DP noise.

Default: a cryptographically secure generator, ChaCha20 (``randomgen.ChaCha`` with
20 rounds) whose 256-bit key is taken directly from the operating system's entropy
source (:func:`secrets.randbits`; not through ``numpy.random.SeedSequence``, whose
pool holds at most 128 bits), wrapped in a :class:`numpy.random.Generator` so that
every vectorised numpy sampler can draw from it in bulk. Child generators
(:meth:`RandomSource.spawn`) are keyed by SHA-256 of the parent key and the child's
index. Token sanitizers draw through per-record keyed streams instead
(:mod:`textdp.noise.keyed`).

Seeded mode: ``seed=<int>`` keys the same ChaCha20 stream from
``numpy.random.SeedSequence(seed)``. The output is reproducible, which is what a
research run wants and exactly what a release must not have: every card records
``"seeded": true`` with the note ``"not for release"``.

Parallel workers never share a stream: :func:`spawn` derives independent child
generators from one :class:`~numpy.random.SeedSequence` (the official SanText
code's workers repeated each other's noise).

The global numpy state (``np.random.seed``, ``np.random.laplace`` ...) is never used.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field

import numpy as np

_CHACHA: list = []  # [randomgen.ChaCha or None], filled on first use (randomgen's import is ~40 ms)


def _chacha():
    """``randomgen.ChaCha`` (imported on first use), or None without randomgen."""
    if not _CHACHA:
        try:  # randomgen is a core dependency; the fallback only keeps imports working in odd envs
            from randomgen import ChaCha
        except ImportError:  # pragma: no cover - exercised only without randomgen
            ChaCha = None
        _CHACHA.append(ChaCha)
    return _CHACHA[0]


def _chacha_available() -> bool:
    """Whether :func:`_chacha` gives the class, without importing randomgen when not done yet."""
    if _CHACHA:
        return _CHACHA[0] is not None
    import importlib.util

    return importlib.util.find_spec("randomgen") is not None


def __getattr__(name: str):
    if name == "_ChaCha":  # the class, for callers that import it by its former module-level name
        return _chacha()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["RandomSource", "make_rng", "spawn", "seed_mode"]

SEEDED_NOTE = "seeded: reproducible, not for release"
SECURE_NOTE = "cryptographically secure (ChaCha20 keyed from OS entropy)"


def _bitgen(seq: np.random.SeedSequence) -> np.random.BitGenerator:
    _ChaCha = _chacha()
    if _ChaCha is not None:
        return _ChaCha(seed=seq, rounds=20)
    return np.random.PCG64(seq)  # pragma: no cover


def _keyed(key: int) -> np.random.Generator:
    """The secure generator of a release: ChaCha20 keyed from OS entropy. Without a working
    randomgen a release has no cryptographically secure generator: MissingPackageError (never a
    silent fallback to a non-cryptographic one)."""
    _ChaCha = _chacha()
    if _ChaCha is None:
        from textdp.errors import MissingPackageError

        raise MissingPackageError("randomgen (the ChaCha20 generator of every release's noise) cannot be imported: "
                                  "pip install randomgen; a run with --seed (not for release) works without it")
    return np.random.Generator(_ChaCha(key=key, rounds=20))


@dataclass(frozen=True)
class RandomSource:
    """A seed sequence (seeded runs) or a 256-bit key (secure runs), and whether it came from a
    user seed.

    ``seed_sequence`` is the root of a seeded run; ``key`` the OS-drawn 256-bit ChaCha20 key
    of a secure run (never written anywhere: ``repr`` hides it); ``seeded`` tells cards
    whether the run is reproducible (not for release).
    """

    seed_sequence: np.random.SeedSequence | None
    seeded: bool
    seed: int | None = None
    key: int | None = field(default=None, repr=False)

    def generator(self) -> np.random.Generator:
        """A generator on the root stream."""
        if self.key is not None:
            return _keyed(self.key)
        return np.random.Generator(_bitgen(self.seed_sequence))

    def spawn(self, n: int) -> list[np.random.Generator]:
        """``n`` independent generators for parallel workers (SeedSequence.spawn when seeded;
        keys SHA-256(key, i) otherwise)."""
        if self.key is not None:
            kb = self.key.to_bytes(32, "little")
            return [_keyed(int.from_bytes(hashlib.sha256(b"textdp/spawn/v1\x00" + kb + i.to_bytes(8, "little"))
                                          .digest(), "little")) for i in range(int(n))]
        return [np.random.Generator(_bitgen(s)) for s in self.seed_sequence.spawn(n)]

    def describe(self) -> dict:
        """The card entry: ``{"seeded": bool, "seed": int|None, "generator": str, "note": str}``."""
        return {
            "seeded": self.seeded,
            "seed": self.seed,
            # a secure source cannot draw without ChaCha20 (_keyed raises); a seeded one falls back to PCG64
            "generator": "ChaCha20" if not self.seeded or _chacha() is not None else "PCG64",
            "note": SEEDED_NOTE if self.seeded else SECURE_NOTE,
        }


def random_source(seed: int | None = None) -> RandomSource:
    """A :class:`RandomSource`: OS entropy when ``seed`` is None, else reproducible.

    Raises :class:`textdp.errors.ParameterError` for a negative or non-integer seed.
    """
    from textdp.errors import ParameterError

    if seed is None:
        return RandomSource(None, seeded=False, key=secrets.randbits(256))
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f"seed must be a non-negative integer, got {seed!r}")
    return RandomSource(np.random.SeedSequence(int(seed)), seeded=True, seed=int(seed))


def make_rng(seed: int | None | np.random.Generator = None) -> np.random.Generator:
    """A numpy Generator for DP noise: CSPRNG (ChaCha20, OS entropy) by default.

    ``seed`` may be ``None`` (secure, fresh), a non-negative int (reproducible,
    not for release) or an existing Generator (returned unchanged).
    """
    if isinstance(seed, np.random.Generator):
        return seed
    return random_source(seed).generator()


def spawn(rng: np.random.Generator, n: int) -> list[np.random.Generator]:
    """``n`` independent child generators of ``rng`` (numpy's Generator.spawn)."""
    return list(rng.spawn(n))


def seed_mode(seed: int | None) -> dict:
    """Card entry for a run with this seed (see :meth:`RandomSource.describe`)."""
    return random_source(seed).describe()
