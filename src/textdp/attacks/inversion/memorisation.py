"""How much a target classifier memorises its training texts.

A model-inversion attack can only reveal what the target has memorised, so the
inversion report states it next to the attack's results:

* accuracy on the members (the private training texts) and on non-members
  (held-out texts of the same distribution the target never saw);
* the AUC of the **loss-threshold membership-inference attack** (Yeom,
  Giacomelli, Fredrikson & Jha 2018, "Privacy risk in machine learning", §3.2):
  the attacker calls a text a member when the target's cross-entropy loss on
  it is low. Its AUC is the probability that a random member has a lower loss
  than a random non-member (ties count one half), i.e. the Mann–Whitney U
  statistic divided by ``n_members · n_nonmembers`` (Hanley & McNeil 1982,
  §III). 0.5 = no membership signal; 1.0 = every member has a lower loss than
  every non-member;
* a confidence interval for that AUC: DeLong, DeLong & Clarke-Pearson (1988)
  (distribution-free variance from the placement values, the default) or
  Hanley & McNeil (1982, eq. 2, which assumes exponential score
  distributions), with a normal quantile, clipped to [0, 1].

The AUC is one number about one fixed target and one pair of samples: the
interval is over the sampling of members and non-members, not over retraining.
When every member scores above every non-member both variances are 0 and the
interval collapses to [1, 1]; read such a run as "AUC 1 on n vs m texts".

Everything here is a measurement on the curator's side (it reads the private
training texts): it belongs in the attack's report, never in a release.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

from textdp.errors import ParameterError

__all__ = ["mann_whitney_auc", "auc_confidence_interval", "per_example_loss", "MembershipAUC",
           "loss_membership_auc", "MemorisationReport", "memorisation_report"]

CI_METHODS = ("delong", "hanley-mcneil")


def _scores(x, name: str) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be numbers") from None
    if a.ndim != 1:
        raise ParameterError(f"{name} must be one-dimensional, got shape {a.shape}")
    if a.size == 0:
        raise ParameterError(f"{name} is empty; the AUC needs at least one score on each side")
    if not np.all(np.isfinite(a)):
        raise ParameterError(f"{name} holds {int((~np.isfinite(a)).sum())} non-finite value(s)")
    return a


def _placements(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeLong's placement values: ``v10[i]`` = share of negatives below ``pos[i]`` (ties ½),
    ``v01[j]`` = share of positives above ``neg[j]`` (ties ½). O((n+m) log(n+m))."""
    ns, ps = np.sort(neg), np.sort(pos)
    below = np.searchsorted(ns, pos, side="left")
    ties = np.searchsorted(ns, pos, side="right") - below
    v10 = (below + 0.5 * ties) / len(neg)
    above = len(pos) - np.searchsorted(ps, neg, side="right")
    ties2 = np.searchsorted(ps, neg, side="right") - np.searchsorted(ps, neg, side="left")
    v01 = (above + 0.5 * ties2) / len(pos)
    return v10, v01


def mann_whitney_auc(positive, negative) -> float:
    """AUC = P(positive score > negative score) + ½ P(equal), from the Mann–Whitney U statistic.

    ``positive``: (n,) scores of the positive class (here: members), ``negative``:
    (m,) scores of the negative class; any real units, higher = "more positive".
    Returns a float in [0, 1] (``U / (n·m)``, Hanley & McNeil 1982, §III), computed
    by sorting, never by an n × m comparison. Raises ParameterError for an empty,
    non-1-D or non-finite input.
    """
    pos, neg = _scores(positive, "positive scores"), _scores(negative, "negative scores")
    v10, _ = _placements(pos, neg)
    return float(v10.mean())


def auc_confidence_interval(positive, negative, level: float = 0.95, method: str = "delong") -> tuple[float, float]:
    """Two-sided ``level`` confidence interval ``(lo, hi)`` for :func:`mann_whitney_auc`.

    ``method="delong"`` (default): variance ``S10/n + S01/m`` from the sample variances of
    the placement values (DeLong et al. 1988, §2). ``method="hanley-mcneil"``: variance
    ``(A(1−A) + (n−1)(Q1−A²) + (m−1)(Q2−A²)) / (n·m)`` with ``Q1 = A/(2−A)``,
    ``Q2 = 2A²/(1+A)`` (Hanley & McNeil 1982, eq. 2). Normal quantile, clipped to [0, 1].
    Needs at least 2 scores on each side. Raises ParameterError for bad input, a level
    outside (0, 1) or an unknown method.
    """
    pos, neg = _scores(positive, "positive scores"), _scores(negative, "negative scores")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ParameterError(f"confidence level must be in (0, 1), got {level!r}")
    if method not in CI_METHODS:
        raise ParameterError(f"unknown AUC interval method {method!r}; use {' or '.join(CI_METHODS)}")
    n, m = len(pos), len(neg)
    if n < 2 or m < 2:
        raise ParameterError(f"an AUC interval needs at least 2 scores on each side, got {n} and {m}")
    v10, v01 = _placements(pos, neg)
    a = float(v10.mean())
    if method == "delong":
        var = float(np.var(v10, ddof=1) / n + np.var(v01, ddof=1) / m)
    else:
        q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
        var = (a * (1 - a) + (n - 1) * (q1 - a * a) + (m - 1) * (q2 - a * a)) / (n * m)
    se = math.sqrt(max(var, 0.0))
    z = NormalDist().inv_cdf(0.5 + level / 2)
    return max(0.0, a - z * se), min(1.0, a + z * se)


def per_example_loss(clf, texts: Sequence[str], labels: Sequence[int], max_len: int = 64,
                     batch_size: int = 64) -> np.ndarray:
    """Cross-entropy loss of the classifier on each text, (N,) float64, in nats.

    ``clf``: a :class:`textdp.models.classifier.TextClassifier`; ``labels``: class ids
    (N,) in ``0..C-1``; texts truncated to ``max_len`` WordPieces as in training. Eval
    mode, no gradient, length-sorted batches; log-softmax in float64 so a confident
    prediction keeps a loss above 0 instead of rounding to it. Raises ParameterError
    for empty input, mismatched lengths or a label out of range.
    """
    return _loss_and_pred(clf, texts, labels, max_len, batch_size)[0]


def _loss_and_pred(clf, texts, labels, max_len: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(loss (N,) float64 nats, predicted class (N,) int64)``, one forward pass per text."""
    texts = list(texts)
    y = np.asarray(labels)
    if len(texts) == 0:
        raise ParameterError("no texts to score")
    if y.ndim != 1 or len(y) != len(texts):
        raise ParameterError(f"{len(texts)} texts but {y.size} labels; give one label per text")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= len(clf.labels):
        raise ParameterError(f"labels must be class ids in 0..{len(clf.labels) - 1}")
    logp = log_probabilities(clf, texts, max_len, batch_size)
    return -logp[np.arange(len(texts)), y], logp.argmax(1).astype(np.int64)


def log_probabilities(clf, texts: list[str], max_len: int, batch_size: int) -> np.ndarray:
    """float64 ``(N, classes)`` log-softmax of the target's logits for each text: eval mode, no gradient,
    batches of texts of similar length (the model's training mode is restored after)."""
    import torch

    order = np.argsort([len(r) for r in clf.encode_ids(texts, max_len)], kind="stable")
    logp = np.empty((len(texts), len(clf.labels)), dtype=np.float64)
    dev = clf.device
    was = clf.model.training
    clf.model.eval()
    try:
        with torch.inference_mode():
            for a in range(0, len(texts), batch_size):
                idx = order[a:a + batch_size]
                ids, mask = clf.encode([texts[i] for i in idx], max_len)
                logp[idx] = torch.log_softmax(clf.logits(ids.to(dev), mask.to(dev)).double(), -1).cpu().numpy()
    finally:
        clf.model.train(was)
    return logp


@dataclass(frozen=True)
class MembershipAUC:
    """Loss-threshold membership inference (Yeom et al. 2018): AUC with its interval.

    ``auc`` in [0, 1] (0.5 = no signal); ``ci``: ``(lo, hi)`` at ``level``, by ``ci_method``;
    ``n_members``/``n_nonmembers``: sample sizes; ``member_loss``/``nonmember_loss``:
    mean cross-entropy in nats.
    """

    auc: float
    ci: tuple[float, float]
    level: float
    ci_method: str
    n_members: int
    n_nonmembers: int
    member_loss: float
    nonmember_loss: float

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ci"] = list(self.ci)
        return d


def loss_membership_auc(member_losses, nonmember_losses, level: float = 0.95,
                        ci_method: str = "delong") -> MembershipAUC:
    """AUC of the loss-threshold attack from per-text losses (members (n,), non-members (m,), nats).

    A lower loss means "member": the AUC is :func:`mann_whitney_auc` of the negated
    losses, with :func:`auc_confidence_interval`. Raises ParameterError for bad input.
    """
    mem = _scores(member_losses, "member losses")
    non = _scores(nonmember_losses, "non-member losses")
    auc = mann_whitney_auc(-mem, -non)
    lo, hi = auc_confidence_interval(-mem, -non, level, ci_method)
    return MembershipAUC(auc, (lo, hi), float(level), ci_method, len(mem), len(non), float(mem.mean()),
                         float(non.mean()))


@dataclass(frozen=True)
class MemorisationReport:
    """How much a target memorises: ``train_acc`` (on the members), ``heldout_acc``
    (on the non-members), both fractions in [0, 1]; ``gap`` = their difference;
    ``membership``: the loss-threshold attack's :class:`MembershipAUC`."""

    train_acc: float
    heldout_acc: float
    membership: MembershipAUC

    @property
    def gap(self) -> float:
        return self.train_acc - self.heldout_acc

    def to_dict(self) -> dict:
        return {"train_acc": self.train_acc, "heldout_acc": self.heldout_acc, "gap": self.gap,
                "attack": "loss threshold (Yeom et al. 2018); AUC = Mann-Whitney U / (n m)",
                **{f"mia_{k}": v for k, v in self.membership.to_dict().items()}}

    def line(self) -> str:
        """One line for a terminal."""
        m = self.membership
        return (f"member acc {self.train_acc:.3f}, non-member acc {self.heldout_acc:.3f} (gap {self.gap:+.3f}); "
                f"loss membership-inference AUC {m.auc:.3f} ({100 * m.level:g}% CI {m.ci[0]:.3f}-{m.ci[1]:.3f}, "
                f"{m.n_members} members vs {m.n_nonmembers} non-members)")


def memorisation_report(clf, member_texts: Sequence[str], member_labels: Sequence[int],
                        nonmember_texts: Sequence[str], nonmember_labels: Sequence[int], *, max_len: int = 64,
                        level: float = 0.95, ci_method: str = "delong", batch_size: int = 64) -> MemorisationReport:
    """Accuracy on members and non-members and the loss-threshold membership AUC of ``clf``.

    ``member_texts``/``member_labels``: the texts the target was trained on and their
    class ids (n,); ``nonmember_texts``/``nonmember_labels``: texts of the same
    distribution it never saw (m,). One forward pass per text (:func:`per_example_loss`).
    Raises ParameterError for an empty set, mismatched lengths or bad labels.
    """
    if len(member_texts) == 0 or len(nonmember_texts) == 0:
        raise ParameterError("the memorisation report needs at least one member and one non-member text")
    for what, t, y in (("member", member_texts, member_labels), ("non-member", nonmember_texts, nonmember_labels)):
        if len(t) != len(y):
            raise ParameterError(f"{len(t)} {what} texts but {len(y)} labels; give one label per text")
    lm, pm = _loss_and_pred(clf, member_texts, member_labels, max_len, batch_size)
    ln, pn = _loss_and_pred(clf, nonmember_texts, nonmember_labels, max_len, batch_size)
    acc_m = float((pm == np.asarray(member_labels)).mean())
    acc_n = float((pn == np.asarray(nonmember_labels)).mean())
    return MemorisationReport(acc_m, acc_n, loss_membership_auc(lm, ln, level, ci_method))
