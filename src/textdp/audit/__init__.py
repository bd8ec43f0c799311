"""Empirical privacy-loss auditing (``textdp audit``).

The neighbouring-dataset sanity check of Habernal (ACL 2022) with exact confidence
bounds, a stronger data-driven attack, the closed-form oracle and the published grid.

Public API::

    audit_mechanism(mechanism, epsilon, n, samples, alpha, seed) -> AuditResult
    audit_dims(mechanism, epsilon, dims, samples, ...) -> list[AuditResult]
    empirical_epsilon_lower_bound(counts_D, counts_D2, alpha) -> EpsilonBound
    selected_event_bound(sel_D, sel_D2, eval_D, eval_D2, alpha) -> SelectedEvent
    laplace_oracle(epsilon, n, scale=None), majority_vote_oracle(p0, p1, n), zoo_oracle(name, epsilon, n)
    audit_sanitizer(mech_or_target, ...) -> MetricAuditResult   (metric-DP audit of word sanitizers: textdp.audit.metric)
    run_grid(...), write_grid_outputs(...)   (the published habernal2022 grid)
    one_run_audit(scores, included, beta, delta) -> OneRunAudit   (one-run ε lower bound, Steinke et al. 2023)
    audit_dpsgd(epsilon, delta, canaries, ...) -> DPSGDAudit        (one-run audit of DP-SGD on a text classifier)

The audit's noise is a simulation, not a release: it is drawn from the fast non-cryptographic
generator of :func:`textdp.noise.simulation_rng` (PCG64DXSM), and every output says so
(``simulation_statement``).

Importing this package registers the audit zoo (:mod:`textdp.mechanisms.zoo`).
"""

from textdp.mechanisms import zoo as _zoo  # noqa: F401  (registers the audit zoo)
from textdp.audit.core import (
    AuditResult,
    Mechanism,
    audit_dims,
    audit_mechanism,
    format_epsilon,
    resolve_mechanism,
    simulation_statement,
)
from textdp.audit.oracle import laplace_oracle, majority_vote_oracle, zoo_oracle
from textdp.audit.stats import (
    EpsilonBound,
    SelectedEvent,
    clopper_pearson_lower,
    clopper_pearson_upper,
    empirical_epsilon_lower_bound,
    selected_event_bound,
)

__all__ = [
    "AuditResult", "Mechanism", "audit_mechanism", "audit_dims", "resolve_mechanism", "format_epsilon",
    "simulation_statement",
    "laplace_oracle", "majority_vote_oracle", "zoo_oracle",
    "EpsilonBound", "SelectedEvent", "clopper_pearson_lower", "clopper_pearson_upper",
    "empirical_epsilon_lower_bound", "selected_event_bound",
]

from textdp.audit.grid import GRIDS, GridResult, GridSpec, load_published, plot_grid, run_grid, summary_text, write_grid_outputs  # noqa: E402

__all__ += ["GRIDS", "GridResult", "GridSpec", "load_published", "plot_grid", "run_grid", "summary_text",
            "write_grid_outputs"]

from textdp.audit.metric import MetricAuditResult, MetricClaim, audit_sanitizer, claim_from_guarantee  # noqa: E402

__all__ += ["MetricAuditResult", "MetricClaim", "audit_sanitizer", "claim_from_guarantee"]

from textdp.audit.dpsgd import DPSGDAudit, audit_dpsgd  # noqa: E402  (torch and Opacus are imported when it runs)
from textdp.audit.one_run import OneRunAudit, one_run_audit  # noqa: E402

__all__ += ["OneRunAudit", "one_run_audit", "DPSGDAudit", "audit_dpsgd"]
