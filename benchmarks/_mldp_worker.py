"""Draw outputs of mldp-text 0.1.2's word mechanisms, run by the mldp-text interpreter (a separate virtual
environment: mldp-text pins numpy < 2). Used by ``benchmarks/bench_audit.py --sanitizers``; textdp itself
is not imported here.

Input (JSON on stdin): ``{"mechanism", "epsilon", "params", "table" (GloVe text file of the output
vocabulary), "words", "n", "seed"}``. Output (JSON on stdout, last line): ``{"draws": {word: [n outputs]},
"failed": {word: message}, "seconds": float}``. mldp-text draws from numpy's global state and Python's
``random``: both are seeded from ``seed`` per word (a simulation, not a release).
"""

import io
import json
import random
import sys
import time
import contextlib


def main() -> None:
    job = json.loads(sys.stdin.read())
    import numpy as np
    from gensim.models import KeyedVectors

    import mldp_text

    with open(job["table"], encoding="utf-8") as fh:
        rows = [line.rstrip("\n").split(" ") for line in fh if line.strip()]
    kv = KeyedVectors(vector_size=len(rows[0]) - 1)
    kv.add_vectors([r[0] for r in rows], np.array([[float(x) for x in r[1:]] for r in rows], dtype=np.float32))
    cls = mldp_text.MECHANISMS[job["mechanism"]]
    kw = dict(job.get("params", {}))
    kw.update(epsilon=job["epsilon"], embedding_matrix=kv, dim=kv.vector_size)
    if job["mechanism"] in ("tem", "truncated_gumbel"):
        kw["vocab"] = set(kv.index_to_key)  # its vocab_size is |V| of this table
    random.seed(job["seed"])
    np.random.seed(job["seed"] % 2**32)
    with contextlib.redirect_stdout(io.StringIO()):  # its loaders print
        mech = cls(**kw)
    draws, failed = {}, {}
    t = time.perf_counter()
    for k, w in enumerate(job["words"]):
        random.seed(job["seed"] + 1 + k)
        np.random.seed((job["seed"] + 1 + k) % 2**32)
        try:
            draws[w] = [str(mech.replace_word(w)) for _ in range(int(job["n"]))]
        except Exception as exc:  # noqa: BLE001 - the peer's own failure, reported per word
            failed[w] = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"draws": draws, "failed": failed, "seconds": time.perf_counter() - t}))


if __name__ == "__main__":
    main()
