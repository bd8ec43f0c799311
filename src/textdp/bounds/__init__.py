"""How much can an attacker reconstruct? Lower bounds on reconstruction error, upper bounds on success.

Implements Guo, Karrer, Chaudhuri & van der Maaten, "Bounding Training Data Reconstruction
in Private (Deep) Learning" (ICML 2022): the (2, ε)-RDP bound (Theorem 1), the Cramér–Rao
bound from Fisher information leakage (Theorem 2), FIL of the Gaussian mechanism, of output
perturbation and of DP-SGD (with a per-example FIL accountant), and the informed attack
that checks the bounds. See docs/bounds.md.

Reconstruction success (:mod:`textdp.bounds.rero`): Hayes, Mahloujifar & Balle (NeurIPS 2023)
and Kaissis et al. (2023) bound the probability that any reconstruction succeeds, 1 − f(κ) at
the prior's baseline κ, from dp-accounting's privacy-loss distributions; for token sanitizers
the exact Bayes optimum sits beside it (:func:`token_reconstruction`). The comparison figure
with Guo's bounds and the measured attacks is :mod:`textdp.bounds.rero_compare`.

Units: every bound is a per-coordinate mean squared error E‖ẑ − z‖²/d in the data's
units², for one record (replace-one). ε values are per record (per document for the
embedding mechanism), for the whole release (one run of training).
"""

from textdp.bounds.curves import (
    MECHANISMS,
    MechanismCurve,
    discrete_laplace_rdp,
    gaussian_rdp,
    laplace_rdp,
    mechanism_curve,
    mechanism_from_card,
    randomized_response_rdp,
    read_card_for_bounds,
)
from textdp.bounds.features import TextFeatures, add_bias, text_features
from textdp.bounds.fil import cramer_rao_mse_bound, fil_from_jacobian, fil_mse_bound, gaussian_fisher_information
from textdp.bounds.glm import (
    AttackResult,
    GLMFit,
    attack_experiment,
    fit_glm,
    glm_informed_attack,
    influence_jacobian,
    output_perturbation_sensitivity,
    per_sample_fil,
)
from textdp.bounds.mechanisms import (
    DEFAULT_ORDERS,
    EmbeddingGaussianMechanism,
    GaussianMechanism,
    OutputPerturbation,
    gaussian_rdp_curve,
)
from textdp.bounds.rdp import (
    epsilon2_from_approx_dp,
    epsilon2_from_guarantee,
    epsilon2_from_pure_dp,
    epsilon2_from_rdp_curve,
    epsilon2_gaussian,
    mia_advantage_bound,
    mse_to_std,
    rdp_mse_lower_bound,
)
from textdp.bounds.rero import (
    RERO_MECHANISMS,
    ReRoBound,
    TokenReconstruction,
    approx_dp_rero_bound,
    gaussian_rero_bound,
    laplace_rero_bound,
    randomized_response_rero_bound,
    rero_bound,
    rero_bound_from_pld,
    rero_mechanism,
    token_reconstruction,
)
from textdp.mechanisms.registry import MechanismInfo, register

__all__ = [
    "rdp_mse_lower_bound", "mse_to_std", "mia_advantage_bound",
    "epsilon2_gaussian", "epsilon2_from_pure_dp", "epsilon2_from_approx_dp", "epsilon2_from_rdp_curve",
    "epsilon2_from_guarantee",
    "MECHANISMS", "MechanismCurve", "mechanism_curve", "mechanism_from_card", "read_card_for_bounds",
    "randomized_response_rdp", "discrete_laplace_rdp", "laplace_rdp", "gaussian_rdp",
    "gaussian_fisher_information", "fil_from_jacobian", "fil_mse_bound", "cramer_rao_mse_bound",
    "GLMFit", "fit_glm", "influence_jacobian", "per_sample_fil", "output_perturbation_sensitivity",
    "glm_informed_attack", "attack_experiment", "AttackResult",
    "GaussianMechanism", "OutputPerturbation", "EmbeddingGaussianMechanism", "gaussian_rdp_curve", "DEFAULT_ORDERS",
    "TextFeatures", "text_features", "add_bias",
    "train_dpsgd_fil", "DPSGDResult", "soft_clip_factor_max",
    "RERO_MECHANISMS", "ReRoBound", "rero_mechanism", "rero_bound", "rero_bound_from_pld", "gaussian_rero_bound",
    "approx_dp_rero_bound", "laplace_rero_bound", "randomized_response_rero_bound", "TokenReconstruction",
    "token_reconstruction",
]


def __getattr__(name):  # torch is imported only when the DP-SGD accountant is used
    if name in ("train_dpsgd_fil", "DPSGDResult", "soft_clip_factor_max", "per_example_fil"):
        from textdp.bounds import dpsgd

        return getattr(dpsgd, name)
    raise AttributeError(name)


register(MechanismInfo(
    name="bounds.gaussian", factory=GaussianMechanism, capability="bounds",
    description="Gaussian mechanism f(D) + N(0, σ²I) with RDP and Fisher information (Guo et al. 2022)",
    tags=("rdp", "fil"),
))
register(MechanismInfo(
    name="bounds.output_perturbation", factory=OutputPerturbation, capability="bounds",
    description="Output-perturbed L2-regularised logistic/linear regression θ* + N(0, σ²I)",
    tags=("rdp", "fil", "glm"),
))
register(MechanismInfo(
    name="bounds.embedding_gaussian", factory=EmbeddingGaussianMechanism, capability="bounds",
    description="Clipped text embeddings + N(0, σ²I), per document",
    tags=("rdp", "fil", "text"),
))
