"""Model inversion against text classifiers: Text Revealer (Zhang, Hidano &
Koushanfar 2022) with the VTG and VMI baselines, metrics and defences.

Entry points: :func:`run_inversion` (the whole experiment) and
:func:`write_report`; building blocks in the submodules ``pplm`` (TR/VTG
generation), ``vmi``, ``templates``, ``metrics``, ``memorisation`` (how much a
target memorises: accuracy gap and loss membership-inference AUC) and ``config``.
Needs the ``nlp`` extra (torch, transformers, scikit-learn).
"""

from textdp.attacks.inversion.config import PRESETS, InversionConfig, preset_config
from textdp.attacks.inversion.metrics import (
    filter_tokens, kendall_topk_distance, lcs_length, match_ground_truth, recovery_rates, topk_ranking,
)
from textdp.attacks.inversion.memorisation import (
    MemorisationReport, loss_membership_auc, mann_whitney_auc, memorisation_report,
)
from textdp.attacks.inversion.pipeline import (
    DEFENCES, METHODS, InversionReport, run_inversion, split_data, summary_markdown, write_report,
)
from textdp.attacks.inversion.pplm import PPLMConfig

__all__ = [
    "run_inversion", "write_report", "split_data", "summary_markdown", "InversionReport", "InversionConfig",
    "PPLMConfig", "preset_config", "PRESETS", "METHODS", "DEFENCES",
    "memorisation_report", "MemorisationReport", "loss_membership_auc", "mann_whitney_auc",
    "filter_tokens", "lcs_length", "match_ground_truth", "recovery_rates", "kendall_topk_distance", "topk_ranking",
]
