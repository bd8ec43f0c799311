"""``bench_audit.py --sanitizers``: the metric-DP audit (textdp.audit.metric) of every textdp word sanitizer,
of the two deliberately broken ones, and of the peers' implementations (pyPANTERA 1.0.2 in this
environment; mldp-text 0.1.2 through its own interpreter, ``MLDP_PYTHON`` or /work/venvs/mldp/bin/python,
since it pins numpy < 2), on GloVe 6B 50d.

What it prints, per mechanism: the claim (from the guarantee; for peers from their paper), the method
(exact from the law, or sampled lower bounds at 95% simultaneous confidence), the worst closest / random
/ searched pair as ``loss / claim (ratio)``, the largest loss against the plain-DP worst case where one is
claimed, the verdict (FLAG = a loss above its claim) and the wall time; then the worst pair's words and
output event. Two RESULT lines: correct textdp mechanisms flagged (goal 0) and broken replicas caught
(goal 2 of 2).

Sizes: textdp exact audits on the public 30,000-word vocabulary with ``--n-words`` random words (each with
its nearest word); textdp sampled audits with fewer words and ``--samples`` draws per word per half; the
peers on the first 1,000 words of GloVe (their distance step is O(V · dim) per word in Python) with fewer
draws (their per-word speed is 0.5-20 ms on this machine).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MLDP_PYTHON = os.environ.get("MLDP_PYTHON", "/work/venvs/mldp/bin/python")


def _f(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}"


def _cell(pairs) -> str:
    if not pairs:
        return "-"
    p = pairs[0]
    return f"{_f(p.loss)}/{_f(p.claim)} ({_f(p.ratio)}){' FLAG' if p.flagged else ''}"


def _report(label: str, eps, r, rows: list) -> None:
    wc = r.claim.worst_case_epsilon
    wc_txt = f"{_f(r.max_loss)} vs {_f(wc)}" if wc is not None else _f(r.max_loss)
    print(f"  {label:<24} {_f(eps):>4} {r.method:<7} {len(r.words):>4} {r.evaluated:>5} | {_cell(r.worst['closest']):<22} "
          f"{_cell(r.worst['random']):<22} {_cell(r.worst['search']):<22} | {wc_txt:<14} {r.verdict:<11} {r.wall_s:6.0f} s",
          flush=True)
    top = r.worst["search"][0] if r.worst["search"] else None
    if top is not None:
        extra = f", counts {top.counts[0]}/{top.counts[1]} of {top.counts[2]}" if top.counts else ""
        print(f"  {'':<24}   worst searched pair {top.word_a!r} vs {top.word_b!r}: d = {_f(top.distance)}, event "
              f"{top.event}{extra}", flush=True)
    if r.method == "sampled":
        print(f"  {'':<24}   ceiling of a lower bound at these sizes: {_f(r.ceiling)}", flush=True)
    for n in r.notes:
        if n.startswith("the sampler failed") or "dropped" in n or "claim covers no pair" in n:
            print(f"  {'':<24}   note: {n}", flush=True)
    if r.umldp_violations:
        print(f"  {'':<24}   UMLDP (ii) violated: {r.umldp_violations[0]}", flush=True)
    rows.append({"mechanism": label, "epsilon": eps, "method": r.method, "verdict": r.verdict,
                 "flagged": r.flagged, "max_loss": r.max_loss, "wall_s": r.wall_s,
                 "worst": {k: [p.to_dict() for p in v[:1]] for k, v in r.worst.items()}})


def _header(title: str) -> None:
    print(f"\n{title}")
    print(f"  {'mechanism':<24} {'eps':>4} {'method':<7} {'words':>4} {'pairs':>5} | {'closest loss/claim':<22} "
          f"{'random':<22} {'search (worst)':<22} | {'max loss vs wc':<14} {'verdict':<11} {'wall':>8}")


def _textdp(quick: bool, seed: int, rows: list) -> tuple[int, int]:
    from textdp.audit.broken_sanitizers import BROKEN_SANITIZERS
    from textdp.audit.metric import audit_sanitizer, sanitizer_target
    from textdp.sanitize import make_mechanism

    n_exact = 15 if quick else 40
    n_sampled = 4 if quick else 10
    samples = 3000 if quick else 10_000
    plan = [("santext", 3.0, {}), ("santext+", 3.0, {}), ("custext", 3.0, {}), ("custext+", 3.0, {}), ("tem", 3.0, {}),
            ("1-diffractor", 1.0, {}), ("fbdd", 10.0, {}), ("mahalanobis", 10.0, {}), ("vickrey", 10.0, {}),
            ("truncated-gumbel", 3.0, {})]
    _header(f"[1] textdp word sanitizers, GloVe 6B 50d, public 30,000-word output vocabulary; exact: {n_exact} random "
            f"words + nearest; sampled: {n_sampled} random words + nearest, {samples:,} draws per word per half")
    flagged_ok = 0
    for name, eps, kw in plan:
        mech = make_mechanism(name, "glove-6b-50d", eps, rng=0, **kw)
        t = sanitizer_target(mech, n_words=n_exact if mech.exact_probabilities else n_sampled, seed=seed)
        r = audit_sanitizer(t, samples=samples, seed=seed)
        flagged_ok += r.verdict == "FLAG"
        _report(name, eps, r, rows)
    _header("[2] deliberately broken replicas (each runs at 2 eps and claims eps), same settings")
    caught = 0
    for name, eps in (("santext-misscaled", 3.0), ("fbdd-half-noise", 10.0)):
        mech = BROKEN_SANITIZERS[name]("glove-6b-50d", eps, rng=0)
        t = sanitizer_target(mech, n_words=n_exact if mech.exact_probabilities else n_sampled, seed=seed)
        r = audit_sanitizer(t, samples=samples, seed=seed)
        caught += r.verdict == "FLAG"
        _report(name, eps, r, rows)
    return flagged_ok, caught


def _table_2d():
    """12 words in 2 dimensions (the table of tests/audit/test_metric_audit.py): distances near 1, so claims
    eps·d at eps = 1.5 lie within what 20,000 draws can refute."""
    import numpy as np

    from textdp.embeddings import Embeddings

    g = np.random.Generator(np.random.PCG64(5))  # the table: test data, not noise
    return Embeddings([f"w{i}" for i in range(12)], g.standard_normal((12, 2)).astype(np.float32), source="2-d table",
                      kind="word", lowercase=True)


def _small_table(quick: bool, seed: int, rows: list) -> None:
    """textdp's and the peers' embedding mechanisms on the 2-d table, eps = 1.5, all 66 pairs of its 12 words."""
    from textdp.audit.broken_sanitizers import BROKEN_SANITIZERS
    from textdp.audit.metric import audit_sanitizer, sanitizer_target
    from textdp.sanitize import make_mechanism

    emb = _table_2d()
    n = 5000 if quick else 20_000
    _header(f"[5] a 12-word table in 2 dimensions (distances ~0.2-4), eps = 1.5, every word, {n:,} draws per word per half: "
            f"where a metric claim is within a sample's reach")
    for name, kw in (("fbdd", {}), ("mahalanobis", {"lam": 0.75}), ("vickrey", {"t": 0.75}), ("fbdd-half-noise", None)):
        mech = (BROKEN_SANITIZERS[name](emb, 1.5, output_vocabulary="full", rng=0) if kw is None else
                make_mechanism(name, emb, 1.5, output_vocabulary="full", rng=0, **kw))
        r = audit_sanitizer(sanitizer_target(mech, words=list(emb.words)), samples=n, seed=seed)
        _report(f"{name} (2-d)", 1.5, r, rows)
    _pypantera_runs([("cmp", {}), ("mahalanobis", {"lam": 0.75}), ("vickrey", {"t": 0.75}), ("santext", {}),
                     ("tem", {})], emb, list(emb.words), list(emb.words), 1.5, n, n, seed, rows, " (2-d)")
    _mldp_runs([("multivariate_calibrated", {}), ("mahalanobis", {}), ("vickrey", {}), ("tem", {}),
                ("truncated_gumbel", "dists")], emb, list(emb.words), list(emb.words), 1.5, n // 2, n // 4, seed,
               rows, " (2-d)", {"use_faiss": False})


def _pypantera_runs(plan, emb, vocab, words, eps, base, tem_n, seed, rows, suffix="") -> None:
    from textdp.audit.metric import audit_sanitizer
    from textdp.audit.peers import pypantera_available, pypantera_target

    if not pypantera_available():
        print("  pyPANTERA: not installed (pip install pypantera==1.0.2); skipped")
        return
    for name, kw in plan:
        t0 = time.perf_counter()
        t = pypantera_target(name, emb, eps, vocabulary=vocab, words=words, seed=seed, **kw)
        n = tem_n if name == "tem" else base
        label = f"pypantera {name}" + (f" beta={kw['beta']:g}" if "beta" in kw else "") + suffix
        try:
            r = audit_sanitizer(t, samples=n, seed=seed)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"  {label:<24} failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        r.wall_s = time.perf_counter() - t0
        _report(label, eps, r, rows)


def _pypantera(quick: bool, seed: int, rows: list) -> None:
    from textdp.audit.metric import audit_sanitizer, nearest_word_candidates
    from textdp.audit.peers import pypantera_available, pypantera_target
    from textdp.embeddings import load_embeddings

    if not pypantera_available():
        print("\n[3] pyPANTERA: not installed (pip install pypantera==1.0.2); skipped")
        return
    n_words = 3 if quick else 6
    base = 500 if quick else 2000
    emb = load_embeddings("glove-6b-50d")
    vocab = list(emb.words[:1000])
    words = nearest_word_candidates(vocab, emb.vectors[:1000], n_words, seed)
    _header(f"[3] pyPANTERA 1.0.2 (its processText; numpy's global state seeded per call), first 1,000 GloVe words; "
            f"{n_words} random words + nearest; {base:,} draws per word per half (tem: {base // 4:,})")
    _pypantera_runs([("cmp", {}), ("mahalanobis", {}), ("vickrey", {}), ("santext", {}), ("custext", {}), ("tem", {}),
                     ("tem", {"beta": 0.5})], emb, vocab, words, 3.0, base, base // 4, seed, rows)
    # its CusText cannot sample under numpy 2: the law its own code computes, audited exactly
    t0 = time.perf_counter()
    t = pypantera_target("custext", emb, 3.0, vocabulary=vocab, n_words=20 if not quick else 8, seed=seed, law=True)
    r = audit_sanitizer(t, seed=seed)
    r.wall_s = time.perf_counter() - t0
    _report("pypantera custext (law)", 3.0, r, rows)


class _PrecomputedSampler:
    """mldp-text's draws, made in its own interpreter on the first call (all words at once)."""

    def __init__(self, mech, eps, params, table, words, seed):
        self.job = {"mechanism": mech, "epsilon": eps, "params": params, "table": table, "words": words, "seed": seed}
        self.cache = None
        self.__name__ = f"mldp_{mech}"

    def __call__(self, word, n, rng):
        from textdp.audit.metric import SamplerFailure

        if self.cache is None:
            job = {**self.job, "n": n}
            out = subprocess.run([MLDP_PYTHON, str(HERE / "_mldp_worker.py")], input=json.dumps(job),
                                 capture_output=True, text=True)
            if out.returncode:
                raise SamplerFailure(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "worker failed")
            self.cache = json.loads(out.stdout.strip().splitlines()[-1])
        if word in self.cache["failed"]:
            raise SamplerFailure(self.cache["failed"][word])
        d = self.cache["draws"][word]
        if len(d) != n:
            raise SamplerFailure(f"{len(d)} draws for {n}")
        return d


def _mldp_runs(plan, emb, vocab, words, eps, base, tem_n, seed, rows, suffix="", common=None) -> None:
    import numpy as np

    from textdp.audit.metric import CallableTarget, MetricClaim, _euclidean, audit_sanitizer
    from textdp.audit.peers import write_glove_file

    if not Path(MLDP_PYTHON).exists():
        print(f"  mldp-text: no interpreter at {MLDP_PYTHON} (mldp-text pins numpy < 2: install it in its own virtual "
              f"environment and set MLDP_PYTHON); skipped")
        return
    rows_idx = emb.rows(vocab)
    vec7 = np.round(np.asarray(emb.vectors[rows_idx], dtype=np.float64), 7)  # as written to its table file
    idx = {w: i for i, w in enumerate(vocab)}
    x = vec7[[idx[w] for w in words]]
    d_all = np.sqrt(((vec7 - vec7[0]) ** 2).sum(axis=1))
    with tempfile.TemporaryDirectory(prefix="textdp-mldp-") as tmp:
        table = os.path.join(tmp, "table.txt")
        write_glove_file(vocab, vec7, table)
        for name, kw in plan:
            t0 = time.perf_counter()
            params = dict(common or {})
            if kw == "dists":  # its default draws a start word with random.sample(dict_keys), a TypeError on 3.11
                params.update(min_inter_dist=float(d_all[d_all > 0].min()), max_inter_dist=float(d_all.max()))
            elif kw:
                params.update(kw)
            if name == "mahalanobis":  # its Sigma: cov(vectors) / var(all entries); lambda 0.2 (its default)
                lam = 0.2
                cov = np.atleast_2d(np.cov(vec7, rowvar=False)) / np.var(vec7)
                sig = lam * cov + (1 - lam) * np.eye(vec7.shape[1])
                w_, u_ = np.linalg.eigh(sig)
                dist = _euclidean(x @ ((u_ / np.sqrt(w_)) @ u_.T))
                metric = "regularized Mahalanobis d_RM (lambda 0.2, mldp-text's Sigma)"
            else:
                dist = _euclidean(x)
                metric = "euclidean"
            claim = MetricClaim(eps, 0.0, metric, "metric-dp", description=f"{eps:g}·d metric DP per word ({metric})")
            t = CallableTarget(_PrecomputedSampler(name, eps, params, table, list(words), seed), words, claim, dist,
                               name=f"mldp-text {name}",
                               sampler_note=f"mldp-text 0.1.2 {name}.replace_word in its own interpreter")
            n = tem_n if name == "tem" else base
            label = f"mldp {name}" + (" (dists given)" if kw == "dists" else "") + suffix
            try:
                r = audit_sanitizer(t, samples=n, seed=seed)
            except Exception as exc:  # noqa: BLE001 - report and go on
                print(f"  {label:<24} failed: {str(exc).splitlines()[0][:200]}", flush=True)
                continue
            r.wall_s = time.perf_counter() - t0
            _report(label, eps, r, rows)


def _mldp(quick: bool, seed: int, rows: list) -> None:
    from textdp.audit.metric import nearest_word_candidates
    from textdp.embeddings import load_embeddings

    n_words = 3 if quick else 6
    base = 300 if quick else 1000
    emb = load_embeddings("glove-6b-50d")
    vocab = list(emb.words[:1000])
    words = nearest_word_candidates(vocab, emb.vectors[:1000], n_words, seed)
    _header(f"[4] mldp-text 0.1.2 (its replace_word, in {MLDP_PYTHON}), first 1,000 GloVe words; {n_words} random "
            f"words + nearest; {base:,} draws per word per half (tem: {base // 2:,})")
    _mldp_runs([("multivariate_calibrated", {}), ("mahalanobis", {}), ("vickrey", {}), ("tem", {}),
                ("truncated_gumbel", {}), ("truncated_gumbel", "dists")], emb, vocab, words, 3.0, base, base // 2,
               seed, rows)


def run(quick: bool = False, seed: int = 1, out_json: str | None = None, only: str | None = None) -> None:
    print(f"metric-DP audit of word sanitizers (issue 17); load average {os.getloadavg()[0]:.1f} at start; "
          f"audit draws from the simulation generator (PCG64DXSM, seed {seed}; not a release)")
    rows: list = []
    t0 = time.perf_counter()
    flagged_ok = caught = None
    if only in (None, "textdp"):
        flagged_ok, caught = _textdp(quick, seed, rows)
    if only in (None, "pypantera"):
        _pypantera(quick, seed, rows)
    if only in (None, "mldp"):
        _mldp(quick, seed, rows)
    if only in (None, "small"):
        _small_table(quick, seed, rows)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f} at the end")
    if flagged_ok is not None:
        print(f"RESULT audit.sanitizers_correct_flagged {flagged_ok} of 10 textdp sanitizers (goal 0)")
        print(f"RESULT audit.sanitizers_broken_caught {caught} of 2 broken replicas on GloVe (goal 2)")
    if out_json:
        Path(out_json).write_text(json.dumps(rows, indent=1, default=str), encoding="utf-8")


if __name__ == "__main__":  # python benchmarks/_audit_sanitizers.py [--quick] [textdp|pypantera|mldp]
    sys.path.insert(0, str(HERE.parent / "src"))
    run(quick="--quick" in sys.argv, only=next((a for a in sys.argv[1:] if not a.startswith("-")), None))
