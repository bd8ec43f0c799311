"""One optimiser step shared by textdp's training loops (classifier fine-tuning, the
from-scratch MLMs and causal LMs): clear the gradients, back-propagate, clip the
global gradient norm, step the optimiser and the learning-rate schedule.

DP-SGD (:func:`textdp.models.classifier.fine_tune_dp`) does not use it: Opacus clips
per example and adds noise inside its own optimiser step.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["clipped_step"]


def clipped_step(loss, opt, sched, params: Iterable, max_norm: float = 1.0) -> float:
    """``opt.zero_grad``; ``loss.backward()``; clip the global L2 norm of ``params``'
    gradients to ``max_norm``; ``opt.step()``; ``sched.step()`` (skipped when ``sched``
    is None). Returns the loss as a Python float."""
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()
    if sched is not None:
        sched.step()
    return float(loss.detach())
