"""``textdp topics``: train, evaluate, show and export (differentially private) LDA topic models.

Thin layer over :mod:`textdp.topics`: parses options, loads the corpus (a built-in
dataset or a file), shows a progress bar per Gibbs sweep with the current
log-likelihood on stderr, saves the model folder (with its privacy card) and
records the release in the dataset's budget ledger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from textdp.cli._common import (
    err_console,
    handle_errors,
    opt_engine,
    opt_json,
    opt_overwrite,
    opt_quiet,
    opt_scheduler,
    opt_seed,
    out_console,
    print_json,
    progress,
)

__all__ = ["register", "topics_app"]

topics_app = typer.Typer(help="Topic models (LDA by collapsed Gibbs sampling) with differential privacy: "
                              "non-private, HDP-LDA (central), LP-LDA and OLP-LDA (local).",
                         no_args_is_help=True)


def _load_texts(input: str, split: str, text_column: Optional[str], limit: Optional[int]):
    """(train_texts, test_texts | None, name). Built-in: split train/test/all; file: all rows."""
    from textdp.data.datasets import is_builtin, load_dataset
    from textdp.errors import ParameterError

    if limit is not None and limit < 1:
        raise ParameterError(f"--limit must be >= 1, got {limit}")
    if is_builtin(input):
        ds = load_dataset(input)
        if split not in ("train", "test", "all"):
            raise ParameterError(f"--split must be train, test or all, got {split!r}")
        import pandas as pd

        frames = {"train": ds.train, "test": ds.test, "all": pd.concat([ds.train, ds.test])}
        tr = frames[split]["text"].tolist()
        te = ds.test["text"].tolist() if split == "train" else None
        if limit:
            tr = tr[:limit]
            te = te[: max(1, limit // 4)] if te is not None else None
        return tr, te, ds.name
    from textdp.data.io import read_table

    if not Path(input).exists():
        from textdp.data.datasets import list_datasets
        from textdp.errors import InputError

        raise InputError(f"{input!r} is neither a file nor a built-in dataset ({', '.join(list_datasets())})")
    df, col = read_table(input, text_column=text_column)
    texts = df[col].tolist()
    if limit:
        texts = texts[:limit]
    return texts, None, str(input)


VOCABULARY_HELP = ("public (default: the shipped public list wordfreq-en-20k, the 20 000 most frequent English "
                   "words of wordfreq 3.1.1 without stop words) | FILE (one word per line; its SHA-256 goes on the "
                   "card) | corpus (built from the private texts: which words occur in them is released "
                   "UNPROTECTED, the guarantee does not cover it).")


def _check_vocabulary_options(min_count: Optional[int], max_vocab: Optional[int], vocabulary: str = "corpus",
                              quiet: bool = False):
    """--vocabulary, --min-count and --max-vocab, before any text is read or budget reserved.

    Returns the :class:`textdp.topics.vocabulary.Vocabulary` for ``public`` or a FILE (the file is read
    and checked here), None for ``corpus``. --min-count applies to ``corpus`` only; given with another
    vocabulary it is ignored with a note on stderr (not with ``quiet``).
    """
    from textdp.errors import ParameterError

    if min_count is not None and min_count < 1:
        raise ParameterError(f"--min-count must be at least 1, got {min_count}")
    if max_vocab is not None and max_vocab < 2:
        raise ParameterError(f"--max-vocab must be at least 2 (a topic model needs several words), got {max_vocab}")
    if vocabulary == "corpus":
        return None
    if min_count is not None and not quiet:
        err_console.print("note: --min-count selects words of a corpus vocabulary only (--vocabulary corpus); "
                          f"ignored with --vocabulary {vocabulary}", highlight=False, markup=False)
    from textdp.topics.vocabulary import public_vocabulary, read_vocabulary

    if vocabulary == "public":
        return public_vocabulary(max_vocab)
    return read_vocabulary(vocabulary, max_vocab)


def _print_warnings(warnings: list[str]) -> None:
    """What the guarantee does not cover: always printed (also with --quiet/--json), on stderr."""
    from rich.markup import escape

    for w in warnings:
        err_console.print(f"[bold yellow]WARNING (not covered by the guarantee):[/] {escape(w)}", highlight=False,
                          soft_wrap=True)


def _print_private(corpus, extra: str = "") -> None:
    """Exact statistics of the private training input: curator's terminal only, never in a released file."""
    tot = corpus.n_tokens + corpus.oov_tokens
    share = f" ({100.0 * corpus.oov_tokens / tot:.1f} %)" if tot else ""
    err_console.print(f"private (curator only, not in the release): {corpus.n_docs} documents, {corpus.n_tokens} "
                      f"tokens in the vocabulary, {corpus.oov_tokens} tokens outside it dropped{share}, "
                      f"{corpus.skipped_docs} empty documents{extra}", highlight=False, markup=False, soft_wrap=True)


def _sweep_bar(quiet: bool, total: int):
    bar = progress(quiet)
    task = bar.add_task("sampling", total=total)
    state = {"ll": None}

    def cb(it, ll, _state):
        if ll is not None:
            state["ll"] = ll
        desc = "sweep" + (f"  log-lik {state['ll']:.5g}" if state["ll"] is not None else "")
        bar.update(task, advance=1, description=desc)

    return bar, cb


@topics_app.command("train")
@handle_errors
def train_command(
    ctx: typer.Context,
    input: str = typer.Argument("20newsgroups", help="A built-in dataset (20newsgroups, reuters-r8, bbc-news, ...) "
                                "or a CSV/TSV/JSONL/Parquet/TXT file (one document per row)."),
    k: int = typer.Option(20, "--k", "-k", help="Number of topics K."),
    privacy: str = typer.Option("none", "--privacy", help="none | hdp (central Laplace) | lp (local RR) | olp (online local RR)."),
    epsilon: Optional[float] = typer.Option(None, "--epsilon", "-e", help="hdp: ε for the whole run, per document. "
                                            "lp/olp: ε per replaced word (local), sets f = 2/(e^(ε/2)+1)."),
    flip: Optional[float] = typer.Option(None, "--flip", help="lp/olp: flip probability f in (0,1) instead of --epsilon."),
    delta: float = typer.Option(0.0, "--delta", help="hdp: δ > 0 uses the PLD accountant for (ε, δ)-DP."),
    iterations: int = typer.Option(200, "--iterations", "-i", help="Gibbs sweeps (olp: per mini-batch)."),
    workers: int = typer.Option(1, "--workers", help="--privacy none: sampler threads; N > 1 runs the approximate "
                                "parallel sampler AD-LDA (not the exact collapsed Gibbs chain; no inherent-privacy "
                                "claim). --privacy hdp: workers of --engine (local: threads; dask: processes of a "
                                "local cluster; spark: local[N]), each sweeping a partition of the documents: exact, "
                                "the same model for any N. lp/olp always use the exact chain and refuse N > 1."),
    engine: str = opt_engine("HDP-LDA's Gibbs sweeps (--privacy hdp only: the other methods stay single-node)"),
    scheduler: Optional[str] = opt_scheduler(),
    alpha: float = typer.Option(0.1, "--alpha", help="Symmetric document-topic prior α."),
    beta: float = typer.Option(0.01, "--beta", help="Symmetric topic-word prior β."),
    batch_size: int = typer.Option(1000, "--batch-size", help="olp: documents per mini-batch."),
    lam: float = typer.Option(0.5, "--lambda", help="olp: correlation factor λ in [0,1] of the β^l recursion."),
    prior_variance: Optional[float] = typer.Option(None, "--prior-variance", help="olp: σ² of the Bayesian "
                                                   "denoising prior (default: the variance of the earlier batches' estimate)."),
    prior_corpus: Optional[str] = typer.Option(None, "--prior-corpus", help="olp: a PUBLIC corpus (built-in dataset "
                                               "name or file) whose document frequencies are the first batch's prior."),
    threshold: float = typer.Option(1.0, "--threshold", help="lp/olp: drop words whose estimated document "
                                    "frequency is within this many standard deviations of 0."),
    sweeps_per_release: int = typer.Option(1, "--sweeps-per-release", help="hdp: Gibbs sweeps between noisy releases."),
    max_doc_length: int = typer.Option(200, "--max-doc-length", help="hdp: documents truncated to this many "
                                       "tokens (the L1 sensitivity is 2 x this)."),
    vocabulary: str = typer.Option("public", "--vocabulary", help=VOCABULARY_HELP),
    min_count: Optional[int] = typer.Option(None, "--min-count", help="--vocabulary corpus: drop words with fewer "
                                            "occurrences (default 5)."),
    max_vocab: Optional[int] = typer.Option(None, "--max-vocab", help="Keep only the first N words of the public "
                                            "list or FILE (their rank order), or the N most frequent words of a "
                                            "corpus vocabulary."),
    text_column: Optional[str] = typer.Option(None, "--text-column", help="Column holding the text (files)."),
    split: str = typer.Option("train", "--split", help="Built-in datasets: train | test | all."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N documents (quick runs)."),
    top: int = typer.Option(10, "--top", help="Top words to print per topic."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Model folder (default ./NAME.PRIVACY.topics); missing "
                                          "folders above it are created (and removed again if the run fails)."),
    ledger_dir: Optional[str] = typer.Option(None, "--ledger-dir", help="Folder of the budget ledgers."),
    no_ledger: bool = typer.Option(False, "--no-ledger", help="Do not record the release in the budget ledger."),
    force: bool = typer.Option(False, "--force", help="Release even if the ledger refuses it (over the dataset's "
                               "budget, a term without bound, or a currency no budget names); recorded as forced."),
    seed: Optional[int] = opt_seed(),
    overwrite: bool = opt_overwrite(),
    quiet: bool = opt_quiet(),
    json_out: bool = opt_json(),
):
    """Train an LDA topic model (optionally differentially private) and save it with its privacy card."""
    from textdp.errors import ParameterError
    from textdp.topics import make_trainer

    if privacy not in ("none", "hdp", "lp", "olp"):
        raise ParameterError(f"unknown --privacy {privacy!r}; choose none, hdp, lp or olp")
    if top < 1:
        raise ParameterError(f"--top must be at least 1, got {top}")
    _refuse_unused_train_options(ctx, privacy, input, prior_corpus)
    vocab = _check_vocabulary_options(min_count, max_vocab, vocabulary, quiet)
    kw = dict(n_topics=k, alpha=alpha, beta=beta, iterations=iterations, seed=seed, ll_every=1)
    eng_name = str(engine).strip().lower()
    if privacy != "hdp" and eng_name != "local":  # before any text is read or budget reserved
        from textdp.engines import ENGINES
        from textdp.topics.distributed import engine_refusal

        if eng_name not in ENGINES:
            raise ParameterError(f"unknown --engine {engine!r}; use one of {', '.join(ENGINES)}")
        raise ParameterError(engine_refusal(privacy, eng_name))
    if privacy in ("lp", "olp") and workers != 1:
        raise ParameterError(f"--workers {workers}: the approximate parallel sampler (AD-LDA) is for --privacy none "
                             f"only; --privacy {privacy} samples with the exact collapsed Gibbs chain (drop --workers)")
    if privacy == "none":
        if epsilon is not None or flip is not None:
            raise ParameterError("--epsilon/--flip need --privacy hdp, lp or olp")
        kw |= dict(workers=workers)
    elif privacy == "hdp":
        if flip is not None:
            raise ParameterError("--flip is for lp/olp; hdp takes --epsilon")
        if epsilon is None:
            raise ParameterError("--privacy hdp needs --epsilon")
        kw |= dict(epsilon=epsilon, delta=delta, sweeps_per_release=sweeps_per_release, max_doc_length=max_doc_length)
    else:
        kw |= dict(epsilon=epsilon, flip=flip, threshold=threshold)
        if privacy == "olp":
            kw |= dict(batch_size=batch_size, lam=lam, prior_variance=prior_variance)
    if privacy != "hdp" and scheduler is not None:
        raise ParameterError("--scheduler applies to --engine dask or spark (--privacy hdp only)")
    trainer = make_trainer(privacy, **kw)  # validates every parameter before any work
    if privacy == "hdp":  # the engine of the sweeps; a cluster starts on the first sweep, closed after the run
        trainer.engine = _hdp_engine(ctx, eng_name, workers, scheduler)
        try:
            return _train_command_body(trainer, input, privacy, prior_corpus, split, text_column, limit, output,
                                       ledger_dir, no_ledger, force, vocab, min_count, max_vocab, iterations,
                                       batch_size, quiet, overwrite, top, json_out)
        finally:
            trainer.engine.close()
    return _train_command_body(trainer, input, privacy, prior_corpus, split, text_column, limit, output,
                               ledger_dir, no_ledger, force, vocab, min_count, max_vocab, iterations, batch_size,
                               quiet, overwrite, top, json_out)


def _hdp_engine(ctx: typer.Context, engine: str, workers: int, scheduler: Optional[str]):
    """The engine of HDP-LDA's sweeps from --engine/--workers/--scheduler (``--workers`` left at its
    default: the engine's own default, or the running cluster's workers with --scheduler)."""
    from textdp.cli._options import given as was_given
    from textdp.engines import get_engine

    given = was_given(ctx, "workers")
    if engine == "local":
        return get_engine("local", workers=workers, scheduler=scheduler)
    return get_engine(engine, workers=workers if given else None, scheduler=scheduler)


def _train_command_body(trainer, input, privacy, prior_corpus, split, text_column, limit, output, ledger_dir,
                        no_ledger, force, vocab, min_count, max_vocab, iterations, batch_size, quiet, overwrite, top,
                        json_out):
    from textdp.data.io import check_output_dir

    train_texts, _, name = _load_texts(input, split, text_column, limit)
    out = Path(output) if output is not None else Path(f"{Path(name).stem if not name.isidentifier() else name}.{privacy}.topics")
    in_paths = [p for p in (input, prior_corpus) if p is not None and Path(p).exists()]
    from textdp.accounting.ledger import check_output_outside_ledgers

    check_output_outside_ledgers(out, ledger_dir)
    check_output_dir(out, overwrite=overwrite, inputs=in_paths, create_parents=True)  # made when the model is saved
    led = None
    dataset = input if Path(input).exists() else name  # the ledger's identity of the training data
    if len(train_texts) < trainer.n_topics:  # known before the budget is touched: bad input leaves no ledger trace
        from textdp.errors import InputError

        raise InputError(f"the corpus has {len(train_texts)} documents, fewer than K={trainer.n_topics} topics; "
                         "lower --k or give a larger corpus")
    if not no_ledger:
        from textdp.accounting.ledger import Ledger

        led = Ledger(dataset, ledger_dir)
        # reserve before training (refused -> nothing is done); closed by the release or cancelled. The
        # model folder and its card are recorded, so that `textdp budget settle` can tell whether a killed
        # run's release reached disk (cancel when neither exists, else commit), as for sanitize
        reservation = led.reserve(trainer.guarantee, command=f"topics train --privacy {privacy}", force=force,
                                  outputs=[out, out / "model.card.json"])
        if force:  # a refusal overridden: one warning line on stderr (the ledger entry records it)
            from textdp.cli.budget import announce_forced

            announce_forced(led, reservation)
    else:  # one warning line when the dataset has a budget; the card says the release is not recorded
        from textdp.cli.budget import announce_unrecorded

        announce_unrecorded(dataset, ledger_dir)
    try:
        return _train_and_release(trainer, train_texts, name, input, out, in_paths, privacy, prior_corpus,
                                  text_column, vocab, min_count, max_vocab, iterations, batch_size, quiet,
                                  overwrite, force, top, json_out, led, reservation if led is not None else None)
    except BaseException:
        if led is not None:
            led.cancel(reservation)
        raise


def _refuse_unused_train_options(ctx: typer.Context, privacy: str, input: str, prior_corpus: Optional[str]) -> None:
    """Options of another method, a file-only option with a built-in dataset (and the reverse), or a ledger
    option with --no-ledger: refused with one line, never silently ignored (issue 13, item 4)."""
    from textdp.cli._options import refuse_unused
    from textdp.data.datasets import is_builtin

    refuse_unused(ctx, f"is for --privacy hdp, not {privacy}", *(() if privacy == "hdp" else
                                                                  ("delta", "sweeps_per_release", "max_doc_length")))
    refuse_unused(ctx, f"is for --privacy olp, not {privacy}", *(() if privacy == "olp" else
                                                                 ("batch_size", "lam", "prior_variance", "prior_corpus")))
    refuse_unused(ctx, f"is for --privacy lp or olp, not {privacy}", *(() if privacy in ("lp", "olp") else ("threshold",)))
    files = [p for p in (input, prior_corpus) if p is not None and not is_builtin(p)]
    if not files:
        refuse_unused(ctx, f"names the text column of a file; {input!r} is a built-in dataset",
                      "text_column")
    if not is_builtin(input):
        refuse_unused(ctx, "selects a split of a built-in dataset; a file INPUT is used whole (--limit takes "
                           "its first N documents)", "split")
    if ctx.params.get("no_ledger"):
        refuse_unused(ctx, "says where the budget ledger is kept; with --no-ledger none is written", "ledger_dir")


def _train_and_release(trainer, train_texts, name, input, out, in_paths, privacy, prior_corpus, text_column,
                       vocab, min_count, max_vocab, iterations, batch_size, quiet, overwrite, force, top, json_out,
                       led, reservation):
    from textdp.errors import ParameterError
    from textdp.topics import OLPLDA, Corpus

    if vocab is None:
        corpus = Corpus.from_texts(train_texts, min_count=5 if min_count is None else min_count,
                                   max_vocab=max_vocab, vocabulary="corpus")
    else:
        corpus = Corpus.from_texts(train_texts, vocabulary=vocab)
    if prior_corpus is not None:
        if privacy != "olp":
            raise ParameterError("--prior-corpus is for --privacy olp")
        trainer.prior_corpus = corpus.transform_texts(_load_texts(prior_corpus, "all", text_column, None)[0])
    from textdp.topics.vocabulary import vocabulary_warnings

    warnings = vocabulary_warnings(corpus.preprocessing.get("vocabulary"), local=privacy in ("lp", "olp"))
    _print_warnings(warnings)  # before the work, so the curator can stop it
    if not quiet:
        _print_private(corpus, f"; vocabulary: {corpus.n_words} words ({_vocabulary_label(corpus.preprocessing)})")
        if privacy == "none" and (getattr(trainer, "workers", 1) or 1) > 1:  # LP/OLP's workers may be None
            from textdp.topics.lda import approximate_sampler_note

            err_console.print(f"note: {approximate_sampler_note(trainer.workers)}", highlight=False, markup=False,
                              soft_wrap=True)
        eng = getattr(trainer, "engine", None) if privacy == "hdp" else None
        if eng is not None and (eng.name != "local" or eng.workers > 1):
            from textdp.topics.distributed import engine_note

            err_console.print(f"note: {engine_note(eng, trainer.partitions)}", highlight=False, markup=False,
                              soft_wrap=True)
    total = iterations * (-(-corpus.n_input_docs // batch_size) if isinstance(trainer, OLPLDA) else 1)
    bar, cb = _sweep_bar(quiet, total)
    with bar:
        model = trainer.fit(corpus, callback=cb)
    from textdp.data.datasets import is_builtin
    from textdp.topics.model import FILE_INPUT

    # a built-in dataset's name is public; a file's name or path is the curator's: never in a released file
    model.info["input"] = name if is_builtin(input) else FILE_INPUT
    reason = led.forced_reason(reservation) if led is not None else None
    if reason is not None:  # --force overrode a refusal: the saved card (and the ledger's copy) state it
        if not is_builtin(input):  # the ledger's reason quotes the file's path: not on the card
            reason = reason.replace(repr(led.dataset), "the dataset")
        plain_card = model.card
        model.card = lambda output=None: {**plain_card(output), "forced": True, "forced_reason": reason}
    if led is None:  # --no-ledger: the card states that this release is counted against no budget
        from textdp.cli.budget import NOT_RECORDED

        unrecorded_card = model.card
        model.card = lambda output=None: {**unrecorded_card(output), "ledger": NOT_RECORDED}
    from textdp.data.io import remove_empty_folders

    above, made = out.parent, []  # folders above the model that the save creates (as sanitize does)
    while str(above) not in ("", ".") and not above.exists() and above != above.parent:
        made.insert(0, above)
        above = above.parent
    model.save(out, overwrite=overwrite, inputs=in_paths, create_parents=True)
    entry = None
    if led is not None:
        import json

        from textdp.errors import BudgetExceededError

        # the ledger keeps the very card that was written (same `created`): `topics evaluate` finds this
        # release by it in the ledger of a file given as held-out INPUT
        card = json.loads((out / "model.card.json").read_text("utf-8"))
        try:  # re-checked under the ledger lock: a parallel release may have spent the budget meanwhile
            entry = led.record(model.guarantee, card=card,
                               input_path=input if Path(input).exists() else None,
                               command=f"topics train --privacy {privacy}", force=force, reservation=reservation)
        except BudgetExceededError:
            import shutil

            shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
            remove_empty_folders(made)
            raise
    private = {k: v for k, v in model.private.items() if k != "log_likelihood"}
    summary = {"input": name, "output": str(out), "card": str(out / "model.card.json"), "method": model.method,
               "guarantee": model.guarantee.to_dict(), "guarantee_text": model.guarantee.describe(),
               "vocabulary": model.vocabulary_description(), "n_words": corpus.n_words, "warnings": model.warnings(),
               "private": private, "seeded": model.seed.get("seeded"),
               "ledger": None if entry is None else str(led.path), "top_words": model.top_words(top)}
    if json_out:
        print_json(summary)
    elif not quiet:
        _print_topics(model, top)
        out_console.print(f"guarantee: {summary['guarantee_text']}", highlight=False, markup=False)
        if warnings:
            out_console.print("[bold yellow]not covered: the vocabulary (built from the private corpus) is released "
                              "unprotected[/]", highlight=False)
        if model.seed.get("seeded"):
            out_console.print("[yellow]seeded run: reproducible, not for release[/]")
        out_console.print(f"model: {out}   card: {summary['card']}", highlight=False, markup=False)


def _vocabulary_label(prep: dict) -> str:
    d = (prep or {}).get("vocabulary") or {}
    src = d.get("source")
    if src == "corpus":
        return "built from the private corpus, UNPROTECTED"
    if src == "public":
        return f"public list {d.get('name')}" + (f", first {d['first']}" if d.get("first") else "")
    if src == "file":
        return f"file {d.get('name')}, sha256 {str(d.get('list_sha256'))[:12]}…" + (
            f", first {d['first']}" if d.get("first") else "")
    return str(src or "given")


def _print_topics(model, top: int) -> None:
    from rich.table import Table

    t = Table(title=f"{model.method}: top {top} words of {model.n_topics} topics", show_lines=False)
    t.add_column("topic", justify="right")
    t.add_column("words")
    for i, words in enumerate(model.top_words(top)):
        t.add_row(str(i), " ".join(words))
    out_console.print(t)


@topics_app.command("show")
@handle_errors
def show_command(
    model_dir: Path = typer.Argument(..., help="A model folder written by `textdp topics train`."),
    top: int = typer.Option(10, "--top", help="Top words per topic."),
    json_out: bool = opt_json(),
):
    """Print a model's top words, hyperparameters and privacy guarantee."""
    from textdp.errors import ParameterError
    from textdp.topics import load_model

    if top < 1:
        raise ParameterError(f"--top must be at least 1, got {top}")

    model = load_model(model_dir)
    if json_out:
        print_json({"method": model.method, "n_topics": model.n_topics, "n_words": len(model.vocabulary),
                    "alpha": model.alpha, "beta": model.beta, "guarantee": model.guarantee.to_dict(),
                    "vocabulary": model.vocabulary_description(), "warnings": model.warnings(),
                    "accounting": model.accounting, "top_words": model.top_words(top)})
        return
    _print_topics(model, top)
    out_console.print(f"guarantee: {model.guarantee.describe()}  |  K={model.n_topics}, V={len(model.vocabulary)}, "
                      f"α={model.alpha:g}, β={model.beta:g}", highlight=False)
    out_console.print(f"vocabulary: {_vocabulary_label(model.info.get('preprocessing') or {})}", highlight=False,
                      markup=False)
    _print_warnings(model.warnings())


@topics_app.command("evaluate")
@handle_errors
def evaluate_command(
    ctx: typer.Context,
    model_dir: Path = typer.Argument(..., help="A model folder written by `textdp topics train`."),
    input: Optional[str] = typer.Argument(None, help="Held-out documents: a built-in dataset (its test split) or a "
                                          "file. Default: the test split of the built-in dataset the model was "
                                          "trained on; required for a model trained on a file."),
    protocol: str = typer.Option("fold-in", "--protocol", help="fold-in | completion (see docs/topics.md)."),
    iterations: int = typer.Option(50, "--iterations", "-i", help="Fold-in sweeps per held-out document."),
    burn_in: int = typer.Option(10, "--burn-in", help="Fold-in sweeps discarded before averaging θ."),
    coherence: bool = typer.Option(True, "--coherence/--no-coherence", help="NPMI coherence over the built-in "
                                   "dataset's train split, or over INPUT when it is a file."),
    top: int = typer.Option(10, "--top", help="Top words per topic for NPMI."),
    text_column: Optional[str] = typer.Option(None, "--text-column", help="Column holding the text (files)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N held-out documents."),
    ledger_dir: Optional[str] = typer.Option(None, "--ledger-dir", help="Folder of the budget ledgers (as for "
                                             "`topics train`): a file INPUT whose ledger records this model's "
                                             "release is its training file and is refused."),
    seed: Optional[int] = opt_seed(),
    json_out: bool = opt_json(),
):
    """Held-out perplexity (fixed fold-in protocol) and NPMI coherence of a saved model.

    Held-out documents: INPUT, or the test split of the built-in dataset the model was trained
    on; a model trained on a file needs INPUT (its training file is not held out). The model's
    files do not name a training file; a file INPUT is refused when its budget ledger records
    this model's release (a model trained with --no-ledger cannot be checked).
    """
    from textdp.errors import InputError
    from textdp.topics import load_model

    from textdp.data.datasets import is_builtin
    from textdp.errors import ParameterError

    if protocol not in ("fold-in", "completion"):  # every option before the model or any text is read
        raise ParameterError(f"--protocol must be fold-in or completion, got {protocol!r}")
    if iterations < 1:
        raise ParameterError(f"--iterations must be at least 1, got {iterations}")
    if not (0 <= burn_in < iterations):
        raise ParameterError(f"--burn-in must be in [0, --iterations) = [0, {iterations}), got {burn_in}")
    if top < 1:
        raise ParameterError(f"--top must be at least 1, got {top}")
    from textdp.cli._options import refuse_unused

    if not coherence:
        refuse_unused(ctx, "sets the top words of the NPMI coherence; --no-coherence computes none", "top")
    model = load_model(model_dir)
    src = input or model.info.get("input")
    if not src:
        raise InputError("the model does not record its training input; give the held-out documents as INPUT")
    if input is None and not is_builtin(src):  # the training file is not held out: never label it so
        raise InputError("the model was trained on a file (its name is not part of the release); give held-out "
                         f"documents as INPUT (textdp topics evaluate {model_dir} HELD_OUT_FILE)")
    if is_builtin(src):  # before any text is read
        held = f"{src!r} is a built-in dataset" + ("" if input is not None else " (its test split, INPUT not given)")
        refuse_unused(ctx, f"names the text column of a file INPUT; {held}", "text_column")
        refuse_unused(ctx, f"is for a file INPUT (its ledger tells whether it is the training file); {held}, held "
                           "out by construction", "ledger_dir")
    elif model.info.get("input") and is_builtin(model.info["input"]):
        refuse_unused(ctx, "finds out whether a file INPUT is the model's training file; this model was trained on "
                           f"the built-in dataset {model.info['input']!r}", "ledger_dir")
    trained_on = model.info.get("input")
    if input is not None and not is_builtin(input) and Path(input).is_file() \
            and not (trained_on and is_builtin(trained_on)):
        _refuse_training_file(model_dir, model, input, trained_on, ledger_dir)
    if is_builtin(src):
        held, _, name = _load_texts(src, "test", None, limit)
        split, label, coherence_on = "test", f"{name} (test split)", f"{name} (train split)"
        train_texts = _load_texts(src, "train", None, None)[0] if coherence else None
    else:
        held, _, name = _load_texts(src, "all", text_column, limit)
        split, label, coherence_on = "all", name, name
        train_texts = held if coherence else None
    held_corpus = model.corpus_from_texts(held)  # words outside the model's vocabulary are dropped
    tot = held_corpus.n_tokens + held_corpus.oov_tokens
    res = {"model": str(model_dir), "input": name, "split": split, "protocol": protocol,
           "fold_in_iterations": iterations, "burn_in": burn_in,
           "held_out_tokens": held_corpus.n_tokens, "held_out_oov_tokens_dropped": held_corpus.oov_tokens,
           "held_out_oov_share": held_corpus.oov_tokens / tot if tot else 0.0,
           "perplexity": model.perplexity(held_corpus, protocol, iterations, burn_in, seed)}
    if coherence:
        c = model.coherence(train_texts, top)
        res["npmi_on"] = coherence_on
        res["npmi_mean"] = float(c.mean())
        res["npmi_per_topic"] = [float(x) for x in c]
    if json_out:
        print_json(res)
        return
    out_console.print(f"held-out perplexity ({protocol}, {iterations} sweeps, burn-in {burn_in}) on {label}: "
                      f"{res['perplexity']:.1f}", highlight=False, markup=False, soft_wrap=True)
    out_console.print(f"held-out words outside the model's vocabulary ({len(model.vocabulary)} words) are dropped "
                      f"before scoring: {res['held_out_oov_tokens_dropped']} of {tot} tokens "
                      f"({100.0 * res['held_out_oov_share']:.1f} %; stop words not counted)",
                      highlight=False, markup=False, soft_wrap=True)
    if coherence:
        out_console.print(f"NPMI coherence (top {top}, mean over {model.n_topics} topics) on {coherence_on}: "
                          f"{res['npmi_mean']:.3f}", highlight=False, markup=False, soft_wrap=True)


def _refuse_training_file(model_dir: Path, model, input: str, trained_on, ledger_dir: Optional[str]) -> None:
    """Raise InputError when the file ``input`` is the one the model was trained on.

    The released files do not name a training file, so the check uses the budget ledger (the
    curator's): ``input``'s ledger (found by its content hash, so a copy or a renamed file is found
    too) holds a release whose card is the model's card (same ``created``, mechanism, parameters,
    guarantee and randomness). A model trained with --no-ledger, or recorded in another ledger
    folder, cannot be checked: one note line on stderr says so. Models saved before the
    input's name left the release may still hold its path: that is compared as well.
    """
    from textdp.errors import InputError

    refusal = (f"INPUT {input!r} is the file the model was trained on, not held-out data; give documents the "
               "model has not seen")
    if trained_on and Path(str(trained_on)).exists() and Path(input).resolve() == Path(str(trained_on)).resolve():
        raise InputError(refusal)  # an older model that still names its training file
    import json

    from textdp.accounting.ledger import Ledger

    keys = ("created", "mechanism", "parameters", "guarantee", "randomness")
    try:
        card = json.loads((Path(model_dir) / "model.card.json").read_text("utf-8"))
        if not isinstance(card, dict) or not all(k in card for k in keys):
            raise ValueError("not a card")
    except (OSError, ValueError):  # no readable card: match what model.json holds (no time)
        card = json.loads(json.dumps(model.card(), default=str))
        keys = keys[1:]
    try:
        led = Ledger(input, ledger_dir)
        releases = led.releases() if led.exists() else []
    except (InputError, OSError) as exc:
        releases, why = None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    else:
        why = None
    for e in releases or []:
        c = e.get("card")
        if isinstance(c, dict) and all(c.get(k) == card.get(k) for k in keys):
            raise InputError(refusal + " (its budget ledger records this model's release)")
    where = str(led.path.parent) if releases is not None else (ledger_dir or "the ledger folder")
    note = (f"cannot read INPUT's budget ledger ({why}), so whether INPUT is the training file is not checked"
            if releases is None else f"INPUT's budget ledger in {where} records no release of this model, so INPUT "
            "is taken as held out (a model trained with --no-ledger or another --ledger-dir cannot be checked)")
    err_console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)


@topics_app.command("export")
@handle_errors
def export_command(
    ctx: typer.Context,
    model_dir: Path = typer.Argument(..., help="A model folder written by `textdp topics train`."),
    format: str = typer.Option("gensim", "--format", help="gensim (topics.npy + dictionary.txt) | csv."),
    output: Path = typer.Option(..., "--output", "-o", help="Export folder."),
    top: int = typer.Option(20, "--top", help="csv: top words per topic in top_words.csv."),
    overwrite: bool = opt_overwrite(),
):
    """Export a model for gensim or as plain CSV."""
    from textdp.errors import ParameterError
    from textdp.topics import load_model

    fmt = format.strip().lower()
    if fmt not in ("gensim", "csv"):  # checked before anything is read or created
        raise ParameterError(f"unknown export format {format!r}; use 'gensim' or 'csv'")
    if top < 1:
        raise ParameterError(f"--top must be >= 1, got {top}")
    if fmt != "csv":
        from textdp.cli._options import refuse_unused

        refuse_unused(ctx, "sets the rows of top_words.csv (--format csv); the gensim export writes every word",
                      "top")
    above = output.parent
    while str(above) not in ("", ".") and not above.exists() and above != above.parent:
        above = above.parent
    if above.exists() and not above.is_dir():  # a file where a folder of the output should be
        from textdp.errors import OutputError

        raise OutputError(f"cannot create export folder {str(output)!r}: {str(above)!r} is a file, not a folder; "
                          "choose another --output")
    model = load_model(model_dir)
    files = model.export(output, fmt, top, overwrite)
    for f in files:
        out_console.print(str(f), highlight=False, markup=False)
    _print_warnings(model.warnings())  # the export holds the same vocabulary


@topics_app.command("tradeoff")
@handle_errors
def tradeoff_command(
    ctx: typer.Context,
    input: str = typer.Argument("20newsgroups", help="A built-in dataset (train split for training, test split "
                                "for perplexity)."),
    epsilons: str = typer.Option("0.5,1,2,4,8", "--epsilons", help="Comma-separated ε values."),
    methods: str = typer.Option("hdp,lp,olp", "--methods", help="Comma-separated methods among hdp, lp, olp."),
    k: int = typer.Option(20, "--k", "-k", help="Number of topics K."),
    iterations: int = typer.Option(50, "--iterations", "-i", help="Gibbs sweeps per run."),
    alpha: float = typer.Option(0.1, "--alpha"),
    beta: float = typer.Option(0.01, "--beta"),
    vocabulary: str = typer.Option("public", "--vocabulary", help=VOCABULARY_HELP),
    min_count: Optional[int] = typer.Option(None, "--min-count", help="--vocabulary corpus: drop words with fewer "
                                            "occurrences (default 5)."),
    max_vocab: Optional[int] = typer.Option(2000, "--max-vocab", help="Vocabulary size: the first N words of the "
                                            "public list or FILE, or the N most frequent corpus words (LP/OLP cost "
                                            "grows with it)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N training documents."),
    sweeps_per_release: int = typer.Option(1, "--sweeps-per-release", help="hdp: Gibbs sweeps between noisy releases."),
    max_doc_length: int = typer.Option(200, "--max-doc-length", help="hdp: documents truncated to this many tokens."),
    batch_size: int = typer.Option(1000, "--batch-size", help="olp: documents per mini-batch."),
    output: Path = typer.Option(Path("topics-tradeoff.png"), "--output", "-o", help="Plot file (.png/.pdf/.svg); "
                                "the numbers go to the same name with .csv."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for a reproducible research run (the models "
                                       "are experiments, not releases). Default: cryptographically secure randomness."),
    overwrite: bool = opt_overwrite(),
    quiet: bool = opt_quiet(),
    json_out: bool = opt_json(),
):
    """Privacy-utility plot: held-out perplexity against ε for each method, with the non-private line."""
    from textdp.data.io import check_output_path
    from textdp.errors import ParameterError
    from textdp.topics import Corpus, plot_privacy_utility, privacy_utility

    from textdp.cli._common import parse_floats, split_list

    eps = parse_floats(epsilons, "--epsilons")
    meths = split_list(methods, "--methods")
    bad = [m for m in meths if m not in ("hdp", "lp", "olp")]
    if bad:
        raise ParameterError(f"unknown method(s) {', '.join(bad)}; choose among hdp, lp, olp")
    from textdp.cli._options import refuse_unused

    if "hdp" not in meths:
        refuse_unused(ctx, f"is for the hdp runs; --methods {methods} has none", "sweeps_per_release", "max_doc_length")
    if "olp" not in meths:
        refuse_unused(ctx, f"is for the olp runs; --methods {methods} has none", "batch_size")
    from textdp.topics.tradeoff import check_runs

    method_params = {"hdp": {"sweeps_per_release": sweeps_per_release, "max_doc_length": max_doc_length},
                     "olp": {"batch_size": batch_size}}
    check_runs(eps, meths, method_params, n_topics=k, alpha=alpha, beta=beta, iterations=iterations)  # no work yet
    vocab = _check_vocabulary_options(min_count, max_vocab, vocabulary, quiet)
    from textdp.topics.tradeoff import plot_format

    fmt = plot_format(output)  # an unsupported suffix fails before any work
    check_output_path(output, overwrite=overwrite)
    csv_path = output.with_suffix(".csv")
    check_output_path(csv_path, overwrite=overwrite)
    tr, te, name = _load_texts(input, "train", None, limit)
    if te is None:
        raise ParameterError("the trade-off needs a built-in dataset with a test split")
    if vocab is None:
        train = Corpus.from_texts(tr, min_count=5 if min_count is None else min_count, max_vocab=max_vocab,
                                  vocabulary="corpus")
        _print_warnings(["vocabulary built from the training split (--vocabulary corpus): these runs are "
                         "experiments, not releases, but their models would not be covered by the guarantee"])
    else:
        train = Corpus.from_texts(tr, vocabulary=vocab)
    test = train.transform_texts(te)  # held-out words outside the vocabulary are dropped
    if not quiet:
        tot = test.n_tokens + test.oov_tokens
        err_console.print(f"vocabulary: {train.n_words} words ({_vocabulary_label(train.preprocessing)}); held-out "
                          f"tokens outside it dropped: {100.0 * test.oov_tokens / max(tot, 1):.1f} %",
                          highlight=False, markup=False)
    bar = progress(quiet)
    task = bar.add_task("runs", total=1 + len(meths) * len(eps))
    with bar:
        df = privacy_utility(train, test, eps, meths, n_topics=k, alpha=alpha, beta=beta, iterations=iterations,
                             seed=seed, progress=lambda d: bar.update(task, advance=1, description=d),
                             method_params=method_params)
    from textdp.data.io import atomic_outputs

    with atomic_outputs([csv_path, output]) as (tmp_csv, tmp_plot):  # both files, or neither
        df.to_csv(tmp_csv, index=False)
        plot_privacy_utility(df, tmp_plot, title=f"{name}: K={k}, {iterations} sweeps", format=fmt)
    if json_out:
        print_json({"plot": str(output), "table": str(csv_path), "rows": df.to_dict(orient="records")})
    elif not quiet:
        out_console.print(df[["method", "epsilon", "perplexity", "seconds"]].to_string(index=False, float_format="%.1f"),
                          highlight=False, markup=False)
        out_console.print(f"plot: {output}   table: {csv_path}", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(topics_app, name="topics")
