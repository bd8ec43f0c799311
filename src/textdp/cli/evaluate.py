"""``textdp evaluate``: privacy-utility sweeps of sanitizers (thin layer over
:mod:`textdp.evaluate`): parses options, refuses options that do not apply, shows a progress line per cell on stderr,
prints the results table and where the report is."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from textdp.cli._common import engine_from_options, opt_engine, opt_scheduler, esc, err_console, handle_errors, out_console, opt_json, opt_overwrite, opt_quiet, opt_seed, \
    print_json, progress

__all__ = ["register", "evaluate_command"]


from textdp.cli._common import split_list as _split  # noqa: E402  (strict comma lists, shared)
from textdp.cli._options import opt_device  # noqa: E402


@handle_errors
def evaluate_command(
    ctx: typer.Context,
    dataset: str = typer.Option("rotten-tomatoes", "--dataset", "-d", help="Built-in labelled dataset "
                                "(rotten-tomatoes, drug-reviews, 20newsgroups, reuters-r8, bbc-news) or two "
                                "labelled files TRAIN,TEST (columns named by --text-column / --label-column)."),
    text_column: str = typer.Option("text", "--text-column", help="Files TRAIN,TEST: the column holding the text."),
    label_column: str = typer.Option("label", "--label-column", help="Files TRAIN,TEST: the column holding the label."),
    mechanisms: str = typer.Option("santext,santext+,fbdd", "--mechanisms", "-m", help="Comma list of "
                                   "santext, santext+, fbdd."),
    epsilons: str = typer.Option("1,2,3", "--epsilons", "-e", help="Comma list of ε values (per token)."),
    model: str = typer.Option("tfidf", "--model", help="tfidf (fast) | minilm (fine-tuned, offline) | a local "
                              "model folder | a Hugging Face hub name you have locally."),
    max_docs: Optional[int] = typer.Option(None, "--max-docs", help="At most N documents per split (quick runs)."),
    attacks: str = typer.Option("bayes,mask", "--attacks", help="Comma list of bayes (Bayes-optimal "
                                "inversion), mask (mask-token inference); 'none' for utility only."),
    mlm: Optional[str] = typer.Option(None, "--mlm", help="Masked LM for the mask-token attack: a local folder "
                                      "or hub name. Default: a small MLM trained once on a disjoint built-in "
                                      "corpus and cached under $TEXTDP_CACHE."),
    mlm_preset: str = typer.Option("small", "--mlm-preset", help="Size of the default MLM: tiny | small | base."),
    prior: str = typer.Option("informed", "--prior", help="Prior of the Bayes attack: informed (the test "
                              "split's own token distribution: the optimal attacker) | wordfreq | uniform. "
                              "The exact optimum is reported next to it either way."),
    embeddings: str = typer.Option("glove-6b-50d", "--embeddings", help="Embeddings of the sanitizers."),
    output_vocabulary: str = typer.Option("public", "--output-vocabulary", help="Output vocabulary of the "
                                          "sanitizers: public (default: the shipped public word list) | corpus "
                                          "(the paper's choice: the evaluated texts' words) | full (the whole "
                                          "embedding table) | FILE (a word list, one word per line)."),
    frequencies: str = typer.Option("public", "--frequencies", help="SanText+: how the sensitive set is ranked: "
                                    "public (default) | wordfreq | corpus (the paper's choice)."),
    w: float = typer.Option(0.9, "--w", help="SanText+: sensitive share of the vocabulary."),
    p: float = typer.Option(0.3, "--p", help="SanText+: resampling probability of non-sensitive words."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="Transformer models: fine-tuning epochs "
                                         "(default: about 150 optimizer steps, 1 to 3 epochs; 1 on the full "
                                         "Rotten Tomatoes)."),
    max_attack_tokens: int = typer.Option(10000, "--max-attack-tokens", help="Bayes attack: tokens attacked "
                                          "per cell (a random subset of the sanitized test split)."),
    max_mask_positions: int = typer.Option(3000, "--max-mask-positions", help="Mask-token attack: positions "
                                           "per cell."),
    pretraining: Optional[str] = typer.Option(None, "--pretraining", help="Instead of a sweep, compare "
                                              "sanitization-aware pretraining with plain fine-tuning for the "
                                              "first mechanism and ε, with preset tiny | realistic "
                                              "(minilm: tiny | small)."),
    pretraining_encoder: str = typer.Option("word-mlm", "--pretraining-encoder", help="Encoder of "
                                            "--pretraining: word-mlm (textdp's small word-level MLM) | "
                                            "minilm (continued MLM training of MiniLM itself)."),
    workers: int = typer.Option(1, "--workers", help="Run the cells in N worker processes (one thread each; "
                                "e.g. 2 on a 2-core machine); with --engine dask|spark, the engine's workers. "
                                "Results do not depend on N."),
    engine: str = opt_engine("the cells (one task per mechanism × ε)"),
    scheduler: Optional[str] = opt_scheduler(),
    output: Path = typer.Option(Path("evaluate-output"), "--output", "-o", help="Report folder (results.csv, "
                                "results.json, *.png, report.html; cache/ lets an interrupted sweep resume)."),
    device: str = opt_device(),
    seed: Optional[int] = opt_seed(),
    overwrite: bool = opt_overwrite(),
    quiet: bool = opt_quiet(),
    json_out: bool = opt_json(),
):
    """Privacy-utility evaluation: sanitize → train → attack for every mechanism × ε."""
    from textdp.errors import ParameterError

    mech_list, eps_list = _split(mechanisms, "--mechanisms"), _split(epsilons, "--epsilons")
    try:
        eps_vals = [float(e) for e in eps_list]
    except ValueError:
        raise ParameterError(f"--epsilons must be a comma list of numbers, got {epsilons!r}") from None
    for i, v in enumerate(eps_vals):  # one cell per ε: a value given twice (also as "1" and "1.0") is refused
        if v in eps_vals[:i]:
            first = eps_list[eps_vals.index(v)]
            same = f"{first!r} and {eps_list[i]!r} are the same ε" if first != eps_list[i] else f"{first!r} twice"
            raise ParameterError(f"--epsilons lists {same}; give each value once")
    atk = [] if attacks.strip().lower() == "none" else [a.lower() for a in _split(attacks, "--attacks")]
    if workers < 1:
        raise ParameterError(f"--workers must be >= 1, got {workers}")
    if engine.strip().lower() not in ("local", "dask", "spark"):
        raise ParameterError(f"--engine must be local, dask or spark, got {engine!r}")
    if scheduler is not None and engine.strip().lower() == "local":
        raise ParameterError("--scheduler applies to --engine dask or spark, not local")
    if epochs is not None and epochs < 1:
        raise ParameterError(f"--epochs must be >= 1, got {epochs}")
    from textdp.evaluate import SweepConfig
    from textdp.evaluate.sweep import epsilon_text

    # every option is checked here, before any data is loaded, model trained or folder created
    for opt, v in (("--text-column", text_column), ("--label-column", label_column)):
        if not v.strip():
            raise ParameterError(f"{opt} is empty; give a column name of the TRAIN,TEST files")
    _refuse_unused_options(ctx, dataset, mech_list, atk, model, mlm, pretraining)
    from textdp.models.device import resolve_device

    device = resolve_device(device)  # cuda without a visible device: one line, exit 2, before any work
    cfg = SweepConfig(device=device, dataset=dataset, text_column=text_column, label_column=label_column, mechanisms=mech_list, epsilons=eps_vals, model=model, max_docs=max_docs,
                      embeddings=embeddings, output_vocabulary=output_vocabulary, frequencies=frequencies,
                      w=w, p=p, attacks=atk, prior=prior, mlm=mlm, mlm_preset=mlm_preset,
                      max_attack_tokens=max_attack_tokens, max_mask_positions=max_mask_positions, seed=seed,
                      model_options={} if model.strip().lower() == "tfidf" or epochs is None
                      else {"epochs": epochs})
    cfg.validate()
    if pretraining is not None:
        from textdp.evaluate.pretrain import compare_pretraining, pretrain_preset

        pretrain_preset(pretraining, pretraining_encoder)  # checks both names before any work
        from textdp.data.io import atomic_output, check_output_dir

        out_dir = check_output_dir(output, overwrite=overwrite, create_parents=True)
        if (out_dir / "pretraining.json").exists() and not overwrite:
            raise ParameterError(f"{str(out_dir / 'pretraining.json')!r} already exists; pass --overwrite")
        # options the user typed (typer may vendor its own click: compare the source by name)
        given = {o.name: o.opts[0] for o in ctx.command.params
                 if getattr(ctx.get_parameter_source(o.name), "name", None) == "COMMANDLINE"}
        ignored = [given[n] for n in ("max_docs", "model", "workers", "epochs", "attacks", "mlm", "mlm_preset",
                                      "prior", "max_attack_tokens", "max_mask_positions", "w", "p",
                                      "output_vocabulary", "frequencies") if n in given]
        if not quiet and (len(mech_list) > 1 or len(eps_vals) > 1):
            err_console.print(f"[yellow]warning:[/] --pretraining compares one cell: {esc(mech_list[0])} at "
                              f"ε={epsilon_text(eps_vals[0])} (the first of --mechanisms and --epsilons)",
                              highlight=False)
        if not quiet and ignored:
            err_console.print(f"[yellow]warning:[/] --pretraining ignores {', '.join(ignored)} (its preset sets the "
                              "data sizes, models and steps)", highlight=False)
        say = (lambda s: None) if quiet else (lambda s: err_console.print(f"[dim]{esc(str(s))}[/]"))
        res = compare_pretraining(dataset, mech_list[0], eps_vals[0], preset=pretraining, embeddings=embeddings,
                                  seed=seed, stage=say, encoder=pretraining_encoder, text_column=text_column,
                                  label_column=label_column, device=device)
        from textdp.evaluate.report import NOT_A_RELEASE

        res = {**res, "dp_release": False, "note": NOT_A_RELEASE}
        out_dir.mkdir(parents=True, exist_ok=True)
        import json as _json

        with atomic_output(out_dir / "pretraining.json") as tmp:
            Path(tmp).write_text(_json.dumps(res, indent=2, default=str), encoding="utf-8")
        if json_out:
            print_json(res)
        else:
            out_console.print(f"sanitization-aware pretraining on {esc(str(dataset))}, {mech_list[0]} "
                              f"ε={epsilon_text(eps_vals[0])} "
                              f"({res['encoder']}, {res['preset']} preset): plain {res['plain']:.3f}, control {res['control']:.3f}, "
                              f"sanitization-aware {res['sanitization_aware']:.3f} (gain {res['gain']:+.3f})")
        if not quiet:
            err_console.print(f"written: {esc(str(out_dir / 'pretraining.json'))}")
            err_console.print(f"note: {NOT_A_RELEASE}.", highlight=False)
        return
    from textdp.evaluate import run_sweep
    from textdp.evaluate.sweep import cell_keys

    eng = engine_from_options(engine, scheduler, workers)
    with progress(quiet) as bar:
        lines = _ProgressLines(bar, cell_keys(cfg))
        try:
            res = run_sweep(cfg, output, overwrite=overwrite, progress=lines.cell_done, stage=lines.stage,
                            workers=workers, engine=eng)
        except KeyboardInterrupt as exc:  # finished cells stay in OUTPUT/cache/ (that is how a sweep resumes)
            exc.textdp_kept = (f"no report was written; finished cells are kept in {str(Path(output) / 'cache')} "
                               "and the same command resumes from them")
            raise
        finally:
            if eng is not None:
                eng.close()
        lines.finish()
    df = res.rows
    if json_out:
        print_json({"output": str(output), "seconds": res.seconds, "resumed_cells": res.resumed_cells,
                    "results": df.to_dict("records")})
        return
    # the terminal table: short headers; model details (epochs, training CPU time) are in results.csv/report
    cols = [c for c in ("mechanism", "epsilon", "utility_sanitized", "utility_clean", "majority_rate",
                        "bayes_top1", "bayes_top5", "bayes_optimum_top1", "mask_success", "N_w_median",
                        "S_w_mean") if c in df]
    from rich.table import Table

    t = Table(title=f"{dataset}: {cfg.model}, {cfg.output_vocabulary} output vocabulary, {len(df) - 1} cells + "
              "clean baseline", box=None,
              pad_edge=False, caption="util: accuracy (Pearson r for similarity data) on sanitized / clean test "
              "text; bayes @k: Bayes attack success (" + cfg.prior + " prior), opt@1: its exact optimum; "
              "mask succ.: attack success; full column names in results.csv")
    from textdp.evaluate.report import epsilon_column

    widths = dict(_MIN_WIDTH, epsilon=max([5] + [len(epsilon_column(v)) for v in df["epsilon"]]))
    for c in cols:  # two-line short headers; numbers never cut ("…"): see the print below
        t.add_column(_SHORT_HEADERS.get(c, c), justify="right", no_wrap=True, min_width=widths.get(c, 5))
    for r in df[cols].to_dict("records"):  # ε exact (never two cells alike), other numbers to 3 decimals
        t.add_row(*[epsilon_column(v) if c == "epsilon" else "–" if v is None or v != v else
                    (f"{v:.3f}" if isinstance(v, float) else str(v)) for c, v in r.items()])
    # numbers are never cut: wider than the terminal (many columns, e.g. with the mask attack), the table is
    # printed at its own width (a pipe gets 80 columns) rather than truncated
    from rich.measure import Measurement

    need = Measurement.get(out_console, out_console.options.update_width(10_000), t).minimum
    width = out_console.width
    out_console.width = max(width, need)
    try:
        out_console.print(t)
    finally:
        out_console.width = width
    if not quiet:
        err_console.print(f"report: {esc(str(Path(output) / 'report.html'))}  ({res.seconds:.1f} s"
                          + (f", {res.resumed_cells} cells from cache" if res.resumed_cells else "") + ")")
        from textdp.evaluate.report import NOT_A_RELEASE

        err_console.print(f"note: {NOT_A_RELEASE}.", highlight=False)


class _ProgressLines:
    """evaluate's progress on stderr: one line per cell, named by its key (``santext-eps3``; its current
    step after a colon while it runs in this process, ``(cached)`` when taken from the cache), one
    line per step outside the cells (loading the data, training the default MLM, starting workers,
    ``writing the report``); each line ends complete when the next thing starts. A log (no terminal)
    gets the final state of every line. Warnings are printed above the lines, never put in them."""

    def __init__(self, bar, keys: list[str]):
        self.bar, self.keys = bar, set(keys)
        self.tasks: dict[str, int] = {}  # cell key -> its line
        self.current: int | None = None  # the line of the step or cell now running here

    def _close_current(self) -> None:
        if self.current is not None:
            self.bar.update(self.current, completed=1)
            self.current = None

    def _line(self, description: str) -> int:
        return self.bar.add_task(description, total=1)

    def stage(self, s: str) -> None:
        if s.startswith("warning:"):  # warnings are printed, not hidden in a line's description
            self.bar.console.print(f"[yellow]warning:[/] {esc(s[len('warning:'):].strip())}", highlight=False)
            return
        key, sep, step = s.partition(": ")
        if sep and key in self.keys:  # a step of a cell: that cell's line names it
            if key not in self.tasks:
                self._close_current()
                self.tasks[key] = self._line(key)
            self.current = self.tasks[key]
            self.bar.update(self.current, description=f"{key}: {step}")
            return
        self._close_current()
        self.current = self._line(s)

    def cell_done(self, label: str, done: int, total: int) -> None:
        key = label[: -len(" (cached)")] if label.endswith(" (cached)") else label
        if key in self.tasks:
            task = self.tasks[key]
            if task == self.current:
                self.current = None
        else:  # run in a worker process, or taken from the cache: its line appears finished
            task = self.tasks[key] = self._line(label)
        self.bar.update(task, description=label, completed=1)

    def finish(self) -> None:
        self._close_current()


_SHORT_HEADERS = {"epsilon": "ε", "utility_sanitized": "util\nsan", "utility_clean": "util\nclean",
                  "majority_rate": "maj.\nrate", "bayes_top1": "bayes\n@1", "bayes_top5": "bayes\n@5",
                  "bayes_optimum_top1": "opt\n@1",
                  "mask_success": "mask\nsucc.", "N_w_median": "N_w\nmed", "S_w_mean": "S_w\nmean"}
_MIN_WIDTH = {"mechanism": 9, "S_w_mean": 7}


def _refuse_unused_options(ctx: typer.Context, dataset: str, mechanisms: list[str], attacks: list[str], model: str,
                           mlm: Optional[str], pretraining: Optional[str]) -> None:
    """Options that do not apply are refused with one line naming the option and why (exit 2), never
    silently ignored (issue 13). --pretraining runs no sweep: it warns about the sweep options it
    ignores instead, so only the dataset's columns are checked for it."""
    from textdp.cli._options import refuse_unused
    from textdp.data.datasets import DATASETS
    from textdp.evaluate.sweep import mechanism_key

    if dataset.strip().lower() in DATASETS:
        refuse_unused(ctx, f"names a column of TRAIN,TEST files; {dataset!r} is a built-in dataset (it knows its "
                           "columns)", "text_column", "label_column")
    if pretraining is not None:
        return
    refuse_unused(ctx, "chooses the encoder of --pretraining; no --pretraining is given", "pretraining_encoder")
    mechs = {mechanism_key(m) for m in mechanisms}
    if "santext+" not in mechs:
        refuse_unused(ctx, f"is a SanText+ setting; --mechanisms {','.join(mechanisms)} has no santext+",
                      "w", "p", "frequencies")
    shown = ",".join(attacks) or "none"
    if "mask" not in attacks:
        refuse_unused(ctx, f"is a setting of the mask-token attack; --attacks {shown} has no mask",
                      "mlm", "mlm_preset", "max_mask_positions")
    elif mlm is not None:
        refuse_unused(ctx, "sets the size of the default masked LM; --mlm names the model to use", "mlm_preset")
    if "bayes" not in attacks:
        refuse_unused(ctx, f"is a setting of the Bayes attack; --attacks {shown} has no bayes",
                      "prior", "max_attack_tokens")
    if model.strip().lower() == "tfidf":
        refuse_unused(ctx, "sets the fine-tuning epochs of a transformer --model (minilm or a model folder); "
                           "--model tfidf trains no epochs", "epochs")
        if "mask" not in attacks:
            refuse_unused(ctx, f"places the torch models (a transformer --model, the mask-token attack's MLM); "
                               f"--model tfidf with --attacks {shown} uses none", "device")


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate_command)
