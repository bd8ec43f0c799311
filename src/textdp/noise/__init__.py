"""Noise primitives: random generators and (floating-point-safe) samplers.

Every DP release in textdp draws its noise through this package.
"""

from textdp.noise.rng import RandomSource, make_rng, random_source, seed_mode, spawn

__all__ = ["RandomSource", "make_rng", "random_source", "seed_mode", "spawn"]
