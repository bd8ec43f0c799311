"""Sweep outputs: results table (CSV/JSON), privacy-utility plots (PNG) and a
self-contained HTML report (plots embedded as base64, the results table, one privacy
card per cell). Nothing in the HTML refers to another file or to the network."""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from textdp.evaluate.sweep import epsilon_text

__all__ = ["write_report", "plot_privacy_utility", "render_html", "epsilon_column"]

_COLORS = {"santext": "#1f77b4", "santext+": "#2ca02c", "fbdd": "#d62728"}
_ATTACKS = (("bayes_top1", "Bayes-optimal inversion, top-1 success"),
            ("bayes_top5", "Bayes-optimal inversion, top-5 success"),
            ("mask_success", "mask-token inference success"))


def epsilon_column(eps) -> str:
    """ε in a results table: three decimals ("3.000", "16.500") when they are exact and short, else
    its exact text (:func:`textdp.evaluate.sweep.epsilon_text`: "0.0001", "1e+06", "1000001.0"), so
    two cells never read alike; "–" for the clean baseline."""
    if eps is None or (isinstance(eps, float) and math.isnan(eps)):
        return "–"
    fixed = f"{float(eps):.3f}"
    return fixed if float(fixed) == float(eps) and len(fixed) <= 7 else epsilon_text(eps)


def _mpl():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def plot_privacy_utility(df: pd.DataFrame, attack: str, label: str, path: Path, utility: str = "utility_sanitized"):
    """Utility (y) against attack success (x): one curve per mechanism over ε (points
    labelled with ε), the clean-text baseline as a star and a dashed line."""
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(6.4, 4.6), dpi=110)
    clean = df[df["mechanism"] == "none"]
    for mech, g in df[df["mechanism"] != "none"].groupby("mechanism", sort=False):
        if attack not in g or g[attack].isna().all():
            continue
        g = g.sort_values("epsilon")
        ax.plot(g[attack], g[utility], "o-", color=_COLORS.get(mech), label=mech)
        for _, r in g.iterrows():
            ax.annotate(f"ε={epsilon_text(r['epsilon'])}", (r[attack], r[utility]), textcoords="offset points", xytext=(4, 4),
                        fontsize=7)
    if len(clean) and utility in clean:
        cu = float(clean[utility].iloc[0])
        ax.axhline(cu, ls="--", color="grey", lw=1, label="clean text")
        if attack in clean and not pd.isna(clean[attack].iloc[0]):
            ax.plot([clean[attack].iloc[0]], [cu], "*", ms=12, color="black")
    metric = df["metric"].dropna().iloc[0] if "metric" in df and df["metric"].notna().any() else "accuracy"
    ax.set_xlabel(f"{label} (lower = more private)")
    ax.set_ylabel(f"{metric} on {'sanitized' if utility == 'utility_sanitized' else 'clean'} test text")
    ax.set_title(f"privacy–utility: {label.split(',')[0]}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def _plot_vs_eps(df: pd.DataFrame, path: Path):
    plt = _mpl()
    cols = [c for c in ("utility_sanitized", "utility_clean", "bayes_top1", "mask_success") if c in df]
    fig, axes = plt.subplots(1, len(cols), figsize=(3.3 * len(cols), 3.3), dpi=110, squeeze=False)
    clean = df[df["mechanism"] == "none"]
    for ax, c in zip(axes[0], cols):
        for mech, g in df[df["mechanism"] != "none"].groupby("mechanism", sort=False):
            g = g.sort_values("epsilon")
            ax.plot(g["epsilon"], g[c], "o-", color=_COLORS.get(mech), label=mech)
            if c == "bayes_top1" and "bayes_optimum_top1" in g and g["bayes_optimum_top1"].notna().any():
                ax.plot(g["epsilon"], g["bayes_optimum_top1"], ":", color=_COLORS.get(mech),
                        label=f"{mech} optimum")
        if len(clean) and c in clean and not pd.isna(clean[c].iloc[0]):
            ax.axhline(float(clean[c].iloc[0]), ls="--", color="grey", lw=1, label="clean")
        ax.set_xlabel("ε per token")
        opt = c == "bayes_top1" and "bayes_optimum_top1" in df and df["bayes_optimum_top1"].notna().any()
        ax.set_title(c.replace("_", " ") + (" (dotted: exact optimum)" if opt else ""), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}"
    return html.escape(str(v))


_TABLE_COLS = ["mechanism", "epsilon", "utility_sanitized", "utility_clean", "majority_rate", "epochs",
               "train_cpu_seconds", "bayes_top1", "bayes_top5", "bayes_optimum_top1", "bayes_optimum_top5",
               "bayes_prior_top1", "mask_success", "mask_defence", "share_changed", "N_w_median", "S_w_mean",
               "seconds"]


def _prior_text(prior) -> str:
    """How the report names the Bayes attack's prior (HTML)."""
    if str(prior) == "informed":
        return ("the <b>informed</b> prior (the test split's own token distribution: the attacker who knows the "
                "distribution the tokens are drawn from; its expected success is the optimum)")
    return (f"a {html.escape(str(prior))} prior (a weaker, mismatched attacker: its success can fall well below "
            "the optimum)")


def _model_note(df: pd.DataFrame, cfg) -> str:
    """`` (fine-tuned …)`` for transformer rows: pooling, epochs, training CPU time; the
    majority-class rate of the test split (the accuracy of always guessing one class)."""
    parts = []
    if "pooling" in df and df["pooling"].notna().any():
        parts.append(f"{html.escape(str(df['pooling'].dropna().iloc[0]))} pooling")
    if "epochs" in df and df["epochs"].notna().any():
        parts.append(f"{int(df['epochs'].dropna().max())} epoch(s)")
    if "train_cpu_seconds" in df and df["train_cpu_seconds"].notna().any():
        parts.append(f"{df['train_cpu_seconds'].dropna().mean():.0f} CPU s of fine-tuning per cell")
    opts = {k: v for k, v in (cfg.model_options or {}).items() if not callable(v)}
    if opts:
        parts.append(html.escape(json.dumps(opts, default=str)))
    note = f" (fine-tuned: {', '.join(parts)})" if parts else ""
    if "majority_rate" in df and df["majority_rate"].notna().any():
        note += f"; majority-class rate of the test split {df['majority_rate'].dropna().iloc[0]:.3f},"
    return note


def render_html(df: pd.DataFrame, cards: dict, cfg, images: dict[str, Path]) -> str:
    """The report as one HTML string (images read from ``images`` and embedded)."""
    cols = [c for c in _TABLE_COLS if c in df.columns]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(epsilon_column(r.get(c))) if c == 'epsilon' else _fmt(r.get(c))}"
                                    "</td>" for c in cols) + "</tr>" for r in df.to_dict("records"))
    figs = []
    for title, p in images.items():
        b64 = base64.b64encode(Path(p).read_bytes()).decode("ascii")
        figs.append(f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{b64}">'
                    f"<figcaption>{html.escape(title)}</figcaption></figure>")
    card_html = []
    for key, c in cards.items():
        den = c.get("plausible_deniability") or {}
        params = c.get("parameters") or {}
        card_html.append(
            f"<div class='card'><h3>{html.escape(key)}</h3>"
            f"<p><b>guarantee</b>: {html.escape(str(c.get('guarantee_text', '')))}</p>"
            + (f"<p><b>parameters</b>: {html.escape(json.dumps(params, default=str))}</p>" if params else "")
            + (f"<p><b>N_w</b> median {den.get('N_w_median', float('nan')):.3f}, <b>S_w</b> mean "
               f"{den.get('S_w_mean', float('nan')):.1f} ({den.get('N_w_S_w_draws')} draws, "
               f"{'exact' if den.get('N_w_S_w_exact') else 'sampled'})</p>" if den else "")
            + (f"<p><b>randomness</b>: {html.escape(str((c.get('seed') or {}).get('note', '')))}</p>"
               if c.get("seed") else "")
            + "</div>")
    cfg_d = {k: v for k, v in asdict(cfg).items() if k != "model_options"}
    model_note = _model_note(df, cfg)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>textdp evaluate: {html.escape(cfg.dataset)}</title>
<style>
body{{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right}}
th{{background:#f3f3f3}} figure{{display:inline-block;margin:8px}} img{{max-width:520px}}
.card{{border:1px solid #ddd;border-radius:6px;padding:6px 12px;margin:6px 0;font-size:13px}}
code{{background:#f5f5f5}}
</style></head><body>
<h1>Privacy–utility report: {html.escape(cfg.dataset)}</h1>
<p>Model <code>{html.escape(str(cfg.model))}</code>{model_note} trained on sanitized train text; utility on sanitized test text
(the SanText protocol) and on clean test text. Privacy on the sanitized test split: the <b>Bayes-optimal
mechanism-aware inversion</b> argmax<sub>x</sub> p(y|x)·π(x) with {_prior_text(cfg.prior)} (headline;
top-1 and top-5 success measured on the sanitized tokens, <code>bayes_top1</code>, <code>bayes_top5</code>; for FBDD the
likelihood is approximated by the noise density) next to the <b>exact optimum</b> Σ<sub>y</sub> max<sub>x</sub>
π(x)·p(y|x) of any attacker who sees one sanitized token, π the test split's token distribution and p the
mechanism's exact law (<code>bayes_optimum_top1</code>, <code>bayes_optimum_top5</code>; not computed for FBDD, which
has no closed form; tokens without an embedding are left out of both), the <b>mask-token
inference attack</b> (an MLM predicts each masked sanitized position; defence rate = 1 − success), and the
plausible-deniability statistics N<sub>w</sub> (share of draws that keep w) and S<sub>w</sub> (distinct outputs).
ε is per token. The row <code>none</code> is the clean-text baseline.</p>
<p><i>Not a release:</i> {html.escape(NOT_A_RELEASE)}.</p>
<h2>Plots</h2>
{''.join(figs)}
<h2>Results</h2>
<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<h2>Privacy cards</h2>
{''.join(card_html)}
<h2>Settings</h2>
<pre>{html.escape(json.dumps(cfg_d, indent=2, default=str))}</pre>
</body></html>
"""


NOT_A_RELEASE = ("an evaluation is computed from the clear text (clean accuracy, attacks scored against the "
                 "original tokens): neither this report nor the sanitized text kept in cache/ is a DP release, "
                 "and nothing is recorded in the privacy-budget ledger; release text with textdp sanitize")


def write_report(df: pd.DataFrame, cards: dict, cfg, out: Path) -> dict:
    """Write ``results.csv``, ``results.json``, the PNG plots and ``report.html`` into
    ``out`` (each file atomically). Returns name → path."""
    from textdp.data.io import atomic_output

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    images: dict[str, Path] = {}
    for col, label in _ATTACKS:
        if col in df and df.loc[df["mechanism"] != "none", col].notna().any():
            p = out / f"privacy_utility_{col}.png"
            with atomic_output(p) as tmp:
                plot_privacy_utility(df, col, label, Path(tmp))
            images[f"utility vs {label}"] = p
            paths[p.stem] = p
    p = out / "metrics_vs_epsilon.png"
    with atomic_output(p) as tmp:
        _plot_vs_eps(df, Path(tmp))
    images["utility and attack success against ε"] = p
    paths[p.stem] = p
    with atomic_output(out / "results.csv") as tmp:
        df.to_csv(tmp, index=False)
    paths["results.csv"] = out / "results.csv"
    cfg_d = {k: v for k, v in asdict(cfg).items() if k != "model_options"}
    recs = json.loads(df.to_json(orient="records"))
    with atomic_output(out / "report.html") as tmp:
        Path(tmp).write_text(render_html(df, cards, cfg, images), encoding="utf-8")
    paths["report.html"] = out / "report.html"
    with atomic_output(out / "results.json") as tmp:  # written last: marks a finished report
        Path(tmp).write_text(json.dumps({"config": cfg_d, "results": recs, "cards": cards, "dp_release": False,
                                    "note": NOT_A_RELEASE}, indent=2,
                                        default=str), encoding="utf-8")
    paths["results.json"] = out / "results.json"
    return paths
