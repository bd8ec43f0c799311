"""``textdp audit dpsgd``: one-run audit of DP-SGD on a text classifier (Steinke, Nasr & Jagielski 2023).

Thin layer over :func:`textdp.audit.dpsgd.audit_dpsgd`: parsing, progress, printing.
"""

from __future__ import annotations

import re

from typing import Optional

import typer

from textdp.cli._common import handle_errors, opt_json, opt_quiet, opt_seed, out_console, print_json, progress
from textdp.cli._options import refuse_unused
from textdp.errors import ParameterError


def _guess_pair(text: str) -> list[tuple[int, int]]:
    from textdp.cli._common import split_list

    items = split_list(text, "--guesses")
    try:
        vals = [int(x) for x in items]
    except ValueError:
        vals = []
    if len(vals) != 2 or min(vals) < 0 or sum(vals) == 0:
        raise ParameterError(f"--guesses must be K_PLUS,K_MINUS (whole numbers >= 0, not both 0), got {text!r}")
    return [(vals[0], vals[1])]


def _fmt_int(x: int) -> str:
    return f"{x:,}"


#: the Python API's parameter names as this command's flags (the library's messages name the parameters)
_SNAKE = ("max_test_examples", "max_examples", "batch_size", "hash_bits", "max_len", "freeze_embeddings")
_LEADING = {"canary kind": "--canary-kind", "canaries": "--canaries", "epsilon": "--epsilon", "delta": "--delta",
            "epochs": "--epochs", "lr": "--lr", "clip": "--clip", "device": "--device", "accountant": "--accountant",
            "score": "--score"}


def _as_flags(msg: str) -> str:
    """A library message with its parameter names replaced by this command's flags: the snake_case names
    anywhere, the plain-word names only as the message's subject (its first words)."""
    for name in _SNAKE:
        msg = re.sub(rf"(?<![-\w]){name}\b", "--" + name.replace("_", "-"), msg)
    for name, flag in _LEADING.items():
        if msg.startswith(name + " "):
            return flag + msg[len(name):]
    return msg


def _print(res, alpha: float, seed: Optional[int]) -> None:
    a = res.audit
    conf = f"{100 * (1 - alpha):g}%"
    p = lambda s: out_console.print(s, highlight=False, markup=False, soft_wrap=True)  # noqa: E731
    p("one-run audit of DP-SGD (Steinke, Nasr & Jagielski 2023, Theorem 3.1)")
    kind = ("canary sentences" if res.canary_kind == "random-tokens" else
            "mislabelled canaries (training examples set aside, each with another label)")
    p(f"  data      {res.dataset}: {_fmt_int(res.train_examples)} training examples + {_fmt_int(res.canaries)} {kind}, "
      f"{_fmt_int(res.included)} of them included by fair coins")
    opt = f"lr {res.lr:g}" if res.optimizer == "SGD" else f"{res.optimizer} lr {res.lr:g}"
    p(f"  model     {res.model}; Opacus DP-SGD: noise multiplier {res.sigma_used:.4g}, sample rate {res.sample_rate:.4g}, "
      f"{_fmt_int(res.steps)} steps, clip {res.clip:g}, {opt}; test accuracy {res.test_accuracy:.3f}")
    if res.broken:
        p(f"  BROKEN    deliberately broken replica: noise multiplier {res.sigma:.4g}/10 = {res.sigma_used:.4g} used, "
          f"while the accountant still reports the ε of {res.sigma:.4g}")
    p(f"  threat    {res.threat_model}")
    p(f"  claimed   ε = {res.claimed_epsilon:.3f} at δ = {res.delta:g} ({res.accountant} accountant; per example, "
      f"add/remove one, whole run)")
    b = a.best
    p(f"  bound     ε ≥ {a.epsilon_lower:.3f} at {conf} confidence ({_fmt_int(b.correct)} of {_fmt_int(b.guesses)} guesses "
      f"right: {b.k_plus} IN, {b.k_minus} OUT; {a.selection})")
    p(f"  ceiling   ln(q/(1−q)) = {a.ceiling:.2f} with q = β^(1/m), m = {_fmt_int(a.canaries)}, β = {alpha:g}: no one-run "
      f"bound from {_fmt_int(a.canaries)} canaries can exceed it (this audit's grid and δ: at most {a.attainable:.2f})")
    if a.fdp_epsilon_lower is not None:
        gdp = ("" if a.gdp_mu_lower is None else f"; the run is not μ-GDP for μ < {a.gdp_mu_lower:.3f}"
               if a.gdp_mu_lower > 0 else "; no μ-GDP claim is refuted either")
        p(f"  f-DP      ε ≥ {a.fdp_epsilon_lower:.3f} with the (ε, δ) trade-off curve{gdp} (Mahloujifar, Melis & "
          f"Chaudhuri 2024; same guesses and confidence)")
    if res.flagged:
        p(f"  verdict   FLAG: the lower bound {a.epsilon_lower:.3f} exceeds the claimed ε = {res.claimed_epsilon:.3f} at "
          f"{conf} confidence: the run is not as private as claimed")
    else:
        p(f"  verdict   ok: the claimed ε = {res.claimed_epsilon:.3f} is not refuted at {conf} confidence (a lower "
          f"bound can refute a claim, never certify it)")
    p(f"  time      training {res.seconds['train']:.1f} s, bound {res.seconds['audit']:.1f} s")
    p(f"simulation_rng: {res.simulation_rng}")
    if seed is not None:
        p(f"seed {seed}: a reproducible research run, not for release")


def register(app: typer.Typer) -> None:
    @app.command("dpsgd")
    @handle_errors
    def dpsgd(
        ctx: typer.Context,
        dataset: str = typer.Argument("rotten-tomatoes", help="Built-in dataset whose training split is the private "
                                      "data (see textdp datasets)."),
        epsilon: float = typer.Option(2.0, "--epsilon", "-e", help="Target ε the noise is calibrated to (per example, "
                                      "add/remove one, whole run); the claim is the accountant's ε for that noise."),
        delta: float = typer.Option(1e-5, "--delta", help="δ of the claim and of the bound."),
        canaries: int = typer.Option(1000, "--canaries", help="Number m of canaries, each included by a fair coin."),
        canary_kind: str = typer.Option("random-tokens", "--canary-kind", help="random-tokens (a made-up word with a "
                                        "random label) or mislabelled (real training examples set aside, each with "
                                        "another label)."),
        model: str = typer.Option("bag-of-words", "--model", help="bag-of-words (hashed logistic regression, CPU), "
                                  "minilm (the packaged MiniLM-L6) or a local transformer folder (your own "
                                  "BERT/MiniLM-style model): fine-tuned with all its layers."),
        epochs: float = typer.Option(4.0, "--epochs", help="Expected passes over the data (steps = ⌈epochs / q⌉)."),
        batch_size: int = typer.Option(256, "--batch-size", help="Expected Poisson batch size."),
        lr: Optional[float] = typer.Option(None, "--lr", help="Learning rate: plain SGD for bag-of-words (default 8), "
                                           "Adam for a transformer (default 5e-4)."),
        clip: float = typer.Option(0.5, "--clip", help="Per-example gradient clipping norm."),
        hash_bits: int = typer.Option(12, "--hash-bits", help="Bag-of-words: words are hashed into 2^BITS rows."),
        max_len: int = typer.Option(64, "--max-len", help="Transformer: WordPieces per text ([CLS]/[SEP] included)."),
        freeze_embeddings: bool = typer.Option(False, "--freeze-embeddings", help="Transformer: keep the word-embedding "
                                               "table fixed (Opacus stores a dense batch x vocabulary x hidden "
                                               "per-example gradient for it)."),
        device: Optional[str] = typer.Option(None, "--device", help="Transformer: auto (default: cuda when torch sees "
                                             "one, else cpu), cpu or cuda[:N]. The bag-of-words model trains on the CPU."),
        accountant: str = typer.Option("rdp", "--accountant", help="rdp (Opacus RDP) or pld (dp-accounting's "
                                       "privacy-loss distribution): calibrates the noise and gives the claimed ε."),
        max_examples: Optional[int] = typer.Option(None, "--max-examples", help="Use only the first N training examples "
                                                   "(a quick run)."),
        max_test_examples: Optional[int] = typer.Option(None, "--max-test-examples", help="Measure the accuracy on only "
                                                        "the first N test examples (a quick run)."),
        score: str = typer.Option("gradient", "--score", help="gradient (white box: the final parameters' alignment with "
                                  "each canary's gradient) or loss (black box: each canary sentence's loss)."),
        broken: bool = typer.Option(False, "--broken", help="Deliberately broken replica to test the audit: the noise "
                                    "multiplier divided by 10 while the accountant still reports the original ε."),
        alpha: float = typer.Option(0.05, "--alpha", help="1 − alpha is the confidence of the bound (β in the papers)."),
        guesses: Optional[str] = typer.Option(None, "--guesses", help="One pre-declared guess count K_PLUS,K_MINUS (top "
                                              "scores guessed IN, bottom OUT) instead of the default grid of 8 (each at "
                                              "alpha/8)."),
        no_fdp: bool = typer.Option(False, "--no-fdp", help="Skip the f-DP refinement (Mahloujifar et al. 2024)."),
        fail_on_violation: bool = typer.Option(False, "--fail-on-violation", help="Exit with status 3 when flagged (for CI)."),
        seed: Optional[int] = opt_seed("Seed of the audit's simulation (canaries, coins, training noise): a "
                                       "reproducible research run. Default: a fresh seed from the OS (the audit "
                                       "releases nothing; its generator is a simulation one, not a CSPRNG)."),
        quiet: bool = opt_quiet("No progress bars (stderr) or summary (stdout); errors are still printed on stderr, "
                                "and --json still prints its summary on stdout."),
        json_out: bool = opt_json(),
    ):
        """One-run audit of DP-SGD (Steinke, Nasr & Jagielski 2023): m canaries, each included by a fair
        coin, ONE DP-SGD training of a text classifier (Opacus; a bag-of-words model or a transformer fine-tuned
        with all its layers), canaries scored on the final model, and an ε lower bound beside the accountant's
        claimed ε. FLAG iff the bound exceeds the claim.

        Examples: textdp audit dpsgd -e 2 --canaries 1000;
        textdp audit dpsgd -e 2 --broken --fail-on-violation;
        textdp audit dpsgd --model ./my-bert --canary-kind mislabelled --score loss --json
        """
        from textdp.audit.dpsgd import _bow_name, audit_dpsgd

        if _bow_name(model):
            refuse_unused(ctx, "applies to a transformer --model, not to bag-of-words", "max_len", "freeze_embeddings",
                          "device")
        else:
            refuse_unused(ctx, "applies to the bag-of-words model, not to a transformer --model", "hash_bits")

        if not 0.0 < alpha < 1.0:
            raise ParameterError(f"--alpha must be in (0, 1) (e.g. 0.05 for 95% confidence), got {alpha!r}")
        pairs = _guess_pair(guesses) if guesses is not None else None
        with progress(quiet) as bar:
            task = bar.add_task("DP-SGD training" + (" (BROKEN replica)" if broken else ""), total=None)

            def on_step(step: int, total: int) -> None:
                bar.update(task, completed=step, total=total)

            try:
                res = audit_dpsgd(epsilon, delta, canaries, dataset=dataset, max_examples=max_examples,
                                  max_test_examples=max_test_examples, model=model, canary_kind=canary_kind,
                                  epochs=epochs, batch_size=batch_size, lr=lr, clip=clip, hash_bits=hash_bits,
                                  max_len=max_len, freeze_embeddings=freeze_embeddings, device=device,
                                  accountant=accountant, score=score, broken=broken, beta=alpha, guess_counts=pairs,
                                  fdp=not no_fdp, seed=seed, on_step=on_step)
            except ParameterError as exc:
                raise ParameterError(_as_flags(str(exc))) from None
        if json_out:
            d = res.to_dict()
            d["seed_note"] = ("seeded: a reproducible research run, not for release" if seed is not None
                              else "a fresh seed from the OS for the audit's simulation generator (not a CSPRNG; the audit releases nothing)")
            print_json(d)
        else:
            _print(res, alpha, seed)
        if fail_on_violation and res.flagged:
            raise typer.Exit(3)
