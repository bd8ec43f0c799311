"""``textdp bounds``: what can an attacker reconstruct? (Guo et al. 2022)

Thin layer over :mod:`textdp.bounds`: parsing, progress, printing.
  textdp bounds mse --epsilon 2 --range 0,100          RDP lower bound on reconstruction MSE
  textdp bounds mse --card model/ --range 0,1          ... through the exact curve of a card's mechanism
  textdp bounds glm rotten-tomatoes --sigma 1e-5 ...   per-record FIL, informed attack, figure
  textdp bounds dpsgd rotten-tomatoes --epochs 3 ...   DP-SGD with per-example FIL next to ε
  textdp bounds rero -m gaussian --sigma 1,2 ...       upper bound on reconstruction success (Hayes et al. 2023)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from textdp.cli._common import err_console, handle_errors, opt_json, opt_overwrite, opt_quiet, opt_seed, out_console, print_json, progress
from textdp.cli._common import parse_floats
from textdp.cli._options import opt_device
from textdp.errors import OutputError, ParameterError

bounds_app = typer.Typer(help="Lower bounds on reconstruction error (RDP and Fisher information), FIL accounting, "
                         "upper bounds on reconstruction success (ReRo).",
                         no_args_is_help=True)


_floats = parse_floats  # shared strict comma-list parser (textdp.cli._common)


def _require(ok: bool, message: str) -> None:
    """Option checks in the CLI's own words (option names, valid ranges), before any work."""
    if not ok:
        raise ParameterError(message)


def _positive(value: float, option: str) -> None:
    import math

    _require(math.isfinite(value) and value > 0, f"{option} must be a positive finite number, got {value:g}")


def _refuse_unused_data_options(ctx: typer.Context, features: str, output: Optional[Path]) -> None:
    """glm, dpsgd: options that do not apply are refused, never silently ignored."""
    from textdp.cli._options import refuse_unused

    if features == "glove":
        refuse_unused(ctx, "sets the TF-IDF vocabulary; --features glove uses mean GloVe vectors", "max_features")
    if output is None:
        refuse_unused(ctx, "replaces an existing --output; no --output is given", "overwrite")


def _check_data_options(features: str, max_features: int, n_records: Optional[int]) -> None:
    _require(features in ("tfidf", "glove"), f"--features must be 'tfidf' or 'glove', got {features!r}")
    _require(max_features >= 1, f"--max-features must be at least 1, got {max_features}")
    _require(n_records is None or n_records == 0 or n_records >= 2,
             f"--n-records must be 0 (all records) or at least 2, got {n_records}")


def _out_dir(output: Optional[Path], overwrite: bool) -> Optional[Path]:
    if output is None:
        return None
    if output.exists() and not output.is_dir():
        raise OutputError(f"output {str(output)!r} is a file; give a folder name")
    if output.exists() and any(output.iterdir()) and not overwrite:
        raise OutputError(f"output folder {str(output)!r} is not empty; pass --overwrite to replace its files")
    if not output.parent.exists():
        raise OutputError(f"folder {str(output.parent)!r} of the output does not exist; create it first")
    output.mkdir(exist_ok=True)
    return output


def _wide():
    """stdout console at least 120 columns wide (tables are not squeezed when piped)."""
    if out_console.is_terminal or out_console.width >= 120:
        return out_console
    from rich.console import Console

    return Console(width=120, highlight=False)


def _write_json(obj, path: Path) -> None:
    from textdp.data.io import atomic_output

    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n", encoding="utf-8")


@bounds_app.command("mse")
@handle_errors
def mse_cmd(
    ctx: typer.Context,
    epsilon: Optional[float] = typer.Option(None, "--epsilon", "-e", help="ε of the mechanism, per record (with "
                                            "--mechanism: the ε that mechanism is run with)."),
    diam: Optional[str] = typer.Option(None, "--diam", help="Data range width per coordinate: one number or a comma list."),
    range_: Optional[str] = typer.Option(None, "--range", help="Data range LO,HI (diam = HI − LO), e.g. 0,100."),
    kind: Optional[str] = typer.Option(None, "--kind", help="What a bare --epsilon is: 'rdp' (Rényi DP at --order; "
                                       "default) or 'dp' (pure ε-DP, through the worst ε-DP mechanism)."),
    order: float = typer.Option(2.0, "--order", help="Rényi order of ε for --kind rdp (≥ 2; the bound needs order 2)."),
    delta: Optional[float] = typer.Option(None, "--delta", help="δ of an (ε, δ) guarantee: needs --mechanism "
                                          "(an (ε, δ) guarantee alone implies no bound); with --mechanism gaussian, "
                                          "σ is calibrated to (ε, δ)."),
    mechanism: Optional[str] = typer.Option(None, "--mechanism", "-m", help="The mechanism, for its exact Rényi "
                                            "curve: randomized-response, laplace, discrete-laplace or gaussian."),
    card: Optional[Path] = typer.Option(None, "--card", help="A privacy card (*.card.json, an output with its card, or "
                                        "a topic-model folder): mechanism and parameters are read from it."),
    categories: Optional[int] = typer.Option(None, "--categories", help="randomized-response: number of categories "
                                             "k (default 2)."),
    reports: Optional[int] = typer.Option(None, "--reports", help="randomized-response: reports one protected "
                                          "change alters (default 1; LP-LDA: 2 bits per replaced word)."),
    scale: Optional[float] = typer.Option(None, "--scale", help="discrete-laplace: noise scale b, P(z) ∝ "
                                          "exp(−|z|/b)."),
    sensitivity: Optional[float] = typer.Option(None, "--sensitivity", help="discrete-laplace: integer L1 "
                                                "sensitivity; gaussian: L2 sensitivity (default 1)."),
    sigma: Optional[float] = typer.Option(None, "--sigma", help="gaussian: noise standard deviation."),
    releases: Optional[int] = typer.Option(None, "--releases", help="laplace, discrete-laplace, gaussian: "
                                           "adaptive releases composed (default 1)."),
    gamma: Optional[float] = typer.Option(None, "--gamma", help="Bias slack γ of a biased attack (Thm 1, biased form)."),
    gamma_mode: str = typer.Option("variation", "--gamma-mode", help="'variation' (|b(z′)−b(z)| ≤ γ) or 'absolute' (|b| ≤ γ)."),
    as_json: bool = opt_json(),
):
    """Lower bound on ANY reconstruction attack's mean squared error (Guo et al. 2022, Theorem 1).

    The bound needs the order-2 Rényi divergence of the mechanism. Give it as --epsilon
    (RDP, or pure DP with --kind dp), or name the mechanism (--mechanism, --card) so its
    exact curve is used. A bare (ε, δ) is refused: it implies no bound.
    """
    from textdp.bounds import (
        epsilon2_from_pure_dp,
        epsilon2_from_rdp_curve,
        mechanism_curve,
        mechanism_from_card,
        mia_advantage_bound,
        mse_to_std,
        rdp_mse_lower_bound,
        read_card_for_bounds,
    )
    from textdp.bounds.curves import MECHANISMS, NO_BOUND_FROM_APPROX_DP
    from textdp.bounds.rdp import check_epsilon

    from textdp.cli._options import refuse_unused

    if gamma is None:
        refuse_unused(ctx, "is the form of the bias slack; it needs --gamma", "gamma_mode")
    if card is not None or mechanism is not None or kind == "dp":
        refuse_unused(ctx, "is the Rényi order of a bare --epsilon with --kind rdp; "
                      + ("the mechanism's exact curve is used" if card is not None or mechanism is not None
                         else "--kind dp has none"), "order")
    mech_opts = {"--categories": categories, "--reports": reports, "--scale": scale, "--sensitivity": sensitivity,
                 "--sigma": sigma, "--releases": releases}
    if card is not None:
        given = [o for o, v in {"--mechanism": mechanism, "--epsilon": epsilon, "--delta": delta, "--kind": kind,
                                **mech_opts}.items() if v is not None]
        _require(not given, f"--card reads the mechanism and its parameters from the card; leave out {', '.join(given)}")
    elif mechanism is not None:
        _require(mechanism in MECHANISMS, f"--mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
        _require(kind is None, "--kind is for a bare --epsilon; with --mechanism the mechanism's own curve is used")
    else:
        given = [o for o, v in mech_opts.items() if v is not None]
        _require(not given, f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --mechanism")
        _require(epsilon is not None, "give --epsilon (and --kind), --mechanism with its parameters, or --card")
        if delta is not None and delta != 0:
            raise ParameterError(f"{NO_BOUND_FROM_APPROX_DP}; name the mechanism that gave it (--mechanism "
                                 f"{'|'.join(MECHANISMS)} with its parameters) or give its --card")
    if kind is None:
        kind = "rdp"
    if card is None and mechanism is None:
        eps = check_epsilon(epsilon)
        if kind == "rdp" and delta is None:
            _require(order >= 2, f"--order must be at least 2 (the bound needs the order-2 Rényi divergence), "
                                 f"got {order:g}")
    if diam is not None and range_ is not None:
        raise ParameterError("give either --diam or --range, not both")
    if range_ is not None:
        lohi = _floats(range_, "--range")
        if len(lohi) != 2 or not lohi[1] > lohi[0]:
            raise ParameterError(f"--range must be LO,HI with HI > LO, got {range_!r}")
        d = [lohi[1] - lohi[0]]
    else:
        d = _floats(diam, "--diam") if diam is not None else [1.0]
    curve = None
    if card is not None:
        card_dict, card_file = read_card_for_bounds(card)
        got = mechanism_from_card(card_dict, source=card_file)
        if isinstance(got, tuple):
            e2, how = got
        else:
            curve, e2, how = got, got.epsilon2, got.describe
    elif mechanism is not None:
        curve = mechanism_curve(mechanism, epsilon=epsilon, delta=delta, categories=categories, reports=reports,
                                scale=scale, sensitivity=sensitivity, sigma=sigma, releases=releases)
        e2, how = curve.epsilon2, curve.describe
    elif kind == "dp":
        e2, how = epsilon2_from_pure_dp(eps), f"{eps:g}-DP (tight: randomized-response χ²)"
    elif kind == "rdp":
        e2 = epsilon2_from_rdp_curve([order], [eps])
        how = f"({order:g}, {eps:g})-RDP" + ("" if order == 2 else " (Rényi divergence grows with the order)")
    else:
        raise ParameterError(f"--kind must be 'rdp' or 'dp', got {kind!r}")
    unb = rdp_mse_lower_bound(e2, d)
    res = {"epsilon": epsilon, "guarantee": how, "epsilon2": e2, "diam": d if len(d) > 1 else d[0],
           "mse_lower_bound_unbiased": unb, "std_lower_bound_unbiased": mse_to_std(unb)}
    if curve is not None:
        res["mechanism"] = curve.to_dict()
    if gamma is not None:
        b = rdp_mse_lower_bound(e2, d, gamma=gamma, gamma_mode=gamma_mode)
        res.update({"gamma": gamma, "gamma_mode": gamma_mode, "mse_lower_bound_biased": b,
                    "std_lower_bound_biased": mse_to_std(b)})
    if card is None and mechanism is None and kind == "dp":
        res["mia_advantage_bound"] = mia_advantage_bound(eps)
    if as_json:
        print_json(res)
        return
    t = Table(title=f"Reconstruction lower bound for {how}", show_header=True)
    t.add_column("attack")
    t.add_column("MSE ≥", justify="right")
    t.add_column("std ≥", justify="right")
    t.add_row("unbiased", f"{unb:.4g}", f"{mse_to_std(unb):.4g}")
    if gamma is not None:
        t.add_row(f"biased (γ = {gamma:g}, {gamma_mode})", f"{res['mse_lower_bound_biased']:.4g}",
                  f"{res['std_lower_bound_biased']:.4g}")
    out_console.print(t)
    src = "exact Rényi curve of the mechanism" if curve is not None else "(2, ε)-RDP value used"
    out_console.print(f"{src}: ε₂ = {e2:.6g}; per-coordinate data range diam = "
                      f"{res['diam']}. An unbiased attacker's guess is off by ±{mse_to_std(unb):.3g} (1 std) or more.")
    if "mia_advantage_bound" in res:
        out_console.print(f"Membership inference: success ≤ {(res['mia_advantage_bound'] + 1) / 2:.1%}.")


@bounds_app.command("glm")
@handle_errors
def glm_cmd(
    ctx: typer.Context,
    dataset: str = typer.Argument("rotten-tomatoes", help="Built-in dataset name."),
    features: str = typer.Option("tfidf", "--features", help="'tfidf' or 'glove' (mean GloVe vectors)."),
    max_features: int = typer.Option(2000, "--max-features", help="TF-IDF vocabulary size."),
    n_records: Optional[int] = typer.Option(2000, "--n-records", help="Train on the first N records (all: 0)."),
    sigma: float = typer.Option(1e-5, "--sigma", help="Output-perturbation noise σ on the weights."),
    lam: float = typer.Option(1e-2, "--lam", help="L2 regularisation λ (objective: mean loss + λ/2 ‖θ‖²)."),
    trials: int = typer.Option(200, "--trials", help="Noise draws for the attack (0: FIL only)."),
    targets: int = typer.Option(100, "--targets", help="How many records the attack targets (at least 1; at "
                                "most --n-records), drawn at random."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Folder for records.csv, summary.json, attack_vs_bound.png."),
    overwrite: bool = opt_overwrite(),
    seed: Optional[int] = opt_seed(),
    quiet: bool = opt_quiet(),
    as_json: bool = opt_json(),
):
    """Output-perturbed logistic regression on text features: per-record FIL bound, RDP bound,
    and the informed attack's empirical MSE (Guo et al. 2022, Fig. 3)."""
    import numpy as np
    import pandas as pd

    from textdp.bounds import OutputPerturbation, attack_experiment, fil_mse_bound, text_features
    from textdp.bounds.plot import plot_attack_vs_bound
    from textdp.data.io import write_table
    from textdp.noise import make_rng, seed_mode

    _check_data_options(features, max_features, n_records)
    _refuse_unused_data_options(ctx, features, output)
    if trials == 0:
        from textdp.cli._options import refuse_unused

        refuse_unused(ctx, "is the number of records the attack targets; --trials 0 runs no attack (FIL bound only)",
                      "targets")
    _positive(sigma, "--sigma")
    _positive(lam, "--lam")
    _require(trials >= 0, f"--trials must be at least 0 (0: FIL bound only, no attack), got {trials}")
    _require(trials == 0 or targets >= 1,
             f"--targets must be at least 1 (the number of records attacked), got {targets}; "
             "use --trials 0 for the FIL bound alone")
    _require(n_records in (None, 0) or targets <= n_records,
             f"--targets {targets} is more than --n-records {n_records}; attack at most {n_records} records")
    out = _out_dir(output, overwrite)
    tf = text_features(dataset, kind=features, max_features=max_features, n_records=n_records or None)
    n = tf.X.shape[0]
    mech = OutputPerturbation(sigma=sigma, lam=lam, n=n, feature_norm_bound=tf.norm_bound)
    rng = make_rng(seed)
    summary = {"dataset": dataset, **tf.info, "sigma": sigma, "lam": lam, "guarantee": mech.guarantee.describe(),
               "rdp_epsilon2": mech.epsilon2, "seed": seed_mode(seed)}
    if trials > 0:
        with progress(quiet) as pb:
            task = pb.add_task("attack draws", total=trials)
            res = attack_experiment(tf.X, tf.y, lam, sigma, trials=trials, n_targets=targets, rng=rng,
                                    feature_norm_bound=tf.norm_bound, diam=tf.diam,
                                    progress=lambda k, t: pb.update(task, completed=k))
        summary.update(res.summary())
        rows = pd.DataFrame({"record": res.targets, "dfil_eta2": res.dfil_trace, "fil_bound": res.fil_bound,
                             "attack_mse": res.mse, "valid_draws": res.valid_draws, "below_bound": res.below_fil})
    else:
        fit = mech.fit(tf.X, tf.y)
        eta2 = mech.per_sample_fil(tf.X, tf.y, fit=fit)
        from textdp.bounds import rdp_mse_lower_bound

        summary.update({"median_fil_bound": float(np.median(fil_mse_bound(eta2))),
                        "min_fil_bound": float(np.min(fil_mse_bound(eta2))),
                        "rdp_mse_bound": rdp_mse_lower_bound(mech.epsilon2, tf.diam)})
        rows = pd.DataFrame({"record": np.arange(n), "dfil_eta2": eta2, "fil_bound": fil_mse_bound(eta2)})
    if out is not None:
        write_table(rows, out / "records.csv")
        _write_json(summary, out / "summary.json")
        if trials > 0:
            plot_attack_vs_bound(res, out / "attack_vs_bound.png",
                                 title=f"{dataset} {features}: σ={sigma:g}, λ={lam:g}, {trials} draws")
        summary["output"] = str(out)
    if as_json:
        print_json(summary)
        return
    t = Table(title=f"Output-perturbed logistic regression on {dataset} ({features}, n = {n}, d = {tf.info['d']})")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    for k in ("rdp_epsilon2", "rdp_mse_bound", "median_fil_bound", "median_attack_mse", "share_below_fil_bound",
              "n_below_fil_bound", "max_reconstruction_error_at_zero_noise"):
        if k in summary and summary[k] is not None:
            v = summary[k]
            t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    out_console.print(t)
    out_console.print("Per-record FIL values depend on the data: keep records.csv private.")
    if out is not None and not quiet:
        err_console.print(f"wrote {out}/records.csv, summary.json" + (", attack_vs_bound.png" if trials > 0 else ""),
                          markup=False)


@bounds_app.command("dpsgd")
@handle_errors
def dpsgd_cmd(
    ctx: typer.Context,
    dataset: str = typer.Argument("rotten-tomatoes", help="Built-in dataset name."),
    features: str = typer.Option("tfidf", "--features", help="'tfidf' or 'glove'."),
    max_features: int = typer.Option(1000, "--max-features", help="TF-IDF vocabulary size."),
    n_records: Optional[int] = typer.Option(2000, "--n-records", help="Train on the first N records (all: 0)."),
    model: str = typer.Option("logreg", "--model", help="'logreg' or 'mlp'."),
    hidden: int = typer.Option(32, "--hidden", help="MLP hidden width."),
    epochs: int = typer.Option(3, "--epochs"),
    batch_size: int = typer.Option(64, "--batch-size"),
    lr: float = typer.Option(0.5, "--lr"),
    clip: float = typer.Option(1.0, "--clip", help="Soft-clip norm C."),
    noise_multiplier: float = typer.Option(1.0, "--noise-multiplier", "--sigma", help="Noise std / C."),
    delta: float = typer.Option(1e-5, "--delta"),
    probes: int = typer.Option(1, "--probes", help="Distinct Hutchinson probes per example per step."),
    subsampling: str = typer.Option("sampled", "--subsampling", help="FIL accounting: 'sampled' (an estimate: one "
                                    "draw of the batches; ~37 % of examples show η = 0 after one epoch), 'expected' "
                                    "(a per-example bound: q·I every step for every example, exact trace; slower) or "
                                    "'wmax' (official code, heuristic)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="CSV of the per-epoch table."),
    overwrite: bool = opt_overwrite(),
    seed: Optional[int] = opt_seed(),
    quiet: bool = opt_quiet(),
    as_json: bool = opt_json(),
    device: str = opt_device(),
):
    """Train a small DP-SGD text classifier with per-example FIL accounting next to its RDP ε."""
    import torch

    from textdp.bounds import text_features
    from textdp.bounds.dpsgd import train_dpsgd_fil
    from textdp.data.io import check_output_path, write_table
    from textdp.models.device import resolve_device

    device = resolve_device(device)  # cuda without a visible device: one line, exit 2, before any work
    _check_data_options(features, max_features, n_records)
    _refuse_unused_data_options(ctx, features, output)
    _require(model in ("logreg", "mlp"), f"--model must be 'logreg' or 'mlp', got {model!r}")
    if model != "mlp":
        from textdp.cli._options import refuse_unused

        refuse_unused(ctx, f"is the hidden width of --model mlp; --model {model} has no hidden layer", "hidden")
    _require(model != "mlp" or hidden >= 1, f"--hidden must be at least 1, got {hidden}")
    _require(epochs >= 1, f"--epochs must be at least 1, got {epochs}")
    _require(batch_size >= 1, f"--batch-size must be at least 1, got {batch_size}")
    _require(probes >= 1, f"--probes must be at least 1, got {probes}")
    _positive(lr, "--lr")
    _positive(clip, "--clip")
    _positive(noise_multiplier, "--noise-multiplier")
    _require(0 < delta < 1, f"--delta must be in (0, 1), got {delta:g}")
    if subsampling == "convexity":  # the old name of the estimate
        subsampling = "sampled"
    _require(subsampling in ("sampled", "expected", "wmax"),
             f"--subsampling must be 'sampled', 'expected' or 'wmax', got {subsampling!r}")
    if output is not None:
        check_output_path(output, overwrite=overwrite)
    tf = text_features(dataset, kind=features, max_features=max_features, n_records=n_records or None)
    _require(batch_size <= tf.X.shape[0], f"--batch-size {batch_size} is more than the {tf.X.shape[0]} records; "
                                          "lower --batch-size or raise --n-records")
    X = tf.X[:, 1:]  # no bias column: the torch model has its own
    d = X.shape[1]
    torch.manual_seed(0)  # initialisation only; privacy noise comes from textdp.noise
    if model == "logreg":
        net = torch.nn.Linear(d, 2)
    elif model == "mlp":
        net = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2))
    else:
        raise ParameterError(f"--model must be 'logreg' or 'mlp', got {model!r}")
    with progress(quiet) as pb:
        task = pb.add_task("DP-SGD steps", total=None)
        res = train_dpsgd_fil(net, X, tf.y.astype(int), epochs=epochs, batch_size=batch_size, lr=lr, clip_norm=clip,
                              noise_multiplier=noise_multiplier, delta=delta, probes=probes, subsampling=subsampling,
                              rng=seed, progress=lambda k, t: pb.update(task, completed=k, total=t), device=device)
    tab = res.table()
    if output is not None:
        write_table(tab, output)
    if as_json:
        print_json({"config": res.config, "epochs": tab.to_dict(orient="records"), "seed": res.seed,
                    "dataset": dataset, **tf.info})
        return
    t = Table(title=f"DP-SGD on {dataset} ({features}, n = {tf.info['n']}, d = {d}, {model}), "
                    f"σ = {noise_multiplier:g}, C = {clip:g}, B = {batch_size}")
    for c in ("epoch", "acc", "η median", "η max", "MSE ≥ (median)", "MSE ≥ (worst)", "ε₂ (RDP α=2)",
              f"ε (δ={delta:g})", "ε Opacus add/rm"):
        t.add_column(c, justify="right")
    for r in tab.itertuples():
        t.add_row(str(r.epoch), f"{r.accuracy:.3f}", f"{r.eta_median:.3g}", f"{r.eta_max:.3g}",
                  f"{r.fil_bound_median:.3g}", f"{r.fil_bound_min:.3g}", f"{r.rdp_epsilon2:.3g}",
                  f"{r.epsilon:.3g}", f"{r.epsilon_opacus_add_remove:.3g}")
    _wide().print(t)
    what = ("a per-example bound along this run's trajectory (every example charged q·I at every step, exact "
            "trace)" if subsampling == "expected" else
            "an ESTIMATE (one draw of the batches and Hutchinson probes; an example never sampled shows η = 0); "
            "for a per-example bound use --subsampling expected")
    out_console.print("η: per-example Fisher information leakage (trace/dFIL, cumulative), " + what + ". MSE ≥: the "
                      "unbiased per-coordinate reconstruction bound 1/η². ε: replace-one, per record, whole run; the "
                      "noise is float-safe (exact lattice sum + discrete Gaussian). "
                      "Per-example η values depend on the data: keep them private.")


#: default baseline successes of `bounds rero`
_RERO_KAPPAS = "1e-5,1e-4,1e-3,0.01,0.1,0.5"


@bounds_app.command("rero")
@handle_errors
def rero_cmd(
    ctx: typer.Context,
    mechanism: str = typer.Option(..., "--mechanism", "-m", help="laplace, gaussian, dpsgd, randomized-response, dp "
                                  "(any (ε, δ)-DP mechanism), or a token sanitizer with an exact law (santext, "
                                  "santext+, custext, custext+, tem, 1-diffractor: its exact per-token success)."),
    epsilon: Optional[str] = typer.Option(None, "--epsilon", "-e", help="ε, or a comma list (one column each): "
                                          "laplace Δ₁/b per release, randomized-response per report, dp, or the "
                                          "sanitizer's own ε."),
    sigma: Optional[str] = typer.Option(None, "--sigma", help="gaussian: noise std; dpsgd: noise multiplier "
                                        "(std / clip norm). A comma list gives one column each."),
    delta: Optional[float] = typer.Option(None, "--delta", help="dp: δ of the (ε, δ) guarantee (default 0)."),
    sensitivity: Optional[float] = typer.Option(None, "--sensitivity", help="gaussian: L2 sensitivity (default 1)."),
    releases: Optional[int] = typer.Option(None, "--releases", help="laplace, gaussian: releases composed "
                                           "(default 1)."),
    sampling_rate: Optional[float] = typer.Option(None, "--sampling-rate", help="dpsgd: Poisson sampling "
                                                  "rate q in (0, 1]."),
    steps: Optional[int] = typer.Option(None, "--steps", help="dpsgd: number of steps T."),
    categories: Optional[int] = typer.Option(None, "--categories", help="randomized-response: categories k "
                                             "(default 2)."),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size", help="sanitizer: the public vocabulary, the "
                                             "N most frequent GloVe words (default 200); the prior is uniform "
                                             "over it, κ = 1/N."),
    kappa: Optional[str] = typer.Option(None, "--kappa", help=f"Baseline success(es) κ of the prior, in (0, 1) "
                                        f"(default {_RERO_KAPPAS}); 1/N for a uniform prior over N candidates."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a figure (PNG, PDF or SVG): the bound against "
                                        "κ, and the token and feature games with the measured attacks and Guo's "
                                        "bounds (about 10 s)."),
    overwrite: bool = opt_overwrite(),
    seed: Optional[int] = opt_seed(),
    quiet: bool = opt_quiet(),
    as_json: bool = opt_json(),
):
    """Upper bound on the success of ANY reconstruction attack (ReRo; Hayes, Mahloujifar & Balle 2023).

    An informed attacker knows every record but the target, drawn from a prior whose best
    blind guess succeeds with probability κ. With the release it succeeds with probability at
    most 1 − f(κ), f the mechanism's trade-off curve, computed from dp-accounting's
    privacy-loss distribution. For a token sanitizer the exact success of the best attacker
    (the Bayes optimum) is printed beside the bound.
    """
    import math

    import numpy as np

    from textdp.bounds.rero import RERO_MECHANISMS, check_kappa, rero_mechanism
    from textdp.cli._options import refuse_unused

    sanitizer = mechanism not in RERO_MECHANISMS
    if sanitizer:
        from textdp.sanitize import MECHANISMS as SANITIZERS, canonical_name

        try:
            name = canonical_name(mechanism)
        except ParameterError:
            raise ParameterError(f"--mechanism must be one of {', '.join(RERO_MECHANISMS)} or a token sanitizer "
                                 f"({', '.join(k for k, c in SANITIZERS.items() if getattr(c, 'exact_probabilities', False))}), "
                                 f"got {mechanism!r}") from None
        if not getattr(SANITIZERS[name], "exact_probabilities", False):
            exact = [k for k, c in SANITIZERS.items() if getattr(c, "exact_probabilities", False)]
            raise ParameterError(f"{name} has no closed-form output law, so its exact Bayes optimum cannot be computed; "
                                 f"use one of {', '.join(exact)}")
        mechanism = name
    uses = {"laplace": ("epsilon", "releases"), "gaussian": ("sigma", "sensitivity", "releases"),
            "dpsgd": ("sigma", "sampling_rate", "steps"), "randomized-response": ("epsilon", "categories"),
            "dp": ("epsilon", "delta")}.get(mechanism, ("epsilon", "vocab_size"))
    for opt in ("epsilon", "sigma", "delta", "sensitivity", "releases", "sampling_rate", "steps", "categories",
                "vocab_size"):
        if opt not in uses:
            refuse_unused(ctx, f"does not apply to --mechanism {mechanism} (it uses "
                          f"{', '.join('--' + u.replace('_', '-') for u in uses)})", opt)
    if sanitizer:
        refuse_unused(ctx, "is fixed by the prior for a sanitizer: κ = 1/--vocab-size", "kappa")
    if plot is None:
        refuse_unused(ctx, "replaces an existing --plot; no --plot is given", "overwrite")
        refuse_unused(ctx, "seeds the simulated releases of --plot; no --plot is given", "seed")
    if sampling_rate is not None:
        _require(0 < sampling_rate <= 1, f"--sampling-rate must be in (0, 1] (the Poisson sampling probability), got "
                                         f"{sampling_rate:g}")
    for opt, val, lo in (("--steps", steps, 1), ("--releases", releases, 1), ("--categories", categories, 2)):
        _require(val is None or val >= lo, f"{opt} must be at least {lo}, got {val}")
    if delta is not None:
        _require(0 <= delta < 1, f"--delta must be in [0, 1), got {delta:g}")
    if sensitivity is not None:
        _positive(sensitivity, "--sensitivity")
    swept = "sigma" if "sigma" in uses else "epsilon"
    text = sigma if swept == "sigma" else epsilon
    if text is None:
        raise ParameterError(f"--mechanism {mechanism} needs --{swept}")
    missing = [f for f, v in {"dpsgd": (("--sampling-rate", sampling_rate), ("--steps", steps))}.get(mechanism, ())
               if v is None]
    if missing:
        raise ParameterError(f"--mechanism {mechanism} needs {' and '.join(missing)}")
    values = _floats(text, f"--{swept}")
    for v in values:
        _positive(v, f"--{swept}")
    if sanitizer:
        V = 200 if vocab_size is None else vocab_size
        _require(V >= 2, f"--vocab-size must be at least 2, got {V}")
    else:
        kap = check_kappa(_floats(kappa or _RERO_KAPPAS, "--kappa"))
    if plot is not None:
        from textdp.data.io import check_output_path

        _require(plot.suffix.lower() in (".png", ".pdf", ".svg"),
                 f"--plot must end in .png, .pdf or .svg, got {plot.name!r}")
        check_output_path(plot, overwrite=overwrite)
    sym = "σ" if swept == "sigma" else "ε"
    res: dict = {"mechanism": mechanism}
    curves = []
    if sanitizer:
        from textdp.bounds.rero_compare import token_game

        with progress(quiet, transient=True) as pb:
            pb.add_task(f"{mechanism}: exact laws over {V} words", total=None)
            game = token_game(values, V, mechanism=mechanism, rr_epsilons=[])
        res.update({k: v for k, v in game.to_dict().items() if k != "randomized_response"})
        for e, r in zip(game.epsilons, game.rows):
            if math.isfinite(r["epsilon_pairs"]):
                curves.append((f"{mechanism} ε = {e:g} (plain-DP ε {r['epsilon_pairs']:.3g})",
                               rero_mechanism("dp", epsilon=r["epsilon_pairs"])))
    else:
        per = []
        for v in values:
            c = rero_mechanism(mechanism, epsilon=v if swept == "epsilon" else None,
                               sigma=v if swept == "sigma" else None, delta=delta, sensitivity=sensitivity,
                               releases=releases, sampling_rate=sampling_rate, steps=steps, categories=categories)
            per.append(c)
            curves.append((f"{sym} = {v:g}", c))
        res.update({"neighbours": per[0].neighbours, "source": per[0].source, "kappa": kap.tolist(),
                    "bounds": [{**c.to_dict(), "bound": c.bound(kap).tolist()} for c in per]})
    if plot is not None:
        from textdp.bounds.rero_compare import glm_candidate_game, plot_rero, token_game

        with progress(quiet, transient=True) as pb:
            t = pb.add_task("token game (exact Bayes optimum)", total=None)
            tok = game if sanitizer else token_game()
            if sanitizer:
                tok = token_game(values, V, mechanism=mechanism)
            pb.update(t, description="feature game (simulated releases)")
            glm = glm_candidate_game(rng=seed)
            pb.update(t, description="drawing")
            lo = min([1e-5] + ([float(kap.min()) / 2] if not sanitizer else [1.0 / V / 10]))
            plot_rero(plot, curves, np.geomspace(lo, 0.99, 200), tokens=tok, glm=glm,
                      title=f"Reconstruction success: {mechanism}")
        res["plot"] = {"path": str(plot), "tokens": tok.to_dict(), "features": glm.to_dict(),
                       "seed": "seeded: not for release" if seed is not None else "fresh"}
    if as_json:
        print_json(res)
        return
    if quiet:  # --quiet: no summary on stdout (the shared option's meaning); --json still prints
        return
    if sanitizer:
        out_console.print(f"Per-token reconstruction, {mechanism}, uniform prior over the {V} most frequent GloVe "
                          f"words (κ = {1 / V:.3g}):")
        t = Table()
        for col in ("ε", "success (exact)", "plain-DP ε", "bound", "bound (best ref.)", "stated worst ε",
                    "bound (stated)"):
            t.add_column(col, justify="right")
        for e, r in zip(game.epsilons, game.rows):
            sw = r["epsilon_guarantee"]
            t.add_row(f"{e:g}", f"{r['bayes_top1']:.4g}", f"{r['epsilon_pairs']:.4g}", f"{r['bound']:.4g}",
                      f"{r['bound_reference']:.4g}", "-" if sw is None else f"{sw:.4g}",
                      "-" if r["bound_guarantee"] is None else f"{r['bound_guarantee']:.4g}")
        _wide().print(t)
        out_console.print("success: the best attacker who sees one sanitized token (Bayes optimum, exact). bound: ReRo "
                          "bound of the mechanism's plain-DP ε over these words; best ref.: the same against the "
                          "best reference word; stated: from the mechanism's stated worst case over every accepted "
                          "input (guarantee.worst_case_epsilon).")
    else:
        names = {"laplace": "Laplace mechanism", "gaussian": "Gaussian mechanism", "dpsgd": "DP-SGD",
                 "randomized-response": "randomized response", "dp": "any (ε, δ)-DP mechanism"}
        out_console.print(f"Reconstruction success ≤ (ReRo bound), {names[mechanism]}:")
        t = Table()
        t.add_column("κ", justify="right")
        for label, _ in curves:
            t.add_column(label, justify="right")
        table = np.array([c.bound(kap) for c in per])
        for i, k in enumerate(kap):
            t.add_row(f"{k:g}", *[f"{table[j, i]:.4g}" for j in range(len(per))])
        _wide().print(t)
        for (label, _), c in zip(curves, per):
            out_console.print(f"{label}: {c.describe}" if len(per) > 1 else c.describe)
        sources = {c.source for c in per}
        how = per[0].source if len(sources) == 1 else "; ".join(f"{lab}: {c.source}" for (lab, _), c in zip(curves, per))
        out_console.print(f"κ: success of the best guess without the release. neighbours: {per[0].neighbours}. "
                          f"computed from: {how}.")
    if plot is not None and not quiet:
        err_console.print(f"wrote {plot} (the feature game's releases are simulated with a non-cryptographic "
                          "generator; nothing is released)", markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(bounds_app, name="bounds")
