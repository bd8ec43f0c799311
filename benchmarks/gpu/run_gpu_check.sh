#!/usr/bin/env bash
# textdp's GPU check (docs/performance.md, "GPU"): CPU-vs-GPU figures of the sanitize sampler and
# of the torch models, from the source tree (no installation, no package registry needed).
#   bash benchmarks/gpu/run_gpu_check.sh                  # on a machine with a CUDA GPU
#   DEVICE=cpu bash benchmarks/gpu/run_gpu_check.sh --quick   # plumbing check anywhere
# Extra arguments go to gpu_check.py (--table FILE.npy, --budget-s, --json FILE, --no-models, ...).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export TEXTDP_CACHE="${TEXTDP_CACHE:-$PWD/.textdp-cache}"  # models trained here stay out of the user's cache
exec timeout 590 "${PYTHON:-python3}" benchmarks/gpu/gpu_check.py --device "${DEVICE:-cuda}" "$@"
