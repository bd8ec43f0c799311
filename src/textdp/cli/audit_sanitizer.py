"""``textdp audit sanitizer NAME|module:function``: the metric-DP audit of a word sanitizer, pair by pair.

Thin layer over :mod:`textdp.audit.metric` (parsing, progress, printing); registered beside
``textdp audit -m …`` by :data:`textdp.cli.audit.SUBCOMMANDS`.
"""

from __future__ import annotations

import math
from typing import Optional

import typer

from textdp.cli._common import handle_errors, opt_json, opt_quiet, opt_seed, print_json, progress
from textdp.errors import ParameterError

NAME_HELP = ("A textdp word sanitizer (santext, santext+, fbdd, mahalanobis, vickrey, custext, custext+, tem, "
             "truncated-gumbel, 1-diffractor), a deliberately broken one (santext-misscaled, fbdd-half-noise), "
             "pyPANTERA's (pypantera.cmp, .mahalanobis, .vickrey, .vickrey-mhl, .santext, .custext, .tem), or your "
             "own as package.module:function / file.py:function: f(word: str, n: int, rng: numpy Generator) -> "
             "list of n output words, audited against --epsilon, --metric and --epsilon0.")


def _words(text: Optional[str]) -> Optional[list[str]]:
    if text is None:
        return None
    from pathlib import Path

    from textdp.cli._common import split_list

    p = Path(text)
    if p.is_file():
        words = [w.strip() for w in p.read_text(encoding="utf-8").splitlines() if w.strip()]
    else:
        words = split_list(text, "--words")
    if len(set(words)) < 2:
        raise ParameterError(f"--words needs at least 2 distinct words (a comma list or a file of one word per line), "
                             f"got {text!r}")
    return words


def _fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return f"{x:.4g}"


def _print(result, quiet: bool) -> None:
    from rich import box
    from rich.table import Table

    from textdp.cli.audit import _wide

    c = result.claim
    con = _wide()
    con.print(f"{result.name}: metric-DP audit ({result.method}), claim {c.text()}", highlight=False, markup=False)
    conf = ("exact laws" if result.method == "exact" else
            f"lower bounds at {100 * (1 - result.alpha):g}% simultaneous confidence, {result.samples:,} draws per "
            f"word per half")
    t = Table(title=f"worst pairs by loss / claim ({conf}); FLAG = loss above the claim", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("pairs", "x", "x′", "d", "claim", "loss" if result.method == "exact" else "loss ≥", "plug-in",
                "ratio", "event", ""):
        t.add_column(col, justify="left" if col in ("pairs", "x", "x′", "event", "") else "right")
    for kind, rows in result.worst.items():
        for p in rows:
            t.add_row(kind, p.word_a, p.word_b, _fmt(p.distance), _fmt(p.claim), _fmt(p.loss), _fmt(p.estimate),
                      _fmt(p.ratio), p.event, "[bold red]FLAG[/]" if p.flagged else "")
    con.print(t)
    wc = c.worst_case_epsilon
    line = f"largest loss over all pairs and outputs: {_fmt(result.max_loss)}"
    if wc is not None:
        line += f" (plain-DP worst case claimed: {_fmt(wc)}{'; FLAG' if result.worst_case_flagged else ''})"
    con.print(line, highlight=False, markup=False)
    if result.method == "sampled":
        con.print(f"ceiling: no lower bound from {result.samples:,} draws per word can exceed {_fmt(result.ceiling)} "
                  f"(a claim above it cannot be refuted at this size)", highlight=False, markup=False)
    if result.umldp_violations:
        con.print(f"FLAG: non-sensitive outputs produced by another input: {'; '.join(result.umldp_violations[:3])}",
                  highlight=False, markup=False)
    verdict = ("[bold red]FLAG[/]: the claim is refuted" + (" at this confidence" if result.method == "sampled" else "")
               if result.verdict == "FLAG" else
               "[green]not refuted[/] (an audit can refute a claim, never certify one)")
    con.print(f"verdict: {verdict}; {len(result.words)} candidate words, {result.evaluated} pairs evaluated",
              highlight=False)
    if not quiet:
        con.print(f"time: {result.wall_s:.1f} s", highlight=False, markup=False)
        for n in result.notes:
            con.print(f"note: {n}", highlight=False, markup=False)
        if result.method == "sampled":
            con.print(f"simulation_rng: {result.simulation}", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    @app.command("sanitizer")
    @handle_errors
    def sanitizer(
        ctx: typer.Context,
        name: str = typer.Argument(..., metavar="NAME|module:function", help=NAME_HELP),
        embeddings: str = typer.Option("glove-6b-50d", "--embeddings", help="Embedding table: glove-6b-50d, a "
                                       "GloVe/word2vec text file or a local model folder."),
        epsilon: Optional[float] = typer.Option(None, "--epsilon", "-e", help="ε of the mechanism (textdp: the "
                                                "value it is built with, default 3; your own: the claimed ε per "
                                                "unit of d, required)."),
        param: Optional[list[str]] = typer.Option(None, "--param", "-P", help="A textdp mechanism's own parameter "
                                                  "as KEY=VALUE (repeatable), as for textdp sanitize."),
        metric: str = typer.Option("euclidean", "--metric", help="Your own sampler's claim: euclidean (ε·d over "
                                   "--embeddings) or discrete (ε for every pair: plain DP per word)."),
        epsilon0: float = typer.Option(0.0, "--epsilon0", help="Your own sampler's additive term ε0 of the claim."),
        words: Optional[str] = typer.Option(None, "--words", help="Candidate input words: a comma list or a file "
                                            "with one word per line (default: --n-words random output words, each "
                                            "with its nearest word)."),
        n_words: int = typer.Option(20, "--n-words", help="Random candidate words when --words is not given."),
        samples: str = typer.Option("2e4", "--samples", "-N", help="Sampled audit: draws per word in each half "
                                    "(selection, evaluation)."),
        method: str = typer.Option("auto", "--method", help="auto (exact where the law is exact), exact or sampled."),
        alpha: float = typer.Option(0.05, "--alpha", help="1 − alpha: simultaneous confidence of the sampled bounds."),
        random_pairs: int = typer.Option(20, "--random-pairs", help="Random pairs audited."),
        search_pairs: int = typer.Option(20, "--search-pairs", help="Pairs the search for the worst adds."),
        top: int = typer.Option(3, "--top", help="Pairs shown per kind."),
        fail_on_flag: bool = typer.Option(False, "--fail-on-flag", help="Exit with status 3 when the claim is "
                                          "refuted (for CI)."),
        seed: Optional[int] = opt_seed(),
        quiet: bool = opt_quiet(),
        json_out: bool = opt_json(),
    ):
        """Audit a word sanitizer's metric-DP claim pair by pair: for the closest pairs, random pairs and a
        search for the worst, the privacy loss between the output laws of x and x′ (exact for finite laws,
        else a Clopper–Pearson lower bound from samples) against the claim ε·d(x, x′) + ε0; FLAG when a
        loss exceeds its claim.

        Examples: textdp audit sanitizer santext -e 3; textdp audit sanitizer santext-misscaled -e 3;
        textdp audit sanitizer fbdd -e 10 -N 1e4; textdp audit sanitizer mysan.py:sanitize -e 2 --words good,great,bad
        """
        from textdp.cli._options import refuse_unused
        from textdp.cli.audit import _count, _user_stdout_to_stderr

        from textdp.audit import metric as M

        n = _count(samples, "--samples")
        if method not in M.METHODS:
            raise ParameterError(f"--method must be one of {', '.join(M.METHODS)}, got {method!r}")
        if metric not in ("euclidean", "discrete"):
            raise ParameterError(f"--metric must be euclidean or discrete, got {metric!r}")
        wl = _words(words)
        user = ":" in name
        peer = name.lower().startswith("pypantera.")
        if not user:
            refuse_unused(ctx, "states the claim of your own sampler (module:function); a named mechanism's claim "
                               "is its guarantee", "metric", "epsilon0")
        if user and param:
            raise ParameterError("--param sets a textdp mechanism's parameters; your own sampler takes none")
        if wl is not None:
            refuse_unused(ctx, "picks random candidates; --words gives them", "n_words")
        with _user_stdout_to_stderr():
            if user:
                if epsilon is None:
                    raise ParameterError("give the claimed --epsilon of your sampler (per unit of d; with "
                                         "--metric discrete, per pair)")
                from textdp.accounting.guarantees import positive_number

                eps = positive_number(epsilon, "--epsilon")
                if not (epsilon0 >= 0 and math.isfinite(epsilon0)):
                    raise ParameterError(f"--epsilon0 must be a finite number >= 0, got {epsilon0!r}")
                target = _user_target(name, eps, metric, epsilon0, embeddings, wl, n_words, seed)
            elif peer:
                from textdp.audit.peers import pypantera_target

                kw = {}
                for item in param or []:
                    k, sep, v = item.partition("=")
                    if not sep:
                        raise ParameterError(f"--param {item!r}: write KEY=VALUE, e.g. --param t=0.5")
                    try:
                        kw[k.strip()] = float(v) if k.strip() != "distance" else v.strip()
                    except ValueError:
                        raise ParameterError(f"--param {item!r}: the value must be a number") from None
                if "k" in kw:
                    kw["k"] = int(kw["k"])
                target = pypantera_target(name.split(".", 1)[1], embeddings, 3.0 if epsilon is None else epsilon,
                                          words=wl, n_words=n_words, seed=seed if seed is not None else 0, **kw)
            else:
                target = _named_target(name, embeddings, 3.0 if epsilon is None else epsilon, param or [], wl,
                                       n_words, seed)
            exact = target.exact if method == "auto" else method == "exact"
            total = len(target.words) ** 2 if exact else 2 * n * len(target.words)
            with progress(quiet) as bar:
                task = bar.add_task(f"audit {target.name}", total=total)
                result = M.audit_sanitizer(target, method=method, samples=n, alpha=alpha, random_pairs=random_pairs,
                                           search_pairs=search_pairs, top=top, seed=seed,
                                           progress=lambda k: bar.advance(task, k))
        if json_out:
            print_json(result.to_dict())
        else:
            _print(result, quiet)
        if fail_on_flag and result.verdict == "FLAG":
            raise typer.Exit(3)


def _named_target(name, embeddings, epsilon, params, words, n_words, seed):
    from textdp.audit.broken_sanitizers import BROKEN_SANITIZERS
    from textdp.audit.metric import sanitizer_target
    from textdp.sanitize import MECHANISMS, canonical_name, make_mechanism

    key = name.strip().lower()
    if key in BROKEN_SANITIZERS:
        if params:
            raise ParameterError(f"{key} takes no --param")
        mech = BROKEN_SANITIZERS[key](embeddings, epsilon, rng=0)
    else:
        try:
            key = canonical_name(name)
        except ParameterError:
            raise ParameterError(f"unknown sanitizer {name!r}; use one of {', '.join(MECHANISMS)}, "
                                 f"{', '.join(BROKEN_SANITIZERS)}, pypantera.NAME or module:function") from None
        from textdp.cli.sanitize import parse_params

        if getattr(MECHANISMS[key], "document_level", False):
            raise ParameterError(f"{key!r} is a document-level mechanism: the metric audit compares the output laws "
                                 "of single words (word sanitizers only)")
        mech = make_mechanism(key, embeddings, epsilon, rng=0, **parse_params(key, params))
    return sanitizer_target(mech, words=words, n_words=n_words, seed=seed if seed is not None else 0)


def _user_target(spec, epsilon, metric, epsilon0, embeddings, words, n_words, seed):
    from textdp.audit.core import _import_callable
    from textdp.audit.metric import MetricClaim, callable_target

    try:
        fn = _import_callable(spec)
    except ParameterError as exc:
        raise ParameterError(str(exc).replace("--mechanism ", "sanitizer ", 1)) from None
    claim = MetricClaim(epsilon, epsilon0, metric, "metric-dp" if metric == "euclidean" else "pure-dp",
                        description=f"{epsilon:g}·d + {epsilon0:g} (given on the command line)")
    if words is None:
        from textdp.audit.metric import nearest_word_candidates
        from textdp.embeddings import load_embeddings
        from textdp.sanitize.vocabulary import public_vocabulary

        emb = load_embeddings(embeddings)
        pool = list(public_vocabulary(emb).words)
        vec = emb.vectors[emb.rows(pool)]
        words = nearest_word_candidates(pool, vec, n_words, seed if seed is not None else 0)
    return callable_target(fn, claim, words, embeddings if metric == "euclidean" else None, name=spec)
