"""Noise primitives: random generators and samplers.

Every DP release in textdp draws its noise through this package.
"""

from textdp.noise.rng import RandomSource, make_rng, random_source, seed_mode, spawn
from textdp.noise.samplers import (
    categorical_from_log_weights,
    gamma,
    gaussian,
    laplace,
    randomized_response,
    uniform_direction,
)

__all__ = [
    "RandomSource", "make_rng", "random_source", "seed_mode", "spawn",
    "laplace", "gaussian", "gamma", "uniform_direction", "randomized_response", "categorical_from_log_weights",
]
