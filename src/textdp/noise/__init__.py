"""Noise primitives: random generators and floating-point-safe samplers.

Every DP release in textdp draws its noise through this package. The samplers
are exact integer constructions (discrete Laplace / Gaussian after Canonne,
Kamath & Steinke 2020) on power-of-two grids, exact Bernoulli draws, and an
integer-weighted exponential mechanism; see :mod:`textdp.noise.samplers` and
``docs/trust.md``.

Simulations that are not releases (the empirical audit) may draw from the fast
non-cryptographic :func:`simulation_rng` (PCG64DXSM, :mod:`textdp.noise.simulation`);
releases never do.
"""

from textdp.noise.rng import RandomSource, make_rng, random_source, seed_mode, spawn
from textdp.noise.simulation import SimulationSource, simulation_rng, simulation_source
from textdp.noise.samplers import (
    DEFAULT_ETA,
    ExactCategorical,
    bernoulli,
    categorical_discretisation_epsilon,
    categorical_from_log_weights,
    categorical_from_weights,
    discrete_gaussian,
    discrete_laplace,
    gamma,
    gaussian,
    gaussian_granularity,
    gaussian_mechanism,
    gaussian_mechanism_params,
    laplace,
    laplace_granularity,
    laplace_mechanism,
    laplace_mechanism_params,
    randomized_response,
    snap_to_grid,
    uniform_direction,
)

__all__ = [
    "RandomSource", "make_rng", "random_source", "seed_mode", "spawn",
    "SimulationSource", "simulation_rng", "simulation_source",
    "laplace", "gaussian", "gamma", "uniform_direction", "randomized_response", "categorical_from_log_weights", "categorical_from_weights",
    "discrete_laplace", "discrete_gaussian", "bernoulli", "ExactCategorical", "categorical_discretisation_epsilon",
    "laplace_mechanism", "gaussian_mechanism", "laplace_mechanism_params", "gaussian_mechanism_params",
    "laplace_granularity", "gaussian_granularity", "snap_to_grid", "DEFAULT_ETA",
]

from textdp.noise.mechanisms import _register as _register_mechanisms  # noqa: E402

_register_mechanisms()
del _register_mechanisms
