"""``textdp sanitize``: DP sanitization of a corpus with any registered sanitizer (``textdp mechanisms``).

Thin layer over :mod:`textdp.sanitize`: parses options, streams the input in
chunks (two passes for a file: count the vocabulary, then sanitize and write),
shows progress on stderr, writes the output and its privacy card atomically,
prints a summary.
"""

from __future__ import annotations

import json
import math
import time
import os
from pathlib import Path
from typing import Optional

import typer

from textdp.cli._common import esc, handle_errors, out_console, opt_engine, opt_json, opt_output, opt_overwrite, \
    opt_quiet, opt_scheduler, opt_seed

__all__ = ["register", "sanitize_command"]


MECHANISM_HELP = ("santext | santext+ | fbdd | mahalanobis | vickrey | custext | custext+ | tem | truncated-gumbel | "
                  "1-diffractor | dp-prompt | dp-mlm (`textdp mechanisms` lists them with their guarantees and "
                  "parameters)")


#: output names that look like a file's: a release of parts (a folder) with one is warned about
_FILE_SUFFIXES = frozenset({".csv", ".tsv", ".txt", ".json", ".jsonl", ".parquet", ".gz"})


def parse_params(mech_name: str, items: list[str]) -> dict:
    """``--param KEY=VALUE`` items as the mechanism's keyword arguments, typed from its signature
    (int, float, bool, str); ParameterError (one line) for a malformed item, an unknown key or a bad value."""
    from textdp.errors import ParameterError
    from textdp.sanitize import mechanism_parameters

    own = mechanism_parameters(mech_name)
    out: dict = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ParameterError(f"--param {item!r}: write KEY=VALUE, e.g. --param k=20")
        if key not in own:
            raise ParameterError(f"--param {key}: {mech_name} has no parameter {key!r}; its parameters: "
                                 f"{', '.join(own) or 'none'}")
        if key in out:
            raise ParameterError(f"--param {key} given twice")
        p = own[key]
        ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
        default = p.default
        value = value.strip()
        try:
            if "bool" in ann or isinstance(default, bool):
                low = value.lower()
                if low not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                out[key] = low in ("true", "1", "yes")
            elif ann.startswith("int") or (isinstance(default, int) and "float" not in ann):
                out[key] = int(value)
            elif "float" in ann or isinstance(default, float):
                out[key] = float(value)
            else:
                out[key] = value
        except ValueError:
            raise ParameterError(f"--param {key}={value!r}: not a valid {ann or type(default).__name__}") from None
    return out


def _default_output(input_name: str, builtin: bool, mechanism: str) -> Path:
    tag = mechanism.replace("+", "plus")
    if builtin:
        return Path(f"{input_name}.{tag}.csv")
    p = Path(input_name)
    suffix = p.suffix or ".txt"
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    return p.with_name(f"{stem}.{tag}{suffix}")


@handle_errors
def sanitize_command(
    input: str = typer.Argument("rotten-tomatoes", help="A built-in dataset name (see `textdp datasets`), a "
                                "CSV/TSV/JSONL/Parquet/TXT file, or a folder or quoted glob of such parts "
                                "('lake/*.parquet'; the output is then a folder of parts)."),
    mechanism: str = typer.Option("santext", "--mechanism", "-m", help=MECHANISM_HELP),
    epsilon: float = typer.Option(..., "--epsilon", "-e", help="Privacy parameter: per token and per unit of the "
                                  "mechanism's distance (santext, fbdd, tem: Euclidean embedding distance; mahalanobis: "
                                  "regularized Mahalanobis; 1-diffractor: list index), per token within a group "
                                  "(custext), per document (dp-prompt), per position (dp-mlm: one word costs "
                                  "2(W-1) times it, W its context window; the card and the ledger charge that). "
                                  "Not comparable across mechanisms: see "
                                  "`textdp compare`."),
    w: Optional[float] = typer.Option(None, "--w", help="SanText+: least frequent share of the vocabulary "
                                      "that is sensitive, in [0,1] (default 0.9)."),
    p: Optional[float] = typer.Option(None, "--p", help="SanText+: probability that a non-sensitive word is "
                                      "resampled, in [0,1] (default 0.3)."),
    param: Optional[list[str]] = typer.Option(None, "--param", "-P", help="A mechanism's own parameter as KEY=VALUE "
                                              "(repeatable), e.g. -P k=20 for custext; `textdp mechanisms` lists "
                                              "each mechanism's parameters."),
    frequencies: Optional[str] = typer.Option(None, "--frequencies", help="SanText+: how the sensitive set is "
                                              "ranked: 'public' (default: the output vocabulary's public frequency "
                                              "order), 'wordfreq', or 'corpus' (the paper's choice: corpus counts "
                                              "are then released UNPROTECTED)."),
    embeddings: str = typer.Option("glove-6b-50d", "--embeddings", help="glove-6b-50d | minilm | a GloVe/"
                                   "word2vec text file | a local Hugging Face model folder."),
    output_vocabulary: str = typer.Option("public", "--output-vocabulary", help="public (default: a shipped "
                                          "public word list, e.g. the 30,000 most frequent GloVe words) | full "
                                          "(the whole embedding table) | FILE (your public list, one word per "
                                          "line) | corpus (the paper's choice: which words occur in the input is "
                                          "then released UNPROTECTED)."),
    oov: str = typer.Option("uniform", "--oov", help="Tokens without an embedding: uniform (random word, "
                            "input-independent) | unk | drop | keep (released UNPROTECTED)."),
    text_column: Optional[str] = typer.Option(None, "--text-column", help="Column holding the text "
                                              "(default: text or a common synonym)."),
    split: str = typer.Option("all", "--split", help="Built-in datasets: all | train | test."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N documents (quick runs)."),
    output: Optional[Path] = opt_output("Output file (format from its suffix). Default: INPUT.MECHANISM.EXT "
                                        "beside a file input, or ./NAME.MECHANISM.csv for a built-in dataset."),
    seed: Optional[int] = opt_seed(),
    overwrite: bool = opt_overwrite(),
    quiet: bool = opt_quiet(),
    json_out: bool = opt_json(),
    chunk_size: int = typer.Option(50_000, "--chunk-size", help="Documents per streamed chunk."),
    block_mb: float | None = typer.Option(None, "--block-size", help="MiB per block of word distributions per worker (float64; at least 16 words per block). Default: 256 for the numba kernel (at most 64 words per block), 32 for the numpy fallback."),
    workers: Optional[int] = typer.Option(None, "--workers", help="--engine local: threads of the SanText / "
                                          "SanText+ sampler on the CPU (default: min(4, CPUs)). --engine dask|spark: "
                                          "the engine's workers (a local cluster of N processes, local[N]); each "
                                          "samples in one thread. The output is the same for any number."),
    engine: str = opt_engine("the parts (one task per input part; a file, folder or glob)"),
    scheduler: Optional[str] = opt_scheduler(),
    device: str = typer.Option("cpu", "--device", help="cpu (default) | cuda (or cuda:N) | auto: where SanText and "
                               "SanText+ sample (the same law and seeded draws on a GPU, except at float ties; "
                               "fbdd samples on the CPU). auto = cuda when torch sees a CUDA device."),
    ledger_dir: Optional[str] = typer.Option(None, "--ledger-dir", help="Folder of the budget ledgers."),
    no_ledger: bool = typer.Option(False, "--no-ledger", help="Do not record the release in the budget ledger."),
    force: bool = typer.Option(False, "--force", help="Release even if the ledger refuses it (over the dataset's "
                               "budget, a term without bound, or a currency no budget names); recorded as forced."),
):
    """Sanitize a corpus with a text-DP mechanism (SanText, SanText+, FBDD, Mahalanobis, Vickrey, CusText,
    CusText+, TEM, TruncatedGumbel, 1-Diffractor, DP-Prompt, DP-MLM: `textdp mechanisms`) and write a privacy
    card."""
    from textdp.accounting.card import build_card, check_card_path, write_card
    from textdp.data import io
    from textdp.data.datasets import is_builtin, load_dataset
    from textdp.errors import InputError, ParameterError
    from textdp.sanitize import make_mechanism, privacy_statistics
    from textdp.sanitize.base import check_epsilon, check_unit

    t0 = time.perf_counter()
    # ---- parameters first: bad values fail before anything is read
    mech_name = mechanism.strip().lower()
    check_epsilon(epsilon)
    if w is not None:
        check_unit(w, "--w")
    if p is not None:
        check_unit(p, "--p")
    if split not in ("all", "train", "test"):
        raise ParameterError(f"--split must be all, train or test, got {split!r}")
    if limit is not None and limit < 1:
        raise ParameterError(f"--limit must be a positive number of documents, got {limit}")
    if chunk_size < 1:
        raise ParameterError(f"--chunk-size must be positive, got {chunk_size}")
    if block_mb is not None and not (math.isfinite(block_mb) and block_mb * 2**20 >= 1024):  # NaN and inf too: one line, not a crash
        raise ParameterError(f"--block-size must be a finite positive number of MiB, at least 1/1024 MiB "
                             f"(1 KiB), got {block_mb:g}; the default is 256 (numba kernel) or 32 (numpy fallback)")
    from textdp.models.device import resolve_device

    from textdp.sanitize import MECHANISMS, canonical_name

    mech_name = canonical_name(mech_name)
    cls = MECHANISMS[mech_name]
    device = resolve_device("cpu" if not cls.torch_sampler and device.strip().lower() == "auto" else device)
    if not cls.torch_sampler and device != "cpu":
        raise ParameterError(f"--device {device}: {mech_name} has no GPU sampler; use --device cpu")
    # --engine dask|spark, or a folder/glob input: the output is a folder of parts (sanitize_parts)
    eng_name = str(engine).strip().lower()
    if eng_name not in ("local", "dask", "spark"):
        raise ParameterError(f"--engine must be local, dask or spark, got {engine!r}")
    if scheduler is not None and eng_name == "local":
        raise ParameterError("--scheduler applies to --engine dask or spark, not local")
    from textdp.data.parts import is_parts_input

    parts_mode = eng_name != "local" or is_parts_input(input)
    if workers is not None and eng_name != "local":  # the engine's workers; each samples in one thread
        if workers < 1:
            raise ParameterError(f"--workers must be a positive number of engine workers, got {workers}")
    elif workers is not None:
        if workers < 1:
            raise ParameterError(f"--workers must be a positive number of threads, got {workers}")
        if not cls.supports_workers and workers > 1:
            takers = ", ".join(n for n, c in MECHANISMS.items() if c.supports_workers)
            raise ParameterError(f"--workers N > 1 applies to {takers} ({mech_name} samples in one thread)")
        if device != "cpu" and workers > 1:
            raise ParameterError(f"--workers N > 1 applies to the CPU sampler; --device {device} samples on the device")
    if cls.document_level and embeddings != "glove-6b-50d" and not quiet:  # one note; the model is -P model=
        from textdp.cli._common import err_console

        err_console.print(f"[yellow]note:[/] --embeddings does not apply to {mech_name} (a document-level "
                          "mechanism over a language model: pass the model with -P model=PATH)", highlight=False,
                          soft_wrap=True)
    kwargs = dict(output_vocabulary=output_vocabulary, oov=oov, rng=seed, block_bytes=None if block_mb is None else int(block_mb * 2**20),
                  device=device, workers=workers)
    if mech_name == "santext+":
        kwargs.update(w=0.9 if w is None else w, p=0.3 if p is None else p,
                      frequencies=frequencies or "public")
    else:
        kwargs.update(w=w, p=p, frequencies=frequencies)
    kwargs.update(parse_params(mech_name, param or []))
    if parts_mode:
        if eng_name != "local":
            kwargs["workers"] = 1  # one sampler thread per engine task: the engine's workers share the cores
        return _sanitize_parts_command(
            input, output, mech_name, embeddings, epsilon, kwargs, eng_name, scheduler, workers, text_column, split,
            limit, chunk_size, overwrite, quiet, json_out, ledger_dir, no_ledger, force, seed, t0)

    # ---- input and output paths
    builtin = is_builtin(input)
    if not builtin and not Path(input).exists():
        from textdp.data.datasets import list_datasets

        raise InputError(f"{input!r} is neither a file nor a built-in dataset ({', '.join(list_datasets())})")
    if not builtin and split != "all":
        raise ParameterError("--split applies only to built-in datasets")
    tag = mech_name
    if output is not None and not str(output).strip():
        raise ParameterError("--output is empty; give a file name such as out.csv (its suffix sets the format)")
    out = Path(output) if output is not None else _default_output(input, builtin, tag)
    if not builtin:
        if Path(input).is_dir():
            raise InputError(f"{input!r} is a folder, not a file; give a CSV/TSV/JSONL/Parquet/text file")
        if not Path(input).is_file():  # a pipe, socket or device: reading it could block forever
            raise InputError(f"{input!r} is not a regular file (a pipe, socket or device); give a "
                             f"CSV/TSV/JSONL/Parquet/text file")
        io.detect_format(input)
    if out.is_dir():
        from textdp.errors import OutputError

        raise OutputError(f"--output {str(out)!r} is a folder; give a file name inside it, e.g. {str(out / 'out.csv')!r}")
    io.detect_format(out)
    # the file's size, mtime and inode before anything reads it: a change between the passes is refused
    input_state = None if builtin else io.file_state(input)
    created = io.make_missing_folders(out.parent)
    try:
        io.check_output_path(out, [None if builtin else input], overwrite=overwrite)
        from textdp.accounting.ledger import check_output_outside_ledgers

        check_output_outside_ledgers(out, ledger_dir)
        check_card_path(out, overwrite=overwrite)
        # the mechanism's guarantee is data-independent: known before anything is read
        mech = make_mechanism(mech_name, embeddings, epsilon, **kwargs)
        led = None
        reservation: list = []
        forced_card: dict = {}  # {"forced": True, "forced_reason": ...} when --force overrode a refusal
        if not no_ledger:
            from textdp.accounting.ledger import Ledger

            led = Ledger(input, ledger_dir)
            if not force:  # a refusal known now costs no reading at all
                led.check(mech.guarantee)
        else:  # one warning line when the dataset has a budget; the card says the release is not recorded
            from textdp.cli.budget import NOT_RECORDED, announce_unrecorded

            announce_unrecorded(input, ledger_dir)
            forced_card["ledger"] = NOT_RECORDED
        # the input is read twice (count, then sanitize): a change between the passes is refused
        watch = None if builtin else io.InputWatch(input, input_state, led.input_sha256 if led is not None else None)
    except BaseException:
        io.remove_empty_folders(created)
        raise

    def reserve_budget():
        """Called once the input has been read and validated, before anything is sampled or
        written (issue 8): the budget is reserved under the ledger lock; refused -> nothing written."""
        if led is not None:
            reservation.append(led.reserve(mech.guarantee, command=f"sanitize --mechanism {mech_name}",
                                           force=force, outputs=[out, card_path(out)]))
            if force:  # a refusal overridden: one warning line, and the card states it
                from textdp.cli.budget import announce_forced

                forced_card.update(announce_forced(led, reservation[0]))

    from textdp.accounting.card import card_path

    written: list = []  # the output and card once in place, until the ledger has recorded them
    try:
        stats, card_file, mech = _run(input, builtin, out, mech, epsilon, text_column, split, limit, chunk_size,
                                      quiet, load_dataset, io, privacy_statistics,
                                      lambda **kw: build_card(**kw, **forced_card), write_card, reserve_budget,
                                      watch=watch)
        if led is not None:  # the release closes the reservation (with its card) once the card is written
            written[:] = [out, Path(card_file)]
            led.record(mech.guarantee, card=json.loads(Path(card_file).read_text(encoding="utf-8")),
                       input_hash=watch.sha256 if watch is not None else None,  # the bytes that were released
                       command=f"sanitize --mechanism {mech_name}", force=force, reservation=reservation[0])
            written.clear()
    except BaseException:
        # refused at the final check, or interrupted (SIGTERM, SIGHUP) between the output's rename and
        # the ledger's record: no release stays on disk whose spend the ledger does not hold
        for f in written:
            Path(f).unlink(missing_ok=True)
        if led is not None and reservation:
            led.cancel(reservation[0])
        io.remove_empty_folders(created)
        raise
    total_s = time.perf_counter() - t0
    warnings = json.loads(Path(card_file).read_text(encoding="utf-8")).get("warnings") or []
    private_warnings = []  # depend on the private data: the curator's terminal only, never the card
    if stats.tokens and stats.oov_tokens / stats.tokens > OOV_WARNING_SHARE:
        private_warnings.append(
            f"{stats.oov_tokens / stats.tokens:.0%} of the tokens have no embedding in {mech.embeddings.source} "
            f"(handled by --oov {mech.oov}): check that the embeddings match the text's language, casing and "
            "tokenization")
    if output is None and not builtin:
        private_warnings.append(f"the output is named after the input ({out.name}); the name travels with the release "
                                "and its card: rename it (or pass --output) if the input's file name is private")
    if mech.output_vocabulary == "corpus" and len(mech.output_rows) < 100:
        private_warnings.append(f"the output vocabulary has only {len(mech.output_rows)} words (--output-vocabulary "
                                "corpus on a small input): most tokens can only come back as themselves or a few "
                                "others; use the public vocabulary")
    summary = {
        "input": input, "output": str(out), "card": str(card_file), "mechanism": mech.name,
        "guarantee": mech.guarantee.describe(),
        "worst_case_epsilon_per_token": getattr(mech.guarantee, "worst_case_epsilon", None),
        "output_vocabulary": mech.output_vocabulary_info(),
        "private": {  # exact statistics of the private input: for the curator, not in the card
            "note": "exact statistics of the private input: not in the card; do not publish",
            "documents": stats.documents, "tokens": stats.tokens,
            "changed_tokens": stats.changed_tokens, "share_changed": round(stats.share_changed, 4),
            "oov_tokens": stats.oov_tokens, "oov_policy": stats.oov_policy,
            "warnings": private_warnings,
            # timings with the token count they are computed from (tokens / seconds gives it back)
            "seconds_total": round(total_s, 3), "seconds_sanitizing": round(stats.seconds, 3),
            "tokens_per_second": round(stats.tokens / stats.seconds) if stats.seconds > 0 else None,
        },
        "seeded": seed is not None,
        "warnings": warnings,
    }
    if getattr(mech, "document_level", False):
        summary["document_level"] = True
        if getattr(mech, "model_path", None):  # the local path: the curator's terminal only (the card has name + hash)
            summary["model_path"] = mech.model_path
        if stats.seconds > 0:  # language models run at a few words per second: two decimals
            summary["private"]["tokens_per_second"] = round(stats.tokens / stats.seconds, 2)
    return _report(summary, warnings, private_warnings, seed, quiet, json_out)


def _report(summary: dict, warnings, private_warnings, seed, quiet: bool, json_out: bool) -> dict:
    """Every card warning (the corpus-vocabulary statement included), then the private ones, on stderr; then the
    summary as JSON or as the terminal summary."""
    if not quiet:
        from textdp.cli._common import err_console

        for w in warnings:
            err_console.print(f"[yellow]warning:[/] {esc(w)}", highlight=False, soft_wrap=True)
        for w in private_warnings:
            err_console.print(f"[yellow]warning (private):[/] {esc(w)}", highlight=False, soft_wrap=True)
    if json_out:
        from textdp.cli._common import print_json

        print_json(summary)
    elif not quiet:
        _print_summary(summary, seed)
    return summary


def _sanitize_parts_command(input, output, mech_name, embeddings, epsilon, kwargs, eng_name, scheduler, workers,
                            text_column, split, limit, chunk_size, overwrite, quiet, json_out, ledger_dir, no_ledger,
                            force, seed, t0):
    """``textdp sanitize`` for a folder or glob of parts, or on --engine dask|spark: a thin layer over
    :func:`textdp.engines.parts.sanitize_parts` (progress over parts, terminal summary)."""
    from textdp.cli._common import engine_from_options, err_console
    from textdp.cli._common import progress as make_progress
    from textdp.cli.budget import NOT_RECORDED, announce_forced
    from textdp.data.datasets import is_builtin
    from textdp.engines import LocalEngine
    from textdp.engines.parts import CARD_NAME, sanitize_parts
    from textdp.errors import ParameterError
    from textdp.sanitize import make_mechanism

    if is_builtin(input) and not Path(input).exists():
        raise ParameterError(f"--engine {eng_name} reads files, folders or globs of parts; the built-in dataset "
                             f"{input!r} runs with --engine local")
    if split != "all":
        raise ParameterError("--split applies only to built-in datasets")
    if limit is not None:
        raise ParameterError("--limit applies to a single file on --engine local (a folder of parts is released "
                             "whole)")
    if output is not None and not str(output).strip():
        raise ParameterError("--output is empty; give a folder name such as out/ (it receives the parts)")
    default_name = output is None
    if output is None and not Path(input).exists():
        from textdp.data.parts import find_parts

        find_parts(input)  # a glob that matches nothing (or a missing file) is named before --output is asked for
    if output is None:
        src = Path(input)
        if not src.is_dir():
            raise ParameterError("give --output FOLDER: the release of a glob is a folder of parts"
                                 if not src.exists() else
                                 f"give --output FOLDER: a file released on --engine {eng_name} is a folder of parts")
        out = src.resolve().with_name(f"{src.resolve().name}.{mech_name.replace('+', 'plus')}")
    else:
        out = Path(output)
    mech = make_mechanism(mech_name, embeddings, epsilon, **kwargs)
    engine = engine_from_options(eng_name, scheduler, workers) or LocalEngine()
    with make_progress(quiet=quiet) as bar:
        tasks: dict = {}
        labels = {"reading": "reading the parts (sizes, hashes)",
                  "sanitizing": f"sanitizing ({mech.name}, eps={epsilon:g})"}

        def progress(stage, done, total):
            if stage not in tasks:
                tasks[stage] = bar.add_task(labels.get(stage, stage), total=total)
            bar.update(tasks[stage], completed=done, total=total)

        try:
            r = sanitize_parts(input, out, mech, engine=engine, text_column=text_column, overwrite=overwrite,
                               ledger=False if no_ledger else (ledger_dir or True), force=force, progress=progress,
                               chunk_size=chunk_size, command=f"sanitize --mechanism {mech_name} --engine {eng_name}",
                               card_fields={"ledger": NOT_RECORDED} if no_ledger else None,
                               on_reserved=announce_forced)
        finally:
            engine.close()
    if no_ledger and not quiet:  # one warning when the dataset (identified by its manifest) has a budget
        from textdp.accounting.ledger import Budget, Ledger
        from textdp.errors import TextDPError

        try:
            led = Ledger.for_content(input, r.dataset_sha256, ledger_dir)
            budgets = led.budgets() if led.exists() else {}
        except (TextDPError, OSError, ValueError):
            budgets = {}
        if budgets:
            caps = "; ".join(Budget.describe(b) for b in budgets.values())
            err_console.print(f"[bold yellow]warning:[/] --no-ledger: this release is not recorded in the budget "
                              f"ledger of the dataset, which has a budget ({esc(caps)}): its spend is not counted; "
                              "the card says it is not recorded", highlight=False, soft_wrap=True)
    stats = r.stats
    total_s = time.perf_counter() - t0
    warnings = r.card_data.get("warnings") or []
    private_warnings = []
    if stats.tokens and stats.oov_tokens / stats.tokens > OOV_WARNING_SHARE:
        private_warnings.append(
            f"{stats.oov_tokens / stats.tokens:.0%} of the tokens have no embedding in {mech.embeddings.source} "
            f"(handled by --oov {mech.oov}): check that the embeddings match the text's language, casing and "
            "tokenization")
    if not default_name and out.suffix.lower() in _FILE_SUFFIXES:
        private_warnings.append(f"--output {out.name} is a folder of parts (a release of parts is always a folder, "
                                f"its parts in the input parts' format), though its name looks like a file's")
    if default_name:
        private_warnings.append(f"the output folder is named after the input ({out.name}); the name travels with "
                                "the release and its card: rename it (or pass --output) if the input's name is "
                                "private")
    summary = {
        "input": str(input), "output": str(out), "card": str(out / CARD_NAME), "mechanism": mech.name,
        "guarantee": mech.guarantee.describe(),
        "worst_case_epsilon_per_token": getattr(mech.guarantee, "worst_case_epsilon", None),
        "output_vocabulary": mech.output_vocabulary_info(),
        "engine": r.engine, "parts": r.parts, "tasks": r.output_parts,
        "sampler_threads": int(getattr(mech, "workers", 1) or 1),
        "private": {
            "note": "exact statistics of the private input: not in the card; do not publish",
            "documents": stats.documents, "tokens": stats.tokens,
            "changed_tokens": stats.changed_tokens, "share_changed": round(stats.share_changed, 4),
            "oov_tokens": stats.oov_tokens, "oov_policy": stats.oov_policy,
            "dataset_sha256": r.dataset_sha256,
            "warnings": private_warnings,
            "seconds_total": round(total_s, 3), "seconds_sanitizing": round(r.seconds.get("sanitizing", 0.0), 3),
            "tokens_per_second": (round(stats.tokens / r.seconds["sanitizing"])
                                  if r.seconds.get("sanitizing", 0) > 0 else None),
        },
        "seeded": seed is not None,
        "warnings": warnings,
        "ledger": None if r.ledger is None else str(r.ledger),
    }
    if getattr(mech, "document_level", False):
        summary["document_level"] = True
        if getattr(mech, "model_path", None):
            summary["model_path"] = mech.model_path
    return _report(summary, warnings, private_warnings, seed, quiet, json_out)


def _run(input, builtin, out, mech, epsilon, text_column, split, limit, chunk_size,
         quiet, load_dataset, io, privacy_statistics, build_card, write_card, reserve_budget=lambda: None,
         watch=None):
    from textdp.cli._common import progress as make_progress
    from textdp.errors import InputError

    # ---- chunks of the input (a built-in dataset is one in-memory frame)
    if builtin:
        ds = load_dataset(input)
        frame = ds.all() if split == "all" else (ds.train if split == "train" else ds.test)
        if text_column is not None and text_column not in frame.columns:
            raise InputError(f"dataset {input!r} has no column {text_column!r} (columns: "
                             f"{', '.join(map(str, frame.columns))})")
        col = text_column or ds.text_column
        if limit is not None:
            frame = frame.head(limit)
        frame = frame.reset_index(drop=True)

        def chunks():
            for s in range(0, len(frame), chunk_size):
                yield frame.iloc[s : s + chunk_size].copy(), col
    else:
        def chunks():
            left = limit
            # a null text passes through unchanged; each JSON Lines row keeps its own keys
            # a .txt input comes as io.TextLines (no pandas import for a plain-text run)
            for df, c in io.iter_table_chunks(input, text_column=text_column, chunksize=chunk_size, nulls="keep",
                                              row_keys=True, plain_text=True):
                if left is not None:
                    if left <= 0:
                        return
                    df = df.head(left)
                    left -= len(df)
                yield df, c

    with make_progress(quiet=quiet) as bar:
        task = bar.add_task("counting the vocabulary", total=None)
        n_docs = 0
        for i, (df, col) in enumerate(chunks()):
            # the first chunk keeps its tokens (a one-chunk input is tokenized once);
            # later chunks are only counted (streaming: nothing is kept)
            mech.partial_fit(_texts(df[col]), keep_tokens=i == 0)
            n_docs += len(df)
            bar.update(task, completed=n_docs)
        if mech._fitted is None or mech._fitted.tokens == 0:
            raise InputError("the input has no words to sanitize (all documents are empty)")
        total_tokens = mech._fitted.tokens
        reserve_budget()  # the input is read and valid: reserve before sampling or writing anything
        bar.update(task, description="counting the vocabulary", total=n_docs, completed=n_docs)
        san = bar.add_task(f"sanitizing ({mech.name}, eps={epsilon:g})", total=total_tokens)
        stats = None
        new_card = None  # set once this run's card is written (just before the table's final rename)
        old_table = _identity(out)
        from textdp.accounting.card import card_path

        try:  # an --overwrite run puts the previous card back if its table is not replaced
            old_card = card_path(out).read_bytes() if card_path(out).is_file() else None
        except OSError:
            old_card = None
        try:
            with io.TableWriter(out, text_column=col) as writer:
                stats, new_card = _sanitize_into(writer, chunks, mech, bar, san, task, total_tokens,
                                                 out, chunk_size, privacy_statistics, build_card, write_card,
                                                 watch)
        except BaseException:
            # the table's final rename failed (or was interrupted) after the card was written:
            # do not leave a new card describing an output that is not there
            if new_card is not None and _identity(out) == old_table:  # the table was not replaced
                if old_card is None:
                    Path(new_card).unlink(missing_ok=True)
                else:
                    Path(new_card).write_bytes(old_card)
            raise
        card_file = new_card
    return stats, card_file, mech


def _texts(column) -> list[str]:
    """The texts of a chunk's text column, a null (None) read as the empty document (it is
    written back as null: nothing to sanitize; record indices stay those of the input)."""
    return ["" if t is None else t for t in column.tolist()]


def _identity(path):
    """``(inode, mtime_ns)`` of ``path``, or None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _sanitize_into(writer, chunks, mech, bar, san, task, total_tokens, out, chunk_size,
                   privacy_statistics, build_card, write_card, watch=None):
    """Pass 2: sanitize chunk by chunk into the open table ``writer``, then write the card;
    returns ``(stats, card_file)``. ``watch`` (an :class:`~textdp.data.io.InputWatch` of a file
    input): the input must be the one pass 1 read (size, mtime, inode at every chunk; SHA-256
    before the card is written), else InputError, and nothing is written."""
    if watch is None:
        return _sanitize_chunks(writer, chunks, mech, bar, san, task, total_tokens, out, chunk_size,
                                privacy_statistics, build_card, write_card, lambda: None)
    watch.check()
    try:
        return _sanitize_chunks(writer, chunks, mech, bar, san, task, total_tokens, out, chunk_size,
                                privacy_statistics, build_card, write_card, lambda: watch.check(full=True),
                                watch.check)
    except Exception:
        what = watch.changed()  # a failure caused by a file changing under us is reported as that
        if what is not None:
            raise watch.error(what) from None
        raise


def _sanitize_chunks(writer, chunks, mech, bar, san, task, total_tokens, out, chunk_size,
                     privacy_statistics, build_card, write_card, before_card, after_chunk=lambda: None):
    stats = None
    mech.begin_release()  # one key for the whole file; each document draws from its own keyed streams
    first = 0
    other_columns: list[str] = []
    for df, col in chunks():
        after_chunk()
        if first == 0:
            from textdp.data.io import ROW_KEYS

            other_columns = [str(c) for c in df.columns if c != col and c != ROW_KEYS]
        original = df[col].tolist()
        texts, st = mech.sanitize_with_stats(_texts(df[col]), progress=lambda k: bar.advance(san, k),
                                             first_record=first)
        first += len(df)
        # a null text (JSON null, Parquet null) has nothing to sanitize: it is written back as null
        released = [None if o is None else t for o, t in zip(original, texts)]
        from textdp.data.io import TextLines

        if isinstance(df, TextLines):
            df[col] = released
        else:
            import pandas as pd

            df[col] = pd.Series(released, index=df.index, dtype=object)
        writer.write(df)
        stats = st if stats is None else stats.merge(st)
    before_card()
    bar.update(san, completed=total_tokens)
    card_task = bar.add_task("writing the privacy card", total=1)  # its own line: the counting bar keeps its label
    card = _card(mech, out, privacy_statistics, build_card, other_columns)
    written = write_card(card, out, overwrite=True)
    bar.update(card_task, completed=1)
    return stats, written


#: share of out-of-vocabulary tokens above which the card (and the terminal) warn
OOV_WARNING_SHARE = 0.2


def card_warnings(mech) -> list[str]:
    """The card's warnings (:func:`textdp.sanitize.cards.card_warnings`)."""
    from textdp.sanitize.cards import card_warnings as warnings

    return warnings(mech)


def _card(mech, out, privacy_statistics, build_card, other_columns=()) -> dict:
    """The privacy card (:func:`textdp.sanitize.cards.sanitizer_card`): parameters, the guarantee and
    facts computed from public data only (issue 12: no count, size, length, hash or name of the
    private input; those are printed to the curator's terminal, marked private, and the ledger
    keeps the input's hash)."""
    from textdp.sanitize.cards import sanitizer_card

    return sanitizer_card(mech, Path(out).name, other_columns=other_columns, build=build_card,
                          statistics=privacy_statistics)


def _drop_none(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def _print_summary(s: dict, seed) -> None:
    from rich.table import Table

    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(no_wrap=True)
    t.add_column(overflow="fold")  # long paths wrap instead of being cut with "…": the curator copies them
    t.add_row("mechanism", esc(f"{s['mechanism']}: {s['guarantee']}"))
    wc = s["worst_case_epsilon_per_token"]
    if s.get("document_level"):
        t.add_row("worst case", "the guarantee above (document-level: see the card's units)")
    else:
        t.add_row("worst case", "unbounded (see the warnings)" if wc is None or math.isinf(wc) else
                  f"{wc:.4g} plain DP per token (largest log-ratio over all accepted inputs)")
    v = s["output_vocabulary"]
    if v["kind"] == "corpus":
        vtext = "corpus (which words occur in the input is NOT protected)"
    elif v["kind"] == "model":
        vtext = f"{v.get('name', 'model')} ({v.get('size', 0):,} tokens; {v.get('banned_tokens', 0):,} special tokens banned)"
    else:
        vtext = f"{v.get('name', v['kind'])} ({v.get('size', 0):,} words)"
    t.add_row("output vocab", esc(vtext))
    if s.get("model_path"):
        t.add_row("model", esc(f"{s['model_path']} (this path is not in the card: it names the model by folder name "
                               "and a hash of its config and tokenizer files)"))
    p = s["private"]
    if s.get("document_level"):
        t.add_row("private", f"{p['documents']:,} documents, {p['tokens']:,} input words: curator only, not in the "
                             "card")
    else:
        t.add_row("private", f"{p['documents']:,} documents, {p['tokens']:,} tokens ({p['share_changed']:.1%} changed; "
                             f"{p['oov_tokens']:,} without embedding, policy '{p['oov_policy']}'): curator only, "
                             "not in the card")
    tps = f"{p['tokens_per_second']:,} {'input words' if s.get('document_level') else 'tokens'}/s" \
        if p["tokens_per_second"] else ""
    t.add_row("time", f"{p['seconds_total']:.2f} s total, {p['seconds_sanitizing']:.2f} s sanitizing ({tps}; "
                      "private too)")
    if "engine" in s:  # a folder of parts
        e = s["engine"]
        tasks = s.get("tasks", s["parts"])
        threads = s.get("sampler_threads") or 1
        who = (f"1 part at a time, {threads} sampler thread{'s' if threads != 1 else ''}" if e["engine"] == "local"
               else f"{e['workers']} worker{'s' if e['workers'] != 1 else ''}")
        t.add_row("engine", esc(f"{e['engine']} ({who}), "
                                f"{s['parts']:,} part{'s' if s['parts'] != 1 else ''} in "
                                f"{tasks:,} task{'s' if tasks != 1 else ''}"))
    t.add_row("output", esc(str(s["output"])))
    t.add_row("privacy card", esc(str(s["card"])))
    if seed is not None:
        t.add_row("seed", f"{seed} (reproducible research run: not for release)")
    out_console.print(t)


def register(app: typer.Typer) -> None:
    app.command("sanitize")(sanitize_command)
