"""``textdp attack``: attacks on text models. ``invert`` runs Text Revealer model
inversion (with the VTG and VMI baselines and optional defences) against a
classifier fine-tuned on the private part of a built-in dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from textdp.cli._common import (
    err_console, handle_errors, opt_json, opt_output, opt_overwrite, opt_quiet, opt_seed, print_json, progress,
)
from textdp.cli._options import opt_device

attack_app = typer.Typer(help="Attacks on text models: model inversion (Text Revealer, VTG, VMI).",
                         no_args_is_help=True)


@attack_app.command("invert")
@handle_errors
def invert(
    ctx: typer.Context,
    dataset: str = typer.Option("rotten-tomatoes", "--dataset", "-d", help="Built-in labelled dataset (80/20 public/private split of its train part)."),
    method: str = typer.Option("all", "--method", "-m", help="tr, vtg, vmi, all, or a comma list (tr,vtg)."),
    defence: str = typer.Option("none", "--defence", help="none, dpsgd (Opacus DP-SGD target) or santext (target trained on SanText-sanitised text). A defended run also attacks the undefended target."),
    preset: str = typer.Option("cpu", "--preset", help="cpu (2-core CPU, minutes), memorising (the cpu preset with a target that memorises: all MiniLM layers, 20 epochs on 200 private texts plus 32 random-token canaries), paper (the paper's settings, hours on CPU) or tiny (plumbing check)."),
    output: Optional[Path] = opt_output("Result folder (inverted.csv, metrics.csv, summary.md, examples.csv, plot.png, report.json)."),
    seed: Optional[int] = opt_seed(),
    seeds: int = typer.Option(3, "--seeds", help="Number of attack seeds (seed, seed+1, ...); results are mean ± std over them."),
    target: Optional[str] = typer.Option(None, "--target", help="Target encoder: minilm (default, offline), a local model folder, or an explicit hub name."),
    target_layers: Optional[int] = typer.Option(None, "--target-layers", help="Keep only the first k encoder layers of the target."),
    generator: str = typer.Option("scratch", "--generator", help="Generator: 'scratch' (causal LM trained on the public split with the target's WordPiece vocabulary; 3 layers, d 128 in the cpu preset), 'scratch-large' (4 layers, d 256, 16k WordPieces, 5 epochs), 'gemma' (the offline Gemma 3 270M), a local folder with a pretrained causal LM + tokenizer (e.g. GPT-2) or a .gguf file, or a hub name such as gpt2 already in the local Hugging Face cache. A pretrained one is LoRA-fine-tuned on the public split first (saved once under the textdp cache; BPE->WordPiece alignment; nothing is downloaded)."),
    finetune: Optional[str] = typer.Option(None, "--finetune", help="A pretrained --generator's fine-tuning on the public split before the attack: lora (default), full or none."),
    finetune_steps: Optional[int] = typer.Option(None, "--finetune-steps", help="Optimiser steps of that fine-tuning (default 200, batch 8 rows of <= 48 tokens)."),
    templates: Optional[int] = typer.Option(None, "--templates", help="Number of templates (texts per label per method)."),
    stepsize: Optional[float] = typer.Option(None, "--stepsize", help="TR step size alpha."),
    num_iterations: Optional[int] = typer.Option(None, "--num-iterations", help="TR gradient steps per generated token."),
    window_length: Optional[int] = typer.Option(None, "--window-length", help="TR window mask length (0 = whole history)."),
    kl_scale: Optional[float] = typer.Option(None, "--kl-scale", help="TR KL coefficient."),
    gm_scale: Optional[float] = typer.Option(None, "--gm-scale", help="TR fusion weight of the perturbed distribution."),
    gen_length: Optional[int] = typer.Option(None, "--gen-length", help="Tokens generated after each template (default: mean private length, capped by the preset)."),
    dp_epsilon: Optional[float] = typer.Option(None, "--dp-epsilon", help="Target epsilon of DP-SGD (example-level, whole training run; default 8). The defended target is a DP linear probe on frozen mean-pooled features."),
    santext_epsilon: Optional[float] = typer.Option(None, "--santext-epsilon", help="SanText epsilon (per token, metric DP; default 5: at 3 the cpu-preset target learned nothing)."),
    device: str = opt_device(),
    overwrite: bool = opt_overwrite(),
    quiet: bool = opt_quiet(),
    json_out: bool = opt_json(),
):
    """Run Text Revealer (TR) and the VTG / VMI baselines against a classifier
    fine-tuned on private data; write inverted texts, metrics (mean ± std over
    seeds), example pairs and a plot."""
    import warnings

    from textdp.attacks.inversion import METHODS, preset_config, run_inversion, summary_markdown, write_report
    from textdp.errors import ParameterError

    # library chatter (torch/Opacus/transformers UserWarnings) is not for the user's terminal; what matters
    # (e.g. that DP-SGD noise comes from torch's generator seeded by textdp's CSPRNG, not Opacus' secure
    # mode) is stated in docs/attacks.md and in the report
    warnings.filterwarnings("ignore", category=UserWarning, module=r"(torch|opacus|transformers)(\.|$)")

    if output is None:
        raise ParameterError("--output DIR is required (the result folder)")
    from textdp.data.io import check_output_dir

    out = check_output_dir(output, overwrite=overwrite, inputs=[dataset] if Path(dataset).exists() else None)
    methods = list(METHODS) if method.strip().lower() == "all" else [m.strip().lower() for m in method.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise ParameterError(f"unknown --method {method!r}; use tr, vtg, vmi or all")
    if seeds < 1:
        raise ParameterError(f"--seeds must be >= 1, got {seeds}")
    from textdp.cli._options import refuse_unused  # options that do not apply are refused, never ignored
    from textdp.models.device import resolve_device

    device = resolve_device(device)  # cuda without a visible device: one line, exit 2, before any work

    d = defence.strip().lower()
    if d != "dpsgd":
        refuse_unused(ctx, f"is the ε of the dpsgd defence; --defence is {d}", "dp_epsilon")
    if d != "santext":
        refuse_unused(ctx, f"is the ε of the santext defence; --defence is {d}", "santext_epsilon")
    if "tr" not in methods:
        refuse_unused(ctx, f"is a Text Revealer (tr) setting; --method {method} runs no tr",
                      "stepsize", "num_iterations", "window_length", "kl_scale", "gm_scale")
    if generator in ("scratch", "scratch-large"):
        refuse_unused(ctx, f"fine-tunes a pretrained generator; --generator {generator} is trained from scratch",
                      "finetune", "finetune_steps")
    else:
        from textdp.attacks.inversion.gpt2_generator import resolve_generator

        resolve_generator(generator)  # offline check: a local folder or .gguf file, gemma, or a hub name in the HF cache
    long_texts = dataset.strip().lower() in ("drug-reviews", "20newsgroups", "reuters-r8", "bbc-news")
    cfg = preset_config(preset, long_texts=long_texts)
    over = dict(target_model=target, n_templates=templates, dp_epsilon=dp_epsilon, santext_epsilon=santext_epsilon,
                pplm_stepsize=stepsize, pplm_num_iterations=num_iterations, pplm_window_length=window_length,
                pplm_kl_scale=kl_scale, pplm_gm_scale=gm_scale, gen_length=gen_length, generator=generator,
                gen_finetune=None if finetune is None else finetune.strip().lower(), gen_finetune_steps=finetune_steps)
    if target_layers is not None:
        over["target_layers"] = target_layers
    if target is not None and target.lower() != "tiny" and cfg.target_model == "tiny":
        over.setdefault("target_layers", None)
    cfg = cfg.with_overrides(**over)
    if gen_length is not None:
        cfg = cfg.with_overrides(gen_length_cap=gen_length)
    cfg.validate()  # every numeric knob: finite, sensible sign, before any work
    if cfg.gen_finetune not in ("none", "lora", "full"):
        raise ParameterError(f"--finetune must be lora, full or none, got {cfg.gen_finetune!r}")
    if int(cfg.gen_finetune_steps) < 1:
        raise ParameterError(f"--finetune-steps must be >= 1, got {cfg.gen_finetune_steps}")
    from textdp.attacks.inversion.pipeline import DEFENCES

    if defence.strip().lower() not in DEFENCES:
        raise ParameterError(f"unknown --defence {defence!r}; choose one of: {', '.join(DEFENCES)}")
    if str(cfg.target_model).strip().lower() != "tiny":
        from textdp.models.classifier import resolve_model_path

        resolve_model_path(cfg.target_model, what="target model")  # offline existence check, no download
    seed_list = [seed + i for i in range(seeds)] if seed is not None else [None] * seeds

    with progress(quiet) as bar:
        def prog(desc: str, total: int):
            task = bar.add_task(desc, total=total)
            return lambda n=1: bar.advance(task, n)

        log = (lambda s: None) if quiet else (lambda s: err_console.print(s, highlight=False, markup=False))
        report = run_inversion(dataset, methods=methods, defence=defence.strip().lower(), preset=cfg,
                               seeds=seed_list, progress=prog, log=log, device=device)
    write_report(report, out, overwrite=overwrite)
    if json_out:
        print_json({"output": str(out), "summary": report.summary.to_dict(orient="records"),
                    "targets": report.card["targets"], "evaluator": report.card["evaluator"],
                    "kendall": report.card["kendall_public_vs_private"]})
    else:
        t = report.card["targets"]
        lines = [f"dataset {report.card['dataset']}: {report.card['sizes']}"]
        for d, info in t.items():
            eps = (f", epsilon {info['epsilon_spent']:.2f} (delta {info['delta']:.1e}); "
                   f"{info.get('noise', '')}" if d == "dpsgd" else "")
            lines.append(f"target[{d}]: train acc {info['train_acc']:.3f}, held-out acc {info['heldout_acc']:.3f}{eps}")
            if info.get("memorisation"):
                lines.append(f"target[{d}] memorisation (private vs non-member texts): {info['memorisation']['line']}")
            if info.get("canary_memorisation"):
                lines.append(f"target[{d}] canaries (inserted vs never-inserted reference canaries): "
                             f"{info['canary_memorisation']['line']}")
        e = report.card["evaluator"]
        lines.append(f"evaluator: private acc {e['private_acc']:.3f}, held-out acc {e['heldout_acc']:.3f}")
        typer.echo("\n".join(lines))
        typer.echo(summary_markdown(report.summary))
        typer.echo(f"wrote {out}/ (inverted.csv, metrics.csv, summary.md, examples.csv, plot.png, report.json)")


def register(app: typer.Typer) -> None:
    """Add the ``attack`` group to the root app."""
    app.add_typer(attack_app, name="attack")
