"""Speed of the language-model sanitizers (DP-Prompt, DP-MLM) on the first N Rotten Tomatoes reviews.

    python benchmarks/bench_lm_mechanisms.py [--limit 500] [--mechanism dp-mlm|dp-prompt|all]
        [--prompt-model PATH] [--max-new-tokens 64] [--device cpu] [--threads N]

Prints, per mechanism: documents, input words, seconds (model loaded beforehand), input words/s and,
for DP-Prompt, generated model tokens/s. DP-Prompt uses ``--prompt-model`` or the default causal LM
(the offline Gemma 3 270M when installed, or ``$TEXTDP_CAUSAL_LM``).
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=500)
    ap.add_argument("--mechanism", default="all", choices=("all", "dp-mlm", "dp-prompt"))
    ap.add_argument("--prompt-model", default=None)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--epsilon-mlm", type=float, default=10.0, help="per token")
    ap.add_argument("--epsilon-prompt", type=float, default=1280.0, help="per document")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    a = ap.parse_args()
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)

    from textdp.data.datasets import load_dataset

    ds = load_dataset("rotten-tomatoes")
    texts = [t or "" for t in ds.all()[ds.text_column].tolist()[: a.limit]]
    print(f"{len(texts)} reviews; torch threads {torch.get_num_threads()}; cpus {os.cpu_count()}; "
          f"load {os.getloadavg()[0]:.1f}")
    names = ("dp-mlm", "dp-prompt") if a.mechanism == "all" else (a.mechanism,)
    for name in names:
        t0 = time.perf_counter()
        if name == "dp-mlm":
            from textdp.sanitize.dp_mlm import DPMLM

            mech = DPMLM(None, a.epsilon_mlm, rng=0, device=a.device)
        else:
            from textdp.sanitize.dp_prompt import DPPrompt

            mech = DPPrompt(None, a.epsilon_prompt, model=a.prompt_model, max_new_tokens=a.max_new_tokens, rng=0,
                            device=a.device)
        load = time.perf_counter() - t0
        t0 = time.perf_counter()
        out, st = mech.sanitize_with_stats(texts)
        secs = time.perf_counter() - t0
        line = (f"{name}: model {mech.model_info().get('name')} loaded in {load:.1f} s; {st.documents} documents, "
                f"{st.tokens} input words in {secs:.1f} s = {st.tokens / secs:.1f} input words/s")
        if name == "dp-prompt":
            line += f", {mech.generated_tokens} generated tokens = {mech.generated_tokens / secs:.2f} tokens/s"
        print(line)
        print(f"  e.g. {texts[0][:100]!r} -> {out[0][:160]!r}")


if __name__ == "__main__":
    main()
