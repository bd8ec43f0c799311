"""The bound-versus-attack figure (Guo et al. 2022, Fig. 3 style)."""

from __future__ import annotations

import numpy as np

__all__ = ["plot_attack_vs_bound"]


def plot_attack_vs_bound(result, path, title: str | None = None) -> None:
    """Scatter of per-record empirical attack MSE (y) against the dFIL bound 1/η² (x), log-log,
    with the diagonal "bound" line; records below it (bound violated by the not-exactly-unbiased
    attack) in red; the RDP bound as a dashed horizontal line when it is > 0. Writes ``path``
    (PNG/PDF by suffix) atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from textdp.data.io import atomic_output

    ok = np.isfinite(result.mse) & (result.mse > 0)
    x, y = result.fil_bound[ok], result.mse[ok]
    below = y < x
    fig, ax = plt.subplots(figsize=(5, 4.2), dpi=120)
    ax.scatter(x[~below], y[~below], s=10, alpha=0.7, label=f"attack MSE ≥ bound ({int((~below).sum())})")
    ax.scatter(x[below], y[below], s=12, color="red", label=f"below bound ({int(below.sum())})")
    lo, hi = float(min(x.min(), y.min())) * 0.8, float(max(x.max(), y.max())) * 1.25
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="lower bound (dFIL, unbiased)")
    if result.rdp_bound > 0:
        ax.axhline(result.rdp_bound, color="gray", ls="--", lw=1, label="RDP bound (Thm 1)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("predicted lower bound 1/η² (per-coordinate MSE)")
    ax.set_ylabel("informed attack's empirical MSE")
    ax.set_title(title or f"σ = {result.sigma:g}, λ = {result.lam:g}, {result.trials} draws")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    suffix = str(path).rsplit(".", 1)[-1].lower()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format=suffix if suffix in ("png", "pdf", "svg") else "png")
    plt.close(fig)
