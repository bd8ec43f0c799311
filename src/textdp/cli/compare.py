"""``textdp compare``: sanitizers compared at equal measured privacy (thin layer over
:mod:`textdp.evaluate.compare`): parses options, shows progress on stderr, prints the equal-privacy
table and where the report is."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from textdp.cli._common import esc, err_console, handle_errors, opt_json, opt_overwrite, opt_quiet, opt_seed, \
    out_console, print_json, progress
from textdp.cli._common import split_list as _split

__all__ = ["register", "compare_command"]


@handle_errors
def compare_command(
    dataset: str = typer.Option("rotten-tomatoes", "--dataset", "-d", help="Built-in labelled dataset "
                                "(rotten-tomatoes, drug-reviews, 20newsgroups, reuters-r8, bbc-news) or two "
                                "labelled files TRAIN,TEST (columns named by --text-column / --label-column)."),
    text_column: str = typer.Option("text", "--text-column", help="Files TRAIN,TEST: the column holding the text."),
    label_column: str = typer.Option("label", "--label-column", help="Files TRAIN,TEST: the column holding the label."),
    mechanisms: Optional[str] = typer.Option(None, "--mechanisms", "-m", help="Comma list of sanitizers (see "
                                             "'textdp mechanisms'). Default: every registered word-level one; "
                                             "document-level ones are listed apart."),
    metric: str = typer.Option("bayes", "--metric", help="Privacy axis: bayes (top-1 recovery of the "
                               "Bayes-optimal informed attacker; exact for closed-form laws, held-out Monte "
                               "Carlo with a 95% interval for continuous noise) | nw (median N_w)."),
    targets: str = typer.Option("0.25,0.5", "--targets", "-t", help="Comma list of privacy targets in (0, 1): "
                                "for each, the largest ε whose metric does not exceed it; 'none' for the sweep only."),
    epsilons: Optional[str] = typer.Option(None, "--epsilons", "-e", help="Comma list of ε values for the plain "
                                           "sweep (privacy and utility at each)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="At most N documents per split (quick runs)."),
    privacy_docs: int = typer.Option(100, "--privacy-docs", help="The attacked tokens: those of the first N test "
                                     "documents (their token distribution is the informed prior)."),
    mc_draws: str = typer.Option("10,5", "--mc-draws", help="Monte Carlo draws per attacked token TRAIN,TEST: "
                                 "fit the plug-in attacker on TRAIN, score it on TEST fresh draws."),
    max_evaluations: int = typer.Option(10, "--max-evaluations", help="Privacy evaluations per mechanism and "
                                        "target in the ε search (bisection over log ε)."),
    tolerance: float = typer.Option(0.01, "--tolerance", help="The search stops at an ε whose metric is within "
                                    "this much below the target."),
    model: str = typer.Option("tfidf", "--model", help="Utility model: tfidf (fast) | minilm | a local model folder."),
    embeddings: str = typer.Option("glove-6b-50d", "--embeddings", help="glove-6b-50d, minilm, a GloVe/word2vec "
                                   "text file or a local Hugging Face model folder."),
    output_vocabulary: str = typer.Option("public", "--output-vocabulary", help="public (default) | corpus | full "
                                          "| a word-list file."),
    output: Path = typer.Option(Path("compare-output"), "--output", "-o", help="Report folder (results.csv, "
                                "sweep.csv, evaluations.csv, frontier.png, report.html, results.json; cache/ "
                                "lets an interrupted run resume)."),
    seed: Optional[int] = opt_seed(),
    overwrite: bool = opt_overwrite(),
    quiet: bool = opt_quiet(),
    json_out: bool = opt_json(),
):
    """Compare sanitizers at equal measured privacy: the ε meeting a privacy target, and the utility there."""
    from textdp.errors import ParameterError
    from textdp.evaluate.compare import CompareConfig, run_compare

    def numbers(text, option):
        vals = _split(text, option)
        try:
            return [float(v) for v in vals]
        except ValueError:
            raise ParameterError(f"{option} must be a comma list of numbers, got {text!r}") from None

    tg = [] if targets.strip().lower() == "none" else numbers(targets, "--targets")
    eps = numbers(epsilons, "--epsilons") if epsilons is not None else []
    mc = _split(mc_draws, "--mc-draws")
    if len(mc) != 2 or not all(x.strip().isdigit() and int(x) >= 1 for x in mc):
        raise ParameterError(f"--mc-draws must be two whole numbers >= 1 (TRAIN,TEST), got {mc_draws!r}")
    for opt, v in (("--text-column", text_column), ("--label-column", label_column)):
        if not v.strip():
            raise ParameterError(f"{opt} is empty; give a column name of the TRAIN,TEST files")
    cfg = CompareConfig(dataset=dataset, mechanisms=_split(mechanisms, "--mechanisms") if mechanisms else None,
                        metric=metric, targets=tg, epsilons=eps, limit=limit, privacy_docs=privacy_docs,
                        mc_train=int(mc[0]), mc_test=int(mc[1]), max_evaluations=max_evaluations, tolerance=tolerance,
                        model=model,
                        embeddings=embeddings, output_vocabulary=output_vocabulary, seed=seed,
                        text_column=text_column, label_column=label_column)
    cfg.validate()  # every option checked before any data is loaded or folder created
    with progress(quiet) as bar:
        state = {"task": None}

        def stage(s: str) -> None:
            if state["task"] is not None:
                bar.update(state["task"], completed=1)
            state["task"] = bar.add_task(esc(s), total=1)

        res = run_compare(cfg, output, overwrite=overwrite, stage=stage)
        if state["task"] is not None:
            bar.update(state["task"], completed=1)
    t = res.table
    if json_out:
        print_json({"output": str(output), "seconds": res.seconds, "results": t.to_dict("records"),
                    "sweep": res.sweep.to_dict("records"), "clean": res.clean,
                    "apart": [{"mechanism": n, "reason": r} for n, r in res.apart]})
        return
    out_console.print(format_table(res), highlight=False, soft_wrap=True)
    if not quiet:
        err_console.print(f"report: {esc(str(Path(output) / 'report.html'))}  ({res.seconds:.1f} s)")
        from textdp.evaluate.report import NOT_A_RELEASE

        err_console.print(f"note: {NOT_A_RELEASE}.", highlight=False)


def _num(v, spec=".3f") -> str:
    return "–" if v is None or v != v else format(v, spec)


def format_table(res) -> str:
    """The equal-privacy table (and the sweep) as plain text, one row per mechanism × target."""
    cfg = res.config
    lines = [f"{cfg.dataset}: {cfg.model} utility, privacy = "
             + ("Bayes-optimal top-1 recovery" if cfg.metric == "bayes" else "median N_w")
             + f" on the tokens of the first {cfg.privacy_docs} test documents"
             + (f" (--limit {cfg.limit})" if cfg.limit else "")]
    head = f"{'mechanism':<18} {'target':>6} {'ε found':>9} {'privacy':>7} {'95% CI':>15} {'method':<11} " \
           f"{'utility':>7} {'± SE':>6}"
    lines += [head, "-" * len(head)]
    for r in res.table.to_dict("records"):
        ci = "" if r.get("privacy_method") == "exact" else \
            f"[{_num(r.get('privacy_ci_low'))}, {_num(r.get('privacy_ci_high'))}]" \
            if r.get("privacy_ci_low") == r.get("privacy_ci_low") and r.get("privacy_ci_low") is not None else "–"
        eps = "–" if r.get("epsilon") is None or r.get("epsilon") != r.get("epsilon") else f"{r['epsilon']:.4g}"
        extra = "" if r.get("status") == "found" else f"  ({r.get('status')}{'; ' + r['note'] if r.get('note') and r.get('note') == r.get('note') else ''})"
        lines.append(f"{r['mechanism']:<18} {r['target']:>6.3g} {eps:>9} {_num(r.get('privacy')):>7} {ci:>15} "
                     f"{str(r.get('privacy_method', '')):<11} {_num(r.get('utility')):>7} "
                     f"{_num(r.get('utility_se')):>6}{extra}")
    if len(res.sweep):
        lines += ["", "plain ε sweep:", f"{'mechanism':<18} {'ε':>9} {'privacy':>7} {'95% CI':>15} {'method':<11} "
                                        f"{'utility':>7} {'± SE':>6}"]
        for r in res.sweep.to_dict("records"):
            ci = "" if r.get("privacy_method") == "exact" else \
                f"[{_num(r.get('privacy_ci_low'))}, {_num(r.get('privacy_ci_high'))}]"
            lines.append(f"{r['mechanism']:<18} {r['epsilon']:>9.4g} {_num(r.get('privacy')):>7} {ci:>15} "
                         f"{str(r.get('privacy_method', '')):<11} {_num(r.get('utility')):>7} "
                         f"{_num(r.get('utility_se')):>6}")
    lines.append(f"clean text: utility {_num(res.clean.get('utility'))}")
    for n, why in res.apart:
        lines.append(f"not compared: {n} ({why})")
    lines.append("exact: Bayes optimum from the closed-form law; monte-carlo: held-out plug-in attacker (a lower "
                 "bound on the optimum), 95% Wilson interval; ± SE: binomial standard error of the test accuracy")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)
