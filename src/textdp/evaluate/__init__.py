"""Utility and privacy of sanitized text (``textdp evaluate``).

* :mod:`textdp.evaluate.utility` -- downstream utility: train on sanitized text, test
  on sanitized and clean text; models ``tfidf`` (TF-IDF + logistic regression) and
  fine-tuned transformers (``minilm``, a local folder or a hub name).
* :mod:`textdp.evaluate.privacy` -- the Bayes-optimal mechanism-aware inversion of a
  textdp sanitizer (informed prior by default) next to its exact optimum, the
  mask-token inference attack, N_w / S_w.
* :mod:`textdp.evaluate.pretrain` -- sanitization-aware MLM pretraining vs plain.
* :mod:`textdp.evaluate.sweep` -- sanitize → train → attack over mechanisms × ε, with
  a resumable cache; :mod:`textdp.evaluate.report` -- CSV/JSON, plots, HTML report.
* :mod:`textdp.evaluate.compare` -- mechanisms at equal measured privacy (``textdp compare``): the ε
  meeting a Bayes-attack (or N_w) target per mechanism, the utility there, frontier plot and report.

Quick start::

    from textdp.evaluate import SweepConfig, run_sweep
    res = run_sweep(SweepConfig("rotten-tomatoes", ["santext", "fbdd"], [1, 3], max_docs=500,
                                attacks=["bayes"], seed=0), "eval-out")
    print(res.rows[["mechanism", "epsilon", "utility_sanitized", "bayes_top1", "bayes_optimum_top1"]])
"""

from textdp.evaluate.privacy import (PRIORS, aligned_tokens, bayes_attack, channel_for, deniability_summary,
                                     mask_token_attack, token_counts)
from textdp.evaluate.sweep import CLEAN, SweepConfig, SweepResult, load_task, run_sweep
from textdp.evaluate.utility import TfidfModel, TransformerModel, UtilityModel, evaluate_utility, make_model, score

__all__ = ["SweepConfig", "SweepResult", "run_sweep", "load_task", "CLEAN", "aligned_tokens", "bayes_attack",
           "channel_for", "deniability_summary", "mask_token_attack", "token_counts", "PRIORS", "TfidfModel", "TransformerModel",
           "UtilityModel", "evaluate_utility", "make_model", "score"]
